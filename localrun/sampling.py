"""Sampling parameters: the one place the knobs of token selection are declared.

A leaf module shared by the server (each API dialect maps its fields here), the runner protocol and
the engine (which builds a `llama_sampler_*` chain from it). A selection knob a request does not set
stays None, so the one precedence in server/defaults.py can tell "unset" from a value: the request,
then the model's defaults, then the dialect's documented defaults (Ollama's differ), then llama.cpp's
(`LLAMA_CPP`), filled by `filled`. The engine fills what is still unset from llama.cpp's as well, so
a SamplingParams built by hand works there too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

MAX_TOP_LOGPROBS = 20
MAX_DRAFT = 64  # the longest speculative draft a request or the server may ask for


# The selection knobs and llama.cpp's defaults for them: what a knob nobody set becomes.
LLAMA_CPP: dict[str, float] = {
    "temperature": 0.8,  # 0 = greedy
    "top_k": 40,  # 0 = off
    "top_p": 0.95,  # 1 = off
    "min_p": 0.05,  # 0 = off
    "typical_p": 1.0,  # 1 = off
    "repeat_penalty": 1.0,  # 1 = off
    "repeat_last_n": 64,  # -1 = the whole context (the engine knows it)
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}
KNOBS = tuple(LLAMA_CPP)


def given(source: Any, names: tuple[str, ...] = KNOBS) -> dict[str, Any]:
    """The fields of `names` that `source` (a dialect's request body or options) sets: what a translator
    copies into SamplingParams, leaving the rest unset for the precedence."""
    return {name: value for name in names if (value := getattr(source, name, None)) is not None}


@dataclass(slots=True)
class SamplingParams:
    temperature: float | None = None  # None = unset; see LLAMA_CPP for each knob's default and meaning
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    typical_p: float | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None  # None = random; same seed + same request = same output
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> bias; -inf bans
    grammar: str | None = None  # GBNF; JSON schemas are converted before they get here
    grammar_triggers: list[str] = field(default_factory=list)  # regexes that wake a lazy grammar; none: from the start
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

    def filled(self, *layers: Mapping[str, Any]) -> SamplingParams:
        """A copy whose unset knobs come from the first of `layers` that sets them, then llama.cpp's."""
        unset = [name for name in KNOBS if getattr(self, name) is None]
        if not unset:
            return self
        chain = (*layers, LLAMA_CPP)
        return replace(self, **{name: next(layer[name] for layer in chain if layer.get(name) is not None)
                                for name in unset})

    @property
    def greedy(self) -> bool:
        return self.filled().temperature <= 0


__all__ = ["KNOBS", "LLAMA_CPP", "SamplingParams", "MAX_DRAFT", "MAX_TOP_LOGPROBS", "given"]
