"""Inter-process locks on files in `partial/` that do not pile up there.

filelock leaves every lock file behind: deleting one is unsafe for it, since a process waiting for the
lock may hold the old file open and would then lock a file nobody else can see. Here the holder deletes
the file while it still holds the lock, and a process that gets a lock checks that the path still names
the file it locked; when it does not (deleted, or already made anew), it starts again on the path's
current file. So only the locks in use exist. Where fcntl is missing (Windows), filelock does the
locking and the files stay, as before.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def hold(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the lock named by `path`; `on_wait` is called once if another holder makes us wait."""
    try:
        import fcntl
    except ImportError:
        with _filelock(path, on_wait):
            yield
        return
    fd = _acquire(fcntl, path, on_wait)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # still locked: whoever opened this file finds it gone and retries
        os.close(fd)  # unlocks


@contextlib.contextmanager
def try_hold(path: Path) -> Iterator[bool]:
    """Hold the lock named by `path` when nobody else does (True); else hold nothing (False). Where
    fcntl is missing, always False: nothing can tell a held lock from a forgotten one there."""
    try:
        import fcntl
    except ImportError:
        yield False
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        yield False
        return
    if not _still_named(fd, path):  # its holder just let it go and deleted it: not ours to judge
        os.close(fd)
        yield False
        return
    try:
        yield True
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


def _acquire(fcntl, path: Path, on_wait: Callable[[], None] | None) -> int:
    waited = False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait and not waited:
                    on_wait()
                    waited = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            if _still_named(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the holder before us deleted it: lock the path's current file


def _still_named(fd: int, path: Path) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


@contextlib.contextmanager
def _filelock(path: Path, on_wait: Callable[[], None] | None) -> Iterator[None]:
    from filelock import FileLock, Timeout

    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if on_wait:
            on_wait()
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


__all__ = ["hold", "try_hold"]
