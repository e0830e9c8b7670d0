"""Exact option scoring: the log-probability of each candidate continuation of one prompt.

The prompt is evaluated once as generation evaluates it, its cached prefix reused between calls, and
its last row's log-probabilities kept: they give every option's first token, the same number
generation's log-probability of that token is. Then each option's other tokens are evaluated after
the prompt, read, and removed again (`llama_memory_seq_rm`), so the next option sees exactly the same
cells. Log-probabilities come from the full-vocabulary softmax of the raw logits: no temperature, no
top-k. Results do not depend on the other options or their order, and equal evaluating the prompt,
then the option, as two batches with the same kind of attention.

Why "as generation evaluates it": how llama.cpp computes a row depends on the rows beside it in
its decode. Without flash attention a token evaluated alone differs from one in a batch of several
(up to 0.8 in a logit); with it, pieces of 64 rows or more take a tiled kernel (`flashrows`). So the
prompt is cut into the pieces the scheduler's rules allow (`spans`): never a lone token unless it is
the prompt's whole part on its side of the flash-attention prefix's end, a tile where the prompt is
that long there, never across that end. In prefix mode the scorer has that mode's two contexts
(`contexts`) and moves its sequence between them as the engine moves a slot's.

Why not fork one sequence per option (`llama_memory_seq_cp`) and decode all options in one batch:
with llama.cpp 0.3.36 that gives wrong numbers. Sequences forked from shared prompt cells and decoded
in the same batch drift by up to 0.5 nats for every lane but the first (found by comparing against
the plain evaluation; also with one token per lane per batch). Options are short, so one small
decode per option costs little next to the prompt evaluated once.
"""

from __future__ import annotations

import numpy as np

from localrun.engine.backend import Batch, Model
from localrun.engine.contexts import open_contexts
from localrun.engine.flashrows import RowRules
from localrun.engine.logprobs import log_softmax, output_logits, top_n
from localrun.engine.scheduler import MIN_PREFILL, cached_keep, common_prefix, prompt_piece
from localrun.errors import ContextOverflow, InvalidRequest, LocalrunError


class Scorer:
    """Owns the scoring contexts; its one sequence holds the last prompt scored, for prefix reuse."""

    def __init__(self, model: Model, ctx_size: int, batch_size: int, threads: int, flash_attn: str,
                 rows: RowRules, kv_type: str) -> None:
        """`flash_attn` and `rows`: the engine's mode and schedule rules, so that rows compute as its do."""
        self.model, self.ctx_size, self.batch_size, self.rows = model, ctx_size, batch_size, rows
        self.contexts = open_contexts(model, flash_attn, n_slots=1, ctx_size=ctx_size, batch_size=batch_size,
                                      threads=threads, kv_type=kv_type)
        self.batch = Batch(batch_size)
        self.cached: list[int] = []  # the prompt sequence 0 holds
        self.last_row: np.ndarray | None = None  # its last row's log-probabilities
        self.n_cached = 0  # prompt tokens reused by the last call

    def score(self, prompt: list[int], options: list[list[int]]) -> list[float]:
        """Sum of log-probabilities of each option's tokens following the prompt, in the given order."""
        self._check(prompt, options)
        first = self._prefill(prompt)
        return [float(first[option[0]]) + self._rest(prompt, option) for option in options]

    def prompt_logprobs(self, tokens: list[int], top: int) -> list[tuple[float, list[tuple[int, float]]]]:
        """For each token after the first: its log-probability given the tokens before it, and the
        `top` most likely tokens there (id, log-probability). What evaluation harnesses call the
        log-likelihood of a text, computed as generation would compute it as a prompt."""
        if len(tokens) > self.ctx_size:
            raise ContextOverflow(f"prompt ({len(tokens)} tokens) exceeds the context of {self.ctx_size}")
        self._forget(0)
        rows: list[tuple[float, list[tuple[int, float]]]] = []
        for start, size in spans(0, len(tokens), len(tokens), self.rows, self.batch_size):
            logprobs = self._decode(tokens, start, size, outputs_from=start)
            for j in range(size):
                following = start + j + 1
                if following < len(tokens):
                    rows.append((float(logprobs[j, tokens[following]]), top_n(logprobs[j], top)))
        self._forget(0)
        return rows

    def _check(self, prompt: list[int], options: list[list[int]]) -> None:
        if not prompt:
            raise InvalidRequest("scoring needs a non-empty prompt")
        if not options or any(not o for o in options):
            raise InvalidRequest("scoring needs at least one option, and no empty option")
        longest = max(map(len, options))
        if MIN_PREFILL + longest > self.batch_size:
            raise InvalidRequest(f"an option is {longest} tokens; at most {self.batch_size - MIN_PREFILL} are scored")
        if len(prompt) + longest > self.ctx_size:
            raise ContextOverflow(f"prompt ({len(prompt)} tokens) plus the longest option ({longest}) exceed "
                                  f"the context of {self.ctx_size}")

    def _prefill(self, prompt: list[int]) -> np.ndarray:
        """Bring sequence 0 to exactly `prompt`, evaluating only what the cached prompt does not share
        (as the scheduler would, `cached_keep`); the prompt's last row's log-probabilities."""
        if prompt == self.cached and self.last_row is not None:
            self.n_cached = len(prompt)
            return self.last_row
        n = len(prompt)
        keep = cached_keep(common_prefix(self.cached, prompt), n, self.rows)
        self._forget(keep)
        self.n_cached = keep
        for start, size in spans(keep, n, n, self.rows, self.batch_size):
            logprobs = self._decode(prompt, start, size, outputs_from=n - 1)
            self.cached = prompt[:start + size]
        self.last_row = logprobs[-1].copy()
        return self.last_row

    def _rest(self, prompt: list[int], option: list[int]) -> float:
        """The log-probability of the option's tokens after its first: its rows evaluated after the
        prompt's, read, and removed again."""
        n, tokens = len(prompt), prompt + option
        total = 0.0
        try:
            for start, size in spans(n, len(tokens) - 1, n, self.rows, self.batch_size):
                logprobs = self._decode(tokens, start, size, outputs_from=start)
                total += float(sum(logprobs[j, tokens[start + j + 1]] for j in range(size)))
        finally:  # a failed decode too: the cached prompt is reused as it is
            self.contexts.trim(0, n)
        return total

    def _decode(self, tokens: list[int], start: int, size: int, outputs_from: int) -> np.ndarray:
        """Evaluate tokens[start:start + size] after the cells sequence 0 holds, in the context their
        side of the prefix's end belongs to; the log-probabilities of the rows from `outputs_from` on."""
        ctx = self.contexts.of(self.rows.flash(start))
        self.contexts.place(0, ctx)
        self.batch.clear()
        for pos in range(start, start + size):
            self.batch.add(tokens[pos], pos, 0, pos >= outputs_from)
        status = self.batch.decode(ctx)
        if status != 0:
            raise LocalrunError(f"scoring failed: llama_decode returned {status}")
        outputs = start + size - max(start, outputs_from)
        return log_softmax(output_logits(ctx, outputs, self.model.n_vocab)) if outputs > 0 else np.empty((0, 0))

    def _forget(self, keep: int) -> None:
        """Cut sequence 0 back to its first `keep` tokens."""
        self.contexts.trim(0, keep)
        self.cached, self.last_row = self.cached[:keep], None

    def close(self) -> None:
        self.batch.free()
        self.contexts.free()


def spans(start: int, end: int, n_prompt: int, rows: RowRules, most: int) -> list[tuple[int, int]]:
    """(first position, tokens) pieces of positions [start, end) of a prompt of `n_prompt` tokens, or
    of an option after it, cut as the scheduler cuts a prompt alone in a step of `most` tokens: none
    across the prefix's end, none under its least rows unless that is all that is left on its side."""
    out = []
    while start < end:
        size = prompt_piece(start, end - start, n_prompt, rows, most, most)
        out.append((start, size))
        start += size
    return out


__all__ = ["Scorer", "spans"]
