"""How many prompt tokens a step may take, decided from plain data.

A step evaluates the running streams' decode tokens first and then prompt chunks, and its streams
get their next tokens only when the whole step is done. A long prompt arriving beside them (an
agent's 16k-token context) would otherwise take up to the batch size each step: 512 tokens are
about 3 s on a 2-core CPU, so every stream would stop for 3 s a token until the prompt is in.
Prompt evaluation on a CPU costs about the same per token in chunks of 32 as of 512: a call costs
5-9 ms beyond its tokens (Gemma 3 270M on 2 cores: 4-7% more in chunks of 32-40 tokens; SmolLM2: no
difference measured, docs/benchmarks.md). So bounding it by time costs the prompt little of its
own; beside streams it also pays for their decode calls and, on a small CPU, the time their HTTP
work takes (0.96-1.23x llama-server's TTFT on 2 cores, against 0.99 unbounded). On a GPU the
measured rate is high and the bound is the batch size, as before.

A step with no stream decoding is bounded too, more loosely: a request arriving while a lone long
prompt loads waits for the step in progress, which took up to the batch size. Each prompt in line
may do ALONE slices of work, so prompts that arrive together are still evaluated together, a chat
sent during a lone long prompt waits about a second at most, and the long prompt's calls are long
enough (a second) that their own cost stays under 1%.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The rate follows the latest prompt calls: their cost per token grows as a long prompt fills the cache.
WEIGHT = 0.3
# The fewest prompt tokens a bounded step takes: fewer would cost the prompt more decode calls than its
# own work where each token is slow (a large model on a CPU). Shorter calls teach the rate nothing:
# their time is mostly the call's own (a 1-token call of SmolLM2 made a token look three times dearer).
FEWEST = 32
# Slices of prompt work each prompt in line may do in a step where nothing decodes.
ALONE = 4


@dataclass(frozen=True, slots=True)
class PromptBudget:
    """Prompt tokens one step may take: `beside` decoding streams, all prompts together; `each` for
    every prompt in line when nothing decodes."""

    beside: int
    each: int

    def tokens(self, decoding: bool, rests: list[int]) -> int:
        """The budget of a step with these prompts in line (the tokens each has left). Where nothing
        decodes but some prompts finish in the step and others do not (a chat sent while a long prompt
        loads), the ones that finish decode from the next step on, so the others get what they would
        beside a stream (else the chat's second token waited for `each` of the long prompt's work)."""
        if decoding:
            return self.beside
        finishing = [rest for rest in rests if rest <= self.each]
        if finishing and len(finishing) < len(rests):
            return sum(finishing) + self.beside
        return self.each * max(1, len(rests))


@dataclass(slots=True)
class PromptPace:
    """`slice_s`: the prompt work one step may do beside decoding streams (0: no bound). `most`: the
    batch size."""

    slice_s: float
    most: int
    rates: dict[str, float] = field(default_factory=dict)  # seconds a token, by where the calls ran

    def record(self, tokens: int, seconds: float, where: str = "") -> None:
        """A `llama_decode` call of prompt tokens alone took this long, in context `where` (prefix mode
        has two: over a short cache, with flash attention, a token costs less in the prefix's)."""
        if tokens < FEWEST or seconds <= 0:
            return
        cost, last = seconds / tokens, self.rates.get(where)
        self.rates[where] = cost if last is None else (1 - WEIGHT) * last + WEIGHT * cost

    @property
    def per_token(self) -> float | None:
        """The dearest context's rate: a step's budget is set before it is known where it runs, and the
        prefix's cheaper rate made the main context's next calls twice too long."""
        return max(self.rates.values(), default=None)

    def budget(self, least: int) -> PromptBudget:
        """The next step's prompt budget: what fits in a slice beside streams, and in ALONE slices for
        each prompt without them, never under `least` (`least_for` the prompts in line). Until a call
        was measured, the least beside streams (that step measures one) and the batch size without them."""
        return PromptBudget(self._fits(self.slice_s, least, least), self._fits(ALONE * self.slice_s, least, self.most))

    def _fits(self, seconds: float, least: int, unmeasured: int) -> int:
        if not seconds:
            return self.most
        per_token = self.per_token
        if per_token is None:
            return unmeasured
        return min(self.most, max(least, int(seconds / per_token)))


def least_for(least_piece: int) -> int:
    """A bounded step's fewest tokens when a prompt in line has pieces of at least `least_piece` tokens
    (`scheduler.least_piece`; 0 for none): twice that, so the first prompt in line always moves on (a
    rest shorter than two pieces is taken whole, `scheduler.prefill_size`), and never under FEWEST."""
    return max(FEWEST, 2 * least_piece)


__all__ = ["ALONE", "PromptBudget", "PromptPace", "least_for"]
