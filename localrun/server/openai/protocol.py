"""OpenAI request bodies (fields in the order of the official reference). Unknown fields are
accepted and ignored, because real clients send extras; localrun's extensions are marked."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from localrun.sampling import MAX_DRAFT
from localrun.server.wire import ReasoningBudget, WireModel


class StreamOptions(WireModel):
    include_usage: bool = False


class SamplingFields(WireModel):
    """Fields shared by chat and text completions, including the llama.cpp/Ollama extensions."""

    model: str = Field(min_length=1)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    n: int = Field(1, ge=1, le=16)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = Field(None, ge=-(2**63), lt=2**64)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    # extensions (llama-server / Ollama names)
    top_k: int | None = Field(None, ge=0, lt=2**31)
    min_p: float | None = Field(None, ge=0, le=1)
    typical_p: float | None = Field(None, ge=0, le=1)
    repeat_penalty: float | None = Field(None, ge=0)
    ignore_eos: bool = False
    num_ctx: int | None = Field(None, ge=16, description="localrun: context length per slot for this model")
    keep_alive: str | float | None = Field(None, description="localrun: how long the model stays loaded")
    speculative: int | None = Field(None, ge=0, le=MAX_DRAFT, description="localrun: most tokens drafted per step; 0 = off")


class ResponseFormat(WireModel):
    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: dict[str, Any] | None = None


class ChatCompletionRequest(SamplingFields):
    messages: list[dict[str, Any]] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    max_completion_tokens: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=0)
    response_format: ResponseFormat | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    reasoning_effort: str | None = None  # none | minimal | low | medium | high
    # extensions: llama-server's template variables (enable_thinking, reasoning_effort are honoured)
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_budget: ReasoningBudget = None


class CompletionRequest(SamplingFields):
    prompt: str | list[str] = Field(...)
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=20)
    max_tokens: int | None = Field(16, ge=0)
    suffix: str | None = None


class EmbeddingRequest(WireModel):
    model: str = Field(min_length=1)
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    # extension (Ollama's name): cut inputs longer than the context instead of answering 400 as OpenAI does
    truncate: bool = False
