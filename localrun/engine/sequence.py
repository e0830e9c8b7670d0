"""A request as the engine sees it: its tokens, where it stands, and its per-request helpers."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

from localrun.engine.drafts import Drafter
from localrun.sampling import SamplingParams


@dataclass(slots=True)
class Request:
    """What a caller submits: an already tokenized prompt and how to sample from it."""

    id: str
    prompt: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    truncate: bool = False  # drop the oldest prompt tokens instead of refusing a prompt over the context
    special_text: bool = False  # control tokens appear in the text by name (a family's markers may be such tokens)


class Status(Enum):
    WAITING = auto()  # queued, no slot yet
    RUNNING = auto()  # holds a slot: prefilling, then decoding
    FINISHED = auto()


@dataclass(slots=True, eq=False)
class Sequence:
    """Plain data the scheduler decides from. `tokens` is the prompt followed by generated tokens;
    the first `n_evaluated` of them are in the slot's KV cache."""

    id: str
    tokens: list[int]
    n_prompt: int
    max_tokens: int | None = None
    status: Status = Status.WAITING
    slot: int = -1
    n_cached: int = 0  # prompt tokens found in the slot's cache at admission
    n_evaluated: int = 0
    cancelled: bool = False
    drafter: Drafter | None = None  # set when the request decodes speculatively
    # Per-request helpers the engine attaches (sampler chain, detokenizer, stop matcher, clocks).
    state: Any = None

    @property
    def n_generated(self) -> int:
        return len(self.tokens) - self.n_prompt

    @property
    def prefilling(self) -> bool:
        return self.n_evaluated < self.n_prompt

    @property
    def prompt_left(self) -> int:
        """Prompt tokens not evaluated yet."""
        return max(0, self.n_prompt - self.n_evaluated)

    @property
    def pending(self) -> int:
        """Tokens known but not yet in the KV cache: a prompt tail, or the last sampled token."""
        return len(self.tokens) - self.n_evaluated


__all__ = ["Request", "Sequence", "Status"]
