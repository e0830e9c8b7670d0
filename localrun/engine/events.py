"""What the engine hands back from `step()`: a new token's text, or the end of a request."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

FinishReason = Literal["stop", "length", "cancelled"]


@dataclass(slots=True)
class Timings:
    """Per-request counters, in the units Ollama and llama-server report."""

    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens reused from a slot's cache, not evaluated again
    prompt_ms: float = 0.0
    generated_tokens: int = 0
    generation_ms: float = 0.0
    load_ms: float = 0.0  # model load time, charged to the first request after loading
    draft_tokens: int = 0  # speculative decoding: tokens drafted for this request
    draft_accepted: int = 0  # of those, the ones the model confirmed and that were used

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Token:
    """One generated token. `text` is the NEW visible text: it may be "" while text is held back
    (a possible stop string, or a UTF-8 character split across tokens)."""

    request_id: str
    text: str
    token: int
    logprob: float | None = None
    top_logprobs: list[tuple[str, float]] | None = None


@dataclass(slots=True)
class Finished:
    """The request is over; no more events for it follow."""

    request_id: str
    reason: FinishReason
    timings: Timings
    stop_text: str | None = None  # the stop string that ended generation, if one did


Event = Token | Finished

__all__ = ["Event", "FinishReason", "Finished", "Timings", "Token"]
