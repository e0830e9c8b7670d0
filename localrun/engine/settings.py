"""What the engine decides from its settings (`localrun.config.EngineSettings`): the deliberate
choice of CPU threads (flash attention's "auto" is `localrun.config.resolve_flash_attn`, which the
memory estimate reads too)."""

from __future__ import annotations

import os


def physical_cores() -> int:
    """Cores this process may run on, counting hyperthread siblings once.

    Decoding is memory-bound: a second hyperthread on the same core adds contention, not speed.
    """
    allowed = allowed_cpus()
    cores = set()
    for cpu in allowed:
        siblings = _read(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        cores.add(siblings or str(cpu))
    return max(1, len(cores))


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity: taskset, a container's cpuset)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return list(range(os.cpu_count() or 1))


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


__all__ = ["allowed_cpus", "physical_cores"]
