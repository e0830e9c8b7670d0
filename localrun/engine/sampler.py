"""Per-sequence token selection: a `llama_sampler_*` chain, and log-probabilities beside it.

The chain order follows llama-cpp-python's `Llama`: logit bias, penalties, grammar, then greedy,
or top-k, typical, top-p, min-p, temperature and a seeded draw. Log-probabilities come from the
raw logits over the full vocabulary, before any of those filters.
"""

from __future__ import annotations

import ctypes
import random

import llama_cpp as L
import numpy as np

from localrun.errors import InvalidRequest
from localrun.sampling import MAX_TOP_LOGPROBS, SamplingParams


class Sampler:
    """One request's sampler chain; `sample` draws from the logits at a batch index and accepts it."""

    __slots__ = ("ptr", "seed")

    def __init__(self, vocab, n_vocab: int, params: SamplingParams, seed: int | None,
                 banned: list[int] = ()) -> None:
        self.seed = seed if seed is not None else random.getrandbits(32)
        self.ptr = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        bias = dict(params.logit_bias)
        bias.update({t: float("-inf") for t in banned})
        try:
            self._build(vocab, n_vocab, params, bias)
        except Exception:
            self.free()
            raise

    def _build(self, vocab, n_vocab: int, p: SamplingParams, bias: dict[int, float]) -> None:
        if bias:
            self._add(_logit_bias(n_vocab, bias))
        if p.repeat_penalty != 1.0 or p.presence_penalty or p.frequency_penalty:
            self._add(L.llama_sampler_init_penalties(
                n_vocab, p.repeat_last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty))
        if p.grammar:
            grammar = L.llama_sampler_init_grammar(vocab, p.grammar.encode(), b"root")
            if not grammar:
                raise InvalidRequest("invalid GBNF grammar (llama.cpp could not parse it)")
            self._add(grammar)
        if p.greedy:
            self._add(L.llama_sampler_init_greedy())
            return
        if p.top_k > 0:
            self._add(L.llama_sampler_init_top_k(p.top_k))
        if p.typical_p < 1.0:
            self._add(L.llama_sampler_init_typical(p.typical_p, 1))
        if p.top_p < 1.0:
            self._add(L.llama_sampler_init_top_p(p.top_p, 1))
        if p.min_p > 0.0:
            self._add(L.llama_sampler_init_min_p(p.min_p, 1))
        self._add(L.llama_sampler_init_temp(p.temperature))
        self._add(L.llama_sampler_init_dist(self.seed))

    def _add(self, smpl) -> None:
        L.llama_sampler_chain_add(self.ptr, smpl)

    def sample(self, ctx, index: int) -> int:
        return L.llama_sampler_sample(self.ptr, ctx, index)

    def free(self) -> None:
        if self.ptr:
            L.llama_sampler_free(self.ptr)
            self.ptr = None


def _logit_bias(n_vocab: int, bias: dict[int, float]):
    for token in bias:
        if not 0 <= token < n_vocab:
            raise InvalidRequest(f"logit_bias: token {token} is outside the vocabulary (0..{n_vocab - 1})")
    items = (L.llama_logit_bias * len(bias))(*(L.llama_logit_bias(t, b) for t, b in bias.items()))
    return L.llama_sampler_init_logit_bias(n_vocab, len(bias), items)


def log_softmax(ctx, index: int, n_vocab: int) -> np.ndarray:
    """Log-probabilities over the full vocabulary from the raw logits at one batch index."""
    ptr = L.llama_get_logits_ith(ctx, index)
    logits = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,))
    shifted = logits.astype(np.float64) - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


def top_logprobs(logprobs: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The `n` most likely tokens (at most MAX_TOP_LOGPROBS), most likely first."""
    n = min(n, MAX_TOP_LOGPROBS, logprobs.size)
    if n <= 0:
        return []
    best = np.argpartition(logprobs, -n)[-n:]
    best = best[np.argsort(-logprobs[best], kind="stable")]
    return [(int(t), float(logprobs[t])) for t in best]


__all__ = ["Sampler", "log_softmax", "top_logprobs"]
