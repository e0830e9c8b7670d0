"""What the engine decides from its settings (`localrun.config.EngineSettings`): flash attention's
"auto", and the deliberate choice of CPU threads."""

from __future__ import annotations

import os


def resolve_flash_attn(setting: str, kv_cache_type: str, gpu_offload: bool) -> str:
    """What "auto" means here: on a GPU, llama.cpp's own choice; quantized KV needs flash attention;
    on a CPU it is off, for speed: the scheduler keeps the CPU kernel exact when it is on
    (`flashrows`), but that kernel's speed depends on the CPU. Over a short cache it is 5% faster on
    an Intel Xeon, 26% on an AMD EPYC Zen 4, level on a Zen 3 (it skips the padding cells llama.cpp
    attends over otherwise); over 1.4k tokens 1.6-1.8x slower on the Xeon and on the Zen 3, 7% faster
    on the Zen 4 (docs/benchmarks.md).
    """
    if setting != "auto":
        return setting
    if kv_cache_type != "f16":
        return "on"
    return "auto" if gpu_offload else "off"


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


__all__ = ["allowed_cpus", "physical_cores", "resolve_flash_attn"]
