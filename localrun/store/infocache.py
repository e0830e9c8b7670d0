"""The GGUF facts `show` prints, cached per file digest.

Reading them means parsing every key/value of the file, the whole vocabulary included: about a second
for SmolLM2 and eight for Gemma 3 270M (262k tokens) on two cores, on every `localrun show` and
`/api/show`. A pull parses the file anyway to validate it, so it writes what it read to
`info/sha256-<hex>.json`; `show` reads that back, and parses (and writes) only when it is missing or
was written for other fields. Files are named by content, so an entry never goes stale; garbage
collection removes the entries of digests no manifest names.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import fields
from pathlib import Path

from localrun.store.ggufinfo import read_info
from localrun.store.layout import Layout, atomic_write
from localrun.store.model import Facts, ModelInfo

# What an entry was written for: a change in the facts read makes old entries misses, not wrong answers.
_SHAPE = sorted(f.name for f in fields(Facts))


def model_info(layout: Layout, digest: str, path: Path, label: str) -> ModelInfo:
    """The facts of the file `path` with `digest`: from the cache, else parsed and cached."""
    cached = _load(layout.info(digest))
    if cached is not None:
        return cached
    info = read_info(path, label)
    save(layout, digest, info)
    return info


def save(layout: Layout, digest: str, info: ModelInfo) -> None:
    """Cache `info`; a cache that cannot be written only costs the next `show` a parse."""
    data = json.dumps({"facts": _SHAPE, "info": info.to_dict()}, ensure_ascii=False, default=str)
    with contextlib.suppress(OSError):
        atomic_write(layout.info(digest), data.encode())


def drop_unused(layout: Layout, used: set[str]) -> None:
    """Remove the entries of digests not in `used`."""
    if not layout.infos.is_dir():
        return
    for entry in layout.infos.glob("sha256-*.json"):
        if "sha256:" + entry.name.removeprefix("sha256-").removesuffix(".json") not in used:
            entry.unlink(missing_ok=True)


def _load(path: Path) -> ModelInfo | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("facts") != _SHAPE or not isinstance(data.get("info"), dict):
        return None
    try:
        return ModelInfo.from_dict(data["info"])
    except (TypeError, ValueError):
        return None


__all__ = ["drop_unused", "model_info", "save"]
