"""Tool calls written as XML-like tags, one argument per tag: Qwen3-Coder and GLM 4.x.

    Qwen3-Coder   <tool_call>\n<function=NAME>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>
    GLM 4.5/4.6   <tool_call>NAME\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>

An argument's value is JSON when it parses as JSON (numbers, objects, lists) and a string otherwise,
as the templates write strings bare. A block that does not have this shape stays text.
"""

from __future__ import annotations

import json
import re
from typing import Any, Collection

from localrun.families.json_calls import new_call_id
from localrun.native import ToolCall

QWEN3_CODER_MARKERS = ("<tool_call>", "<function=")
GLM_MARKERS = ("<tool_call>",)

_QWEN_CALL = re.compile(r"(?:<tool_call>\s*)?<function=([^>\s]+)>(.*?)</function>\s*(?:</tool_call>)?", re.S)
_QWEN_PARAM = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.S)
_GLM_CALL = re.compile(r"<tool_call>\s*([^\s<]+)\s*(.*?)\s*</tool_call>", re.S)
_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def parse_qwen3_coder(text: str, names: Collection[str] | None = None) -> tuple[str, list[ToolCall]]:
    return _parse(text, _QWEN_CALL, _QWEN_PARAM)


def parse_glm(text: str, names: Collection[str] | None = None) -> tuple[str, list[ToolCall]]:
    return _parse(text, _GLM_CALL, _GLM_ARG)


def _parse(text: str, call: re.Pattern[str], argument: re.Pattern[str]) -> tuple[str, list[ToolCall]]:
    calls: list[ToolCall] = []

    def take(match: re.Match[str]) -> str:
        body = match.group(2)
        arguments = {key.strip(): _value(value) for key, value in argument.findall(body)}
        if argument.sub("", body).strip():  # something besides arguments: not a call
            return match.group()
        calls.append(ToolCall(new_call_id(), match.group(1), arguments))
        return ""

    rest = call.sub(take, text)
    return (rest.strip(), calls) if calls else (text, [])


def _value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


__all__ = ["GLM_MARKERS", "QWEN3_CODER_MARKERS", "parse_glm", "parse_qwen3_coder"]
