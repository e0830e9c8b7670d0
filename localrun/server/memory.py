"""Memory arithmetic for scheduling: what a loaded model costs, and the budget it must fit in.

Pure functions over plain numbers and GGUF metadata, so the eviction tests need no model.
"""

from __future__ import annotations

import os
import re
from typing import Any

from localrun.errors import UsageError

_KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
             "q4_1": 20 / 32, "q4_0": 18 / 32}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNIT = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 2**10, "m": 1e6, "mb": 1e6, "mib": 2**20,
         "g": 1e9, "gb": 1e9, "gib": 2**30, "t": 1e12, "tb": 1e12, "tib": 2**40}


def estimate_bytes(file_size: int, kv_f16_bytes_per_token: int, options: Any) -> int:
    """Weights (the file size) plus the KV cache of every slot; compute buffers are left out."""
    return file_size + kv_bytes(kv_f16_bytes_per_token, options.kv_cache_type, options.ctx_size * options.parallel)


def kv_bytes(kv_f16_bytes_per_token: int, kv_cache_type: str, cells: int) -> int:
    """A KV cache of `cells` tokens of the given type."""
    return int(kv_f16_bytes_per_token * _KV_BYTES.get(kv_cache_type, 2.0) / 2.0 * cells)


def parse_size(text: str) -> int:
    match = _SIZE.match(text)
    if not match or (match.group(2) or "").lower() not in _UNIT:
        raise UsageError(f"invalid size {text!r} (use bytes or e.g. 8GiB, 512MB)")
    return int(float(match.group(1)) * _UNIT[(match.group(2) or "").lower()])


def total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def memory_budget(setting: str) -> int:
    """LOCALRUN_MEMORY_BUDGET in bytes; 0 (the default) means 75% of physical memory; 0 if unknown."""
    size = parse_size(setting or "0")
    return size or int(total_memory() * 0.75)
