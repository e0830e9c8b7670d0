"""Log-probabilities from llama.cpp's logits: the one log-softmax and the one top-n, for sampling,
scoring, perplexity and the row probe alike.

Full vocabulary, raw logits (no temperature, no filters), float64 sums: what the OpenAI logprobs,
option scoring and llama-perplexity report.
"""

from __future__ import annotations

import ctypes

import llama_cpp as L
import numpy as np

from localrun.sampling import MAX_TOP_LOGPROBS


def logits_at(ctx, index: int, n_vocab: int) -> np.ndarray:
    """The raw logits at one batch index, as a view into llama.cpp's buffer (valid until the next decode)."""
    ptr = L.llama_get_logits_ith(ctx, index)
    return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,))


def output_logits(ctx, n_rows: int, n_vocab: int) -> np.ndarray:
    """The logits of the last decode's outputs, in batch order, as an (n_rows, n_vocab) view."""
    ptr = ctypes.cast(L.llama_get_logits(ctx), ctypes.POINTER(ctypes.c_float))
    return np.ctypeslib.as_array(ptr, shape=(n_rows, n_vocab))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities along the last axis (one row, or many), in float64."""
    x = logits.astype(np.float64)
    x -= x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def top_n(logprobs: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The `n` most likely tokens of one row (at most MAX_TOP_LOGPROBS), most likely first."""
    n = min(n, MAX_TOP_LOGPROBS, logprobs.size)
    if n <= 0:
        return []
    best = np.argpartition(logprobs, -n)[-n:]
    best = best[np.argsort(-logprobs[best], kind="stable")]
    return [(int(t), float(logprobs[t])) for t in best]


__all__ = ["log_softmax", "logits_at", "output_logits", "top_n"]
