"""`localrun launch claude`: Claude Code on a local model, in one command.

Claude Code speaks Anthropic's Messages API, which the daemon serves at its root URL (no /v1). The
command starts the daemon and pulls the model when needed, then runs `claude` with the environment
that points every model tier at the local model. With `--print`, or when `claude` is not installed,
it prints that environment as `export` lines for the user's shell instead.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from typing import Optional

import typer

from localrun.cli.app import app

launch_app = typer.Typer(help="Run a coding agent (Claude Code) against a local model.", no_args_is_help=True)
app.add_typer(launch_app, name="launch")

PLACEHOLDER_KEY = "localrun"  # Claude Code wants some token; the daemon ignores it unless keys are set
INSTALL_HINT = "claude is not installed (npm install -g @anthropic-ai/claude-code); set this in your shell:"


def claude_env(base_url: str, model: str, api_key: str) -> dict[str, str]:
    """The variables that send Claude Code, every model tier included, to `base_url`."""
    env = {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_AUTH_TOKEN": api_key, "ANTHROPIC_API_KEY": "",
           "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
           "CLAUDE_CODE_ATTRIBUTION_HEADER": "0"}
    env.update({f"ANTHROPIC_DEFAULT_{tier}_MODEL": model for tier in ("OPUS", "SONNET", "HAIKU")})
    return env


def exports(env: dict[str, str]) -> str:
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())


@launch_app.command("claude", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def claude(
    ctx: typer.Context,
    model: str = typer.Argument("smollm2", help="Local model every Claude Code tier uses."),
    print_only: bool = typer.Option(False, "--print", help="Print the export lines instead of running claude."),
    host: Optional[str] = typer.Option(None, "--host", help="Daemon address; default LOCALRUN_HOST."),
) -> None:
    """Run Claude Code against a local model; arguments after `--` go to claude."""
    from localrun.cli import daemon
    from localrun.cli.daemon_commands import target
    from localrun.cli.generation import ensure_model
    from localrun.config import read

    address = target(host)
    if address.is_loopback:
        daemon.ensure_running(address)
        model = ensure_model(model)
    keys = read("LOCALRUN_API_KEY")
    env = claude_env(address.base_url, model, keys[0] if keys else PLACEHOLDER_KEY)
    executable = shutil.which("claude")
    if print_only or executable is None:
        if executable is None and not print_only:
            sys.stderr.write(INSTALL_HINT + "\n")
        sys.stdout.write(exports(env))
        return
    os.execvpe(executable, [executable, *ctx.args], {**os.environ, **env})
