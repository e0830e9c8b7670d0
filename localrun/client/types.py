"""What the client sends and gets back, as plain dataclasses (no pydantic: the CLI stays light).

`GenerateOptions` is the CLI's view of sampling knobs; `to_body()` renders the OpenAI request fields
plus the extension fields the localrun daemon understands (`num_ctx`, `keep_alive`, `top_k`,
`min_p`, `repeat_penalty`). Other OpenAI-compatible servers ignore the extensions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from localrun.api_types import PullProgress, RunningModel
from localrun.errors import UsageError
from localrun.sampling import MAX_DRAFT


@dataclass(slots=True)
class GenerateOptions:
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    num_ctx: int | None = None
    stop: list[str] | None = None
    format: str | None = None  # "json" = JSON-object output
    keep_alive: str | None = None
    speculative: int | None = None  # most tokens drafted per step; 0 = off
    think: bool | None = None  # thinking models: on or off (None: the model's way)
    reasoning_budget: int | None = None  # the most thinking tokens, then the answer follows

    def to_body(self) -> dict[str, Any]:
        body = {k: v for k, v in asdict(self).items()
                if v is not None and k not in ("format", "keep_alive", "think")}
        if self.format == "json":
            body["response_format"] = {"type": "json_object"}
        if self.think is not None:  # llama-server's switch, which vLLM and the localrun daemon read too
            body["chat_template_kwargs"] = {"enable_thinking": self.think}
        if self.keep_alive is not None:
            body["keep_alive"] = _keep_alive(self.keep_alive)
        return body

    def merged(self, overrides: dict[str, Any]) -> GenerateOptions:
        """A copy with `overrides` (by field name, values as given or as strings) applied."""
        result = GenerateOptions(**asdict(self))
        for name, value in overrides.items():
            setattr(result, ALIASES.get(name, name), coerce_option(name, value))
        return result


_TYPES = {f.name: f.type for f in fields(GenerateOptions)}
ALIASES = {"num_predict": "max_tokens", "ctx_size": "num_ctx", "max_completion_tokens": "max_tokens"}
NO_LIMIT = -1  # max_tokens -1: generate until the model stops or the context is full (Ollama's num_predict -1)

# The values each option accepts (those of the daemon's OpenAI route), checked here so that a typo is a
# usage error before any request: (lowest, highest or None, how to say it).
_RANGES: dict[str, tuple[float, float | None, str]] = {
    "temperature": (0, 2, "from 0 to 2"), "top_p": (0, 1, "from 0 to 1"), "min_p": (0, 1, "from 0 to 1"),
    "top_k": (0, None, "0 or more"), "repeat_penalty": (0, None, "0 or more"),
    "max_tokens": (1, None, f"1 or more, or {NO_LIMIT} for no limit"), "num_ctx": (16, None, "16 or more"),
    "speculative": (0, MAX_DRAFT, f"from 0 to {MAX_DRAFT}"), "reasoning_budget": (0, None, "0 or more"),
}


def coerce_option(name: str, value: Any, label: str | None = None) -> Any:
    """Convert `value` (often a string typed by a user) to the type of option `name` and check its range;
    a UsageError naming `label` (default: the option's name) otherwise."""
    name = ALIASES.get(name, name)
    kind = _TYPES.get(name)
    if kind is None:
        raise UsageError(f"unknown option {name!r} (known: {', '.join(sorted(_TYPES))})")
    label = label or f"option {name}"
    if value is None:
        return None
    try:
        if "float" in kind:
            return _in_range(name, float(value), label)
        if "int" in kind:
            return _in_range(name, _integer(value), label)
        if "list" in kind:
            return [value] if isinstance(value, str) else [str(v) for v in value]
        return str(value)
    except (TypeError, ValueError):
        raise UsageError(f"{label} needs a {kind.split(' ')[0]}, got {value!r}") from None


def _integer(value: Any) -> int:
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    return int(value)


def _in_range(name: str, value: float, label: str) -> Any:
    if name == "max_tokens" and value == NO_LIMIT:
        return None
    low, high, words = _RANGES.get(name, (None, None, ""))
    if value != value or (low is not None and value < low) or (high is not None and value > high):  # NaN too
        shown = int(value) if float(value).is_integer() else value
        raise UsageError(f"{label} must be {words}, got {shown}")
    return value


def _keep_alive(value: str) -> str | int:
    """Durations pass through ("5m"); plain numbers become seconds as the daemon expects."""
    try:
        return int(value)
    except ValueError:
        return value


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Usage | None:
        if not data:
            return None
        details = data.get("prompt_tokens_details") or {}
        return cls(int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0),
                   int(details.get("cached_tokens") or 0))


@dataclass(slots=True)
class Timings:
    """llama-server's timing block: counts, milliseconds and rates for prefill and decode."""

    prompt_n: int = 0
    prompt_ms: float = 0.0
    prompt_per_second: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    predicted_per_second: float = 0.0
    cache_n: int = 0
    load_ms: float = 0.0
    draft_n: int = 0
    draft_n_accepted: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Timings | None:
        if not data:
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known and v is not None})


@dataclass(slots=True)
class Completion:
    """One finished answer; `raw` is the server's JSON (the last chunk's, when streamed)."""

    text: str
    model: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    timings: Timings | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    request_id: str = ""  # the daemon's X-Request-Id: its access log line in `localrun logs`
    thinking: str = ""  # a thinking model's reasoning, apart from the answer (`reasoning_content`)


PullStatus = PullProgress  # one line of /api/pull, the type the server's store reports pulls in (api_types)


__all__ = ["GenerateOptions", "Usage", "Timings", "Completion", "RunningModel", "PullStatus", "coerce_option",
           "ALIASES", "NO_LIMIT"]
