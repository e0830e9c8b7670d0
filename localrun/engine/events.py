"""What the engine hands back from `step()`: a new token's text, or the end of a request.

`Finished.timings` is the native `Timings` the daemon reports: one class from engine to dialect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from localrun.native import Timings

FinishReason = Literal["stop", "length", "cancelled"]


@dataclass(slots=True)
class Token:
    """One generated token. `text` is the NEW visible text: it may be "" while text is held back
    (a possible stop string, or a UTF-8 character split across tokens)."""

    request_id: str
    text: str
    token: int
    logprob: float | None = None
    top_logprobs: list[tuple[int, float]] | None = None  # the most likely tokens (ids) and their log-probabilities


@dataclass(slots=True)
class Finished:
    """The request is over; no more events for it follow."""

    request_id: str
    reason: FinishReason
    timings: Timings
    stop_text: str | None = None  # the stop string that ended generation, if one did


Event = Token | Finished

__all__ = ["Event", "FinishReason", "Finished", "Timings", "Token"]
