#!/usr/bin/env python
"""CLI start-up against its floors, measured in the same run.

    python scripts/bench_cli.py [--rounds 7]

1. `localrun --help` against a one-command Typer app's `--help` (the framework's floor: interpreter,
   typer, rich) and against `python -c pass`.
2. A warm `localrun run smollm2 hi --max-tokens 1` (daemon up, model loaded) against a bare
   httpx script streaming the same request: what the CLI adds per call.
3. Which heavy modules importing every command module pulls in (should be none: imports are lazy).

The daemon is started the way users start it (the first `run` auto-starts it in a temporary
LOCALRUN_HOME on a free port) and stopped at the end. Rounds alternate; the best round of each
(the least disturbed on a shared machine) and the medians are compared.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

PY = sys.executable
HEAVY = ("httpx", "localrun.store.store", "localrun.client", "localrun.server", "localrun.engine", "llama_cpp",
         "numpy", "gguf", "prompt_toolkit", "rich.markdown", "fastapi", "uvicorn")
BARE = """
import httpx
body = {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "temperature": 0,
        "stream": True, "stream_options": {"include_usage": True}}
with httpx.stream("POST", "http://127.0.0.1:%d/v1/chat/completions", json=body, timeout=60, verify=False) as r:
    print("".join(r.iter_lines()))
"""
FLOOR_APP = """
import typer
app = typer.Typer(rich_markup_mode="rich")
@app.command()
def hello(name: str = "x") -> None:
    "Say hello."
@app.callback()
def root() -> None:
    "A one-command app."
app()
"""


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def heavy_imports(env: dict[str, str]) -> list[str]:
    code = f"import sys, localrun.cli.commands; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    return subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--show-rounds", action="store_true", help="print every round's seconds too")
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="bench-cli-")
    port = free_port()
    env = {**os.environ, "LOCALRUN_HOME": home, "LOCALRUN_HOST": f"127.0.0.1:{port}"}
    run = [PY, "-m", "localrun", "run", "smollm2", "hi", "--max-tokens", "1", "--temperature", "0"]
    bare = [PY, "-c", BARE % port]
    commands = {"python -c pass": [PY, "-c", "pass"], "typer floor --help": [PY, "-c", FLOOR_APP, "--help"],
                "localrun --help": [PY, "-m", "localrun", "--help"], "bare httpx request": bare,
                "localrun run (warm)": run}
    try:
        subprocess.run(run, env=env, check=True, capture_output=True)  # auto-start, pull, load
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, command in commands.items():
                times[name].append(timed(command, env))
    finally:
        subprocess.run([PY, "-m", "localrun", "stop"], env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    if args.show_rounds:
        print({name: [round(v, 2) for v in values] for name, values in times.items()})
    best = {name: min(values) for name, values in times.items()}
    med = {name: statistics.median(values) for name, values in times.items()}
    load = os.getloadavg()[0]
    print(f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, load {load:.1f}, {args.rounds} rounds (best / median)")
    for name in commands:
        print(f"  {name:<22} {best[name] * 1000:6.0f} ms / {med[name] * 1000:6.0f} ms")
    for label, ours, floor in (("--help / typer floor", "localrun --help", "typer floor --help"),
                               ("warm run / bare httpx", "localrun run (warm)", "bare httpx request")):
        print(f"  {label:<22} {best[ours] / best[floor]:.2f}x / {med[ours] / med[floor]:.2f}x "
              f"(+{(best[ours] - best[floor]) * 1000:.0f} ms best)")
    print(f"  heavy modules imported by the command modules: {heavy_imports(env) or 'none'}")


if __name__ == "__main__":
    main()
