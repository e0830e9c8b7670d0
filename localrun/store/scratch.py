"""Scratch files in `partial/`: a file this machine writes whole (a quantization, an upload) before the
store takes it in. Unlike a download's partial file, none is ever resumed, so one whose writer is gone
(a process killed before it could delete it: `kill -9`, a crash, a reboot) is garbage of a model's size.
Each is locked for as long as it is written, and every new one first deletes those nobody holds."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

from localrun.store import locks
from localrun.store.layout import Layout

KINDS = ("quantize", "upload")


@contextlib.contextmanager
def scratch_file(layout: Layout, kind: str) -> Iterator[Path]:
    """A fresh path in `partial/` for a file of `kind`, held by this process until the block ends and
    deleted then unless it was moved away (into `blobs/`)."""
    layout.partial.mkdir(parents=True, exist_ok=True)
    sweep(layout)
    key = f"{kind}-{uuid.uuid4().hex}"
    with locks.hold(layout.lock_file(key)):  # before the file exists, so a sweep never sees it unheld
        path = layout.partial_file(key)
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)


def sweep(layout: Layout) -> None:
    """Delete the scratch files whose writers are gone."""
    if not layout.partial.is_dir():
        return
    for path in layout.partial.glob("*.partial"):
        key = path.name.removesuffix(".partial")
        if key.split("-", 1)[0] in KINDS:
            with locks.try_hold(layout.lock_file(key)) as free:
                if free:
                    path.unlink(missing_ok=True)


__all__ = ["KINDS", "scratch_file", "sweep"]
