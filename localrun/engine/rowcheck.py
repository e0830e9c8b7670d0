"""Whether llama.cpp computes a token's row the same way alone as among several rows of its sequence.

Speculative decoding verifies a draft as one chunk of rows, plain decoding evaluates one row per
step; the drafted answer equals the plain one token for token only when both give bit-identical
logits. That depends on the build (llamafile's tinyBLAS sums multi-row matmuls in another order),
the weight types (some have batched or repacked kernels), the KV cache type and flash attention,
and the backend, so it is measured, not guessed: the same tokens are evaluated one row at a time
and as one chunk on a scratch context with the engine's settings, and the logits are compared.

One case a short probe cannot see, the thread-split kernel CPU flash attention takes for a lone row
over 512+ cells, the engine's schedule never lets happen (`flashrows`).
"""

from __future__ import annotations

import numpy as np

from localrun.engine.backend import Model
from localrun.engine.logprobs import log_softmax, logits_at
from localrun.engine.sidecontext import SideContext

PROBE_TEXT = "The quick brown fox jumps over the lazy dog while the old cat sleeps in the warm sun. "
PREFIX = 4  # tokens evaluated first, as a prompt would be


def rows_alike(model: Model, rows: int, *, threads: int, flash_attn: str, kv_type: str) -> bool:
    """Whether `rows` tokens evaluated one by one and as one chunk give bit-identical logits."""
    tokens = model.tokenize(PROBE_TEXT * (1 + rows // 8), add_special=True, parse_special=False)[:PREFIX + rows]
    with SideContext(model, "probing how rows are computed", n_ctx=max(64, len(tokens)), n_batch=len(tokens),
                     n_seq_max=1, threads=threads, flash_attn=flash_attn, kv_type=kv_type) as side:
        one_by_one = _logprobs_after_prefix(model, side, tokens, step=1)
        chunked = _logprobs_after_prefix(model, side, tokens, step=rows)
    return all(np.array_equal(a, b) for a, b in zip(one_by_one, chunked))


def _logprobs_after_prefix(model: Model, side: SideContext, tokens: list[int], step: int) -> list[np.ndarray]:
    """From an empty cache: the PREFIX as one chunk, then the rest `step` rows per call, with the
    log-probabilities at each of those rows."""
    side.clear()
    batch = side.batch
    spans = [(0, PREFIX)] + [(start, min(start + step, len(tokens))) for start in range(PREFIX, len(tokens), step)]
    out: list[np.ndarray] = []
    for start, end in spans:
        batch.clear()
        for pos in range(start, end):
            batch.add(tokens[pos], pos, 0, start >= PREFIX)
        side.decode()
        if start >= PREFIX:
            out += [log_softmax(logits_at(side.ctx, i, model.n_vocab)) for i in range(end - start)]
    return out


__all__ = ["rows_alike"]
