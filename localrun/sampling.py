"""Sampling parameters: the one place the knobs of token selection are declared.

A leaf module shared by the server (each API dialect maps its fields here), the runner protocol and
the engine (which builds a `llama_sampler_*` chain from it). Defaults are llama.cpp's; dialects
apply their own API's defaults when translating, and server/defaults.py the one precedence for what
a request leaves unset (request, then the model's defaults, then the server's settings, then these).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MAX_TOP_LOGPROBS = 20
MAX_DRAFT = 64  # the longest speculative draft a request or the server may ask for


@dataclass(slots=True)
class SamplingParams:
    temperature: float = 0.8  # 0 = greedy
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1 = off
    min_p: float = 0.05  # 0 = off
    typical_p: float = 1.0  # 1 = off
    repeat_penalty: float = 1.0  # 1 = off
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None  # None = random; same seed + same request = same output
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> bias; -inf bans
    grammar: str | None = None  # GBNF; JSON schemas are converted before they get here
    max_tokens: int | None = None  # None = until EOG or the context is full
    stop: list[str] = field(default_factory=list)
    logprobs: int | None = None  # None = off; N = chosen token plus N alternatives (<= 20)
    ignore_eos: bool = False
    # Not a selection knob but carried with them: the most tokens drafted per step by prompt lookup
    # for speculative decoding (0 = off, None = the server's default). Meant to change speed, not
    # tokens: see the README's Exactness for when llama.cpp makes that hold bit for bit.
    speculative: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        data = dict(data)
        data["logit_bias"] = {int(k): float(v) for k, v in (data.get("logit_bias") or {}).items()}
        return cls(**data)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


__all__ = ["SamplingParams", "MAX_DRAFT", "MAX_TOP_LOGPROBS"]
