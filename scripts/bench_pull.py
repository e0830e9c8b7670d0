#!/usr/bin/env python
"""Pull throughput against a plain httpx streaming download of the same file, in the same run.

    python scripts/bench_pull.py [--mb 300] [--rounds 3] [--file MODEL.gguf]

A loopback server (os.sendfile, so the server is not the bottleneck) serves one generated GGUF.
The baseline streams it with httpx into a file; the pull is `Store.pull(url)` end to end: Range-
capable download, sha256 of every byte, the early GGUF header check, the rich progress bar (on
stderr), the full GGUF parse, fsync and the atomic rename into blobs/, and the manifest. Rounds
alternate baseline and pull; the best round of each is compared (the machine is shared, so the
best run is the least disturbed one), and the ratio of the medians is printed too. Target: pull >=
0.9x baseline.

The pull reads 1 MiB per socket read where httpx reads 64 KiB (localrun/store/reads.py); a
third download, httpx with the same 1 MiB reads, is printed for reference, so
the pull's own overhead (hashing, progress, validation, durability) is visible on its own.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.tiny_gguf import write_tiny_gguf  # noqa: E402


def serve(path: Path) -> ThreadingHTTPServer:
    size = path.stat().st_size

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            with open(path, "rb") as f:
                sent = 0
                while sent < size:
                    sent += os.sendfile(self.connection.fileno(), f.fileno(), sent, size - sent)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # all threads, the server's sendfile included
    return usage.ru_utime + usage.ru_stime


def baseline(url: str, dest: Path, wide: bool = False) -> tuple[float, float]:
    from localrun.store.reads import widen_reads

    cpu, started = cpu_seconds(), time.perf_counter()
    with httpx.stream("GET", url) as response, open(dest, "wb") as out:
        if wide:
            widen_reads(response)
        for chunk in response.iter_raw():
            out.write(chunk)
    elapsed, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    dest.unlink()
    return elapsed, cpu


def pull(url: str, root: Path) -> tuple[float, float]:
    from localrun.cli.store_commands import PullBar
    from localrun.store import Store

    bar = PullBar()
    cpu, started = cpu_seconds(), time.perf_counter()
    try:
        Store(root).pull(url, progress=bar)
    finally:
        bar.close()
    elapsed, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    shutil.rmtree(root)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=300, help="size of the generated model file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--file", type=Path, help="serve this GGUF instead (a real model's metadata, e.g. its "
                                                  "vocabulary, makes validation a visible fixed cost)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pull-") as tmp:
        work = Path(tmp)
        model = args.file or write_tiny_gguf(work / "Bench-F32.gguf", floats=args.mb * (1 << 18), name="bench")
        size = model.stat().st_size
        server = serve(model)
        url = f"http://127.0.0.1:{server.server_address[1]}/{model.name}"
        base_times, wide_times, pull_times = [], [], []
        for i in range(args.rounds):
            base_times.append(baseline(url, work / "baseline.bin"))
            pull_times.append(pull(url, work / f"store-{i}"))
            wide_times.append(baseline(url, work / "baseline.bin", wide=True))
        server.shutdown()
    base, best = min(base_times), min(pull_times)
    print(f"file: {size / 1e6:.0f} MB, rounds: {args.rounds}, cpus: {os.cpu_count()}, load: {os.getloadavg()[0]:.1f}")
    print(_row("httpx stream baseline", size, base_times))
    print(_row("localrun pull", size, pull_times))
    print(_row("httpx, 1 MiB reads", size, wide_times) + "  (reference)")
    print(f"ratio pull/baseline:   {_ratios(base_times, pull_times)}  (target >= 0.90x)")
    print(f"ratio pull/reference:  {_ratios(wide_times, pull_times)}  (the pull's own overhead)")
    sys.exit(0 if base[0] / best[0] >= 0.9 else 1)


def _ratios(base: list[tuple[float, float]], pull: list[tuple[float, float]]) -> str:
    median = statistics.median(t for t, _ in base) / statistics.median(t for t, _ in pull)
    return f"{min(base)[0] / min(pull)[0]:.2f}x best rounds, {median:.2f}x medians"


def _row(label: str, size: int, runs: list[tuple[float, float]]) -> str:
    best = min(runs)
    rounds = ", ".join(f"{size / t / 1e6:.0f}" for t, _ in runs)
    return f"{label + ':':<22} {size / best[0] / 1e6:5.0f} MB/s, {best[1]:.2f} s CPU  (rounds, MB/s: {rounds})"


if __name__ == "__main__":
    main()
