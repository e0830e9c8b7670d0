"""Which JSON-schema keywords a grammar can enforce, so structured output never silently ignores one.

llama.cpp's schema converter enforces types, properties, required, additionalProperties, enum,
const, anyOf/oneOf, allOf of objects, items/prefixItems, minItems/maxItems, minLength/maxLength,
pattern, local $refs, and the formats date, time, date-time and uuid. It quietly skips everything
else, which would let an answer break the schema. `check_supported` refuses those keywords with a
400 naming where they are. (Tool parameter schemas are descriptions, not contracts: a forced tool
call enforces what the converter can and ignores the rest.)
"""

from __future__ import annotations

from typing import Any

from localrun.errors import InvalidRequest

UNENFORCED = frozenset({
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
    "propertyNames", "unevaluatedProperties", "unevaluatedItems", "uniqueItems", "contains", "minContains",
    "maxContains", "multipleOf", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minProperties", "maxProperties",
})
FORMATS = frozenset({"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"})
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_NOT_SCHEMAS = ("enum", "const", "required", "default", "examples")


def check_supported(schema: Any, where: str = "schema") -> None:
    """Raise InvalidRequest if the schema uses a keyword the grammar cannot enforce."""
    if isinstance(schema, list):
        for i, item in enumerate(schema):
            check_supported(item, f"{where}[{i}]")
        return
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        if key in UNENFORCED:
            raise InvalidRequest(f"unsupported JSON schema: {where}.{key} cannot be enforced by the grammar; "
                                 f"remove it (or validate it after the answer)")
        if key == "format" and value not in FORMATS:
            raise InvalidRequest(f"unsupported JSON schema: {where}.format {value!r} cannot be enforced "
                                 f"(supported: {', '.join(sorted(FORMATS))})")
        if key == "pattern" and ("minLength" in schema or "maxLength" in schema):
            raise InvalidRequest(f"unsupported JSON schema: {where} combines pattern with minLength/maxLength")
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                check_supported(sub, f"{where}.{key}.{name}")
        elif key not in _NOT_SCHEMAS:
            check_supported(value, f"{where}.{key}")


__all__ = ["FORMATS", "UNENFORCED", "check_supported"]
