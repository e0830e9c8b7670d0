"""Ollama <-> native translation: pure logic, table-tested without a model or a server."""

from __future__ import annotations

import base64
import math
import struct

import pytest
from pydantic import ValidationError

from localrun.errors import InvalidRequest
from localrun.native import Done, Timings, ToolCall
from localrun.server.defaults import with_model_defaults
from localrun.server.ollama import translate as t
from localrun.server.ollama.protocol import ChatRequest, GenerateRequest, ModelRequest, Options
from localrun.server.vectors import as_base64, shortened



def test_absent_options_stay_unset_and_ollamas_defaults_fill_them_after_the_models():
    p = t.sampling(None)
    assert (p.temperature, p.top_p, p.repeat_penalty, p.seed, p.max_tokens, p.stop) == (None, None, None, None, None, [])
    request = t.chat_request(ChatRequest(model="m", messages=[{"role": "user", "content": "x"}]))
    p = with_model_defaults(request, {"top_p": 0.5}, t.OLLAMA_DEFAULTS).sampling
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.repeat_last_n) == (0.8, 40, 0.5, 0.0, 1.1, 64)


@pytest.mark.parametrize("options, field, expected", [
    ({"temperature": 0}, "temperature", 0),
    ({"top_k": 5}, "top_k", 5),
    ({"top_p": 0.5}, "top_p", 0.5),
    ({"min_p": 0.1}, "min_p", 0.1),
    ({"typical_p": 0.7}, "typical_p", 0.7),
    ({"repeat_penalty": 1.0}, "repeat_penalty", 1.0),
    ({"presence_penalty": 0.5}, "presence_penalty", 0.5),
    ({"frequency_penalty": 0.25}, "frequency_penalty", 0.25),
    ({"seed": 42}, "seed", 42),
    ({"seed": -1}, "seed", None),  # Ollama: negative = random
    ({"num_predict": 16}, "max_tokens", 16),
    ({"num_predict": 0}, "max_tokens", 0),
    ({"num_predict": -1}, "max_tokens", None),  # until the end
    ({"num_predict": -2}, "max_tokens", None),  # fill the context
    ({"repeat_last_n": 0}, "repeat_last_n", 0),
    ({"repeat_last_n": -1}, "repeat_last_n", -1),  # the whole context: the engine knows its length
    ({"stop": ["\n", "User:"]}, "stop", ["\n", "User:"]),
    ({"mirostat": 2, "num_gpu": 99, "numa": True}, "temperature", None),  # unknown options are ignored
])
def test_options_map_onto_sampling(options, field, expected):
    assert getattr(t.sampling(Options(**options)), field) == expected


@pytest.mark.parametrize("options", [{"temperature": -1}, {"top_p": 1.5}, {"num_ctx": 0}, {"num_predict": -3},
                                     {"top_k": -1}, {"repeat_last_n": -2}, {"stop": [1]}])
def test_out_of_range_options_are_refused(options):
    with pytest.raises(ValidationError):
        Options(**options)


def test_generate_puts_system_and_prompt_through_the_chat_template():
    r = t.generate_request(GenerateRequest(model="m", prompt="hi", system="be brief", keep_alive="1m",
                                           options={"num_ctx": 1024}))
    assert r.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert r.prompt is None and r.num_ctx == 1024 and r.keep_alive == 60.0


def test_raw_generate_uses_the_prompt_as_is():
    r = t.generate_request(GenerateRequest(model="m", prompt="<|im_start|>user", raw=True, system="ignored"))
    assert r.prompt == "<|im_start|>user" and r.messages is None


@pytest.mark.parametrize("fmt, mode, schema", [
    ("json", True, None),
    ({"type": "object"}, False, {"type": "object"}),
    ("", False, None),
    (None, False, None),
])
def test_format(fmt, mode, schema):
    r = t.generate_request(GenerateRequest(model="m", prompt="x", format=fmt))
    assert (r.json_mode, r.json_schema) == (mode, schema)


@pytest.mark.parametrize("body, words", [
    ({"format": "yaml"}, "format"),
    ({"images": ["eA=="]}, "images"),
    ({"template": "{{ .Prompt }}"}, "template"),
    ({"suffix": "return x"}, "suffix"),
])
def test_refused_generate_fields(body, words):
    with pytest.raises(InvalidRequest, match=words):
        t.generate_request(GenerateRequest(model="m", prompt="x", **body))


def test_chat_maps_tools_and_tool_messages_into_the_native_shape():
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}}
    tool = {"type": "function", "function": {"name": "weather", "description": "d", "parameters": parameters}}
    body = ChatRequest(model="m", tools=[tool], messages=[
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": "cold", "tool_name": "weather"},
    ])
    r = t.chat_request(body)
    assert r.tools == [{"name": "weather", "description": "d", "parameters": parameters}]
    assert r.messages[1] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1_0", "type": "function", "function": {"name": "weather", "arguments": {"city": "Oslo"}}}]}
    assert r.messages[2] == {"role": "tool", "content": "cold", "name": "weather"}


@pytest.mark.parametrize("message, words", [
    ({"role": "user", "content": "x", "images": ["eA=="]}, "images"),
    ({"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": {}}}]}, "tool_calls"),
    ({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}, "object"),
])
def test_refused_chat_messages(message, words):
    with pytest.raises(InvalidRequest, match=words):
        t.chat_request(ChatRequest(model="m", messages=[message]))


def test_bad_tool_is_refused():
    with pytest.raises(InvalidRequest, match="tools"):
        t.chat_request(ChatRequest(model="m", messages=[{"role": "user", "content": "x"}], tools=[{"type": "x"}]))


def test_final_chat_object_carries_tool_calls_as_objects_and_nanoseconds():
    timings = Timings(prompt_tokens=12, prompt_ms=3.5, generated_tokens=4, generation_ms=20.0, load_ms=1.25)
    done = Done(0, "tool_calls", timings, tool_calls=[ToolCall("call_1", "weather", {"city": "Oslo"})])
    out = t.chat_final("m", done, 30_000_000, "")
    assert out["message"]["tool_calls"] == [{"id": "call_1", "function": {"index": 0, "name": "weather",
                                                                          "arguments": {"city": "Oslo"}}}]
    assert out["done"] is True and out["done_reason"] == "stop"
    assert (out["prompt_eval_count"], out["prompt_eval_duration"], out["eval_count"], out["eval_duration"],
            out["load_duration"], out["total_duration"]) == (12, 3_500_000, 4, 20_000_000, 1_250_000, 30_000_000)


@pytest.mark.parametrize("reason, expected", [("stop", "stop"), ("length", "length"), ("cancelled", "stop")])
def test_done_reason(reason, expected):
    assert t.generate_final("m", Done(0, reason, Timings()), 1, "x")["done_reason"] == expected


def test_load_only_requests_and_their_answers():
    assert t.is_load_only(GenerateRequest(model="m"))
    assert not t.is_load_only(GenerateRequest(model="m", prompt="x"))
    assert not t.is_load_only(GenerateRequest(model="m", images=["eA=="]))  # refused later, not loaded
    assert t.is_load_only(ChatRequest(model="m"))
    answer = t.load_answer(ChatRequest(model="m"), "unload", 5)
    assert answer["message"] == {"role": "assistant", "content": ""} and answer["done_reason"] == "unload"


def test_embedding_dimensions_cut_and_renormalise_and_never_grow():
    vector = [0.6, 0.8, 0.0]
    assert shortened([vector], None) == [vector] and shortened([vector], 3) == [vector]
    [cut] = shortened([[0.5, 0.5, 0.5, 0.5]], 2)
    assert len(cut) == 2 and math.isclose(math.hypot(*cut), 1.0)
    with pytest.raises(InvalidRequest, match="have 3 dimensions"):
        shortened([vector], 100_000)


def test_base64_embeddings_are_little_endian_float32():
    packed = base64.b64decode(as_base64([1.0, -0.5]))
    assert struct.unpack("<2f", packed) == (1.0, -0.5)


def test_model_requests_accept_model_or_legacy_name():
    assert ModelRequest(model="a").model == "a" and ModelRequest(name="b").model == "b"
    with pytest.raises(ValidationError):
        ModelRequest()
