"""Memory arithmetic for scheduling: what a loaded model costs, and the budget it must fit in.

Pure functions over plain numbers and GGUF metadata, so the eviction tests need no model. A leaf
module: the daemon decides from it, and `localrun show` says from it which context a load picks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from localrun.config import PREFIX_CELLS, resolve_flash_attn

_KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
             "q4_1": 20 / 32, "q4_0": 18 / 32}
SWA_PAD = 256  # llama.cpp pads its sliding-window cache to this many cells


@dataclass(frozen=True, slots=True)
class KvShape:
    """What sizes a model's KV cache, read from its GGUF (store.ggufinfo) and kept in its facts."""

    bytes_per_token: int  # f16 K and V of one token, all layers
    swa_bytes_per_token: int = 0  # the part of it in sliding-window layers (Gemma 2/3, gpt-oss, Cohere 2)
    window: int = 0  # their window in tokens (llama.cpp's n_swa)

    @classmethod
    def of(cls, facts: Any) -> KvShape:
        return cls(facts.kv_bytes_per_token, getattr(facts, "kv_swa_bytes_per_token", 0),
                   getattr(facts, "sliding_window", 0))


def estimate_bytes(file_size: int, shape: KvShape, options: Any) -> int:
    """Weights (the file size) plus the KV caches of a load; compute buffers are left out."""
    return file_size + load_cache_bytes(shape, options, options.ctx_size)


def load_cache_bytes(shape: KvShape, options: Any, ctx: int) -> int:
    """The KV caches a load of `ctx` tokens per slot holds: the slots' own, of the configured type, whose
    sliding-window layers keep only their window (engine.py), and its two side contexts', f16 with
    every cell kept, which a load makes when first needed: scoring's (engine/scoring.py: one sequence
    of `ctx` tokens, as it cuts back to the prompt after each option; made once anything is scored or
    a prompt's logprobs are asked for) and embeddings' (engine/embed.py: `options.embed_ctx_size`
    tokens, or the trained length when shorter, so this may count a little more than a load holds).
    In prefix mode (`LOCALRUN_FLASH_ATTN=prefix`, and `auto` with an f16 cache: what it means on
    CPUs) the slots' and scoring's first cells have a context of their own too (engine/contexts.py),
    counted for every model without a sliding window and slots without a shared cache, whether or not
    the machine (a GPU) and the model (a recurrent state) turn out to allow it: 256 cells a slot, a
    small part of a load."""
    slots = cache_bytes(shape, options.kv_cache_type, ctx, options.parallel, options.batch_size, options.kv_unified)
    scoring = cache_bytes(shape, "f16", ctx, 1, options.batch_size, swa_full=True)
    prefix_mode = resolve_flash_attn(options.flash_attn, options.kv_cache_type, gpu_offload=False) == "prefix"
    if prefix_mode and not shape.window and not options.kv_unified:
        prefix = min(ctx, PREFIX_CELLS)
        slots += cache_bytes(shape, "f16", prefix, options.parallel, options.batch_size, swa_full=True)
        scoring += cache_bytes(shape, "f16", prefix, 1, options.batch_size, swa_full=True)
    return slots + scoring + cache_bytes(shape, "f16", options.embed_ctx_size, 1, options.batch_size, swa_full=True)


def cache_bytes(shape: KvShape, kv_cache_type: str, ctx: int, sequences: int, ubatch: int,
                unified: bool = False, swa_full: bool = False) -> int:
    """One llama context's KV cache for `sequences` of `ctx` tokens, as llama.cpp sizes it: full layers
    hold every cell; sliding-window layers, unless `swa_full`, only llama.cpp's SWA cache
    (llama_kv_cache_iswa): per stream min(cells, window x the stream's sequences + n_ubatch), padded
    to 256."""
    cells = ctx * sequences
    full = kv_bytes(shape.bytes_per_token - shape.swa_bytes_per_token, kv_cache_type, cells)
    if swa_full or not shape.swa_bytes_per_token:
        return full + kv_bytes(shape.swa_bytes_per_token, kv_cache_type, cells)
    streams = 1 if unified else sequences
    per_stream = min(cells // streams, shape.window * (sequences if unified else 1) + ubatch)
    swa_cells = streams * -(-per_stream // SWA_PAD) * SWA_PAD
    return full + kv_bytes(shape.swa_bytes_per_token, kv_cache_type, swa_cells)


def kv_bytes_per_token(get: Callable[[str, Any], Any]) -> int:
    """f16 K and V for every layer, from `<arch>.block_count`, the head counts and head sizes, as
    `get(key without the architecture, default)` reads them (a GGUF's fields, a loaded model's metadata)."""
    layers = int(get("block_count", 0) or 0)
    embd = int(get("embedding_length", 0) or 0)
    heads = int(get("attention.head_count", 1) or 1)
    kv_heads = int(get("attention.head_count_kv", heads) or heads)
    key_len = int(get("attention.key_length", embd // heads) or 0)
    value_len = int(get("attention.value_length", key_len) or key_len)
    return layers * kv_heads * (key_len + value_len) * 2


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
    return default_context(facts.context_length, KvShape.of(facts), model.size, settings.engine,
                           memory_budget(settings.memory_budget), settings.max_ctx)


def default_context(trained: int, shape: KvShape, file_size: int, options: Any, budget: int,
                    ceiling: int = 0) -> tuple[int, str]:
    """The context per slot a model loads with when neither the request, its Modelfile nor
    LOCALRUN_CTX_SIZE chose one, and why: its trained length, cut to what the memory budget holds
    beside its weights (the KV caches of `load_cache_bytes`), and to `ceiling` (LOCALRUN_MAX_CTX;
    0 = none). A model too big for the budget even without a cache gets the smallest step; its load
    then fails saying why (see `fits`)."""
    ctx, why = (trained, "its trained length") if trained > 0 else (FALLBACK_CTX, "its trained length is unknown")
    if ceiling and ceiling < ctx:
        ctx, why = ceiling, "LOCALRUN_MAX_CTX"
    if budget and shape.bytes_per_token and file_size + load_cache_bytes(shape, options, ctx) > budget:
        ctx = _largest_fitting(shape, options, budget - file_size, ctx)
        why = "the memory budget (LOCALRUN_MEMORY_BUDGET)"
    return ctx, why


def _largest_fitting(shape: KvShape, options: Any, room: int, below: int) -> int:
    """The longest context, in CTX_STEPs under `below`, whose caches fit in `room` bytes (at least one
    step). The cost grows with the context, but not in proportion (sliding-window layers stop at
    their window), so it is searched rather than divided."""
    low, high = 1, max(1, (below - 1) // CTX_STEP)  # low fits (or is the floor), high + 1 does not
    while low < high:
        mid = (low + high + 1) // 2
        if load_cache_bytes(shape, options, mid * CTX_STEP) <= room:
            low = mid
        else:
            high = mid - 1
    return low * CTX_STEP


def fits(file_size: int, shape: KvShape, options: Any, budget: int) -> str | None:
    """None when a load fits the budget on its own, else why not (a sentence for the error)."""
    if not budget:
        return None
    cache = load_cache_bytes(shape, options, options.ctx_size)
    if file_size + cache <= budget:
        return None
    return (f"{_gib(file_size)} of weights and {_gib(cache)} of KV cache ({options.ctx_size} tokens x "
            f"{options.parallel} slots, {options.kv_cache_type}, and the scoring and embeddings contexts') do not "
            f"fit the memory budget of {_gib(budget)} (LOCALRUN_MEMORY_BUDGET)")


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"
