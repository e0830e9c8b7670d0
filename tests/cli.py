"""Run the real `python -m localrun` in a subprocess, as a shell script would."""

from __future__ import annotations

import os
import subprocess
import sys


def run_cli(*args: str, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess:
    """The CLI with pipes on stdin/stdout/stderr (never a terminal), in the current environment plus `env`."""
    return subprocess.run([sys.executable, "-m", "localrun", *args], input=input if input is not None else "",
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
