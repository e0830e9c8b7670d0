"""`localrun launch claude` and `localrun launch codex`: a coding agent on a local model, in one command.

Claude Code speaks Anthropic's Messages API, which the daemon serves at its root URL (no /v1). The
command starts the daemon and pulls the model when needed, then runs `claude` with the environment
that points every model tier at the local model. With `--print`, or when `claude` is not installed,
it prints that environment as `export` lines for the user's shell instead.

Codex speaks only the Responses API (/v1/responses). `launch codex` gives it a model provider of
its own through `-c` flags, so nothing is written and the user's ~/.codex/config.toml stays as it
is: wire_api "responses", the model's context window, and that context as a `num_ctx` query
parameter on every request, so the daemon loads the model with the context Codex was told about.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from typing import Optional

import typer

from localrun.cli.app import app

launch_app = typer.Typer(help="Run a coding agent (Claude Code, Codex) against a local model.", no_args_is_help=True)
app.add_typer(launch_app, name="launch")

PLACEHOLDER_KEY = "localrun"  # Claude Code wants some token; the daemon ignores it unless keys are set
INSTALL_HINT = "claude is not installed (npm install -g @anthropic-ai/claude-code); set this in your shell:"
CODEX_INSTALL_HINT = "codex is not installed (npm install -g @openai/codex); this is what would run:"
CODEX_PROVIDER = "localrun"
CODEX_KEY_VARIABLE = "LOCALRUN_CODEX_API_KEY"  # the provider's env_key: Codex reads the key from it
CODEX_MAX_CONTEXT = 32768  # Codex's prompt is ~6k tokens; more than this costs memory per slot for little


def claude_env(base_url: str, model: str, api_key: str) -> dict[str, str]:
    """The variables that send Claude Code, every model tier included, to `base_url`."""
    env = {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_AUTH_TOKEN": api_key, "ANTHROPIC_API_KEY": "",
           "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
           "CLAUDE_CODE_ATTRIBUTION_HEADER": "0"}
    env.update({f"ANTHROPIC_DEFAULT_{tier}_MODEL": model for tier in ("OPUS", "SONNET", "HAIKU")})
    return env


def _ready(host: str | None, model: str) -> tuple[str, str, str]:
    """Start the local daemon and pull the model when needed: its base URL, the model's name, the API key."""
    from localrun.cli import daemon
    from localrun.cli.daemon_commands import target
    from localrun.cli.generation import ensure_model
    from localrun.config import read

    address = target(host)
    if address.is_loopback:
        daemon.ensure_running(address)
        model = ensure_model(model)
    keys = read("LOCALRUN_API_KEY")
    return address.base_url, model, keys[0] if keys else ""


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
    base_url, model, key = _ready(host, model)
    env = claude_env(base_url, model, key or PLACEHOLDER_KEY)
    executable = shutil.which("claude")
    if print_only or executable is None:
        if executable is None and not print_only:
            sys.stderr.write(INSTALL_HINT + "\n")
        sys.stdout.write(exports(env))
        return
    os.execvpe(executable, [executable, *ctx.args], {**os.environ, **env})


def codex_args(base_url: str, model: str, context: int, keyed: bool) -> list[str]:
    """Codex's flags for a provider that is this daemon: no config file is read or written for it."""
    provider = (f'{{name="localrun", base_url="{base_url}/v1", wire_api="responses", '
                f'query_params={{num_ctx="{context}"}}' + (f', env_key="{CODEX_KEY_VARIABLE}"' if keyed else "") + "}")
    return ["-m", model, "-c", f"model_provider={CODEX_PROVIDER}", "-c", f"model_providers.{CODEX_PROVIDER}={provider}",
            "-c", f"model_context_window={context}"]


def codex_context(host: str | None, model: str, requested: int | None) -> int:
    """The context Codex is told about and the daemon loads: asked for, else the model's trained length
    up to CODEX_MAX_CONTEXT."""
    from localrun.client import Client
    from localrun.errors import UsageError

    with Client.from_host(host) as client:
        trained = client.trained_context(model)
    if requested is not None:
        if trained and requested > trained:
            raise UsageError(f"--ctx: {model} supports at most {trained} tokens of context, not {requested}")
        return requested
    return min(trained or CODEX_MAX_CONTEXT, CODEX_MAX_CONTEXT)


@launch_app.command("codex", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def codex(
    ctx: typer.Context,
    model: str = typer.Argument("smollm2", help="Local model Codex uses."),
    context: Optional[int] = typer.Option(None, "--ctx", min=512, help="Context window in tokens; default the "
                                          f"model's trained length, at most {CODEX_MAX_CONTEXT}."),
    print_only: bool = typer.Option(False, "--print", help="Print the codex command instead of running it."),
    host: Optional[str] = typer.Option(None, "--host", help="Daemon address; default LOCALRUN_HOST."),
) -> None:
    """Run Codex against a local model (Responses API); arguments after `--` go to codex."""
    base_url, model, key = _ready(host, model)
    env = {CODEX_KEY_VARIABLE: key} if key else {}
    args = codex_args(base_url, model, codex_context(host, model, context), bool(key))
    executable = shutil.which("codex")
    if print_only or executable is None:
        if executable is None and not print_only:
            sys.stderr.write(CODEX_INSTALL_HINT + "\n")
        sys.stdout.write(exports(env) + shlex.join(["codex", *args, *ctx.args]) + "\n")
        return
    os.execvpe(executable, [executable, *args, *ctx.args], {**os.environ, **env})
