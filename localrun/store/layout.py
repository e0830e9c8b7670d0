"""The store on disk, and the file operations that keep it consistent across crashes.

    <root>/blobs/sha256-<hex>            verified GGUF files, named by content; never partial
    <root>/manifests/<part>/.../<tag>    one JSON manifest per name:tag
    <root>/partial/<key>.partial         downloads in progress (resumable); <key>.lock while one is held;
                                         quantize-*/upload-* scratch files (store/scratch.py)
    <root>/info/sha256-<hex>.json        the parsed GGUF facts of a file (`show`), a cache

A blob enters `blobs/` only by an atomic rename after its digest was checked, and a manifest is
written (temp file + fsync + rename) only after its blob is in place, so a crash at any point
leaves either the old state or the new one; unreferenced blobs are collected by `rm`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from localrun.errors import DiskFull, StoreError
from localrun.store.names import Name

_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_BLOB = re.compile(r"sha256-([0-9a-f]{64})")


class Layout:
    """Paths inside one store root; every path it returns lies under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs"
        self.manifests = root / "manifests"
        self.partial = root / "partial"
        self.infos = root / "info"

    def blob(self, digest: str) -> Path:
        match = _DIGEST.fullmatch(digest)
        if not match:
            raise StoreError(f"invalid digest {digest!r}")
        return self.blobs / f"sha256-{match.group(1)}"

    def info(self, digest: str) -> Path:
        return self.infos / f"{self.blob(digest).name}.json"

    def manifest(self, name: Name) -> Path:
        return self.manifests.joinpath(*name.relpath().parts)

    def partial_file(self, key: str) -> Path:
        return self.partial / f"{key}.partial"

    def lock_file(self, key: str) -> Path:
        return self.partial / f"{key}.lock"

    def blob_digests(self) -> Iterator[str]:
        if self.blobs.is_dir():
            for entry in self.blobs.iterdir():
                if match := _BLOB.fullmatch(entry.name):
                    yield f"sha256:{match.group(1)}"


def digest_key(digest: str) -> str:
    """A file-name-safe key for a digest ("sha256:ab.." -> "sha256-ab..")."""
    return digest.replace(":", "-")


def url_key(url: str) -> str:
    """The key of a download whose digest is not known in advance: a hash of its URL."""
    return "url-" + hashlib.sha256(url.encode()).hexdigest()[:32]


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so readers see the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def os_errors() -> Iterator[None]:
    """Turn the OS's refusals into one-line store errors."""
    try:
        yield
    except PermissionError as e:
        raise StoreError(f"permission denied: {e.filename or e}") from None
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise DiskFull(f"disk full while writing {e.filename or 'the model'}") from None
        raise StoreError(f"{e.strerror or e}: {e.filename or ''}".rstrip(": ")) from None


def ensure_space(folder: Path, needed: int, label: str) -> None:
    """Refuse to start writing `needed` bytes into `folder` when the disk has less free."""
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise DiskFull(f"not enough disk space for {label}: needs {needed / 1e6:.0f} MB, {free / 1e6:.0f} MB "
                       f"free in {folder}")


def install_blob(layout: Layout, verified: Path, digest: str) -> Path:
    """Move a verified file into `blobs/` under its digest (durably); an existing blob wins."""
    blob = layout.blob(digest)
    layout.blobs.mkdir(parents=True, exist_ok=True)
    if blob.exists():
        verified.unlink(missing_ok=True)
        return blob
    with open(verified, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(verified, blob)
    fsync_dir(layout.blobs)
    return blob


__all__ = ["Layout", "atomic_write", "digest_key", "ensure_space", "fsync_dir", "install_blob", "os_errors",
           "url_key"]
