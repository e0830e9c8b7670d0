"""Engine settings, and the deliberate choice of CPU threads."""

from __future__ import annotations

import os
from dataclasses import dataclass

FLASH_ATTN = ("auto", "on", "off")
KV_CACHE_TYPES = ("f16", "q8_0", "q4_0")


@dataclass(slots=True)
class EngineSettings:
    """How one model is served. `ctx_size` is per slot: the context holds `parallel * ctx_size`
    KV cells, `ctx_size` for each sequence slot.

    By default each slot has its own KV stream. With one unified buffer (`kv_unified=True`) a
    sequence's cells sit wherever there was room, and the attention kernels then sum the same
    values in a different order than for that sequence alone: greedy output could differ from a
    solo run once the cache is fragmented by prefix reuse. Separate streams keep every sequence
    bit-identical to running alone, and each attends only over its own cells.
    """

    parallel: int = 4
    ctx_size: int = 4096
    batch_size: int = 512
    threads: int | None = None  # None = auto: physical cores, tuned against n-1 while running
    flash_attn: str = "auto"
    kv_cache_type: str = "f16"
    gpu_layers: int | None = None  # None = all when the build can offload, else 0
    seed: int | None = None  # default seed for requests without one; None = random per request
    embed_ctx_size: int = 2048  # context of the lazily created embeddings context
    kv_unified: bool = False  # one KV buffer shared by all slots (see above)
    speculative: int = 0  # draft length for requests that do not choose one; 0 = no speculative decoding
    safe_mode: bool = False  # plain CPU weights: no repacking, no AMX (after a load crashed; see cpu_features)


def resolve_flash_attn(setting: str, kv_cache_type: str, gpu_offload: bool) -> str:
    """What "auto" means here: on a GPU, llama.cpp's own choice; quantized KV needs flash attention;
    on a CPU it is off. The CPU flash-attention kernel changes its summation order with the number of
    query rows (a 64-token prefill chunk gave different greedy output than 61 or 512), so batched and
    chunked runs would no longer match solo runs token for token; without it they do.
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
    allowed = _allowed_cpus()
    cores = set()
    for cpu in allowed:
        siblings = _read(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        cores.add(siblings or str(cpu))
    return max(1, len(cores))


def _allowed_cpus() -> list[int]:
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


__all__ = ["EngineSettings", "physical_cores", "resolve_flash_attn", "FLASH_ATTN", "KV_CACHE_TYPES"]
