"""Exact option scoring: the log-probability of each candidate continuation of one prompt.

The prompt's head (all but its last two tokens) is evaluated once, its cached prefix reused between
calls; then each option is evaluated in one decode together with the prompt's last two tokens, its
log-probabilities read, and removed again (`llama_memory_seq_rm`), so the next option sees exactly the
same cells. Log-probabilities come from the full-vocabulary softmax of the raw logits: no temperature,
no top-k. Results equal a plain evaluation of prompt + option in one batch and do not depend on the
other options or their order.

Why the last two prompt tokens go with every option: llama.cpp's CPU kernels (flash attention off)
compute a token evaluated alone differently from one in a batch of several (up to 0.8 in a logit), so
no decode here is ever a single token: not an option of one token, not the rest of a prompt whose
prefix was cached.

Why not fork one sequence per option (`llama_memory_seq_cp`) and decode all options in one batch:
with llama.cpp 0.3.36 that gives wrong numbers. Sequences forked from shared prompt cells and decoded
in the same batch drift by up to 0.5 nats for every lane but the first (found by comparing against
the plain evaluation; also with one token per lane per batch). Options are short, so one small
decode per option costs little next to the prompt evaluated once.
"""

from __future__ import annotations

import llama_cpp as L

from localrun.engine.backend import Model
from localrun.engine.logprobs import log_softmax, output_logits, top_n
from localrun.engine.scheduler import common_prefix
from localrun.engine.sidecontext import SideContext
from localrun.errors import ContextOverflow, InvalidRequest


TAIL = 2  # prompt tokens evaluated again with every option (see the module docstring)


class Scorer:
    """Owns the scoring context; its one sequence holds the last prompt's head, for prefix reuse."""

    def __init__(self, model: Model, ctx_size: int, batch_size: int, threads: int) -> None:
        self.model, self.ctx_size, self.batch_size = model, ctx_size, batch_size
        self.side = SideContext(model, "scoring", n_ctx=ctx_size, n_batch=batch_size, n_seq_max=1, threads=threads,
                                flash_attn="off")
        self.memory, self.batch = self.side.memory, self.side.batch
        self.cached: list[int] = []  # the prompt head sequence 0 holds
        self.n_cached = 0  # prompt tokens reused by the last call

    def score(self, prompt: list[int], options: list[list[int]]) -> list[float]:
        """Sum of log-probabilities of each option's tokens following the prompt, in the given order."""
        self._check(prompt, options)
        head, tail = prompt[:-TAIL], prompt[-TAIL:]
        self._prefill(head)
        return [self._score_option(tail, option, len(head)) for option in options]

    def prompt_logprobs(self, tokens: list[int], top: int) -> list[tuple[float, list[tuple[int, float]]]]:
        """For each token after the first: its log-probability given the tokens before it, and the
        `top` most likely tokens there (id, log-probability). What evaluation harnesses call the
        log-likelihood of a text; the same numbers `score` gives for those tokens as an option."""
        if len(tokens) > self.ctx_size:
            raise ContextOverflow(f"prompt ({len(tokens)} tokens) exceeds the context of {self.ctx_size}")
        L.llama_memory_seq_rm(self.memory, 0, -1, -1)
        self.cached, self.n_cached = [], 0
        rows: list[tuple[float, list[tuple[int, float]]]] = []
        for start, size in _chunks(len(tokens), self.batch_size):
            self.batch.clear()
            for pos in range(start, start + size):
                self.batch.add(tokens[pos], pos, 0, True)
            self.side.decode()
            logprobs = log_softmax(output_logits(self.side.ctx, size, self.model.n_vocab))
            for j in range(size):
                following = start + j + 1
                if following < len(tokens):
                    rows.append((float(logprobs[j, tokens[following]]), top_n(logprobs[j], top)))
        L.llama_memory_seq_rm(self.memory, 0, -1, -1)
        return rows

    def _check(self, prompt: list[int], options: list[list[int]]) -> None:
        if not prompt:
            raise InvalidRequest("scoring needs a non-empty prompt")
        if not options or any(not o for o in options):
            raise InvalidRequest("scoring needs at least one option, and no empty option")
        longest = max(map(len, options))
        if TAIL + longest > self.batch_size:
            raise InvalidRequest(f"an option is {longest} tokens; at most {self.batch_size - TAIL} are scored")
        if len(prompt) + longest > self.ctx_size:
            raise ContextOverflow(f"prompt ({len(prompt)} tokens) plus the longest option ({longest}) exceed "
                                  f"the context of {self.ctx_size}")

    def _prefill(self, head: list[int]) -> None:
        """Bring sequence 0 to exactly `head`, evaluating only what the previous head does not share."""
        keep = common_prefix(self.cached, head)
        if 0 < len(head) - keep < TAIL:
            keep = max(0, len(head) - TAIL)  # never evaluate a lone token
        L.llama_memory_seq_rm(self.memory, 0, keep, -1)
        self.cached, self.n_cached = head[:keep], keep
        for start, size in _chunks(len(head) - keep, self.batch_size):
            self.batch.clear()
            for pos in range(keep + start, keep + start + size):
                self.batch.add(head[pos], pos, 0, False)
            self.side.decode()
            self.cached = head[: keep + start + size]

    def _score_option(self, tail: list[int], option: list[int], at: int) -> float:
        """Evaluate the prompt's tail and the option (but its last token) after the head, read the
        option's log-probabilities, and remove them again."""
        tokens = tail + option[:-1]
        self.batch.clear()
        for j, token in enumerate(tokens):
            self.batch.add(token, at + j, 0, j >= len(tail) - 1)
        self.side.decode()
        rows = log_softmax(output_logits(self.side.ctx, len(option), self.model.n_vocab))
        L.llama_memory_seq_rm(self.memory, 0, at, -1)
        return float(sum(rows[j, token] for j, token in enumerate(option)))

    def close(self) -> None:
        self.side.close()


def _chunks(n: int, size: int):
    """(start, length) pieces of n tokens, at most `size` long, none of them a lone token."""
    start = 0
    while start < n:
        length = min(size, n - start)
        if n - start - length == 1:
            length -= 1
        yield start, length
        start += length


__all__ = ["Scorer"]
