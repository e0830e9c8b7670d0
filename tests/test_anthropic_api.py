"""The Anthropic Messages API through the official `anthropic` client, against the real daemon.

This SDK version no longer takes `temperature` as an argument, so greedy decoding goes in
`extra_body`, as Claude Code's own requests carry it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import anthropic
import httpx
import jsonschema
import openai
import pytest

from localrun.native import Delta, Done, Started, Timings
from localrun.server.anthropic.stream import KEEP_ALIVE, message_events, with_pings
from localrun.server.anthropic.translate import model_page, system_text, tools
from tests.tool_fixtures import ADD, CITY_WEATHER, WEATHER, as_anthropic, two_shot

MODEL = "smollm2"
GREEDY = {"extra_body": {"temperature": 0}}


def anthropic_tool(tool: dict) -> dict:
    return {"name": tool["name"], "description": tool["description"], "input_schema": tool["parameters"]}


TOOLS = [anthropic_tool(WEATHER), anthropic_tool(ADD)]


@pytest.fixture(scope="module")
def client(daemon):
    return anthropic.Anthropic(base_url=daemon.url, api_key="unused", max_retries=0)


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_models_come_in_anthropics_shape_to_the_anthropic_client_and_in_openais_to_others(client, daemon):
    everything = [m.id for m in client.models.list(limit=1)]  # one per page: the SDK follows after_id
    assert everything == [m.id for m in openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused").models.list()]
    assert "smollm2:135m" in everything
    info = client.models.retrieve("smollm2")
    assert (info.type, info.id, info.display_name, info.lifecycle) == ("model", "smollm2:135m", "smollm2:135m", "active")
    assert info.created_at.tzinfo is not None and info.created_at.year >= 2026
    page = httpx.get(f"{daemon.url}/v1/models", headers={"anthropic-version": "2023-06-01"}, timeout=10).json()
    assert set(page) == {"data", "has_more", "first_id", "last_id"} and page["has_more"] is False
    assert (page["first_id"], page["last_id"]) == (everything[0], everything[-1])
    assert set(page["data"][0]) >= {"type", "id", "display_name", "created_at"}
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.models.retrieve("no-such-model")
    assert missing.value.body["type"] == "error" and missing.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError, match="after_id"):
        client.models.list(after_id="no-such-model")


@pytest.mark.parametrize("after, before, limit, ids, more", [
    (None, None, 2, ["a", "b"], True), (None, None, 5, ["a", "b", "c", "d"], False),
    ("b", None, 1, ["c"], True), ("c", None, 5, ["d"], False), ("d", None, 5, [], False),
    (None, "d", 2, ["b", "c"], True), (None, "c", 5, ["a", "b"], False), (None, "a", 5, [], False),
])
def test_anthropic_model_pages_follow_the_cursors(after, before, limit, ids, more):
    page = model_page([{"id": i} for i in "abcd"], after, before, limit)
    assert [m["id"] for m in page["data"]] == ids and page["has_more"] is more
    assert (page["first_id"], page["last_id"]) == ((ids[0], ids[-1]) if ids else (None, None))


def test_create_answers_with_text_and_usage(client):
    message = client.messages.create(model=MODEL, max_tokens=20, messages=ask("Name a color."), **GREEDY)
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.model == MODEL
    [block] = message.content
    assert block.type == "text" and block.text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens > 5
    assert 0 < message.usage.output_tokens <= 20


def test_stream_accumulates_to_the_created_message(client):
    # an answer at most half the prompt's length: a slot's cached prompt is reused only while it is at
    # least half of what the slot holds, and which answer the greedy kernels give differs between CPUs
    request = dict(model=MODEL, max_tokens=10, system="You are terse.", messages=ask("Count to five."), **GREEDY)
    created = client.messages.create(**request)
    with client.messages.stream(**request) as stream:
        deltas = [event.delta.text for event in stream if event.type == "content_block_delta"]
        streamed = stream.get_final_message()
    assert "".join(deltas) == created.content[0].text
    assert [b.model_dump(exclude={"parsed_output"}) for b in streamed.content] == \
        [b.model_dump() for b in created.content]
    assert (streamed.stop_reason, streamed.stop_sequence) == (created.stop_reason, created.stop_sequence)
    assert streamed.usage.output_tokens == created.usage.output_tokens
    total = created.usage.input_tokens + created.usage.cache_read_input_tokens
    assert streamed.usage.input_tokens + streamed.usage.cache_read_input_tokens == total
    assert streamed.usage.cache_read_input_tokens > 0  # the same prompt again: its prefix was cached


def test_message_start_and_message_delta_count_a_cache_hit_alike(client):
    """Anthropic's way in every place: input_tokens are the prompt tokens evaluated anew and
    cache_read_input_tokens the cached ones, in message_start as in message_delta and the created message."""
    request = dict(model=MODEL, max_tokens=6, system="You answer in one word.", messages=ask("Name a fruit."), **GREEDY)
    client.messages.create(**request)  # now its prompt is in a slot's cache
    created = client.messages.create(**request)
    events = list(client.messages.create(**request, stream=True))
    start = next(e.message.usage for e in events if e.type == "message_start")
    end = next(e.usage for e in events if e.type == "message_delta")
    assert start.cache_read_input_tokens > 0 and start.input_tokens < start.cache_read_input_tokens
    assert (start.input_tokens, start.cache_read_input_tokens) == (end.input_tokens, end.cache_read_input_tokens)
    assert (end.input_tokens, end.cache_read_input_tokens, end.output_tokens) == \
        (created.usage.input_tokens, created.usage.cache_read_input_tokens, created.usage.output_tokens)
    with client.messages.stream(**request) as stream:
        streamed = stream.get_final_message()
    assert streamed.usage.model_dump() == created.usage.model_dump()


def test_raw_stream_follows_anthropics_event_sequence(daemon):
    body = {"model": MODEL, "max_tokens": 8, "stream": True, "temperature": 0, "messages": ask("Hi")}
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31"}
    with httpx.stream("POST", f"{daemon.url}/v1/messages?beta=true", json=body, headers=headers, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    names = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    data = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert [d["type"] for d in data] == names
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert data[names.index("message_delta")]["delta"]["stop_reason"] in ("end_turn", "max_tokens")


def test_forced_tool_use_streams_as_input_json_and_matches_create(client):
    request = dict(model=MODEL, max_tokens=80, tools=TOOLS, tool_choice={"type": "any"},
                   messages=ask("What is the weather in Paris?"), **GREEDY)
    created = client.messages.create(**request)
    [use] = created.content
    assert use.type == "tool_use" and created.stop_reason == "tool_use"
    jsonschema.validate(use.input, next(t["input_schema"] for t in TOOLS if t["name"] == use.name))
    with client.messages.stream(**request) as stream:
        events = list(stream)
        streamed = stream.get_final_message()
    kinds = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert kinds and set(kinds) == {"input_json_delta"}
    [streamed_use] = streamed.content
    assert (streamed_use.name, streamed_use.input, streamed.stop_reason) == (use.name, use.input, "tool_use")


def test_named_tool_choice_is_honoured(client):
    message = client.messages.create(model=MODEL, max_tokens=80, tools=TOOLS,
                                     tool_choice={"type": "tool", "name": "add"},
                                     messages=ask("What is the weather in Paris?"), **GREEDY)
    [use] = message.content
    assert use.name == "add"
    jsonschema.validate(use.input, ADD["parameters"])


def test_disable_parallel_tool_use_reports_the_first_call_only(client):
    request = dict(model=MODEL, max_tokens=80, tools=[anthropic_tool(CITY_WEATHER)], **GREEDY,
                   messages=as_anthropic(two_shot("Weather in Berlin and in Madrid?", calls=2)))
    both = client.messages.create(**request)
    assert [(b.type, b.input) for b in both.content] == \
        [("tool_use", {"city": "Berlin"}), ("tool_use", {"city": "Madrid"})]
    one = client.messages.create(**request, tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    assert [(b.type, b.input) for b in one.content] == [("tool_use", {"city": "Berlin"})]
    assert one.stop_reason == "tool_use"


def test_server_tools_and_deferred_tools_stay_out_of_the_prompt():
    deferred = {"name": "DeferredToolPlaceholder", "description": "never call this tool",
                "input_schema": {"type": "object", "properties": {}}, "defer_loading": True}
    specs = [anthropic_tool(ADD), {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}, deferred]
    assert [tool["name"] for tool in tools(specs)] == ["add"]
    assert tools([deferred]) is None


def test_full_tool_round_trip(client):
    question = ask("What is 2 plus 3? Use the add tool.")
    first = client.messages.create(model=MODEL, max_tokens=80, tools=TOOLS, tool_choice={"type": "tool", "name": "add"},
                                   messages=question, **GREEDY)
    [use] = first.content
    conversation = question + [
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": [{"type": "text", "text": "5"}]},
            {"type": "text", "text": "Now tell me the answer in words."}]},
    ]
    answer = client.messages.create(model=MODEL, max_tokens=30, tools=TOOLS, messages=conversation, **GREEDY)
    assert answer.content and answer.content[0].type == "text" and answer.content[0].text
    assert answer.stop_reason in ("end_turn", "max_tokens")
    counted = client.messages.count_tokens(model=MODEL, tools=TOOLS, messages=conversation).input_tokens
    assert counted == answer.usage.input_tokens + answer.usage.cache_read_input_tokens


def test_count_tokens_is_the_prompt_size_of_a_generation(client):
    request = dict(model=MODEL, system=[{"type": "text", "text": "Be kind.", "cache_control": {"type": "ephemeral"}}],
                   tools=TOOLS, messages=ask("Hello there"))
    counted = client.messages.count_tokens(**request).input_tokens
    message = client.messages.create(max_tokens=5, **request, **GREEDY)
    assert counted > 100  # the tool prompt is in it
    assert counted == message.usage.input_tokens + message.usage.cache_read_input_tokens
    without_tools = client.messages.count_tokens(model=MODEL, messages=ask("Hello there")).input_tokens
    assert 0 < without_tools < counted


def test_stop_sequence_and_max_tokens_stop_reasons(client):
    free = client.messages.create(model=MODEL, max_tokens=40, messages=ask("List three fruits."), **GREEDY)
    text = free.content[0].text
    words = text.split()
    assert len(words) > 4, text
    stop = words[3]
    stopped = client.messages.create(model=MODEL, max_tokens=40, stop_sequences=["@@never@@", stop],
                                     messages=ask("List three fruits."), **GREEDY)
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", stop)
    assert stopped.content[0].text == text[:text.index(stop)]
    short = client.messages.create(model=MODEL, max_tokens=3, messages=ask("List three fruits."), **GREEDY)
    assert (short.stop_reason, short.usage.output_tokens) == ("max_tokens", 3)


def test_thinking_blocks_and_string_tool_results_are_accepted(client):
    conversation = [
        {"role": "user", "content": "Add 1 and 1."},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should use add.", "signature": "x"},
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "boom",
                                      "is_error": True}]},
    ]
    message = client.messages.create(model=MODEL, max_tokens=10, tools=TOOLS, messages=conversation,
                                     metadata={"user_id": "u1"},
                                     extra_body={"temperature": 0, "top_k": 5, "top_p": 0.9})
    assert message.content


# --- errors --------------------------------------------------------------------------------------------

def _post(daemon, body: dict) -> httpx.Response:
    return httpx.post(f"{daemon.url}/v1/messages", json=body, timeout=60)


def _error_type(response: httpx.Response) -> tuple[int, str]:
    body = response.json()
    assert body["type"] == "error" and body["error"]["message"]
    return response.status_code, body["error"]["type"]


# What Anthropic's official API reference requires of a Message, its usage and its text blocks
# (nullable members present as null); its OpenAPI file cannot be vendored, see tests/data/openapi/README.md.
MESSAGE_FIELDS = {"id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage", "container"}
USAGE_FIELDS = {"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
                "cache_creation", "server_tool_use", "service_tier"}


def test_messages_carry_every_member_the_reference_requires(daemon):
    body = {"model": MODEL, "max_tokens": 8, "temperature": 0, "messages": ask("Hi")}
    message = _post(daemon, body).json()
    assert MESSAGE_FIELDS <= message.keys() and USAGE_FIELDS <= message["usage"].keys()
    assert message["content"][0] == {"type": "text", "text": message["content"][0]["text"], "citations": None}
    assert message["usage"]["cache_creation"] == {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0}
    assert message["usage"]["service_tier"] in ("standard", "priority", "batch")
    with httpx.stream("POST", f"{daemon.url}/v1/messages", json={**body, "stream": True}, timeout=60) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    started = events[0]["message"]
    assert MESSAGE_FIELDS <= started.keys() and USAGE_FIELDS <= started["usage"].keys()
    block = next(e["content_block"] for e in events if e["type"] == "content_block_start")
    assert block == {"type": "text", "text": "", "citations": None}
    delta = next(e for e in events if e["type"] == "message_delta")
    assert {"output_tokens", "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
            "server_tool_use"} <= delta["usage"].keys()


def test_errors_use_anthropics_envelope(daemon, client):
    assert _error_type(_post(daemon, {"model": MODEL, "messages": ask("hi")})) == (400, "invalid_request_error")
    assert _error_type(_post(daemon, {"model": "no-such-model", "max_tokens": 5, "messages": ask("hi")})) == \
        (404, "not_found_error")
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    response = _post(daemon, {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": [image]}]})
    assert _error_type(response) == (400, "invalid_request_error") and "vision" in response.json()["error"]["message"]
    with pytest.raises(anthropic.BadRequestError, match="context"):
        client.messages.create(model=MODEL, max_tokens=5, messages=ask("hello " * 9000))  # over its trained 8192
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="no-such-model", messages=ask("hi"))


def test_billing_header_line_is_stripped_from_the_system_prompt():
    blocks = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.0.1; cch=abc;"},
              {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]
    assert system_text(blocks) == "You are Claude Code."
    assert system_text("x-anthropic-billing-header: a\n\nRules.") == "Rules."
    assert system_text("Rules.\nx-anthropic-billing-header: a") == "Rules.\nx-anthropic-billing-header: a"


def test_message_start_waits_for_the_slot_behind_keep_alive_comments():
    """Until the request has its slot (and knows its cached tokens) only SSE comments go out; then
    message_start with the usage message_delta repeats. Plain data stands in for the runner's events."""
    class Waiting:
        prompt_tokens = 50

        async def with_started(self):
            await asyncio.sleep(0.25)  # a slot frees up
            yield Started(0, 40)
            yield Delta(0, "Hi")
            yield Done(0, "stop", Timings(prompt_tokens=50, cached_tokens=40, generated_tokens=1), "Hi")

    async def collect() -> list[str]:
        return [chunk async for chunk in message_events(Waiting(), MODEL, ping_interval=0.1)]

    chunks = asyncio.run(collect())
    waiting = chunks[:chunks.index(next(c for c in chunks if "message_start" in c))]
    assert waiting and set(waiting) == {KEEP_ALIVE}
    data = [json.loads(line[6:]) for chunk in chunks for line in chunk.splitlines() if line.startswith("data: ")]
    start, delta = data[0]["message"]["usage"], next(d["usage"] for d in data if d["type"] == "message_delta")
    assert (start["input_tokens"], start["cache_read_input_tokens"]) == (10, 40) == \
        (delta["input_tokens"], delta["cache_read_input_tokens"])


def test_pings_fill_silences_and_the_pending_read_is_cancelled_on_exit():
    cancelled = asyncio.Event()

    async def slow():
        yield "a"
        try:
            await asyncio.sleep(0.35)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        yield "b"

    async def collect(limit: int | None = None) -> list:
        seen = []
        pinged = with_pings(slow(), 0.1)
        async for item in pinged:
            seen.append(item)
            if limit and len(seen) >= limit:
                await pinged.aclose()
                break
        return seen

    items = asyncio.run(collect())
    assert items[0] == "a" and items[-1] == "b" and 2 <= items.count(None) <= 4

    async def stop_early() -> bool:
        await collect(limit=2)
        await asyncio.sleep(0)
        return cancelled.is_set()

    assert asyncio.run(stop_early())


@pytest.fixture
def keyed_daemon(tmp_path):
    from tests.daemon import start_daemon

    d = start_daemon(tmp_path / "keyed", {"LOCALRUN_API_KEY": "sk-local-1"})
    yield d
    d.stop()


def test_api_key_as_x_api_key_or_bearer_token(keyed_daemon):
    """The SDK sends `api_key` as x-api-key and `auth_token` (Claude Code's ANTHROPIC_AUTH_TOKEN) as Bearer."""
    for credentials in ({"api_key": "sk-local-1"}, {"auth_token": "sk-local-1", "api_key": None}):
        client = anthropic.Anthropic(base_url=keyed_daemon.url, max_retries=0, **credentials)
        assert client.messages.count_tokens(model=MODEL, messages=ask("hi")).input_tokens > 0
    wrong = anthropic.Anthropic(base_url=keyed_daemon.url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        wrong.messages.create(model=MODEL, max_tokens=5, messages=ask("hi"))
    assert refused.value.body["error"]["type"] == "authentication_error"


@pytest.fixture
def busy_daemon(tmp_path):
    """A daemon with one slot and no queue: a second request is refused at once."""
    from tests.daemon import start_daemon

    d = start_daemon(tmp_path / "busy", {"LOCALRUN_PARALLEL": "1", "LOCALRUN_MAX_QUEUE": "0"})
    yield d
    d.stop()


def _runner_pid(daemon_pid: int) -> int:
    for _ in range(100):
        children = Path(f"/proc/{daemon_pid}/task/{daemon_pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.1)
    raise AssertionError("no runner process")


def test_full_queue_is_overloaded_and_a_crash_mid_stream_is_an_error_event(busy_daemon):
    client = anthropic.Anthropic(base_url=busy_daemon.url, api_key="unused", max_retries=0)
    request = dict(model=MODEL, max_tokens=400, messages=ask("Write a long story about the sea."),
                   extra_body={"temperature": 0})
    with client.messages.stream(**request) as stream:
        events = iter(stream)
        next(e for e in events if e.type == "content_block_delta")
        with pytest.raises(anthropic.APIStatusError) as refused:
            client.messages.create(**request)
        assert refused.value.status_code == 503 and refused.value.body["error"]["type"] == "overloaded_error"
        os.kill(_runner_pid(busy_daemon.proc.pid), signal.SIGKILL)
        with pytest.raises(anthropic.APIStatusError, match="runner crashed"):
            list(events)
