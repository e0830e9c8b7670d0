#!/usr/bin/env python
"""Uploading a model file to a daemon (`POST /api/blobs/<digest>`, what `ollama create` and `localrun
create --host` do) against importing the same file into a store on this machine, in the same run.

    python scripts/bench_upload.py [--mb 300] [--rounds 3] [--file MODEL.gguf]

The baseline is `Store.pull(PATH)`: the file copied into `partial/` with its sha256 computed on the
way, parsed as GGUF, moved into `blobs/` and named. The upload is the same file streamed by httpx to a
real daemon on loopback, which hashes and writes it on a worker thread as it arrives, parses it and
moves it in (the 201). Between rounds both copies are deleted. A generated GGUF with a tiny
vocabulary (`--mb` of one tensor) keeps the GGUF parse out of the figures; `--file` takes a real one.
Rounds alternate; the best round of each and the ratio of the medians are printed.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from localrun.store import Store  # noqa: E402
from tests.daemon import start_daemon  # noqa: E402
from tests.tiny_gguf import write_tiny_gguf  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=300, help="size of the generated GGUF file")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--file", type=Path, help="a GGUF file to use instead of a generated one")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-upload-"))
    try:
        source = args.file or write_tiny_gguf(work / "model.gguf", floats=args.mb * 250_000)
        digest = "sha256:" + hashlib.sha256(source.read_bytes()).hexdigest()
        daemon = start_daemon(work / "daemon-home", pull=False)
        try:
            imported, uploaded = rounds(source, digest, daemon, work, args.rounds)
        finally:
            daemon.stop()
        size = source.stat().st_size / 1e6
        best_in, best_up = min(imported), min(uploaded)
        print(f"{size:.0f} MB, {args.rounds} rounds, best (median)")
        print(f"  import here   {best_in:5.2f} s ({statistics.median(imported):.2f})  {size / best_in:6.0f} MB/s")
        print(f"  upload        {best_up:5.2f} s ({statistics.median(uploaded):.2f})  {size / best_up:6.0f} MB/s")
        print(f"  upload / import: {best_up / best_in:.2f}x best, "
              f"{statistics.median(uploaded) / statistics.median(imported):.2f}x medians")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def rounds(source: Path, digest: str, daemon, work: Path, count: int) -> tuple[list[float], list[float]]:
    imported, uploaded = [], []
    blob = daemon.home / "models" / "blobs" / digest.replace(":", "-")
    for index in range(count):
        home = work / f"store-{index}"
        started = time.perf_counter()
        Store(home / "models").pull(str(source))
        imported.append(time.perf_counter() - started)
        shutil.rmtree(home)
        started = time.perf_counter()
        with open(source, "rb") as f:
            answer = httpx.post(f"{daemon.url}/api/blobs/{digest}", content=f, timeout=None)
        uploaded.append(time.perf_counter() - started)
        if answer.status_code != 201:
            raise SystemExit(f"upload answered {answer.status_code}: {answer.text}")
        blob.unlink()  # the next round uploads it again
    return imported, uploaded


if __name__ == "__main__":
    main()
