"""sha256 of model files: in chunks from disk, or on a helper thread while a download streams."""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from pathlib import Path

COPY_CHUNK = 4 << 20
SYNC_EVERY = 32 << 20  # bytes written between background fdatasyncs
_fdatasync = getattr(os, "fdatasync", os.fsync)  # macOS and Windows have no fdatasync


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

    Every SYNC_EVERY bytes the thread also fdatasyncs the file being written, so dirty pages reach
    the disk during the download and the fsync before the blob is installed has little left to do.
    """

    def __init__(self, path: Path) -> None:
        self._hash = hashlib.sha256()
        self._path, self._fd, self._unsynced = path, -1, 0
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=256)
        self._thread = threading.Thread(target=self._run, name="sha256", daemon=True)
        self._thread.start()

    def update(self, chunk: bytes) -> None:
        self._queue.put(chunk)

    def hexdigest(self) -> str:
        self.close()
        return self._hash.hexdigest()

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            self._hash.update(chunk)
            self._unsynced += len(chunk)
            if self._unsynced >= SYNC_EVERY:
                self._sync()

    def _sync(self) -> None:
        self._unsynced = 0
        try:
            if self._fd < 0:
                self._fd = os.open(self._path, os.O_RDONLY)
            _fdatasync(self._fd)
        except OSError:
            pass  # only an optimisation: the final fsync still makes the blob durable


__all__ = ["BackgroundHash", "hash_file"]
