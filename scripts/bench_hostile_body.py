"""What a 30 MB request body costs everyone else: `/health` latency and a concurrent stream's gaps
between tokens while the daemon checks the body.

    python scripts/bench_hostile_body.py [--tree /work/main] [--rounds 3]

A fresh daemon serves the bundled SmolLM2. One client streams a long greedy answer; another polls
`/health` every 20 ms; meanwhile two bodies just under the 32 MiB limit are sent, one after the other:
  hostile  {"model": ..., "x": [[],[],...]}   10 million empty arrays (refused by the body check)
  prompt   {"model": ..., "x": "aaaa..."}     one 30 MB string (parsed, then 404: no such model)
Each body names a model that does not exist, so what is measured is the body check, not generation.
Reported per body: the time to its answer, the slowest `/health` answer and the longest gap between
two streamed chunks while it was in flight (and the longest gap of the same stream before, as the
baseline). `--tree` runs the daemon from another checkout (e.g. main before the change) for an A/B.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.daemon import Daemon, start_daemon  # noqa: E402

MODEL = "smollm2"
SIZE = 30_000_000


def bodies() -> dict[str, bytes]:
    head = b'{"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}], "x": '
    arrays = b"[" + b",".join([b"[]"] * ((SIZE - len(head)) // 3)) + b"]}"
    return {"hostile": head + arrays, "prompt": head + b'"' + b"a" * (SIZE - len(head) - 3) + b'"}'}


class Stream(threading.Thread):
    """A long greedy stream; records when each chunk arrived."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.times, self.stop = url, [], threading.Event()

    def run(self) -> None:
        body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 4000, "temperature": 0,
                "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{self.url}/v1/completions", json=body, timeout=600) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    self.times.append(time.perf_counter())
                if self.stop.is_set():
                    break  # leaving the stream cancels the generation

    def longest_gap(self, start: float, end: float) -> float:
        inside = [t for t in self.times if start <= t <= end]
        gaps = [b - a for a, b in zip(inside, inside[1:])]
        return max(gaps, default=float("nan"))


class Health(threading.Thread):
    """GET /health every 20 ms; records (sent at, seconds to answer)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.samples, self.stop = url, [], threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=120) as client:
            while not self.stop.is_set():
                sent = time.perf_counter()
                client.get(f"{self.url}/health")
                self.samples.append((sent, time.perf_counter() - sent))
                time.sleep(0.02)

    def slowest(self, start: float, end: float) -> float:
        return max((s for t, s in self.samples if start <= t <= end), default=float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", help="run the daemon from this checkout instead of this one")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    env = {"PYTHONPATH": str(Path(args.tree).resolve())} if args.tree else {}
    if args.tree:
        os.chdir(args.tree)  # `python -m localrun` puts the working directory first on sys.path
    with tempfile.TemporaryDirectory() as tmp:
        measure(args, start_daemon(Path(tmp) / "home", {**env, "LOCALRUN_PARALLEL": "2"}))


def measure(args: argparse.Namespace, daemon: Daemon) -> None:
    """Each body's answer time, the slowest /health and the stream's longest gap meanwhile; stops the daemon."""
    try:
        httpx.post(f"{daemon.url}/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 1}, timeout=120)
        payloads = bodies()
        results: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in payloads}
        for _ in range(args.rounds):
            stream, health = Stream(daemon.url), Health(daemon.url)
            stream.start()
            health.start()
            while len(stream.times) < 20:
                time.sleep(0.05)
            baseline_start = time.perf_counter()
            time.sleep(2.0)
            baseline = stream.longest_gap(baseline_start, time.perf_counter())
            with httpx.Client(timeout=600) as client:
                for name, payload in payloads.items():
                    start = time.perf_counter()
                    status = client.post(f"{daemon.url}/v1/chat/completions", content=payload,
                                         headers={"Content-Type": "application/json"}).status_code
                    end = time.perf_counter()
                    time.sleep(0.3)  # the stream's next chunk after the body shows the gap it caused
                    results[name].append((end - start, health.slowest(start, end),
                                          stream.longest_gap(start, end + 0.3), baseline))
                    print(f"  {name}: HTTP {status} in {end - start:.2f} s", flush=True)
            health.stop.set()
            stream.stop.set()
            health.join()
            stream.join()
        print(f"\ndaemon from {args.tree or 'this tree'}, {args.rounds} rounds, medians:")
        print(f"{'body':8} {'answer s':>9} {'/health max s':>14} {'stream gap s':>13} {'gap before s':>13}")
        for name, rows in results.items():
            med = [statistics.median(column) for column in zip(*rows)]
            print(f"{name:8} {med[0]:9.2f} {med[1]:14.3f} {med[2]:13.3f} {med[3]:13.3f}")
    finally:
        daemon.stop()
        os.environ.pop("PYTHONPATH", None)


if __name__ == "__main__":
    main()
