"""Memory arithmetic for scheduling: what a loaded model costs, and the budget it must fit in.

Pure functions over plain numbers and GGUF metadata, so the eviction tests need no model.
"""

from __future__ import annotations

import os
from typing import Any

_KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
             "q4_1": 20 / 32, "q4_0": 18 / 32}


def estimate_bytes(file_size: int, kv_f16_bytes_per_token: int, options: Any) -> int:
    """Weights (the file size) plus the KV cache of every slot; compute buffers are left out."""
    return file_size + kv_bytes(kv_f16_bytes_per_token, options.kv_cache_type, options.ctx_size * options.parallel)


def kv_bytes(kv_f16_bytes_per_token: int, kv_cache_type: str, cells: int) -> int:
    """A KV cache of `cells` tokens of the given type."""
    return int(kv_f16_bytes_per_token * _KV_BYTES.get(kv_cache_type, 2.0) / 2.0 * cells)


def total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def memory_budget(setting: int) -> int:
    """LOCALRUN_MEMORY_BUDGET in bytes; 0 (the default) means 75% of physical memory; 0 if unknown."""
    return setting or int(total_memory() * 0.75)
