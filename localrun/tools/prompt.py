"""Tools into the prompt: through the model's chat template when it knows tools, else a generic prompt.

A template "knows tools" when its source mentions `tools` (Qwen, Hermes, Llama 3.1, Mistral ...): it
gets the tools in Hugging Face's shape, `[{"type": "function", "function": {...}}]`, and the
conversation's tool calls and results as they are. Any other template (SmolLM2, Gemma) gets the
generic tool prompt below appended to the system message, and the history's tool calls and tool
results written out as text in the same format, so the model sees one consistent convention:

    You can call tools. Each tool is described by a JSON schema:
    <tools>
    {"name": "get_weather", "description": "...", "parameters": {...}}
    </tools>
    To call a tool, write exactly this, one block per call, and nothing else:
    <tool_call>
    {"name": "<tool name>", "arguments": <the arguments as a JSON object>}
    </tool_call>
    ...

Tool results come back as a user turn `<tool_response>...</tool_response>`, which templates with
strict role alternation accept. This is the Hermes convention, which every family's parser reads
and the tool-choice grammar (`grammar.py`) writes for the generic family.
"""

from __future__ import annotations

import json
import re
from typing import Any

from localrun.families.call_format import HERMES

_MENTIONS_TOOLS = re.compile(r"\btools\b")

TOOL_PROMPT = """\
You can call tools. Each tool is described by a JSON schema:
<tools>
{tools}
</tools>
To call a tool, write exactly this, one block per call, and nothing else:
<tool_call>
{{"name": "<tool name>", "arguments": <the arguments as a JSON object>}}
</tool_call>
The results come back in a user message inside <tool_response></tool_response>. \
When no tool is needed, answer normally."""


def active_tools(tools: list[dict[str, Any]] | None, choice: Any) -> list[dict[str, Any]] | None:
    """The tools the model is offered: none at all for tool_choice "none"."""
    return tools if tools and choice != "none" else None


def template_knows_tools(template: str | None) -> bool:
    return bool(template and _MENTIONS_TOOLS.search(template))


def prepare_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     template: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(messages, tools for the template): what to render for this template."""
    if template_knows_tools(template):
        return messages, [{"type": "function", "function": tool} for tool in tools] if tools else None
    plain = _written_out(messages)
    return (_with_system(plain, tool_prompt(tools)) if tools else plain), None


def tool_prompt(tools: list[dict[str, Any]]) -> str:
    listed = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return TOOL_PROMPT.format(tools=listed)


def format_call(name: str, arguments: Any) -> str:
    """One call in the generic convention (what a forced tool_choice writes for the generic family)."""
    return HERMES.write(name, arguments)


def _written_out(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool calls as text in their assistant turn; consecutive tool results as one user turn."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "tool":
            response = f"<tool_response>\n{message.get('content') or ''}\n</tool_response>"
            if out and out[-1].get("tool_responses"):
                out[-1]["content"] += "\n" + response
            else:
                out.append({"role": "user", "content": response, "tool_responses": True})
        elif message.get("tool_calls"):
            calls = [format_call(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
            text = "\n".join(filter(None, [message.get("content") or "", *calls]))
            out.append({k: v for k, v in message.items() if k != "tool_calls"} | {"content": text})
        else:
            out.append(message)
    return [{k: v for k, v in m.items() if k != "tool_responses"} for m in out]


def _with_system(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    if messages and messages[0].get("role") == "system":
        first = messages[0]
        return [{**first, "content": f"{first.get('content') or ''}\n\n{text}".lstrip()}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


__all__ = ["TOOL_PROMPT", "active_tools", "format_call", "prepare_messages", "template_knows_tools", "tool_prompt"]
