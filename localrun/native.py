"""The one native generation request every API dialect translates into, and what comes back.

A leaf module shared by the server (dialects build a `GenerateRequest` and render `Delta`/`Done`
events in their own wire format), the runner (which templates, tokenizes and runs it) and the engine
(whose `Finished` events carry `Timings`). It is plain dataclasses so that it crosses the runner pipe
as JSON without pydantic: each type has one encode/decode pair (`to_dict`/`from_dict`; a token's
log-probabilities, sent per token, a compact `to_wire`/`from_wire` triple), and `encode_event` /
`decode_event` are the runner's "delta" and "done" messages.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from localrun.errors import InvalidRequest
from localrun.sampling import SamplingParams

EFFORTS = ("low", "medium", "high")


@dataclass(slots=True)
class GenerateRequest:
    model: str
    messages: list[dict[str, Any]] | None = None  # chat: OpenAI-shaped messages, content as text
    prompt: str | None = None  # completion: used as is, no chat template
    template: str | None = None  # chat: a Jinja chat template to use instead of the model's own (Modelfile TEMPLATE)
    tools: list[dict[str, Any]] | None = None  # [{"name", "description", "parameters": JSON schema}]
    tool_choice: str | dict[str, Any] | None = None  # "none" | "auto" | "required" | {"name": ...}
    parallel_tool_calls: bool = True  # False: a choice reports its first tool call only
    json_schema: dict[str, Any] | None = None  # the output must validate against it
    json_mode: bool = False  # the output must be one JSON value
    sampling: SamplingParams = field(default_factory=SamplingParams)
    n: int = 1  # independent choices sharing the prompt
    echo: bool = False  # completions: return the prompt (and its logprobs) before the output
    num_ctx: int | None = None  # context length per slot; None = the server default
    keep_alive: float | None = None  # seconds; None = server default, < 0 forever, 0 unload after
    think: bool | None = None  # thinking models: False turns thinking off (the family's switch); None = the model's way
    reasoning_effort: str | None = None  # "low" | "medium" | "high", for families that take an effort
    reasoning_budget: int | None = None  # the most thinking tokens; then the thought is closed and the answer follows
    return_context: bool = False  # Ollama's /api/generate: Done carries the prompt's and answer's token ids
    # False: no Delta events except those carrying logprobs; Done still carries the whole text. For
    # answers nobody streams: each delta would wake the daemon once per token (docs/benchmarks.md, split).
    deltas: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GenerateRequest:
        data = dict(data)
        data["sampling"] = SamplingParams.from_dict(data.get("sampling") or {})
        return cls(**data)


# OpenAI's effort names (its ReasoningEffort enum) on the families' switch and their three efforts:
# "none" turns thinking off, "minimal" is the lowest effort, "xhigh" and "max" the highest.
SWITCHES: dict[str, tuple[bool, str | None]] = {"none": (False, None), "minimal": (True, "low"),
                                               **{effort: (True, effort) for effort in EFFORTS},
                                               "xhigh": (True, "high"), "max": (True, "high")}


def thinking(value: bool | str | None, where: str) -> tuple[bool | None, str | None]:
    """(think, reasoning_effort) from a dialect's switch: Ollama's `think` (a bool or an effort),
    OpenAI's reasoning effort (see `SWITCHES`)."""
    if value is None or isinstance(value, bool):
        return value, None
    if value in SWITCHES:
        return SWITCHES[value]
    raise InvalidRequest(f"{where}: expected true, false or one of {', '.join(SWITCHES)}; got {value!r}")


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # of completion_tokens, the ones inside the thought

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def of(cls, choices: Sequence[Done]) -> Usage:
        """A request's usage from its choices: the prompt they share counted once, their tokens summed."""
        first = choices[0].timings
        return cls(first.prompt_tokens, first.cached_tokens, sum(c.timings.generated_tokens for c in choices),
                   sum(c.timings.reasoning_tokens for c in choices))


@dataclass(slots=True)
class Timings:
    """Per-request counters in milliseconds, in the units Ollama and llama-server report; dialects
    convert (Ollama wants nanoseconds). The engine measures all but `load_ms`, which the server
    measures: how long the request waited for its model to load."""

    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens reused from a slot's cache, not evaluated again
    prompt_ms: float = 0.0
    generated_tokens: int = 0
    generation_ms: float = 0.0
    load_ms: float = 0.0
    draft_tokens: int = 0  # speculative decoding: tokens drafted for this request
    draft_accepted: int = 0  # of those, the ones the model confirmed and that were used
    reasoning_tokens: int = 0  # of generated_tokens, the ones inside the thought (the runner counts them)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timings:
        return cls(**data)

    def to_llama_server(self) -> dict[str, float]:
        """llama-server's `timings` object, which some clients already read."""
        def rate(n: int, ms: float) -> float:
            return n / ms * 1000.0 if ms > 0 else 0.0

        return {
            "prompt_n": self.prompt_tokens - self.cached_tokens,
            "prompt_ms": self.prompt_ms,
            "prompt_per_second": rate(self.prompt_tokens - self.cached_tokens, self.prompt_ms),
            "predicted_n": self.generated_tokens,
            "predicted_ms": self.generation_ms,
            "predicted_per_second": rate(self.generated_tokens, self.generation_ms),
            "cache_n": self.cached_tokens,
            "load_ms": self.load_ms,
            "draft_n": self.draft_tokens,
            "draft_n_accepted": self.draft_accepted,
        }


@dataclass(slots=True)
class TokenLogprob:
    token: str
    logprob: float | None  # None for a prompt's first token: nothing comes before it
    # the most likely tokens: (text, logprob), or (text, logprob, bytes) when the text does not spell them
    top: list[tuple] = field(default_factory=list)
    raw: list[int] | None = None  # the token's bytes, when they are not its text's UTF-8 (a partial character)

    def to_wire(self) -> list[Any]:
        """[token, logprob, [[alt, logprob, raw?], ...], raw?]: sent for every token, so a list, not an object."""
        wire = [self.token, self.logprob, [list(alt) for alt in self.top]]
        return wire if self.raw is None else [*wire, self.raw]

    @classmethod
    def from_wire(cls, item: list[Any]) -> TokenLogprob:
        token, logprob, top, *raw = item
        return cls(token, logprob, [tuple(alt) for alt in top], raw[0] if raw else None)


@dataclass(slots=True)
class Delta:
    """New output of choice `index`: answer text (`text`) and/or thinking (`reasoning`), as the
    model family's parser split them (localrun.families); may carry the logprobs of the tokens behind it."""

    index: int
    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)
    reasoning: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = {"index": self.index, "text": self.text, "logprobs": [lp.to_wire() for lp in self.logprobs]}
        return out | {"reasoning": self.reasoning} if self.reasoning else out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Delta:
        return cls(data["index"], data["text"], [TokenLogprob.from_wire(item) for item in data["logprobs"]],
                   data.get("reasoning", ""))


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(slots=True)
class Done:
    """Choice `index` finished: why, and what it cost."""

    index: int
    finish_reason: str  # "stop" | "length" | "tool_calls" | "cancelled"
    timings: Timings
    text: str = ""  # the whole visible text of the choice, after tool calls were taken out
    tool_calls: list[ToolCall] = field(default_factory=list)
    stop_sequence: str | None = None
    context: list[int] | None = None  # with GenerateRequest.return_context: prompt + answer token ids
    reasoning: str = ""  # the whole thinking of the choice, split out of `text`

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Done:
        data = dict(data)
        data["timings"] = Timings.from_dict(data["timings"])
        data["tool_calls"] = [ToolCall(**call) for call in data["tool_calls"]]
        return cls(**data)


@dataclass(slots=True)
class Started:
    """Choice `index` got its sequence slot: `cached_tokens` of its prompt were found in the slot's
    cache and will not be evaluated again. Comes before the choice's first Delta, when a runner can
    tell (an upstream server cannot); the Done's timings repeat the count."""

    index: int
    cached_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Started:
        return cls(**data)


Event = Delta | Done
_TYPES: dict[type, str] = {Delta: "delta", Done: "done", Started: "started"}
_DECODERS = {name: kind.from_dict for kind, name in _TYPES.items()}


def encode_event(request_id: str, event: Event | Started) -> dict[str, Any]:
    """The runner's message for one event of request `request_id` (see runner/protocol.py)."""
    return {"type": _TYPES[type(event)], "id": request_id, **event.to_dict()}


def decode_event(message: dict[str, Any]) -> Event | Started:
    """The event a "delta", "done" or "started" message carries (the inverse of `encode_event`)."""
    fields = {k: v for k, v in message.items() if k not in ("type", "id")}
    return _DECODERS[message["type"]](fields)


__all__ = ["EFFORTS", "SWITCHES", "thinking", "GenerateRequest", "Usage", "Timings", "TokenLogprob", "Delta",
           "ToolCall", "Done", "Event", "Started", "decode_event", "encode_event"]
