"""tool_choice "required" / a named tool, enforced: a GBNF grammar that only admits valid calls.

The call is the generic convention (`<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`),
whose JSON part is the grammar of one schema: a oneOf over the offered tools, each
`{"name": {"const": tool}, "arguments": <the tool's parameters schema>}`. So even a tiny model
answers with a call that parses and whose arguments match the schema. One call per turn: a grammar
that allowed "another call?" after each one lets small models repeat the call until max_tokens.
"""

from __future__ import annotations

import re
from typing import Any

from localrun.engine.grammar import schema_to_grammar
from localrun.errors import InvalidRequest
from localrun.families.json_calls import HERMES_CLOSE, HERMES_OPEN

CALL_RULE = "tool-call-json"
_GBNF_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|[A-Za-z0-9-]+')
_LOCAL_REF = re.compile(r"^#/(\$defs|definitions)/(.+)$")


def forced_tools(tools: list[dict[str, Any]] | None, choice: Any) -> list[dict[str, Any]] | None:
    """The tools one of which must be called, or None when the model may answer freely."""
    if not tools or choice in (None, "none", "auto"):
        return None
    if choice in ("required", "any"):
        return tools
    name = choice.get("name") if isinstance(choice, dict) else None
    if not name:
        raise InvalidRequest(f"tool_choice: expected none, auto, required or a tool name, got {choice!r}")
    named = [tool for tool in tools if tool["name"] == name]
    if not named:
        raise InvalidRequest(f"tool_choice names {name!r}, which is not among the tools")
    return named


def tool_call_grammar(tools: list[dict[str, Any]] | None, choice: Any) -> str | None:
    """GBNF for one forced call, or None when tool_choice leaves the answer free."""
    forced = forced_tools(tools, choice)
    if forced is None:
        return None
    json_rules = _renamed_root(schema_to_grammar(call_schema(forced)), CALL_RULE)
    return f"root ::= {_literal(HERMES_OPEN + chr(10))} {CALL_RULE} {_literal(chr(10) + HERMES_CLOSE)}\n{json_rules}"


def call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema of one call to any of `tools`; each tool's $defs move to the top, renamed."""
    defs: dict[str, Any] = {}
    alternatives = []
    for index, tool in enumerate(tools):
        parameters = _hoisted(tool.get("parameters") or {"type": "object"}, f"tool{index}-", defs)
        alternatives.append({
            "type": "object", "properties": {"name": {"const": tool["name"]}, "arguments": parameters},
            "required": ["name", "arguments"], "additionalProperties": False,
        })
    schema: dict[str, Any] = alternatives[0] if len(alternatives) == 1 else {"oneOf": alternatives}
    return {**schema, "$defs": defs} if defs else schema


def _hoisted(parameters: dict[str, Any], prefix: str, defs: dict[str, Any]) -> dict[str, Any]:
    """A tool's schema with its local $refs renamed to `prefix`+name, its definitions added to `defs`."""
    def rename(node: Any) -> Any:
        if isinstance(node, list):
            return [rename(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {k: rename(v) for k, v in node.items() if k not in ("$defs", "definitions")}
        ref = node.get("$ref")
        if isinstance(ref, str) and (local := _LOCAL_REF.match(ref)):
            out["$ref"] = f"#/$defs/{prefix}{local.group(2)}"
        return out

    for key in ("$defs", "definitions"):
        for name, definition in (parameters.get(key) or {}).items():
            defs[prefix + name] = rename(definition)
    return rename(parameters)


def _renamed_root(gbnf: str, name: str) -> str:
    """The grammar with its `root` rule called `name` (string literals and char classes untouched)."""
    return _GBNF_TOKEN.sub(lambda m: name if m.group() == "root" else m.group(), gbnf)


def _literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


__all__ = ["CALL_RULE", "call_schema", "forced_tools", "tool_call_grammar"]
