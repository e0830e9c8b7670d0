"""The catalogue (`models.toml`): short names for public GGUF models, their sources and facts.

The file ships inside the package (`localrun/store/models.toml`, a link to the top-level file in a
checkout), so an installed wheel and an editable checkout read the same catalogue.
"""

from __future__ import annotations

import difflib
import functools
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from localrun.errors import StoreError
from localrun.store.names import Name, parse_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_SHA256 = re.compile(r"[0-9a-f]{64}")
_REQUIRED = ("repo", "file", "quant", "size", "license", "params", "ctx")


@dataclass(frozen=True, slots=True)
class Entry:
    """One catalogue model: where its file lives and what it is."""

    name: Name
    repo: str
    file: str
    quant: str
    size: int
    license: str
    params: str
    ctx: int
    revision: str = "main"
    sha256: str = ""
    aliases: tuple[Name, ...] = ()
    package: str = ""
    package_file: str = ""


class Catalogue:
    """Entries by canonical name and by alias."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = {e.name: e for e in entries}
        self._index: dict[Name, Entry] = {}
        for entry in entries:
            for name in (entry.name, *entry.aliases):
                if name in self._index:
                    raise StoreError(f"catalogue: {name} is defined twice")
                self._index[name] = entry

    def find(self, name: Name) -> Entry | None:
        """The entry a name or alias stands for (`smollm2` -> `smollm2:135m`)."""
        return self._index.get(name)

    def names(self) -> list[str]:
        """Every name and alias, for suggestions and completion."""
        return sorted(str(n).removesuffix(":latest") for n in self._index)

    def suggest(self, text: str, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
        """Close matches for a name nobody knows (catalogue names plus `extra`, e.g. local models)."""
        pool = sorted({*self.names(), *extra})
        text = text.lower().removesuffix(":latest")
        close = difflib.get_close_matches(text, pool, n=3, cutoff=0.5)
        prefix = [p for p in pool if p.split(":")[0] == text.split(":")[0] and p not in close]
        return (close + prefix)[:4]


def parse_catalogue(text: str, origin: str = "models.toml") -> Catalogue:
    """Parse and validate catalogue TOML; a bad entry is a StoreError naming it."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise StoreError(f"{origin}: {e}") from None
    return Catalogue([_entry(key, table, origin) for key, table in data.get("models", {}).items()])


@functools.lru_cache(maxsize=1)
def load_catalogue() -> Catalogue:
    """The catalogue shipped with localrun (read once per process)."""
    path = catalogue_path()
    return parse_catalogue(path.read_text(encoding="utf-8"), str(path))


def catalogue_path() -> Path:
    return Path(str(resources.files("localrun.store").joinpath("models.toml")))


def _entry(key: str, table: dict, origin: str) -> Entry:
    missing = [f for f in _REQUIRED if f not in table]
    if missing:
        raise StoreError(f"{origin}: {key} lacks {', '.join(missing)}")
    sha = str(table.get("sha256", "")).lower()
    if sha and not _SHA256.fullmatch(sha):
        raise StoreError(f"{origin}: {key} has an invalid sha256")
    return Entry(
        name=parse_name(key),
        repo=table["repo"],
        file=table["file"],
        quant=table["quant"],
        size=int(table["size"]),
        license=table["license"],
        params=table["params"],
        ctx=int(table["ctx"]),
        revision=table.get("revision", "main"),
        sha256=sha,
        aliases=tuple(parse_name(a) for a in table.get("aliases", ())),
        package=table.get("package", ""),
        package_file=table.get("package_file", ""),
    )


__all__ = ["Catalogue", "Entry", "catalogue_path", "load_catalogue", "parse_catalogue"]
