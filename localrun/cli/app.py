"""The Typer application every command module registers on, and the error boundary around it.

Command groups live in their own modules (store_commands, generate_commands, daemon_commands, ...);
they import heavy things (httpx, rich.progress, the client) inside the command functions so that
`localrun --help` stays fast. The CLI never imports the engine, the runner or the server (except
`serve`, which starts the server in-process).
"""

from __future__ import annotations

import os
import sys
import types

import typer

from localrun import __version__
from localrun.cli.help import use_plain_names
from localrun.errors import LocalrunError
from localrun.quick_exit import skip_exit_collection

# `import httpx` imports httpx's own command line (httpx._main: click, rich.console, pygments), about
# 60 ms of every command, only to export `httpx.main`, which localrun never calls. With an empty module
# in its place the import fails as httpx expects when click is missing, and it defines a stub `main`.
sys.modules.setdefault("httpx._main", types.ModuleType("httpx._main"))
use_plain_names()
app = typer.Typer(
    name="localrun",
    help="Run open LLMs locally: pull GGUF models, serve OpenAI/Ollama/Anthropic-compatible APIs, chat.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: greppable, the same on a pipe, no boxes
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"localrun {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors (also LOCALRUN_DEBUG=1)."),
) -> None:
    if debug:
        os.environ["LOCALRUN_DEBUG"] = "1"


def debugging() -> bool:
    """`--debug` or LOCALRUN_DEBUG, read through the setting's one rule (a flag never fails to parse)."""
    from localrun.config import read

    return read("LOCALRUN_DEBUG")


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print one readable error line and return the Exit to raise."""
    sys.stderr.write(f"error: {message}\n")
    return typer.Exit(code)


def usage_error(e: Exception) -> str:
    """click's usage error as the one line localrun prints: its message and where the help is."""
    message = e.format_message().strip().rstrip(".")  # type: ignore[attr-defined]
    message = message[:1].lower() + message[1:]
    ctx = getattr(e, "ctx", None)
    return f"{message} (see `{ctx.command_path} --help`)" if ctx is not None else message


def main() -> None:
    """Console-script entry: run the app; turn localrun errors into one stderr line and an exit code."""
    from localrun.cli import commands  # noqa: F401  (registers every command)

    skip_exit_collection()
    try:
        code = app(prog_name="localrun", standalone_mode=False)
    except LocalrunError as e:
        if debugging():
            raise
        sys.stderr.write(f"error: {e.message}\n")
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.exit(1)
    except Exception as e:  # click's usage errors and anything unexpected
        import click

        # Typer >= 0.22 raises its vendored click's exceptions, which are TyperExceptions, not click's.
        if isinstance(e, click.ClickException) or (isinstance(e, typer.TyperException) and hasattr(e, "show")):
            if type(e).__name__ == "NoArgsIsHelpError":  # `localrun` or `localrun launch` alone: the help
                typer.echo(e.ctx.get_help())  # type: ignore[attr-defined]
                sys.exit(0)
            sys.stderr.write(f"error: {usage_error(e)}\n")
            sys.exit(e.exit_code)
        if debugging():
            raise
        sys.stderr.write(f"error: {type(e).__name__}: {e}\n")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
