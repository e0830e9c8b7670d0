"""Which llama.cpp builds have needed safe mode on this CPU, kept across daemon restarts.

When a runner dies of a signal while loading, the manager retries the load once in safe mode (plain
CPU weights: no repacking, no AMX). When that load works, the build and CPU are written here, so later
loads start in safe mode at once instead of crashing first. The key names the llama-cpp-python
version and the CPU, so reinstalling llama-cpp-python (a portable rebuild) or moving the data
directory to another machine starts afresh.
"""

from __future__ import annotations

import json
import logging
from importlib import metadata
from pathlib import Path

from localrun import cpu_features, paths
from localrun.store.layout import atomic_write

log = logging.getLogger("localrun.manager")

FILE_NAME = "safe-mode.json"


def current_key() -> str:
    """This llama.cpp build on this CPU (read without importing llama_cpp into the daemon)."""
    try:
        build = f"llama-cpp-python {metadata.version('llama-cpp-python')}"
    except metadata.PackageNotFoundError:
        build = "llama-cpp-python (unknown version)"
    return cpu_features.machine_key(build, cpu_features.probe())


class SafeModeMemory:
    """One JSON object, {key: reason}, in the data directory."""

    def __init__(self, path: Path | None = None, key: str | None = None) -> None:
        self.path = path or paths.data_dir() / FILE_NAME
        self.key = key or current_key()

    def _entries(self) -> dict[str, str]:
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return entries if isinstance(entries, dict) else {}

    @property
    def reason(self) -> str | None:
        """The crash that made this build need safe mode on this CPU; None when it does not."""
        return self._entries().get(self.key)

    @property
    def needed(self) -> bool:
        return self.reason is not None

    def remember(self, reason: str) -> None:
        entries = self._entries()
        entries[self.key] = reason
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(entries, indent=2).encode())
        except OSError as e:  # a read-only data dir costs a crash per load, nothing else
            log.warning("cannot remember safe mode in %s: %s", self.path, e)


__all__ = ["FILE_NAME", "SafeModeMemory", "current_key"]
