"""Structured output on the real model: every answer parses and validates against its JSON schema,
through OpenAI's response_format, Ollama's format and Anthropic's output_config; schema keywords
a grammar cannot enforce are refused with a 400 instead of being silently ignored."""

from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema
import ollama
import openai
import pytest

from localrun.errors import InvalidRequest
from localrun.tools.schema import check_supported, normalized

MODEL = "smollm2"

SCHEMAS = {
    "nested objects": {
        "type": "object",
        "properties": {"person": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                                                  "age": {"type": "integer"}},
                                  "required": ["name", "age"], "additionalProperties": False}},
        "required": ["person"], "additionalProperties": False,
    },
    "array of enums": {
        "type": "object",
        "properties": {"colors": {"type": "array", "items": {"enum": ["red", "green", "blue"]},
                                  "minItems": 1, "maxItems": 3}},
        "required": ["colors"], "additionalProperties": False,
    },
    "numbers and booleans": {
        "type": "object",
        "properties": {"price": {"type": "number"}, "count": {"type": "integer"}, "in_stock": {"type": "boolean"}},
        "required": ["price", "count", "in_stock"], "additionalProperties": False,
    },
    "pattern and date": {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
                       "day": {"type": "string", "format": "date"}},
        "required": ["code", "day"], "additionalProperties": False,
    },
    "nullable and bounded strings": {
        "type": "object",
        "properties": {"nickname": {"type": ["string", "null"], "maxLength": 12},
                       "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 2},
                       "level": {"anyOf": [{"const": "low"}, {"type": "integer"}]}},
        "required": ["nickname", "tags", "level"], "additionalProperties": False,
    },
    "top-level array with $defs": {
        "type": "array", "items": {"$ref": "#/$defs/Point"}, "minItems": 2, "maxItems": 3,
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                            "required": ["x", "y"], "additionalProperties": False}},
    },
}
PROMPT = "Describe a product, a person or some points as JSON."


def valid(text: str, schema: dict) -> None:
    jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.FormatChecker())


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0)


@pytest.mark.parametrize("name", SCHEMAS)
def test_openai_json_schema_output_validates(client, name):
    schema = SCHEMAS[name]
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": PROMPT}], temperature=0.7, seed=7, max_tokens=300,
        response_format={"type": "json_schema", "json_schema": {"name": "out", "strict": True, "schema": schema}})
    assert answer.choices[0].finish_reason == "stop"
    valid(answer.choices[0].message.content, schema)


def test_openai_json_object_mode_is_one_object(client):
    question = [{"role": "user", "content": "Give a JSON object with a name and an age."}]
    answer = client.chat.completions.create(model=MODEL, messages=question, response_format={"type": "json_object"},
                                            temperature=0, max_tokens=200)
    assert answer.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(answer.choices[0].message.content), dict)


def test_ollama_format_schema_validates(daemon):
    schema = SCHEMAS["array of enums"]
    answer = ollama.Client(host=daemon.url).chat(model=MODEL, messages=[{"role": "user", "content": PROMPT}],
                                                 format=schema, options={"temperature": 0, "num_predict": 200})
    valid(answer.message.content, schema)


def test_anthropic_output_config_validates(daemon):
    schema = SCHEMAS["numbers and booleans"]
    client = anthropic.Anthropic(base_url=daemon.url, api_key="unused", max_retries=0)
    message = client.messages.create(model=MODEL, max_tokens=200, messages=[{"role": "user", "content": PROMPT}],
                                     output_config={"format": {"type": "json_schema", "schema": schema}},
                                     extra_body={"temperature": 0})
    valid(message.content[0].text, schema)


UNSUPPORTED = [
    ({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}}, "properties.n.minimum"),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems"),
    ({"type": "object", "properties": {"mail": {"type": "string", "format": "email"}}}, "format 'email'"),
    ({"type": "object", "not": {"required": ["a"]}}, "schema.not"),
    ({"anyOf": [{"type": "object", "patternProperties": {"^x": {"type": "string"}}}]}, "anyOf[0].patternProperties"),
    ({"type": "string", "pattern": "^a+$", "maxLength": 3}, "combines pattern"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "anyOf": [{"required": ["a"]}]}, "beside anyOf"),
    ({"$ref": "#/$defs/A", "maxLength": 2, "$defs": {"A": {"type": "string"}}}, "beside $ref"),
    ({"allOf": [{"type": "string"}, {"maxLength": 3}]}, "allOf"),
]
INVALID = [  # not JSON Schemas at all: the meta-schema says where
    ({"type": "strange"}, "output schema.type: 'strange' is not valid"),
    ({"type": "object", "properties": {"a": "string"}}, "output schema.properties.a: 'string' is not of type"),
    ({"type": "array", "minItems": -1}, "output schema.minItems"),
]


@pytest.mark.parametrize("schema, kind, message", [(schema, "unsupported JSON schema", message)
                                                   for schema, message in UNSUPPORTED]
                         + [(schema, "invalid JSON schema", message) for schema, message in INVALID])
def test_unenforceable_or_invalid_schemas_are_a_clear_400(client, schema, kind, message):
    with pytest.raises(openai.BadRequestError, match=kind) as refused:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5,
            response_format={"type": "json_schema", "json_schema": {"name": "out", "schema": schema}})
    assert message in refused.value.body["message"]


def test_ollama_unenforceable_schema_is_a_400(daemon):
    response = httpx.post(f"{daemon.url}/api/chat", timeout=60, json={
        "model": MODEL, "stream": False, "messages": [{"role": "user", "content": "hi"}],
        "format": {"type": "object", "properties": {"n": {"type": "number", "maximum": 1}}}})
    assert response.status_code == 400 and "maximum" in response.json()["error"]


def test_supported_keywords_pass_the_check():
    for schema in SCHEMAS.values():
        check_supported(schema)
    check_supported({"type": "object", "properties": {"minimum": {"type": "string"}, "enum": {"const": "not"}},
                     "description": "property names are not keywords", "default": {"minimum": 1}})
    with pytest.raises(InvalidRequest):
        check_supported({"$defs": {"A": {"type": "number", "multipleOf": 2}}})


def test_type_lists_with_constraints_become_alternatives():
    schema = {"type": "object", "properties": {"nick": {"type": ["string", "null"], "maxLength": 3}}}
    assert normalized(schema)["properties"]["nick"] == {
        "anyOf": [{"maxLength": 3, "type": "string"}, {"maxLength": 3, "type": "null"}]}
    assert normalized({"type": ["string", "null"]}) == {"type": ["string", "null"]}
    enum = {"enum": [{"type": ["a", "b"], "maxLength": 1}]}  # values, not schemas
    assert normalized(enum) == enum
