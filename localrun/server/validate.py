"""The checks every generation request passes before a runner sees it, whatever its dialect.

Dialects translate into one GenerateRequest (native.py) and `generation.start` checks it here, so a
request a runner cannot serve ends with a 400 that names the field instead of an exception (or worse,
a crash) in the process that serves every request of the model: tools and output schemas must be
valid JSON Schemas within the grammar cost bounds (tools/schema.py, tools/bounds.py), and a forced
tool_choice needs the tools it forces, as OpenAI and Anthropic answer 400 without them.
"""

from __future__ import annotations

from typing import Any

from localrun.errors import InvalidRequest
from localrun.native import GenerateRequest
from localrun.tools.schema import check_schema, check_supported, normalized

MAX_TOOL_NAME = 256


def check_generate(request: GenerateRequest) -> None:
    check_tools(request.tools)
    check_tool_choice(request.tools, request.tool_choice)
    if request.json_schema is not None:
        check_output_schema(request.json_schema)


def check_tools(tools: list[dict[str, Any]] | None) -> None:
    """Each native tool: a name, a text description, and parameters that are a valid, affordable schema."""
    names: set[str] = set()
    for i, tool in enumerate(tools or []):
        name = tool.get("name")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_TOOL_NAME:
            raise InvalidRequest(f"tools[{i}]: the name must be a string of 1 to {MAX_TOOL_NAME} characters")
        if name in names:
            raise InvalidRequest(f"tools[{i}]: two tools are called {name!r}")
        names.add(name)
        if not isinstance(tool.get("description", ""), str):
            raise InvalidRequest(f"tools[{i}].description must be a string")
        check_schema(tool.get("parameters"), f"tools[{i}].parameters")


def check_tool_choice(tools: list[dict[str, Any]] | None, choice: Any) -> None:
    if choice in (None, "none", "auto"):
        return
    if choice in ("required", "any"):
        if not tools:
            raise InvalidRequest(f"tool_choice {choice!r} needs tools: none were given")
        return
    name = choice.get("name") if isinstance(choice, dict) else None
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"tool_choice: expected none, auto, required or a tool's name, got {choice!r}"[:300])
    if name not in {tool["name"] for tool in tools or []}:
        raise InvalidRequest(f"tool_choice names the tool {name!r}, which is not among the tools")


def check_output_schema(schema: Any, where: str = "output schema") -> None:
    """An output schema: valid, affordable, and using only keywords the grammar can enforce."""
    check_schema(schema, where)
    check_supported(normalized(schema), where)


__all__ = ["check_generate", "check_output_schema", "check_tool_choice", "check_tools"]
