"""`localrun launch claude` and `localrun launch codex`: a coding agent on a local model, in one command.

Claude Code speaks Anthropic's Messages API, which the daemon serves at its root URL (no /v1). The
command starts the daemon and pulls the model when needed, loads it with the most context it holds
(its trained length, within the memory budget; `--ctx` chooses), refuses before starting when that
cannot hold Claude Code's prompt, then runs `claude` with the environment that points every model
tier at the local model and tells Claude Code the window. With `--print`, or when `claude` is not
installed, it prints that environment as `export` lines for the user's shell instead.

Codex speaks only the Responses API (/v1/responses). `launch codex` gives it a model provider of
its own through `-c` flags, so nothing is written and the user's ~/.codex/config.toml stays as it
is: wire_api "responses", the model's context window, and that context as a `num_ctx` query
parameter on every request, so the daemon loads the model with the context Codex was told about.
"""

from __future__ import annotations

import math
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
# Claude Code 2.1's first request (system prompt and tool definitions) is about 23k tokens (22921 with
# SmolLM2's tokenizer); with room for its answers and a few turns before it compacts, 32k is the least.
MIN_CONTEXT = 32768
CODEX_INSTALL_HINT = "codex is not installed (npm install -g @openai/codex); this is what would run:"
CODEX_PROVIDER = "localrun"
CODEX_KEY_VARIABLE = "LOCALRUN_CODEX_API_KEY"  # the provider's env_key: Codex reads the key from it
CODEX_MAX_CONTEXT = 32768  # Codex's prompt is ~6k tokens; more than this costs memory per slot for little


def claude_env(base_url: str, model: str, api_key: str, window: int | None = None) -> dict[str, str]:
    """The variables that send Claude Code, every model tier included, to `base_url`; with `window`,
    the ones that tell it how much context the model holds (`window_env`)."""
    env = {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_AUTH_TOKEN": api_key, "ANTHROPIC_API_KEY": "",
           "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
           # The attribution (billing) header line changes with every request and sits before the system
           # prompt: off, the prompt's first tokens stay the same and the daemon's prefix cache reuses them.
           "CLAUDE_CODE_ATTRIBUTION_HEADER": "0"}
    env.update({f"ANTHROPIC_DEFAULT_{tier}_MODEL": model for tier in ("OPUS", "SONNET", "HAIKU")})
    return {**env, **window_env(window)} if window else env


def window_env(window: int) -> dict[str, str]:
    """Claude Code's settings for a model that holds `window` tokens per request.

    Claude Code assumes a window it knows nothing of is huge, and counts CLAUDE_CODE_AUTO_COMPACT_WINDOW
    under 100k as 100k. As 2.1.328 computes it, compaction starts at min(W * pct / 100, W - 13000) tokens,
    W being that window less the answer's room (the output limit, at most 20000), and pct
    CLAUDE_AUTOCOMPACT_PCT_OVERRIDE. So the output limit is an eighth of the window, and for a window
    under 100k the percentage puts the threshold where prompt and answer still fit."""
    output = max(1024, min(32000, window // 8))
    env = {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(output), "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(max(window, 100_000))}
    if window < 100_000:
        threshold = window - output - window // 32  # a margin for Claude Code's own token estimate
        percent = math.floor(10_000 * threshold / (100_000 - min(output, 20_000))) / 100  # rounded down
        env["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"] = f"{percent:.2f}"
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
    context: Optional[int] = typer.Option(None, "--ctx", min=256, help="Context per request to load the model with; "
                                          "default: its Modelfile's num_ctx, else the most it holds (its trained "
                                          "length, within the memory budget)."),
    min_context: int = typer.Option(MIN_CONTEXT, "--min-context", min=256,
                                    help="Refuse a model that holds less (lower it for a short claude "
                                         "--system-prompt and few tools)."),
    host: Optional[str] = typer.Option(None, "--host", help="Daemon address; default LOCALRUN_HOST."),
) -> None:
    """Run Claude Code against a local model; arguments after `--` go to claude."""
    from localrun.cli.daemon_commands import target
    from localrun.client import Client

    base_url, model, key = _ready(host, model)
    with Client.from_host(base_url) as client:
        window = _load(client, model, context, min_context, target(host).is_loopback)
    env = claude_env(base_url, model, key or PLACEHOLDER_KEY, window)
    executable = shutil.which("claude")
    if print_only or executable is None:
        if executable is None and not print_only:
            sys.stderr.write(INSTALL_HINT + "\n")
        sys.stdout.write(exports(env))
        return
    os.execvpe(executable, [executable, *ctx.args], {**os.environ, **env})


def _load(client, model: str, context: int | None, min_context: int, local: bool) -> int:
    """Load `model` with the context Claude Code gets, after checking it can hold Claude Code's prompt;
    the context it was loaded with."""
    from localrun.errors import UsageError

    window, why = (context, "--ctx") if context else _most_context(client, model, local)
    if window < min_context:
        raise UsageError(f"{model} holds {window} tokens per request ({why}), but Claude Code needs about "
                         f"{min_context} (its first request alone is about 23k tokens): use a model trained for "
                         f"32k tokens or more (README, Claude Code), or give claude a short --system-prompt and "
                         f"few tools and lower --min-context")
    client.load(model, window)
    loaded = [m.context_length for m in client.ps() if m.name == model]
    return loaded[0] if loaded else window


def _most_context(client, model: str, local: bool) -> tuple[int, str]:
    """The most context `model` holds: its Modelfile's num_ctx, else its trained length within this home's
    memory budget (for another machine's daemon, its trained length: that daemon refuses what it cannot fit)."""
    if not local:
        return client.trained_context(model) or 0, "its trained length"
    from localrun.config import Settings
    from localrun.memory import KvShape, default_context, memory_budget
    from localrun.store import Store

    found, settings = Store().resolve(model), Settings.from_env()
    if found.defaults.get("num_ctx"):
        return int(found.defaults["num_ctx"]), "its Modelfile's num_ctx"
    return default_context(found.facts.context_length, KvShape.of(found.facts), found.size, settings.engine,
                           memory_budget(settings.memory_budget))


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
