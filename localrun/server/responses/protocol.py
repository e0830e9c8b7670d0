"""Responses API request bodies (fields in the order of the official reference), strict as every
dialect's (server/wire.py): unknown fields are accepted and ignored, because real clients (Codex)
send extras; known ones must have their type. Input items and tools stay plain dicts
and are checked in translate.py, which knows what each item type means here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from localrun.sampling import MAX_DRAFT
from localrun.server.wire import ReasoningBudget, WireModel


class TextFormat(WireModel):
    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class TextConfig(WireModel):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class Reasoning(WireModel):
    """`effort` goes onto the model family's thinking switch (translate.py); it is not checked against
    a list, since each new model generation brings new effort names. `summary` is echoed: the
    reasoning item carries the whole thought as reasoning_text, there is no summarizer."""

    effort: str | None = None
    summary: str | None = None


class ResponsesRequest(WireModel):
    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]] = Field(default_factory=list)
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False
    background: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    reasoning: Reasoning | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    # localrun extensions (the names the other dialects use)
    seed: int | None = Field(None, ge=-(2**63), lt=2**64)
    num_ctx: int | None = Field(None, ge=16, description="localrun: context length per slot for this model")
    keep_alive: str | float | None = Field(None, description="localrun: how long the model stays loaded")
    speculative: int | None = Field(None, ge=0, le=MAX_DRAFT, description="localrun: most tokens drafted per step; 0 = off")
    reasoning_budget: ReasoningBudget = None
