"""The runner's operations besides generation: each one's request and its answer, typed.

A leaf module, like `native` (whose `GenerateRequest`, `Delta` and `Done` are generation's): the
runner decodes an operation's message with `from_dict` and answers with its result's `to_dict`;
the daemon sends `op.to_dict()` under `op.OP` and decodes the answer with `op.RESULT.from_dict`
(`ask`, which server/operations.py uses). One pair per type, so what the runner sends is what the daemon reads, and
no route picks keys out of a runner's dict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from localrun.native import TokenLogprob


class _Wire:
    """`to_dict`/`from_dict` over the dataclass's fields; keys that are not fields (a message's "op"
    and "id") are ignored, missing ones take the field's default."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})  # type: ignore[arg-type]


# --- answers -------------------------------------------------------------------------------------

@dataclass(slots=True)
class Tokens(_Wire):
    """Token ids: a text's (tokenize) or a conversation's through its chat template (render)."""

    tokens: list[int]


@dataclass(slots=True)
class Text(_Wire):
    text: str


@dataclass(slots=True)
class Embeddings(_Wire):
    """One vector per input, and the tokens they took. `load_ms` is the daemon's, as `Timings.load_ms`
    is: how long the request waited for its model (Ollama reports it)."""

    embeddings: list[list[float]]
    prompt_tokens: int
    load_ms: float = 0.0


@dataclass(slots=True)
class Scores(_Wire):
    """Per option: the sum of its tokens' log-probabilities after the prompt, and how many tokens it has."""

    logprobs: list[float]
    tokens: list[int]
    prompt_tokens: int
    cached_tokens: int  # prompt tokens reused from the scorer's cache
    ms: float


@dataclass(slots=True)
class PromptTokens:
    """The prompt's own tokens with their log-probabilities (the first has none)."""

    tokens: list[TokenLogprob]

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": [item.to_wire() for item in self.tokens]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PromptTokens:
        return cls([TokenLogprob.from_wire(item) for item in data["tokens"]])


@dataclass(frozen=True, slots=True)
class PerplexityResult(_Wire):
    perplexity: float
    nll: float  # mean negative log-likelihood per scored token (nats)
    tokens: int  # tokens in the text
    scored: int  # tokens whose likelihood counted
    chunks: int
    ctx: int
    seconds: float


@dataclass(slots=True)
class Health(_Wire):
    running: int  # sequences the engine is working on
    threads: int | None = None  # the CPU threads it decodes with now (the tuner changes them)
    stream_interval_ms: int | None = None  # how long a stream's tokens are held now (runner/interval.py)


# --- requests ------------------------------------------------------------------------------------

@dataclass(slots=True)
class Tokenize(_Wire):
    OP: ClassVar[str] = "tokenize"
    RESULT: ClassVar[type] = Tokens
    text: str
    special: bool = True  # add BOS and the like


@dataclass(slots=True)
class Detokenize(_Wire):
    OP: ClassVar[str] = "detokenize"
    RESULT: ClassVar[type] = Text
    tokens: list[int]


@dataclass(slots=True)
class Render(_Wire):
    """The chat template and tokenizer over a conversation, no generation (Anthropic's count_tokens)."""

    OP: ClassVar[str] = "render"
    RESULT: ClassVar[type] = Tokens
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    template: str | None = None


@dataclass(slots=True)
class Embed(_Wire):
    OP: ClassVar[str] = "embed"
    RESULT: ClassVar[type] = Embeddings
    inputs: list[str]
    truncate: bool = False  # cut long inputs to the context instead of refusing them


@dataclass(slots=True)
class Score(_Wire):
    """Exact option scoring after a `prompt` (used as is) or `messages` (through the chat template)."""

    OP: ClassVar[str] = "score"
    RESULT: ClassVar[type] = Scores
    options: list[str]
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None


@dataclass(slots=True)
class PromptLogprobs(_Wire):
    OP: ClassVar[str] = "prompt_logprobs"
    RESULT: ClassVar[type] = PromptTokens
    prompt: str
    top: int = 0  # alternatives per token


@dataclass(slots=True)
class Perplexity(_Wire):
    OP: ClassVar[str] = "perplexity"
    RESULT: ClassVar[type] = PerplexityResult
    text: str
    ctx: int = 512
    batch: int = 2048


@dataclass(slots=True)
class HealthCheck(_Wire):
    OP: ClassVar[str] = "health"
    RESULT: ClassVar[type] = Health


Op = Tokenize | Detokenize | Render | Embed | Score | PromptLogprobs | Perplexity | HealthCheck
OPS: dict[str, type] = {op.OP: op for op in (Tokenize, Detokenize, Render, Embed, Score, PromptLogprobs,
                                             Perplexity, HealthCheck)}


async def ask(runner: Any, op: Op) -> Any:
    """`op`'s answer from `runner`: the one place an operation crosses to a runner and back. Any
    runner with `call(op, **fields)` (server/runner_process.py's; an upstream runner refuses them all)."""
    return op.RESULT.from_dict(await runner.call(op.OP, **op.to_dict()))

__all__ = ["Detokenize", "Embed", "Embeddings", "Health", "HealthCheck", "OPS", "Op", "Perplexity",
           "PerplexityResult", "PromptLogprobs", "PromptTokens", "Render", "Score", "Scores", "Text", "Tokenize",
           "Tokens", "ask"]
