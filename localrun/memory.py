"""Memory arithmetic for scheduling: what a loaded model costs, and the budget it must fit in.

Pure functions over plain numbers and GGUF metadata, so the eviction tests need no model. A leaf
module: the daemon decides from it, and `localrun show` says from it which context a load picks.
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


CTX_STEP = 256  # a context the memory budget limits is rounded down to a multiple of this
FALLBACK_CTX = 4096  # for a model whose GGUF does not say how long it was trained


def context_for(model: Any, num_ctx: int | None, settings: Any) -> tuple[int, str]:
    """The context per slot `model` loads with, and why: `num_ctx` (the request's, else its Modelfile's),
    then LOCALRUN_CTX_SIZE when set, then `default_context`. `settings` is a config.Settings."""
    if num_ctx:
        return num_ctx, "num_ctx"
    if settings.ctx_size:
        return settings.ctx_size, "LOCALRUN_CTX_SIZE"
    facts = model.facts
    return default_context(facts.context_length, facts.kv_bytes_per_token, model.size, settings.engine,
                           memory_budget(settings.memory_budget), settings.max_ctx)


def default_context(trained: int, kv_f16_bytes_per_token: int, file_size: int, options: Any, budget: int,
                    ceiling: int = 0) -> tuple[int, str]:
    """The context per slot a model loads with when neither the request, its Modelfile nor
    LOCALRUN_CTX_SIZE chose one, and why: its trained length, cut to what the memory budget holds
    beside its weights (the KV cache of every slot, of the configured type), and to `ceiling`
    (LOCALRUN_MAX_CTX; 0 = none). A model too big for the budget even without a cache gets the
    smallest step; its load then fails saying why (see `fits`)."""
    ctx, why = (trained, "its trained length") if trained > 0 else (FALLBACK_CTX, "its trained length is unknown")
    if ceiling and ceiling < ctx:
        ctx, why = ceiling, "LOCALRUN_MAX_CTX"
    per_token = kv_bytes(kv_f16_bytes_per_token, options.kv_cache_type, options.parallel)
    if budget and per_token:
        room = (budget - file_size) // per_token // CTX_STEP * CTX_STEP
        if room < ctx:
            ctx, why = max(CTX_STEP, room), "the memory budget (LOCALRUN_MEMORY_BUDGET)"
    return ctx, why


def fits(file_size: int, kv_f16_bytes_per_token: int, options: Any, budget: int) -> str | None:
    """None when a load fits the budget on its own, else why not (a sentence for the error)."""
    if not budget:
        return None
    cache = kv_bytes(kv_f16_bytes_per_token, options.kv_cache_type, options.ctx_size * options.parallel)
    if file_size + cache <= budget:
        return None
    return (f"{_gib(file_size)} of weights and {_gib(cache)} of KV cache ({options.ctx_size} tokens x "
            f"{options.parallel} slots, {options.kv_cache_type}) do not fit the memory budget of {_gib(budget)} "
            f"(LOCALRUN_MEMORY_BUDGET)")


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"
