"""Real answers of the daemon, validated field for field against OpenAI's official OpenAPI schemas
(vendored in tests/data/openapi/, see its README): every required field present, nullable ones as
null, every enum value valid, in non-streamed answers and in each streamed event."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import httpx
import jsonschema
import pytest

from tests.tool_fixtures import ADD

MODEL = "smollm2"
SPECS = Path(__file__).parent / "data" / "openapi"


@cache
def validator(spec: str, name: str) -> jsonschema.protocols.Validator:
    document = json.loads((SPECS / f"{spec}.json").read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}", **document})


def conforms(data: dict, name: str, spec: str = "openai") -> None:
    if name == "ResponseStreamEvent":  # a union of ~50 events: validate against the one its type names
        name = event_schema(data["type"])
    errors = sorted(validator(spec, name).iter_errors(data), key=lambda e: len(list(e.absolute_path)))
    assert not errors, f"{name}: " + "; ".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}"[:300]
                                              for e in errors[:5])


@cache
def event_schema(kind: str) -> str:
    schemas = json.loads((SPECS / "openai.json").read_text(encoding="utf-8"))["components"]["schemas"]
    for member in schemas["ResponseStreamEvent"]["anyOf"]:
        name = member["$ref"].rsplit("/", 1)[1]
        if schemas[name]["properties"]["type"].get("enum") == [kind]:
            return name
    raise AssertionError(f"the spec has no stream event of type {kind!r}")


def post(daemon, path: str, body: dict) -> dict:
    answer = httpx.post(f"{daemon.url}{path}", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def streamed(daemon, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{daemon.url}{path}", json={**body, "stream": True}, timeout=120) as answer:
        assert answer.status_code == 200
        lines = [line[6:] for line in answer.iter_lines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Name a color."}], "temperature": 0, "max_tokens": 8}
TOOL_CHAT = {**CHAT, "max_tokens": 60, "tools": [{"type": "function", "function": ADD}], "tool_choice": "required"}


@pytest.mark.parametrize("body", [CHAT, {**CHAT, "logprobs": True, "top_logprobs": 2}, TOOL_CHAT],
                         ids=["text", "logprobs", "tool_call"])
def test_chat_completions_conform(daemon, body):
    conforms(post(daemon, "/v1/chat/completions", body), "CreateChatCompletionResponse")
    chunks = streamed(daemon, "/v1/chat/completions", {**body, "stream_options": {"include_usage": True}})
    for chunk in chunks:
        conforms(chunk, "CreateChatCompletionStreamResponse")


def test_completions_conform(daemon):
    body = {"model": MODEL, "prompt": "Once upon a time", "temperature": 0, "max_tokens": 8, "logprobs": 2}
    conforms(post(daemon, "/v1/completions", body), "CreateCompletionResponse")
    for chunk in streamed(daemon, "/v1/completions", body):
        # the spec has no stream schema for completions; OpenAI's own stream, like this one, has a null
        # finish_reason in every chunk but a choice's last
        choices = [{**c, "finish_reason": c["finish_reason"] or "stop"} for c in chunk["choices"]]
        conforms({**chunk, "choices": choices}, "CreateCompletionResponse")


def test_embeddings_and_models_conform(daemon):
    conforms(post(daemon, "/v1/embeddings", {"model": MODEL, "input": ["a", "b"]}), "CreateEmbeddingResponse")
    conforms(httpx.get(f"{daemon.url}/v1/models").json(), "ListModelsResponse")
    conforms(httpx.get(f"{daemon.url}/v1/models/{MODEL}").json(), "Model")


RESPONSE = {"model": MODEL, "input": "Name a color.", "temperature": 0, "max_output_tokens": 40}
TOOL_RESPONSE = {**RESPONSE, "max_output_tokens": 60, "tools": [{"type": "function", "strict": True, **ADD}],
                 "tool_choice": "required"}


@pytest.mark.parametrize("body", [RESPONSE, {**RESPONSE, "max_output_tokens": 2}, TOOL_RESPONSE],
                         ids=["text", "incomplete", "tool_call"])
def test_responses_conform(daemon, body):
    conforms(post(daemon, "/v1/responses", body), "Response")
    for event in streamed(daemon, "/v1/responses", body):
        conforms(event, "ResponseStreamEvent")


@pytest.mark.parametrize("method, path, body", [
    ("POST", "/v1/chat/completions", {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]}),
    ("POST", "/v1/chat/completions", {"model": MODEL, "messages": []}),
    ("POST", "/v1/responses", {"model": MODEL, "input": [{"type": "computer_call"}]}),
    ("GET", "/v1/responses/resp_missing", None),
    ("GET", "/v1/models/no-such-model", None),
])
def test_errors_conform(daemon, method, path, body):
    answer = httpx.request(method, f"{daemon.url}{path}", json=body, timeout=60)
    assert 400 <= answer.status_code < 500
    conforms(answer.json(), "ErrorResponse")
