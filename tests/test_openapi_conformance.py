"""Real answers of the daemon, validated field for field against OpenAI's and Anthropic's official
OpenAPI schemas (vendored in tests/data/openapi/, see its README): every required field present,
nullable ones as null, every enum value valid, in non-streamed answers and in each streamed event."""

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


# Anthropic: the schemas of POST /v1/messages (JSON and stream events), /v1/messages/count_tokens and
# the error envelope (anthropic.json), and of the models API (anthropic-models.json, from a 2026 spec:
# the 2024 one predates it). The 2024 spec does not list the `ping` stream event, so it has no schema
# to meet here (tests/test_anthropic_api.py checks it); the newer members localrun sends (citations,
# container, cache usage) are extra members, which these schemas allow.
ANTHROPIC = {"anthropic-version": "2023-06-01"}
MESSAGE = {"model": MODEL, "max_tokens": 20, "temperature": 0,
           "messages": [{"role": "user", "content": "Name a color."}]}
TOOL_MESSAGE = {**MESSAGE, "max_tokens": 60, "tool_choice": {"type": "tool", "name": ADD["name"]},
                "tools": [{"name": ADD["name"], "description": ADD["description"], "input_schema": ADD["parameters"]}]}


def anthropic_conforms(data: dict, name: str) -> None:
    conforms(data, name, "anthropic")


def anthropic_stream(daemon, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{daemon.url}/v1/messages", json={**body, "stream": True}, headers=ANTHROPIC,
                      timeout=120) as answer:
        assert answer.status_code == 200
        events = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: ")]
    for event in events:
        if event["type"] == "ping":  # not in the vendored spec; Anthropic's docs give it as just its type
            assert event == {"type": "ping"}
        else:  # the union's member that the event's type names (its discriminator), for clearer errors
            anthropic_conforms(event, anthropic_event_schema(event["type"]))
    return events


@cache
def anthropic_event_schema(kind: str) -> str:
    schemas = json.loads((SPECS / "anthropic.json").read_text(encoding="utf-8"))["components"]["schemas"]
    mapping = schemas["MessageStreamEvent"]["discriminator"]["mapping"]
    assert kind in mapping, f"the spec has no stream event of type {kind!r}"
    return mapping[kind].rsplit("/", 1)[1]


def checked_message(daemon, body: dict) -> tuple[dict, list[dict]]:
    """The answer to `body`, JSON and streamed, each validated; both returned for the caller's checks."""
    message = httpx.post(f"{daemon.url}/v1/messages", json=body, headers=ANTHROPIC, timeout=120)
    assert message.status_code == 200, message.text
    anthropic_conforms(message.json(), "Message")
    events = anthropic_stream(daemon, body)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
    assert {"ping", "content_block_start", "content_block_delta", "content_block_stop"} <= set(kinds)
    return message.json(), events


def test_anthropic_messages_conform(daemon):
    message, events = checked_message(daemon, MESSAGE)
    assert message["content"][0]["type"] == "text" and message["stop_sequence"] is None
    assert {e["delta"]["type"] for e in events if e["type"] == "content_block_delta"} == {"text_delta"}


def test_anthropic_message_with_stop_sequence_conforms(daemon):
    text = httpx.post(f"{daemon.url}/v1/messages", json=MESSAGE, headers=ANTHROPIC, timeout=120).json()
    words = text["content"][0]["text"].split()
    assert len(words) > 1, text
    message, events = checked_message(daemon, {**MESSAGE, "stop_sequences": [words[1]]})
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", words[1])
    delta = next(e for e in events if e["type"] == "message_delta")["delta"]
    assert (delta["stop_reason"], delta["stop_sequence"]) == ("stop_sequence", words[1])


def test_anthropic_forced_tool_use_conforms(daemon):
    message, events = checked_message(daemon, TOOL_MESSAGE)
    assert message["stop_reason"] == "tool_use" and message["content"][-1]["type"] == "tool_use"
    assert "input_json_delta" in {e["delta"]["type"] for e in events if e["type"] == "content_block_delta"}


def test_anthropic_count_tokens_conforms(daemon):
    body = {key: TOOL_MESSAGE[key] for key in ("model", "messages", "tools")}
    answer = httpx.post(f"{daemon.url}/v1/messages/count_tokens", json=body, headers=ANTHROPIC, timeout=60)
    assert answer.status_code == 200, answer.text
    anthropic_conforms(answer.json(), "BetaCountMessageTokensResponse")


@pytest.mark.parametrize("method, path, body, status", [
    ("POST", "/v1/messages", {"model": MODEL, "messages": MESSAGE["messages"]}, 400),  # no max_tokens
    ("POST", "/v1/messages", {**MESSAGE, "messages": []}, 400),
    ("POST", "/v1/messages", {**MESSAGE, "model": "no-such-model"}, 404),
    ("POST", "/v1/messages/count_tokens", {"model": "no-such-model", "messages": MESSAGE["messages"]}, 404),
    ("GET", "/v1/models/no-such-model", None, 404),
])
def test_anthropic_errors_conform(daemon, method, path, body, status):
    answer = httpx.request(method, f"{daemon.url}{path}", json=body, headers=ANTHROPIC, timeout=60)
    assert answer.status_code == status, answer.text
    anthropic_conforms(answer.json(), "ErrorResponse")


def anthropic_models(daemon, **query) -> dict:
    answer = httpx.get(f"{daemon.url}/v1/models", params=query, headers=ANTHROPIC, timeout=10)
    assert answer.status_code == 200, answer.text
    conforms(answer.json(), "ListResponse_ModelInfo_", "anthropic-models")
    return answer.json()


def test_anthropic_models_conform(daemon):
    everything = anthropic_models(daemon)
    ids = [m["id"] for m in everything["data"]]
    assert ids and everything["has_more"] is False
    assert (everything["first_id"], everything["last_id"]) == (ids[0], ids[-1])
    paged, after = [], None  # one model a page, following after_id to the (empty) page past the last
    while True:
        page = anthropic_models(daemon, limit=1, **({"after_id": after} if after else {}))
        if not page["data"]:
            assert (page["first_id"], page["last_id"], page["has_more"]) == (None, None, False)
            break
        paged += [m["id"] for m in page["data"]]
        assert page["has_more"] is (len(paged) < len(ids))
        after = page["last_id"]
    assert paged == ids
    for name in [MODEL, *ids]:
        answer = httpx.get(f"{daemon.url}/v1/models/{name}", headers=ANTHROPIC, timeout=10)
        assert answer.status_code == 200, answer.text
        conforms(answer.json(), "ModelInfo", "anthropic-models")
    info = httpx.get(f"{daemon.url}/v1/models/{MODEL}", headers=ANTHROPIC, timeout=10).json()
    assert info["max_input_tokens"] > 0  # the model's trained context
