"""Perplexity of a text, computed the way llama.cpp's `llama-perplexity` does.

The text is tokenized once and cut into chunks of `ctx` tokens (a tail shorter than `ctx` is
dropped); a model that adds BOS gets BOS as each chunk's first token. Each chunk is evaluated from
an empty cache, and only the second half of it is scored: token j+1 is predicted from the logits
at j for j in [ctx/2, ctx-1), so every scored token sees at least ctx/2 tokens of context.
Perplexity is exp(mean negative log-likelihood) over all scored tokens.

Several chunks go into one `llama_decode` as separate sequences (`batch // ctx` of them, fewer when
their logits would pass LOGITS_BUDGET), on a context of its own with one KV stream per sequence;
logits are requested only for scored rows, and the log-softmax runs in numpy. A `stop` event set
from another thread ends the work between two decodes.
"""

from __future__ import annotations

import threading
import time

import llama_cpp as L
import numpy as np

from localrun.engine.backend import Model
from localrun.engine.logprobs import log_softmax, output_logits
from localrun.engine.sidecontext import SideContext
from localrun.errors import Cancelled, InvalidRequest
from localrun.ops import PerplexityResult

MIN_CTX = 16
LOGITS_BUDGET = 256 << 20  # bytes of float32 logits one decode may return (a 262k vocabulary is 1 MiB a row)


def split_chunks(tokens: list[int], ctx: int, bos: int | None) -> list[list[int]]:
    """Whole chunks of `ctx` tokens; each starts with `bos` when the model adds one."""
    chunks = [tokens[i:i + ctx] for i in range(0, len(tokens) - ctx + 1, ctx)]
    return [[bos, *chunk[1:]] for chunk in chunks] if bos is not None else chunks


def first_scored(ctx: int) -> int:
    """The first position whose logits are scored (llama-perplexity's `first = n_ctx/2`)."""
    return ctx // 2


def token_nll(logits: np.ndarray, targets: np.ndarray, block: int = 64) -> np.ndarray:
    """-log softmax(logits)[target] per row, `block` rows at a time so a batch of vocabulary-wide
    rows never needs a second full-size copy."""
    out = np.empty(len(targets), dtype=np.float64)
    for start in range(0, len(targets), block):
        rows = log_softmax(logits[start:start + block])
        out[start:start + block] = -rows[np.arange(len(rows)), targets[start:start + block]]
    return out


def perplexity(model: Model, text: str, *, ctx: int = 512, batch: int = 2048, threads: int = 1,
               kv_type: str = "f16", flash_attn: str = "off", stop: threading.Event | None = None) -> PerplexityResult:
    """The perplexity of `text` under `model` with chunks of `ctx` tokens (see the module doc)."""
    started = time.perf_counter()
    _check_sizes(model, ctx, batch)
    tokens = model.tokenize(text, add_special=True, parse_special=False)
    bos = L.llama_vocab_bos(model.vocab) if L.llama_vocab_get_add_bos(model.vocab) else None
    chunks = split_chunks(tokens, ctx, bos)
    if not chunks:
        raise InvalidRequest(f"the text is {len(tokens)} tokens; perplexity needs at least one chunk of "
                             f"{ctx} (a smaller ctx or a longer text)")
    rows = ctx - 1 - first_scored(ctx)
    per_decode = max(1, min(batch // ctx, len(chunks), LOGITS_BUDGET // (4 * rows * model.n_vocab)))
    with SideContext(model, "perplexity", n_ctx=ctx * per_decode, n_batch=ctx * per_decode, n_seq_max=per_decode,
                     threads=threads, flash_attn=flash_attn, kv_type=kv_type) as side:
        parts = []
        for i in range(0, len(chunks), per_decode):
            if stop is not None and stop.is_set():
                raise Cancelled("perplexity cancelled")
            parts.append(_nll(side, model.n_vocab, chunks[i:i + per_decode], ctx))
        nll = np.concatenate(parts)
    mean = float(nll.mean())
    return PerplexityResult(float(np.exp(mean)), mean, len(tokens), len(nll), len(chunks), ctx,
                            time.perf_counter() - started)


def _check_sizes(model: Model, ctx: int, batch: int) -> None:
    trained = L.llama_model_n_ctx_train(model.ptr)
    if not MIN_CTX <= ctx <= trained:
        raise InvalidRequest(f"ctx must be between {MIN_CTX} and the model's training context {trained}, got {ctx}")
    if batch < 1:
        raise InvalidRequest(f"batch must be positive, got {batch}")


def _nll(side: SideContext, n_vocab: int, chunks: list[list[int]], ctx: int) -> np.ndarray:
    """Evaluate chunks of `ctx` tokens (one sequence each) from an empty cache and score their second halves."""
    first = first_scored(ctx)
    side.batch.clear()
    for seq_id, chunk in enumerate(chunks):
        for pos, token in enumerate(chunk):
            side.batch.add(token, pos, seq_id, first <= pos < ctx - 1)
    side.clear()
    side.decode()
    logits = output_logits(side.ctx, len(chunks) * (ctx - 1 - first), n_vocab)
    targets = np.array([chunk[first + 1:] for chunk in chunks], dtype=np.int64).reshape(-1)
    return token_nll(logits, targets)


__all__ = ["PerplexityResult", "first_scored", "perplexity", "split_chunks", "token_nll"]
