"""Tool calls framed by special tokens, with JSON arguments: DeepSeek and Kimi K2 (one call shown; a
section holds one or more, and ends with <｜tool▁calls▁end｜> / <|tool_calls_section_end|>).

    DeepSeek R1   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>
    DeepSeek V3.1 <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
    Kimi K2       <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
                  <|tool_call_argument_begin|>{...}<|tool_call_end|>

These tokens are control tokens, so the family asks the engine for special-token text. A call whose
arguments are not a JSON object stays text, and so does the section around it.
"""

from __future__ import annotations

import json
import re
from typing import Collection

from localrun.families.json_calls import new_call_id
from localrun.native import ToolCall

DEEPSEEK_MARKERS = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>")
KIMI_MARKERS = ("<|tool_calls_section_begin|>", "<|tool_call_begin|>")

_DEEPSEEK_SECTION = re.compile(r"<｜tool▁calls▁begin｜>(.*?)(?:<｜tool▁calls▁end｜>|$)", re.S)
_DEEPSEEK_CALL = re.compile(
    r"<｜tool▁call▁begin｜>\s*(?:function<｜tool▁sep｜>([^\n]+)\n```(?:json)?\s*(.*?)\s*```"
    r"|([^<]+?)<｜tool▁sep｜>(.*?))\s*<｜tool▁call▁end｜>", re.S)
_KIMI_SECTION = re.compile(r"<\|tool_calls_section_begin\|>(.*?)(?:<\|tool_calls_section_end\|>|$)", re.S)
_KIMI_CALL = re.compile(r"<\|tool_call_begin\|>\s*(?:functions\.)?([^:<\s]+)(?::\d+)?\s*"
                        r"<\|tool_call_argument_begin\|>(.*?)<\|tool_call_end\|>", re.S)


def parse_deepseek(text: str, names: Collection[str] | None = None) -> tuple[str, list[ToolCall]]:
    def call(m: re.Match[str]) -> tuple[str, str]:
        return (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))

    return _parse(text, _DEEPSEEK_SECTION, _DEEPSEEK_CALL, call)


def parse_kimi(text: str, names: Collection[str] | None = None) -> tuple[str, list[ToolCall]]:
    return _parse(text, _KIMI_SECTION, _KIMI_CALL, lambda m: (m.group(1), m.group(2)))


def _parse(text: str, section: re.Pattern[str], call: re.Pattern[str], parts) -> tuple[str, list[ToolCall]]:
    calls: list[ToolCall] = []

    def take(match: re.Match[str]) -> str:
        found = [_call(*parts(m)) for m in call.finditer(match.group(1))]
        if not found or not all(found):
            return match.group()
        calls.extend(found)  # type: ignore[arg-type]
        return ""

    rest = section.sub(take, text)
    return (rest.strip(), calls) if calls else (text, [])


def _call(name: str, arguments: str) -> ToolCall | None:
    try:
        value = json.loads(arguments.strip() or "{}")
    except ValueError:
        return None
    return ToolCall(new_call_id(), name.strip(), value) if isinstance(value, dict) and name.strip() else None


__all__ = ["DEEPSEEK_MARKERS", "KIMI_MARKERS", "parse_deepseek", "parse_kimi"]
