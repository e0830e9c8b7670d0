"""Exact option scoring: the log-probability of each candidate continuation of one prompt.

The prompt is evaluated once (its cached prefix reused between calls); then each option is appended
to it in one decode, its log-probabilities read, and removed again (`llama_memory_seq_rm`), so the next
option sees exactly the same prompt cells. Log-probabilities come from the full-vocabulary softmax of
the raw logits: no temperature, no top-k. Every option is computed exactly as a plain evaluation of
prompt + option would be, so results do not depend on the other options or their order.

Why not fork one sequence per option (`llama_memory_seq_cp`) and decode all options in one batch:
with llama.cpp 0.3.36 that gives wrong numbers. Sequences forked from shared prompt cells and decoded
in the same batch drift by up to 0.5 nats for every lane but the first (found by comparing against
the plain evaluation; also with one token per lane per batch). Options are short, so one small
decode per option costs little next to the prompt evaluated once.
"""

from __future__ import annotations

import ctypes

import llama_cpp as L
import numpy as np

from localrun.engine.backend import Batch, Model, new_context
from localrun.engine.scheduler import common_prefix
from localrun.errors import ContextOverflow, InvalidRequest, LocalrunError


class Scorer:
    """Owns the scoring context; its one sequence holds the last prompt scored, for prefix reuse."""

    def __init__(self, model: Model, ctx_size: int, batch_size: int, threads: int) -> None:
        self.model, self.ctx_size, self.batch_size = model, ctx_size, batch_size
        self.ctx = new_context(model, n_ctx=ctx_size, n_batch=batch_size, n_seq_max=1,
                               threads=threads, flash_attn="off")
        self.memory = L.llama_get_memory(self.ctx)
        self.batch = Batch(batch_size)
        self.cached: list[int] = []  # the prompt tokens sequence 0 holds
        self.n_cached = 0  # prompt tokens reused by the last call

    def score(self, prompt: list[int], options: list[list[int]]) -> list[float]:
        """Sum of log-probabilities of each option's tokens following the prompt, in the given order."""
        self._check(prompt, options)
        first = self._prefill(prompt)
        return [self._score_option(option, len(prompt), first) for option in options]

    def _check(self, prompt: list[int], options: list[list[int]]) -> None:
        if not prompt:
            raise InvalidRequest("scoring needs a non-empty prompt")
        if not options or any(not o for o in options):
            raise InvalidRequest("scoring needs at least one option, and no empty option")
        longest = max(map(len, options))
        if longest > self.batch_size:
            raise InvalidRequest(f"an option is {longest} tokens; at most {self.batch_size} are scored")
        if len(prompt) + longest > self.ctx_size:
            raise ContextOverflow(f"prompt ({len(prompt)} tokens) plus the longest option ({longest}) exceed "
                                  f"the context of {self.ctx_size}")

    def _prefill(self, prompt: list[int]) -> np.ndarray:
        """Evaluate the prompt into sequence 0; the log-probabilities that follow its last token."""
        keep = min(common_prefix(self.cached, prompt), len(prompt) - 1)
        L.llama_memory_seq_rm(self.memory, -1, keep, -1)
        self.cached, self.n_cached = prompt[:keep], keep
        for start in range(keep, len(prompt), self.batch_size):
            chunk = prompt[start:start + self.batch_size]
            self.batch.clear()
            for pos in range(start, start + len(chunk)):
                self.batch.add(prompt[pos], pos, 0, pos == len(prompt) - 1)
            self._decode()
            self.cached = prompt[: start + len(chunk)]
        return _log_softmax(self._logits(1))[0]

    def _score_option(self, option: list[int], n_prompt: int, first: np.ndarray) -> float:
        """Append the option to the prompt in one decode, read its log-probabilities, take it out again."""
        total = float(first[option[0]])
        if len(option) > 1:  # the last token of an option is never evaluated
            self.batch.clear()
            for j, token in enumerate(option[:-1]):
                self.batch.add(token, n_prompt + j, 0, True)
            self._decode()
            rows = _log_softmax(self._logits(len(option) - 1))
            total += float(sum(rows[j, token] for j, token in enumerate(option[1:])))
            L.llama_memory_seq_rm(self.memory, 0, n_prompt, -1)
        return total

    def _decode(self) -> None:
        status = self.batch.decode(self.ctx)
        if status != 0:
            raise LocalrunError(f"scoring failed: llama_decode returned {status}")

    def _logits(self, n_rows: int) -> np.ndarray:
        """The logits of the last batch's outputs, in batch order, as an (n_rows, n_vocab) array."""
        ptr = ctypes.cast(L.llama_get_logits(self.ctx), ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(ptr, shape=(n_rows, self.model.n_vocab))

    def close(self) -> None:
        self.batch.free()
        if self.ctx:
            L.llama_free(self.ctx)
            self.ctx = None


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x -= x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


__all__ = ["Scorer"]
