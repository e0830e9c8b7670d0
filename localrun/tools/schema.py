"""Which JSON-schema keywords a grammar can enforce, so structured output never silently ignores one.

llama.cpp's schema converter enforces types, properties, required, additionalProperties, enum,
const, anyOf/oneOf, allOf of objects, items/prefixItems, minItems/maxItems, minLength/maxLength,
pattern, local $refs, and the formats date, time, date-time and uuid. It quietly skips everything
else, which would let an answer break the schema. So before converting, `normalized` rewrites the
one common shape it mishandles (a list of types with constraints, as OpenAI's strict mode writes
optional fields: {"type": ["string", "null"], "maxLength": 9}) into an anyOf, and `check_supported`
refuses the rest with a 400 naming where they are. (Tool parameter schemas are descriptions, not
contracts: a forced tool call enforces what the converter can and ignores the rest.)

Every schema, a tool's or an output's, must first be a valid JSON Schema (`check_schema`: the
meta-schema of its `$schema`, else draft 2020-12) within the cost bounds of bounds.py, so that what
reaches a runner's converter is well-formed and cheap.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from localrun.errors import InvalidRequest
from localrun.tools.bounds import check_cost

UNENFORCED = frozenset({
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
    "propertyNames", "unevaluatedProperties", "unevaluatedItems", "uniqueItems", "contains", "minContains",
    "maxContains", "multipleOf", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minProperties", "maxProperties",
})
FORMATS = frozenset({"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"})
# Constraints the converter drops when they sit beside anyOf/oneOf or a $ref.
CONSTRAINTS = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
    "enum", "const", "pattern", "minLength", "maxLength", "format",
})
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_NOT_SCHEMAS = ("enum", "const", "required", "default", "examples")


def normalized(schema: Any) -> Any:
    """The same schema with `"type": [a, b, ...]` plus constraints written as an anyOf per type."""
    if isinstance(schema, list):
        return [normalized(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: (value if key in _NOT_SCHEMAS else normalized(value)) for key, value in schema.items()}
    types = out.get("type")
    if isinstance(types, list) and set(out) & (CONSTRAINTS - {"type"}):
        rest = {k: v for k, v in out.items() if k != "type"}
        return {"anyOf": [{**rest, "type": t} for t in types]}
    return out


def check_supported(schema: Any, where: str = "schema") -> None:
    """Raise InvalidRequest if the schema uses a keyword the grammar cannot enforce."""
    if isinstance(schema, list):
        for i, item in enumerate(schema):
            check_supported(item, f"{where}[{i}]")
        return
    if not isinstance(schema, dict):
        return
    _check_node(schema, where)
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                check_supported(sub, f"{where}.{key}.{name}")
        elif key not in _NOT_SCHEMAS:
            check_supported(value, f"{where}.{key}")


def _check_node(schema: dict[str, Any], where: str) -> None:
    for key in schema.keys() & UNENFORCED:
        raise _refused(f"{where}.{key} cannot be enforced by the grammar; remove it (or validate it after the answer)")
    if "format" in schema and schema["format"] not in FORMATS:
        raise _refused(f"{where}.format {schema['format']!r} cannot be enforced "
                       f"(supported: {', '.join(sorted(FORMATS))})")
    if "pattern" in schema and ("minLength" in schema or "maxLength" in schema):
        raise _refused(f"{where} combines pattern with minLength/maxLength")
    siblings = schema.keys() & (CONSTRAINTS - {"type"})
    for combinator in ("anyOf", "oneOf", "$ref"):
        if combinator in schema and siblings:
            raise _refused(f"{where} puts {', '.join(sorted(siblings))} beside {combinator}; "
                           f"move them into each alternative")
    parts = schema.get("allOf") or []
    if not all(isinstance(p, dict) and p.keys() & {"properties", "$ref", "anyOf"} for p in parts):
        raise _refused(f"{where}.allOf is only supported as a merge of object schemas")


def check_schema(schema: Any, where: str = "schema") -> None:
    """Raise InvalidRequest (400, naming the place) unless `schema` is a valid JSON Schema whose
    grammar stays within the cost bounds."""
    if not isinstance(schema, (dict, bool)):
        raise InvalidRequest(f"{where}: a JSON schema must be an object", param=where)
    check_cost(schema, where)
    problem = _meta_problem(json.dumps(schema, sort_keys=True))
    if problem:
        raise InvalidRequest(f"invalid JSON schema: {where}{problem}", param=where)


@functools.lru_cache(maxsize=256)
def _meta_problem(text: str) -> str | None:
    """Why the schema (as canonical JSON) breaks its meta-schema, or None. Cached: agents such as
    Claude Code send the same tools on every turn."""
    from jsonschema import Draft202012Validator, SchemaError, validators

    schema = json.loads(text)
    named = isinstance(schema, dict) and isinstance(schema.get("$schema"), str)
    validator = validators.validator_for(schema, default=Draft202012Validator) if named else Draft202012Validator
    try:
        validator.check_schema(schema)
    except SchemaError as e:
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
        message = e.message if len(e.message) <= 200 else e.message[:200] + "…"
        return f"{path}: {message}"
    return None


def _refused(message: str) -> InvalidRequest:
    return InvalidRequest(f"unsupported JSON schema: {message}")


__all__ = ["CONSTRAINTS", "FORMATS", "UNENFORCED", "check_schema", "check_supported", "normalized"]
