"""The CLI's import boundaries: it reaches the daemon through the client only, and `--help` stays light."""

from __future__ import annotations

import subprocess
import sys

import localrun.client

CLI_MODULES = ["localrun.cli.commands", "localrun.cli.chat", "localrun.cli.batch", "localrun.cli.generation",
               "localrun.cli.daemon", "localrun.cli.doctor_commands", "localrun.client"]


def loaded_after(imports: list[str], prefixes: tuple[str, ...]) -> list[str]:
    """The modules under `prefixes` a fresh interpreter has imported after `imports` (a module put in
    `sys.modules` by hand, with no spec, was not imported)."""
    code = (f"import sys\nfor m in {imports!r}: __import__(m)\n"
            f"print(' '.join(sorted(m for m, mod in sys.modules.items() if m.startswith({prefixes!r})"
            f" and getattr(mod, '__spec__', None) is not None)))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def test_cli_never_imports_engine_runner_or_server():
    assert loaded_after(CLI_MODULES, ("localrun.server", "localrun.engine", "localrun.runner", "llama_cpp")) == []


def test_registering_commands_imports_nothing_heavy():
    heavy = ("httpx", "localrun.client", "localrun.store.store", "numpy", "gguf", "prompt_toolkit", "rich.markdown",
             "rich.live")
    assert loaded_after(["localrun.cli.commands"], heavy) == []


def test_httpx_in_the_cli_leaves_its_own_command_line_out():
    """httpx imports its command line (click, rich, pygments: ~60 ms) on import; the CLI needs none of it."""
    assert loaded_after(["localrun.cli", "httpx"], ("click", "rich", "pygments", "httpx._main")) == []
    assert loaded_after(["httpx"], ("httpx._main",)) == ["httpx._main"]  # what it is without the CLI


def test_client_public_names():
    assert sorted(localrun.client.__all__) == ["Address", "Client", "Completion", "GenerateOptions", "PullStatus",
                                               "RunningModel", "TextStream", "Timings", "Usage", "parse_address"]
