"""What the engine decides from its settings (`localrun.config.EngineSettings`): flash attention's
"auto", and the deliberate choice of CPU threads."""

from __future__ import annotations

import os


def resolve_flash_attn(setting: str, kv_cache_type: str, gpu_offload: bool) -> str:
    """What "auto" means here: on a GPU, llama.cpp's own choice; quantized KV needs flash attention;
    on a CPU "prefix": flash attention for each sequence's first 256 cells, none after (`flashrows`),
    which the engine turns "off" for models it does not fit. The CPU kernel is fastest over a short
    cache (eight short chats 1.29x off on an AMD EPYC) and over a long one loses to attention without
    it on some CPUs (decoding after 1.4k tokens 0.54-0.70x off on an Intel Xeon and two AMD EPYCs;
    docs/benchmarks.md): prefix mode has the first's speed and the second's.
    """
    if setting != "auto":
        return setting
    if kv_cache_type != "f16":
        return "on"
    return "auto" if gpu_offload else "prefix"


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
