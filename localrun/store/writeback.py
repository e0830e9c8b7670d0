"""Write-behind for a download: get its bytes onto the disk while the rest is still arriving.

A blob must be durable (fsync) before a manifest points at it. Left to the end, that fsync flushes
the whole file at once and the pull waits for it (about 0.1 s per 300 MB here); started early, the
disk works in parallel with the network and the final fsync finds little left to write. Linux's
`sync_file_range` does this without blocking: SYNC_FILE_RANGE_WRITE only *starts* writeback of a
range. A helper thread issues it for each finished window and waits for the window before (which
also bounds the dirty pages one pull leaves behind); the reader thread only hands it offsets, so a
slow disk never stalls the socket (a periodic fdatasync on the reader did). Where the call does not
exist (not Linux) or the filesystem refuses it, this does nothing and the final fsync does it all.
Durability never depends on it: `install_blob` still fsyncs.
"""

from __future__ import annotations

import ctypes
import queue
import sys
import threading
from collections.abc import Callable

WINDOW = 16 << 20  # bytes per writeback request
_WAIT_BEFORE, _WRITE, _WAIT_AFTER = 1, 2, 4  # <linux/fs.h> SYNC_FILE_RANGE_*


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()


class WriteBehind:
    """Start writeback of `fd` window by window as `written(end)` reports bytes [start, end) written."""

    def __init__(self, fd: int, start: int = 0, window: int = WINDOW) -> None:
        self._fd, self._window = fd, window
        self._next = start + window
        self._queue: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        if _sync_file_range is not None:
            self._thread = threading.Thread(target=self._run, args=(_sync_file_range, start), name="write-behind",
                                            daemon=True)
            self._thread.start()

    def written(self, end: int) -> None:
        """Bytes up to `end` are in the page cache; cheap enough to call after every write."""
        if end >= self._next and self._thread is not None:
            self._queue.put(end)
            self._next = end + self._window

    def close(self) -> None:
        """Stop the helper (it finishes the request in hand; the caller's fsync does the rest)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _run(self, sync_file_range: Callable[[int, int, int, int], int], start: int) -> None:
        previous = start
        while (end := self._queue.get()) is not None:
            if sync_file_range(self._fd, start, end - start, _WRITE) != 0:
                return  # refused here (a filesystem without it): the final fsync does it all
            if previous < start:  # the window before has had a window's time to reach the disk: wait for it
                sync_file_range(self._fd, previous, start - previous, _WAIT_BEFORE | _WRITE | _WAIT_AFTER)
            previous, start = start, end


__all__ = ["WINDOW", "WriteBehind"]
