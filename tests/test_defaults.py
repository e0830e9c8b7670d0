"""One precedence for what a request leaves unset: request, then the model's defaults, then the server's
settings, then llama.cpp's. Table-tested from plain data; the server step is in tests/test_manager.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from localrun.native import GenerateRequest
from localrun.sampling import LLAMA_CPP, SamplingParams
from localrun.server.defaults import context_size, for_model, with_model_defaults
from localrun.server.ollama.translate import chat_request
from localrun.server.ollama.protocol import ChatRequest
from localrun.server.openai.protocol import ChatCompletionRequest
from localrun.server.openai.translate import chat_request as openai_chat_request

MODEL = {"num_ctx": 1024, "num_predict": 64, "stop": "<end>", "seed": 7, "speculative": 8}


@pytest.mark.parametrize("given, expected", [
    ({}, {"max_tokens": 64, "stop": ["<end>"], "seed": 7, "speculative": 8}),
    ({"max_tokens": 5, "stop": ["x"], "seed": 1, "speculative": 0},
     {"max_tokens": 5, "stop": ["x"], "seed": 1, "speculative": 0}),
])
def test_the_request_wins_then_the_model(given, expected):
    request = GenerateRequest(model="m", prompt="hi", sampling=SamplingParams(**given))
    out = with_model_defaults(request, MODEL).sampling
    assert {name: getattr(out, name) for name in expected} == expected


def test_what_neither_sets_is_left_to_the_server_and_llama_cpp():
    request = GenerateRequest(model="m", prompt="hi")
    out = with_model_defaults(request, {})
    assert (out.num_ctx, out.sampling.seed, out.sampling.max_tokens, out.sampling.speculative) == (None,) * 4
    assert {k: getattr(out.sampling, k) for k in LLAMA_CPP} == LLAMA_CPP
    assert context_size(None, {}) is None and context_size(None, {"num_ctx": 1024}) == 1024
    assert context_size(2048, {"num_ctx": 1024}) == 2048
    assert with_model_defaults(request, {"num_ctx": 1024}).num_ctx == 1024
    assert with_model_defaults(request, {"num_predict": -1}).sampling.max_tokens is None  # Ollama: no limit


@pytest.mark.parametrize("given, model, api, expected", [
    ({}, {}, {}, LLAMA_CPP["temperature"]),  # nobody sets it: llama.cpp's
    ({}, {}, {"temperature": 0.6}, 0.6),  # the dialect's documented default
    ({}, {"temperature": 0.2}, {"temperature": 0.6}, 0.2),  # the model's beats the dialect's
    ({"temperature": 0.0}, {"temperature": 0.2}, {"temperature": 0.6}, 0.0),  # the request's beats all, 0 included
])
def test_sampling_knobs_take_the_request_then_the_model_then_the_dialect_then_llama_cpp(given, model, api, expected):
    request = GenerateRequest(model="m", prompt="hi", sampling=SamplingParams(**given))
    assert with_model_defaults(request, model, api).sampling.temperature == expected


def _model(**fields):
    return SimpleNamespace(**{"defaults": {}, "system": "", "messages": [], "template": "", **fields})


def test_a_models_system_prompt_messages_and_template_come_before_the_requests_turns():
    model = _model(system="be brief", messages=[{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
                   template="{{ messages }}")
    out = for_model(GenerateRequest(model="m", messages=[{"role": "user", "content": "hi"}]), model)
    assert [m["content"] for m in out.messages] == ["be brief", "2+2?", "4", "hi"] and out.template == "{{ messages }}"
    own = for_model(GenerateRequest(model="m", messages=[{"role": "system", "content": "mine"},
                                                         {"role": "user", "content": "hi"}]), model)
    assert [m["content"] for m in own.messages] == ["mine", "2+2?", "4", "hi"]  # its own system prompt wins
    raw = GenerateRequest(model="m", prompt="as is")
    assert for_model(raw, model).prompt == "as is" and for_model(raw, model).messages is None


def test_every_dialects_request_passes_the_same_precedence():
    """The dialects translate; the model step is the same for each of them."""
    messages = [{"role": "user", "content": "hi"}]
    ollama = chat_request(ChatRequest(model="m", messages=messages))
    openai = openai_chat_request(ChatCompletionRequest(model="m", messages=messages))
    for request in (ollama, openai):
        out = with_model_defaults(request, MODEL)
        assert (out.num_ctx, out.sampling.max_tokens, out.sampling.stop, out.sampling.seed) == (1024, 64, ["<end>"], 7)


def test_a_models_defaults_reach_a_real_daemon_through_every_dialect(tmp_path, monkeypatch, smollm2_path):
    """A model whose manifest says num_ctx 1024 and num_predict 3 loads with that context and answers
    3 tokens when a request names no length; a request that names one gets it."""
    import httpx

    from localrun.store import Store
    from tests.daemon import start_daemon

    home = tmp_path / "home"
    monkeypatch.setenv("LOCALRUN_HOME", str(home))
    Store().import_file(smollm2_path, "short:1", source="test", defaults={"num_ctx": 1024, "num_predict": 3})
    daemon = start_daemon(home, {"LOCALRUN_PARALLEL": "1"}, pull=False)
    messages = [{"role": "user", "content": "Tell me a long story."}]
    try:
        openai = httpx.post(f"{daemon.url}/v1/chat/completions", timeout=120, json={
            "model": "short:1", "messages": messages, "temperature": 0, "ignore_eos": True}).json()
        ollama = httpx.post(f"{daemon.url}/api/chat", timeout=120, json={
            "model": "short:1", "messages": messages, "stream": False, "options": {"temperature": 0}}).json()
        asked = httpx.post(f"{daemon.url}/v1/chat/completions", timeout=120, json={
            "model": "short:1", "messages": messages, "temperature": 0, "ignore_eos": True, "max_tokens": 5}).json()
        running = httpx.get(f"{daemon.url}/api/ps", timeout=10).json()["models"]
    finally:
        daemon.stop()
    assert openai["usage"]["completion_tokens"] == 3 and openai["choices"][0]["finish_reason"] == "length"
    assert ollama["eval_count"] <= 3 and asked["usage"]["completion_tokens"] == 5
    assert [m["context_length"] for m in running] == [1024]
