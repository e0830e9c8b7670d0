"""Chat messages and function tools in the shape chat templates read: OpenAI's, which the Ollama,
Responses and scoring paths speak too. The one home for checking them, so no dialect imports another's.
"""

from __future__ import annotations

import json
from typing import Any

from localrun.errors import InvalidRequest


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [normalize_message(message, f"messages[{i}]") for i, message in enumerate(messages)]


def normalize_message(message: dict[str, Any], where: str = "messages") -> dict[str, Any]:
    """OpenAI message -> template-ready message: text content, tool-call arguments as objects."""
    role = message.get("role")
    if role not in ("system", "developer", "user", "assistant", "tool"):
        raise InvalidRequest(f"{where}.role: unknown role {role!r}"[:300])
    out: dict[str, Any] = {"role": "system" if role == "developer" else role,
                           "content": _text(message.get("content"), where)}
    calls = message.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise InvalidRequest(f"{where}.tool_calls must be a list of calls")
        out["tool_calls"] = [_template_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)]
    for key in ("tool_call_id", "name", "reasoning_content"):
        if message.get(key):
            if not isinstance(message[key], str):
                raise InvalidRequest(f"{where}.{key} must be a string")
            out[key] = message[key]
    if role == "assistant" and isinstance(message.get("reasoning"), str) and "reasoning_content" not in out:
        out["reasoning_content"] = message["reasoning"]  # OpenRouter's name for it
    return out


def _text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text":
                raise InvalidRequest(f"{where}.content: a part of type {kind!r} is not supported by this model"[:300])
            if not isinstance(part.get("text", ""), str):
                raise InvalidRequest(f"{where}.content: a text part's text must be a string")
            parts.append(part.get("text", ""))
        return "".join(parts)
    raise InvalidRequest(f"{where}.content must be a string or a list of parts")


def _template_call(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise InvalidRequest(f'{where}: expected {{"type": "function", "function": {{"name": ..., "arguments": ...}}}}')
    arguments = function.get("arguments") or "{}"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            arguments = None
    if not isinstance(arguments, dict):
        raise InvalidRequest(f"{where}.function.arguments must be a JSON object")
    return {"id": call.get("id"), "type": "function", "function": {"name": function["name"], "arguments": arguments}}


def tool_definition(tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI (and Ollama) function tool -> the native {name, description, parameters}."""
    function = tool.get("function") if tool.get("type", "function") == "function" else None
    if not isinstance(function, dict) or not function.get("name"):
        raise InvalidRequest("tools: each tool must be {\"type\": \"function\", \"function\": {\"name\", ...}}")
    return {"name": function["name"], "description": function.get("description", ""),
            "parameters": function.get("parameters") or {"type": "object", "properties": {}}}


__all__ = ["normalize_message", "normalize_messages", "tool_definition"]
