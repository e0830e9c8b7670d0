"""sha256 of model files: in chunks from disk, or on a helper thread while a download streams."""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from pathlib import Path

COPY_CHUNK = 4 << 20
BATCH = 4 << 20  # bytes handed to the hashing thread at a time


def hash_file(src: Path, progress=None, copy_to: Path | None = None) -> str:
    """The "sha256:<hex>" of a file read in chunks, optionally copying it to `copy_to` on the way.
    `progress(completed_bytes)` is called after each chunk."""
    h = hashlib.sha256()
    done = 0
    with open(src, "rb") as fin, (open(copy_to, "wb") if copy_to else open(os.devnull, "wb")) as fout:
        while chunk := fin.read(COPY_CHUNK):
            h.update(chunk)
            fout.write(chunk)
            done += len(chunk)
            if progress:
                progress(done)
    return f"sha256:{h.hexdigest()}"


class BackgroundHash:
    """sha256 on a helper thread: hashlib releases the GIL, so hashing overlaps the network reads.

    Chunks go over in batches of about BATCH bytes: one queue hand-off and thread wake-up per
    batch instead of per 64 KiB read (per read, they cost more than hashing inline on a fast link).
    When the hash falls behind, the full queue holds the reader back."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._batch: list[bytes] = []
        self._pending = 0
        self._queue: queue.Queue[list[bytes] | None] = queue.Queue(maxsize=4)  # bounds the memory held
        self._thread = threading.Thread(target=self._run, name="sha256", daemon=True)
        self._thread.start()

    def update(self, chunk: bytes) -> None:
        self._batch.append(chunk)
        self._pending += len(chunk)
        if self._pending >= BATCH:
            self._hand_over()

    def hexdigest(self) -> str:
        self.close()
        return self._hash.hexdigest()

    def close(self) -> None:
        if self._thread.is_alive():
            self._hand_over()
            self._queue.put(None)
            self._thread.join()

    def _hand_over(self) -> None:
        self._queue.put(self._batch)
        self._batch, self._pending = [], 0

    def _run(self) -> None:
        while (batch := self._queue.get()) is not None:
            for chunk in batch:
                self._hash.update(chunk)


__all__ = ["BackgroundHash", "hash_file"]
