"""Ollama request bodies (fields in the order of Ollama's API reference).

Unknown fields, and unknown keys inside `options`, are accepted and ignored: real clients send
extras (`numa`, `num_gpu`, `mirostat`, ...) that mean nothing to this server. Ollama's server
streams unless `stream` is false, so `stream` defaults to true here as it does there. Older clients
name the model `name` on the model-management routes; both spellings are accepted.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from localrun.sampling import MAX_DRAFT
from localrun.server.wire import ReasoningBudget, WireModel


class Options(WireModel):
    """The runtime options localrun honours; the rest of Ollama's list is ignored."""

    num_ctx: int | None = Field(None, ge=16)
    num_predict: int | None = Field(None, ge=-2, description="-1 = until the end, -2 = fill the context")
    temperature: float | None = Field(None, ge=0)
    top_k: int | None = Field(None, ge=0, lt=2**31)
    top_p: float | None = Field(None, ge=0, le=1)
    min_p: float | None = Field(None, ge=0, le=1)
    typical_p: float | None = Field(None, ge=0, le=1)
    seed: int | None = Field(None, ge=-(2**63), lt=2**64)
    stop: list[str] | None = None
    repeat_penalty: float | None = Field(None, ge=0)
    repeat_last_n: int | None = Field(None, ge=-1, lt=2**31, description="-1 = the whole context")
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    speculative: int | None = Field(None, ge=0, le=MAX_DRAFT, description="localrun: most tokens drafted per step; 0 = off")
    reasoning_budget: ReasoningBudget = None


class _Generation(WireModel):
    """What /api/generate and /api/chat share."""

    model: str = Field(min_length=1)
    format: str | dict[str, Any] | None = None  # "json" or a JSON schema; checked in translate
    options: Options | None = None
    stream: bool = True
    keep_alive: str | float | None = None
    think: bool | str | None = None  # true/false, or an effort: low | medium | high


class GenerateRequest(_Generation):
    prompt: str = ""
    suffix: str = ""
    images: list[str] | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None  # deprecated by Ollama; ignored (the prefix cache does its job)
    raw: bool = False


class Message(WireModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = ""
    images: list[str] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_name: str | None = None
    thinking: str | None = None


class ChatRequest(_Generation):
    messages: list[Message] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None


class EmbedRequest(WireModel):
    model: str = Field(min_length=1)
    input: str | list[str]
    truncate: bool = True
    options: Options | None = None
    keep_alive: str | float | None = None
    dimensions: int | None = Field(None, ge=1)


class EmbeddingsRequest(WireModel):
    """The legacy single-prompt embeddings route (it has no `truncate`; a long prompt is cut, as on /api/embed)."""

    model: str = Field(min_length=1)
    prompt: str = ""
    truncate: bool = True
    options: Options | None = None
    keep_alive: str | float | None = None


class ModelRequest(WireModel):
    """A body that names one model, as `model` or (older clients) `name`."""

    model: str = ""
    name: str = ""

    @model_validator(mode="after")
    def _one_name(self) -> ModelRequest:
        self.model = self.model or self.name
        if not self.model:
            raise ValueError("model is required")
        return self


class ShowRequest(ModelRequest):
    verbose: bool = False


class PullRequest(ModelRequest):
    insecure: bool = False  # accepted and ignored
    stream: bool = True


class CreateRequest(ModelRequest):
    """/api/create: the fields of a Modelfile as JSON (Ollama 0.5+), or (older clients) its text in
    `modelfile`; `files` names a GGUF file uploaded to /api/blobs (file name to digest); `quantize` a
    type to quantize the base to (Q4_K_M, Q8_0, ...). `adapters` is refused in translate."""

    from_: str | None = Field(None, alias="from")
    files: dict[str, str] | None = None
    quantize: str | None = None
    modelfile: str | None = None
    system: str | None = None
    template: str | None = None
    parameters: dict[str, Any] | None = None
    messages: list[dict[str, Any]] | None = None
    license: str | list[str] | None = None
    stream: bool = True


class CopyRequest(WireModel):
    source: str = Field(min_length=1)
    destination: str = Field(min_length=1)
