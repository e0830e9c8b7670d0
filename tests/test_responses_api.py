"""The OpenAI Responses API (/v1/responses) through the official `openai` client, against the real
daemon: answers, the streamed event sequence, stored conversations, tools, formats and errors."""

from __future__ import annotations

import json
import os
import signal

import httpx
import jsonschema
import openai
import pytest

from localrun.native import Done, Timings
from localrun.server.responses import translate as t
from tests.test_anthropic_api import _runner_pid
from tests.test_openapi_conformance import conforms
from tests.tool_fixtures import ADD, CITY_WEATHER, as_responses, two_shot

MODEL = "smollm2"
GREEDY = {"temperature": 0, "max_output_tokens": 12}


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0)


def function(tool: dict) -> dict:
    return {"type": "function", "strict": False, **tool}


def test_an_answer_equals_the_chat_completion_of_the_same_conversation(client):
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Name a color."}],
                                          temperature=0, max_tokens=12)
    answer = client.responses.create(model=MODEL, input="Name a color.", **GREEDY)
    assert answer.object == "response" and answer.id.startswith("resp_")
    assert answer.output_text == chat.choices[0].message.content
    [message] = answer.output
    assert (message.type, message.role, message.content[0].type) == ("message", "assistant", "output_text")
    assert answer.usage.input_tokens == chat.usage.prompt_tokens
    assert answer.usage.output_tokens == chat.usage.completion_tokens
    assert answer.usage.total_tokens == answer.usage.input_tokens + answer.usage.output_tokens
    assert answer.usage.input_tokens_details.cached_tokens >= answer.usage.input_tokens - 2  # the same prompt again


def test_a_cut_answer_is_incomplete_with_the_reason(client):
    answer = client.responses.create(model=MODEL, input="Write a long story.", temperature=0, max_output_tokens=3)
    assert answer.status == "incomplete" and answer.incomplete_details.reason == "max_output_tokens"
    assert answer.usage.output_tokens == 3 and answer.output[0].status == "incomplete"


def test_a_stream_sends_every_event_in_order_and_adds_up_to_the_answer(client):
    whole = client.responses.create(model=MODEL, input="Count to five.", temperature=0, max_output_tokens=40)
    events = list(client.responses.create(model=MODEL, input="Count to five.", temperature=0, max_output_tokens=40,
                                          stream=True))
    kinds = [e.type for e in events]
    deltas = kinds.count("response.output_text.delta")
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * deltas,
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     f"response.{whole.status}"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == events[-1].response.output_text
    assert events[-1].response.usage.output_tokens == whole.usage.output_tokens


def test_previous_response_id_continues_a_stored_conversation(client):
    first = client.responses.create(model=MODEL, input="My name is Ada.", instructions="Be brief.", **GREEDY)
    second = client.responses.create(model=MODEL, input="What is my name?", previous_response_id=first.id, **GREEDY)
    assert second.previous_response_id == first.id
    # the second prompt holds the first turn (its instructions are not carried over), so it reuses its cache
    assert second.usage.input_tokens > first.usage.output_tokens + 8
    assert client.responses.retrieve(second.id).output_text == second.output_text
    assert client.responses.retrieve(first.id).instructions == "Be brief."
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model=MODEL, input="Again?", previous_response_id=first.id, **GREEDY)
    assert client.responses.create(model=MODEL, input="Again?", previous_response_id=second.id, **GREEDY).output_text


def test_store_false_keeps_nothing(client):
    answer = client.responses.create(model=MODEL, input="Hi", store=False, **GREEDY)
    assert answer.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(answer.id)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="Again?", previous_response_id=answer.id, **GREEDY)


def test_a_tool_round_trip_through_items_and_previous_response_id(client):
    tools = [function(CITY_WEATHER), {"type": "web_search"}, {"type": "local_shell"},
             {"type": "custom", "name": "apply_patch"}]  # only the function is offered to the model
    first = client.responses.create(model=MODEL, input=as_responses(two_shot("Weather in Rome?")), tools=tools,
                                    temperature=0,
                                    max_output_tokens=60)
    [call] = first.output
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "get_weather", {"city": "Rome"})
    assert call.call_id.startswith("call_") and call.status == "completed"
    assert [tool.name for tool in first.tools] == ["get_weather"]
    answer = client.responses.create(model=MODEL, previous_response_id=first.id, tools=tools, temperature=0,
                                     max_output_tokens=30,
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": "25 C"}])
    assert answer.output[0].type == "message" and "25" in answer.output_text


def test_a_streamed_tool_call_has_its_argument_events(client):
    events = list(client.responses.create(model=MODEL, input="What is 2 plus 3?", tools=[function(ADD)],
                                          tool_choice={"type": "function", "name": "add"}, temperature=0,
                                          max_output_tokens=60, stream=True))
    kinds = [e.type for e in events]
    assert kinds[-5:] == ["response.output_item.added", "response.function_call_arguments.delta",
                          "response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"]
    added, delta, done, item_done, completed = events[-5:]
    assert added.item.type == "function_call" and added.item.status == "in_progress"
    assert delta.delta == done.arguments == item_done.item.arguments and done.name == "add"
    jsonschema.validate(json.loads(done.arguments), ADD["parameters"])
    assert completed.response.output[-1].call_id == item_done.item.call_id


def test_required_tool_choice_and_parallel_calls_off(client):
    answer = client.responses.create(model=MODEL, input="Add 1 and 2.", tools=[function(ADD)], tool_choice="required",
                                     parallel_tool_calls=False, temperature=0, max_output_tokens=60)
    assert [item.type for item in answer.output] == ["function_call"]
    assert answer.parallel_tool_calls is False and answer.tool_choice == "required"


def test_text_format_json_schema_and_json_object(client):
    schema = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"],
              "additionalProperties": False}
    answer = client.responses.create(model=MODEL, input="Name a color as JSON.", temperature=0, max_output_tokens=40,
                                     text={"format": {"type": "json_schema", "name": "color", "schema": schema,
                                                      "strict": True}})
    jsonschema.validate(json.loads(answer.output_text), schema)
    assert answer.text.format.type == "json_schema"
    loose = client.responses.create(model=MODEL, input="A JSON object, please.", temperature=0, max_output_tokens=20,
                                    text={"format": {"type": "json_object"}})
    assert loose.output_text.startswith("{")  # the grammar holds it to one object (cut here by the token limit)


def test_reasoning_effort_and_reasoning_items_are_accepted(client):
    answer = client.responses.create(
        model=MODEL, reasoning={"effort": "low"}, **GREEDY,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
               {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Greet back."}]},
               {"role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
               {"role": "developer", "content": "Answer briefly."},
               {"role": "user", "content": "How are you?"}])
    assert answer.output_text and answer.reasoning.effort == "low"


def test_errors_come_in_openais_shape(client, daemon):
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="Hi")
    image = [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA=="}]}]
    with pytest.raises(openai.BadRequestError, match="input_image is not supported"):
        client.responses.create(model=MODEL, input=image)
    refused = httpx.post(f"{daemon.url}/v1/responses", json={"model": MODEL, "input": [{"type": "computer_call"}]})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["type"] == "invalid_request_error" and "computer_call" in error["message"]
    assert error["param"] == "input[0]"
    refused = httpx.post(f"{daemon.url}/v1/responses", json={"model": MODEL, "input": "Hi", "background": True})
    assert refused.status_code == 400 and "background" in refused.json()["error"]["message"]


def test_input_items_become_the_native_conversation():
    items = [{"role": "user", "content": "Weather?"},
             {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Use the tool."}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
             {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
             {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city": "Rome"}'},
             {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "3 C"}]},
             {"type": "function_call_output", "call_id": "c2", "output": "20 C"}]
    chat = t.conversation("Be brief.", items)
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "tool", "tool"]
    assert chat[2]["content"] == "Checking." and chat[2]["reasoning_content"] == "Use the tool."
    assert [c["function"]["arguments"] for c in chat[2]["tool_calls"]] == [{"city": "Oslo"}, {"city": "Rome"}]
    assert [(m["tool_call_id"], m["name"], m["content"]) for m in chat[3:]] == \
        [("c1", "get_weather", "3 C"), ("c2", "get_weather", "20 C")]


def test_parallel_calls_off_reports_the_first_call_only(client):
    request = dict(model=MODEL, input=as_responses(two_shot("Weather in Berlin and in Madrid?", calls=2)),
                   tools=[function(CITY_WEATHER)], temperature=0, max_output_tokens=80)
    both = client.responses.create(**request)
    assert [json.loads(item.arguments) for item in both.output] == [{"city": "Berlin"}, {"city": "Madrid"}]
    one = client.responses.create(**request, parallel_tool_calls=False)
    assert [json.loads(item.arguments) for item in one.output] == [{"city": "Berlin"}]


def test_a_crash_mid_stream_ends_with_error_and_response_failed(client, daemon):
    stream = client.responses.create(model=MODEL, input="Write a long story about the sea.", temperature=0,
                                     max_output_tokens=400, stream=True)
    events = iter(stream)
    seen = [next(events) for _ in range(6)]  # created .. the first deltas
    os.kill(_runner_pid(daemon.proc.pid), signal.SIGKILL)
    seen += list(events)
    assert [e.sequence_number for e in seen] == list(range(len(seen)))
    error, failed = seen[-2:]
    assert (error.type, error.code) == ("error", "server_error") and "runner" in error.message
    assert failed.type == "response.failed" and failed.response.status == "failed"
    assert failed.response.error.code == "server_error" and failed.response.error.message == error.message
    for event in (error, failed):
        conforms(event.model_dump(mode="json", exclude_unset=True), "ResponseStreamEvent")


def test_a_thought_is_the_first_item_and_goes_back_as_the_assistants_reasoning():
    items = t.output(Done(0, "stop", Timings(), text="Paris.", reasoning="Easy."))
    assert [(item["type"], item["status"]) for item in items] == [("reasoning", "completed"), ("message", "completed")]
    assert items[0]["content"] == [{"type": "reasoning_text", "text": "Easy."}] and items[0]["summary"] == []
    chat = t.conversation(None, [{"role": "user", "content": "Capital?"}, *items])
    assert (chat[-1]["content"], chat[-1]["reasoning_content"]) == ("Paris.", "Easy.")
    cut = t.output(Done(0, "length", Timings(), reasoning="Hmm"))
    assert [(item["type"], item["status"]) for item in cut] == [("reasoning", "incomplete")]
