"""Tool calls written as JSON, the formats most families are trained on.

    Hermes / Qwen   <tool_call>{"name": "f", "arguments": {...}}</tool_call>   (the closing tag may be missing)
    Mistral         [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]   or   [TOOL_CALLS]f[ARGS]{...}
    Granite         <|tool_call|>[{"name": "f", "arguments": {...}}]
    Llama 3 JSON    {"name": "f", "parameters": {...}} at the start, or after <|python_tag|>
    Command R       Action: ```json [{"tool_name": "f", "parameters": {...}}] ```
    plain JSON      {"name": "f", "arguments": {...}} or a list of such objects, at the start of the output

A family names the markers it writes (`markers`); without them all the common ones count.

Marked calls are found anywhere; bare JSON only at the very start of the output (that is where models
put it, and it is what `stream.CallHoldback` holds back) and only when it names a known tool.
Text around the calls stays text. The parser never raises: what is not a well-formed call is text.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Collection

from localrun.native import ToolCall

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
MISTRAL_OPEN, MISTRAL_ARGS = "[TOOL_CALLS]", "[ARGS]"
GRANITE_OPEN, PYTHON_TAG = "<|tool_call|>", "<|python_tag|>"
COMMAND_R_OPEN, COMMAND_R7B_OPEN = "Action: ```json", "<|START_ACTION|>"
MARKERS = (HERMES_OPEN, MISTRAL_OPEN)
_CLOSERS = {HERMES_OPEN: HERMES_CLOSE, COMMAND_R_OPEN: "```", COMMAND_R7B_OPEN: "<|END_ACTION|>"}

_MISTRAL_NAME = re.compile(r"\s*([A-Za-z0-9_.:-]+)" + re.escape(MISTRAL_ARGS))
_DECODER = json.JSONDecoder()


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_tool_calls(text: str, names: Collection[str] | None = None,
                     markers: tuple[str, ...] = MARKERS) -> tuple[str, list[ToolCall]]:
    """(the text without the calls, the calls). Without calls the text comes back unchanged."""
    calls, pos = _bare_calls(text, names)
    kept: list[str] = []
    pattern = re.compile("|".join(re.escape(m) for m in markers))
    while match := pattern.search(text, pos):
        kept.append(text[pos:match.start()])
        end, found = _marked(text, match)
        if not found:
            kept.append(match.group())
        calls += found
        pos = end
    kept.append(text[pos:])
    return ("".join(kept).strip(), calls) if calls else (text, [])


def unfinished_call_cut(text: str, markers: tuple[str, ...] = MARKERS) -> str:
    """The text before the first call marker left in it: in an answer cut off (by max_tokens, a stop
    string), what follows a marker that did not parse is a call cut short, whose raw markup must never
    reach a client. (A complete answer keeps a malformed call as text instead.)"""
    found = [at for at in (text.find(marker) for marker in markers) if at >= 0]
    return text[:min(found)].rstrip() if found else text


def _bare_calls(text: str, names: Collection[str] | None) -> tuple[list[ToolCall], int]:
    """JSON calls at the start of the text, one after another (separated by whitespace or ';')."""
    calls: list[ToolCall] = []
    pos = _skip(text, 0, " \t\r\n")
    while pos < len(text) and text[pos] in "{[":
        end, value = _decode(text, pos)
        found = _calls(value)
        if not found or (names is not None and any(c.name not in names for c in found)):
            break
        calls += found
        pos = _skip(text, end, " \t\r\n;")
    return calls, pos if calls else 0


def _marked(text: str, match: re.Match[str]) -> tuple[int, list[ToolCall]]:
    """The calls right after a marker, and where they end (the marker's end when there are none)."""
    if match.group() == MISTRAL_OPEN and (named := _MISTRAL_NAME.match(text, match.end())):
        end, arguments = _decode(text, _skip(text, named.end(), " \t\r\n"))
        found = _calls({"name": named.group(1), "arguments": arguments})
    else:
        end, value = _decode(text, _skip(text, match.end(), " \t\r\n"))
        found = _calls(value)
    if not found:
        return match.end(), []
    if closer := _CLOSERS.get(match.group()):
        close = _skip(text, end, " \t\r\n")
        end = close + len(closer) if text.startswith(closer, close) else end
    return end, found


def _decode(text: str, pos: int) -> tuple[int, Any]:
    """The JSON value at `pos` and where it ends; (pos, None) when there is none."""
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except (ValueError, RecursionError):
        return pos, None
    return end, value


def _calls(value: Any) -> list[ToolCall]:
    """One call per object; a list counts only when every item is a call."""
    items = value if isinstance(value, list) else [value]
    calls = [_call(item) for item in items]
    return calls if calls and all(calls) else []  # type: ignore[return-value]


def _call(item: Any) -> ToolCall | None:
    if isinstance(item, dict) and isinstance(item.get("function"), dict):
        item = item["function"]  # OpenAI's {"type": "function", "function": {...}}
    if isinstance(item, dict) and "tool_name" in item:  # Command R
        item = {"name": item["tool_name"], "arguments": item.get("parameters", {})}
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        return None
    arguments = item.get("arguments", item.get("parameters", {}))
    if isinstance(arguments, str):  # some models (and OpenAI) write the arguments as a JSON string
        arguments = _decode(arguments.strip(), 0)[1] if arguments.strip() else {}
    if not isinstance(arguments, dict):
        return None
    return ToolCall(id=new_call_id(), name=item["name"], arguments=arguments)


def _skip(text: str, pos: int, chars: str) -> int:
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


__all__ = ["COMMAND_R7B_OPEN", "COMMAND_R_OPEN", "GRANITE_OPEN", "HERMES_CLOSE", "HERMES_OPEN", "MARKERS",
           "MISTRAL_OPEN", "PYTHON_TAG", "new_call_id", "parse_tool_calls", "unfinished_call_cut"]
