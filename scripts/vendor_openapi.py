"""Vendor the parts of an official OpenAPI spec that the conformance tests validate against.

    python scripts/vendor_openapi.py openapi.json tests/data/openapi/openai.json SCHEMA...

Keeps the named component schemas and every schema they reference, under the same
`components/schemas` paths (so `$ref`s resolve unchanged), without prose (descriptions, examples,
x-oaiMeta, x-enum-descriptions), which the tests do not need. OpenAPI 3.0's `nullable: true`, which
parts of OpenAI's spec still use, becomes JSON Schema's null type, and the `"type": null` that
Anthropic's (Stainless-generated) spec writes for "any type" is dropped; the result is plain JSON
Schema 2020-12. Works for every vendored spec (openai.json, anthropic.json, anthropic-models.json;
see tests/data/openapi/README.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PROSE = {"description", "example", "examples", "x-oaiMeta", "x-enum-descriptions", "title"}
PREFIX = "#/components/schemas/"


def referenced(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"][len(PREFIX):]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(referenced(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(referenced(value) for value in node))
    return set()


def closure(schemas: dict[str, Any], roots: list[str]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in kept:
            kept[name] = schemas[name]
            todo += referenced(schemas[name]) - kept.keys()
    return {name: without_prose(kept[name]) for name in sorted(kept)}


def without_prose(node: Any, in_properties: bool = False) -> Any:
    """The schema without its prose keywords; a property that happens to be called `description` stays."""
    if isinstance(node, dict):
        kept = {key: without_prose(value, key == "properties" and not in_properties)
                for key, value in node.items() if in_properties or key not in PROSE}
        return kept if in_properties else with_null(kept)
    if isinstance(node, list):
        return [without_prose(value) for value in node]
    return node


def with_null(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0's `nullable: true` as JSON Schema: null added to the type (and the enum)."""
    if "type" in schema and schema["type"] is None:  # Stainless' "no type given", not a JSON Schema type
        del schema["type"]
    if schema.pop("nullable", False) is not True:
        return schema
    if isinstance(schema.get("type"), str):
        schema["type"] = [schema["type"], "null"]
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
        return schema
    return {"anyOf": [schema, {"type": "null"}]}


def main(source: str, target: str, roots: list[str]) -> None:
    spec = json.loads(Path(source).read_text(encoding="utf-8"))
    out = {"info": spec["info"], "components": {"schemas": closure(spec["components"]["schemas"], roots)}}
    Path(target).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
