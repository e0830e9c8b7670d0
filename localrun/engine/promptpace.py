"""How many prompt tokens a step may take while other sequences decode, decided from plain data.

A step evaluates the running streams' decode tokens first and then prompt chunks, and its streams
get their next tokens only when the whole step is done. A long prompt arriving beside them (an
agent's 16k-token context) would otherwise take up to the batch size each step: 512 tokens are
about 3 s on a 2-core CPU, so every stream would stop for 3 s a token until the prompt is in.
Prompt evaluation on a CPU costs the same per token in chunks of 32 as of 512 (docs/benchmarks.md),
so bounding it by time costs the prompt the decode calls interleaved with it and, on a small CPU,
the time the streams' own work takes (0.96-1.23x llama-server's TTFT on 2 cores, against 0.99
unbounded). On a GPU the measured rate is high and the bound is the batch size, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

# The rate follows the latest prompt calls: their cost per token grows as a long prompt fills the cache.
WEIGHT = 0.3
# The fewest prompt tokens a bounded step takes: fewer would cost the prompt more decode calls than its
# own work where each token is slow (a large model on a CPU).
FEWEST = 32


@dataclass(slots=True)
class PromptPace:
    """`slice_s`: the prompt work one step may do beside decoding streams (0: no bound). `least`: the
    fewest tokens a bounded step takes (`least_for`). `most`: the batch size."""

    slice_s: float
    least: int
    most: int
    per_token: float | None = None  # seconds, measured on prompt calls

    def record(self, tokens: int, seconds: float) -> None:
        """A `llama_decode` call of prompt tokens alone took this long."""
        if tokens <= 0 or seconds <= 0:
            return
        cost = seconds / tokens
        self.per_token = cost if self.per_token is None else (1 - WEIGHT) * self.per_token + WEIGHT * cost

    def budget(self) -> int:
        """Prompt tokens the next step may take while sequences decode: the batch size until a prompt
        call was measured (the first prompts meet no stream), then what fits in the slice."""
        if not self.slice_s or self.per_token is None:
            return self.most
        return min(self.most, max(self.least, int(self.slice_s / self.per_token)))


def least_for(least_piece: int) -> int:
    """A bounded step's fewest tokens when a prompt's pieces hold at least `least_piece` tokens
    (`scheduler.least_piece`): twice that, so the first prompt in line always moves on (a rest shorter than
    two pieces is taken whole, `scheduler.prefill_size`), and never under FEWEST."""
    return max(FEWEST, 2 * least_piece)


__all__ = ["PromptPace", "least_for"]
