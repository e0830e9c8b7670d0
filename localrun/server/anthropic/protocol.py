"""Anthropic Messages request bodies (fields in the order of the official reference). Unknown fields
are accepted and ignored, because real clients (Claude Code) send extras; content blocks stay plain
dicts and are checked in translate.py, which knows what each block type means here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from localrun.sampling import MAX_DRAFT
from localrun.server.wire import WireModel


class Message(WireModel):
    # "system" is not in Anthropic's reference, but Claude Code sends system reminders this way
    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class ToolChoice(WireModel):
    type: Literal["auto", "any", "tool", "none"] = "auto"
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class CountTokensRequest(WireModel):
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    metadata: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None  # {"format": {"type": "json_schema", "schema": {...}}}
    output_format: dict[str, Any] | None = None  # the same format, as the structured-outputs beta sent it
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0, le=2)  # Anthropic allows 0..1; 2 for OpenAI-minded clients
    thinking: dict[str, Any] | None = None  # {"type": "enabled", "budget_tokens": N} | {"type": "disabled"}
    top_k: int | None = Field(None, ge=0, lt=2**31)
    top_p: float | None = Field(None, ge=0, le=1)
    # localrun extensions
    num_ctx: int | None = Field(None, ge=16, description="localrun: context length per slot for this model")
    keep_alive: str | float | None = Field(None, description="localrun: how long the model stays loaded")
    speculative: int | None = Field(None, ge=0, le=MAX_DRAFT, description="localrun: most tokens drafted per step; 0 = off")
