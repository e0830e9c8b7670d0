"""The HTTP client: against the real daemon for the routes, and at the transport for the wire
corner cases a healthy daemon does not produce (error shapes, an error after streaming began)."""

from __future__ import annotations

import json

import httpx
import pytest

from localrun.client import Client, GenerateOptions, TextStream
from localrun.errors import AuthError, DaemonUnavailable, InvalidRequest, LocalrunError, ModelNotFound, Overloaded

TINY = GenerateOptions(max_tokens=8, temperature=0, seed=1)


@pytest.fixture
def client(daemon):
    with Client(daemon.url) as c:
        yield c


def test_small_routes(client):
    assert client.health()["status"] == "ok"
    assert client.version()
    assert any("smollm2" in m for m in client.models())
    assert isinstance(client.ps(), list)


def test_chat_answer_with_usage(client):
    answer = client.chat("smollm2", [{"role": "user", "content": "Say hi."}], TINY)
    assert answer.text and answer.usage.completion_tokens <= 8
    assert answer.usage.prompt_tokens > 0
    assert answer.finish_reason in ("stop", "length")
    loaded = client.ps()
    assert loaded and loaded[0].name.startswith("smollm2") and loaded[0].context_length > 0


def test_streamed_chat_yields_deltas_then_usage_and_timings(client):
    stream = client.chat("smollm2", [{"role": "user", "content": "Count to five."}], TINY, stream=True)
    assert isinstance(stream, TextStream)
    deltas = list(stream)
    assert len(deltas) >= 2 and "".join(deltas) == stream.completion.text
    c = stream.completion
    assert c.usage.completion_tokens == c.timings.predicted_n > 0
    assert c.timings.prompt_n + c.timings.cache_n == c.usage.prompt_tokens > 0
    assert c.timings.predicted_per_second > 0


def test_same_seed_same_answer(client):
    options = GenerateOptions(max_tokens=12, temperature=0.9, seed=7)
    first = client.complete("smollm2", "Once upon a time", options).text
    assert first and client.complete("smollm2", "Once upon a time", options).text == first


def test_unknown_model_is_model_not_found(client):
    with pytest.raises(ModelNotFound):
        client.chat("no-such-model", [{"role": "user", "content": "hi"}], TINY)


def test_nothing_listening_is_daemon_unavailable():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DaemonUnavailable, match="cannot reach"):
        Client(f"http://127.0.0.1:{port}").health()


# -- wire corner cases, at the transport ----------------------------------------------------------

def _client(handler) -> Client:
    return Client("http://daemon", api_key="k1", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("status, body, error", [
    (400, {"error": {"message": "bad temperature", "type": "invalid_request_error"}}, InvalidRequest),
    (401, {"error": {"message": "missing API key"}}, AuthError),
    (404, {"error": "model 'x' not found"}, ModelNotFound),
    (503, {"error": {"message": "queue full"}}, Overloaded),
    (500, {"detail": "boom"}, LocalrunError),
])
def test_error_shapes_become_errors_with_the_server_message(status, body, error):
    client = _client(lambda request: httpx.Response(status, json=body, headers={"Retry-After": "3"}))
    with pytest.raises(error) as info:
        client.chat("m", [])
    assert info.value.message.split(" (")[0] in json.dumps(body)
    if error is Overloaded:
        assert info.value.retry_after == 3


def test_api_key_is_sent_as_bearer():
    seen = {}

    def handler(request):
        seen["auth"] = request.headers.get("authorization")
        return httpx.Response(200, json={"version": "9"})

    assert _client(handler).version() == "9"
    assert seen["auth"] == "Bearer k1"


def test_error_event_after_streaming_began_raises():
    events = ('data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
              'data: {"error":{"message":"runner crashed"}}\n\n')
    client = _client(lambda request: httpx.Response(200, text=events, headers={"content-type": "text/event-stream"}))
    stream = client.chat("m", [], stream=True)
    got = []
    with pytest.raises(LocalrunError, match="runner crashed"):
        for delta in stream:
            got.append(delta)
    assert got == ["Hel"]


def test_stream_request_asks_for_usage_and_sends_extensions():
    seen = {}

    def handler(request):
        seen.update(json.loads(request.content))
        return httpx.Response(200, text="data: [DONE]\n\n")

    options = GenerateOptions(num_ctx=2048, keep_alive="0", format="json", top_k=5)
    list(_client(handler).chat("m", [], options, stream=True))
    assert seen["stream_options"] == {"include_usage": True}
    assert seen["num_ctx"] == 2048 and seen["keep_alive"] == 0 and seen["top_k"] == 5
    assert seen["response_format"] == {"type": "json_object"}
