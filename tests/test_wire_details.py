"""Wire details real clients hit (issue 20), on the shared daemon through plain HTTP and the official
clients: Claude Code's system-role messages, `curl -d` bodies, forced tool calls cut short, forced
tool_choice without tools, raw bytes in logprobs, base64 and shortened embeddings, OpenAI's error
`code` and `param`, Ollama's `context` and capabilities."""

from __future__ import annotations

import base64
import json
import math
import struct

import httpx
import openai
import pytest

from localrun.server.anthropic.protocol import CountTokensRequest
from localrun.server.anthropic.translate import conversation

MODEL = "smollm2"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


def post(daemon, path: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(f"{daemon.url}{path}", json=body, timeout=120, **kw)


# --- Anthropic: system-role messages (Claude Code 2.1) ---------------------------------------------

def test_system_messages_join_the_system_prompt_first_and_a_user_turn_later():
    body = CountTokensRequest(model="m", system="Be brief.", messages=[
        {"role": "system", "content": "Project rules."}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"}, {"role": "system", "content": "<system-reminder>x</system-reminder>"},
        {"role": "user", "content": "again"}])
    assert conversation(body) == [
        {"role": "system", "content": "Be brief.\n\nProject rules."}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "<system-reminder>x</system-reminder>\n\nagain"}]
    last = CountTokensRequest(model="m", messages=[{"role": "user", "content": "hi"},
                                                   {"role": "system", "content": [{"type": "text", "text": "r"}]}])
    assert conversation(last) == [{"role": "user", "content": "hi\n\nr"}]


def test_claude_codes_system_role_messages_are_answered(daemon):
    turn = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"},
            {"role": "system", "content": "<system-reminder>Stay short.</system-reminder>"},
            {"role": "user", "content": "Say ok."}]
    answer = post(daemon, "/v1/messages", {"model": MODEL, "max_tokens": 4, "messages": turn})
    assert answer.status_code == 200, answer.text
    counted = post(daemon, "/v1/messages/count_tokens", {"model": MODEL, "messages": turn})
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 10


# --- bodies sent as curl -d sends them -------------------------------------------------------------

@pytest.mark.parametrize("path, body", [
    ("/v1/score", {"model": MODEL, "prompt": "The capital of France is", "options": [" Paris", " Lyon"]}),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    ("/api/tokenize", {"model": MODEL, "text": "hello"}),
    ("/api/perplexity", {"model": MODEL, "text": "The cat sat on the mat. " * 8, "ctx": 32}),
])
def test_a_form_labelled_json_body_is_read_as_json(daemon, path, body):
    response = httpx.post(f"{daemon.url}{path}", content=json.dumps(body), timeout=120,
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert response.status_code == 200, response.text


# --- forced tool calls cut by max_tokens -----------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_cut_by_max_tokens_leaks_no_markup(daemon, stream):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
            "tool_choice": "required", "max_tokens": 6, "temperature": 0, "stream": stream}
    openai_text = post(daemon, "/v1/chat/completions", body).text
    anthropic = {"model": MODEL, "max_tokens": 6, "temperature": 0, "stream": stream,
                 "messages": [{"role": "user", "content": "Weather in Paris?"}], "tool_choice": {"type": "any"},
                 "tools": [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}]}
    anthropic_text = post(daemon, "/v1/messages", anthropic).text
    for text in (openai_text, anthropic_text):
        assert "tool_call" not in text and "get_weather" not in text.replace('"name":"get_weather"', ""), text
    assert "length" in openai_text and "max_tokens" in anthropic_text


# --- logprobs of a token that ends inside a UTF-8 character --------------------------------------

def test_logprobs_carry_a_partial_characters_raw_bytes(daemon):
    # a character the byte-level vocabulary lacks: its UTF-8 bytes take several tokens
    char = next(c for c in "𝄞ꙮ𓀀🜲" if len(post(daemon, "/api/tokenize", {"model": MODEL, "text": c}).json()["tokens"]) > 1)
    first_token = post(daemon, "/api/tokenize", {"model": MODEL, "text": char}).json()["tokens"][0]
    forced = post(daemon, "/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "temperature": 0,
        "logprobs": True, "logit_bias": {str(first_token): 100}}).json()
    first = forced["choices"][0]["logprobs"]["content"][0]
    assert first["bytes"] and first["bytes"] == list(char.encode())[:len(first["bytes"])]
    assert first["bytes"] != [239, 191, 189]  # U+FFFD's bytes, which the token's text shows


# --- embeddings ------------------------------------------------------------------------------------

def test_embeddings_in_base64_and_shortened(daemon):
    floats = post(daemon, "/v1/embeddings", {"model": MODEL, "input": "a cat"}).json()["data"][0]["embedding"]
    packed = post(daemon, "/v1/embeddings", {"model": MODEL, "input": "a cat", "encoding_format": "base64"})
    raw = base64.b64decode(packed.json()["data"][0]["embedding"])
    assert struct.unpack(f"<{len(floats)}f", raw) == pytest.approx(floats, abs=1e-6)
    client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0)
    assert client.embeddings.create(model=MODEL, input="a cat").data[0].embedding == pytest.approx(floats, abs=1e-6)
    short = client.embeddings.create(model=MODEL, input="a cat", dimensions=64).data[0].embedding
    assert len(short) == 64 and math.isclose(math.hypot(*short), 1.0, rel_tol=1e-4)
    too_many = post(daemon, "/v1/embeddings", {"model": MODEL, "input": "a cat", "dimensions": 100_000})
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "dimensions"


# --- OpenAI's error code and param -----------------------------------------------------------------

def test_openai_errors_name_the_param_and_code_strings_or_null(daemon):
    error = post(daemon, "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                                  "max_tokens": "9"}).json()["error"]
    assert error["param"] == "max_tokens" and error["code"] is None and error["type"] == "invalid_request_error"
    missing = post(daemon, "/v1/chat/completions", {"model": "no-such-model", "messages": [{"role": "user",
                                                                                            "content": "hi"}]})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    text = httpx.post(f"{daemon.url}/v1/chat/completions", timeout=60, headers={"Content-Type": "application/json"},
                      content=b'{"model": "smollm2", "messages": [{"role": "user", "content": "\\ud800"}]}')
    assert text.status_code == 400 and text.json()["error"]["param"] == "messages[0].content"


# --- Ollama: context and capabilities --------------------------------------------------------------

def test_generate_ends_with_the_conversations_context(daemon):
    body = {"model": MODEL, "prompt": "Say hi.", "options": {"num_predict": 4, "temperature": 0}}
    final = post(daemon, "/api/generate", {**body, "stream": False}).json()
    assert final["context"] and all(isinstance(t, int) for t in final["context"])
    assert final["prompt_eval_count"] < len(final["context"]) <= final["prompt_eval_count"] + final["eval_count"]
    lines = [json.loads(line) for line in post(daemon, "/api/generate", body).text.splitlines()]
    assert lines[-1]["done"] and lines[-1]["context"] == final["context"]
    assert all("context" not in line for line in lines[:-1])


def test_show_lists_what_works_with_the_model(daemon):
    shown = post(daemon, "/api/show", {"model": MODEL}).json()
    assert shown["capabilities"] == ["completion", "tools", "embedding"]


def test_an_alternative_that_ends_inside_a_character_keeps_its_bytes_across_the_runner_socket():
    from localrun.native import TokenLogprob
    from localrun.runner.host import _alternative
    from localrun.server.openai.translate import chat_logprobs

    partial, whole = "𝄞".encode()[:2], "ab".encode()
    sent = TokenLogprob("ab", -0.1, [_alternative(whole, -0.1), _alternative(partial, -2.5)], list(whole))
    (entry,) = chat_logprobs([TokenLogprob.from_wire(sent.to_wire())])["content"]
    assert [(alt["token"], alt["bytes"]) for alt in entry["top_logprobs"]] == [("ab", list(whole)),
                                                                               ("\ufffd", list(partial))]
