"""JSON schema to GBNF, for structured output through llama.cpp's grammar sampler."""

from __future__ import annotations

import json
from typing import Any

from llama_cpp.llama_grammar import json_schema_to_gbnf

from localrun.errors import InvalidRequest


def schema_to_grammar(schema: dict[str, Any] | bool) -> str:
    """The GBNF grammar accepting exactly the JSON documents the schema describes.

    Raises InvalidRequest for schemas the converter cannot express (unknown types, remote $refs).
    """
    if schema is True or schema == {}:
        schema = {"type": "object"}  # "anything" still has to be a JSON document
    if not isinstance(schema, dict):
        raise InvalidRequest("JSON schema must be an object")
    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except (AssertionError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise InvalidRequest(f"unsupported JSON schema: {e}") from None


__all__ = ["schema_to_grammar"]
