"""No request can hurt another (issue 19): every hostile request found by probing the daemon, each
sent beside a victim stream on the same model. The hostile request gets its 4xx; the victim's
greedy answer completes unchanged, the runner keeps its pid and its memory, and `/health` keeps
answering fast while the hostile request is handled."""

from __future__ import annotations

import re
import socket
import statistics
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

from tests.daemon import free_port, start_daemon

MODEL = "smollm2"
VICTIM = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "ignore_eos": True}
HEALTH_MEDIAN_S = 0.1


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    # LOCALRUN_ALLOW_PRIVATE_PULL is off here: the pull guard is under test too.
    d = start_daemon(tmp_path_factory.mktemp("hostile-requests"), {"LOCALRUN_PARALLEL": "2",
                                                                   "LOCALRUN_ALLOW_PRIVATE_PULL": ""})
    yield d
    d.stop()


@pytest.fixture(scope="module")
def alone(hostile) -> str:
    """The victim's answer with nothing else going on: what it must stay. The runner's one-time
    allocations (the embeddings and scoring contexts) are made first, so its memory is comparable."""
    for path, body in [("/api/embed", {"model": MODEL, "input": "warm"}),
                       ("/v1/score", {"model": MODEL, "prompt": "a", "options": ["b"]}),
                       ("/v1/completions", {"model": MODEL, "prompt": "a", "echo": True, "logprobs": 1, "max_tokens": 0})]:
        assert httpx.post(f"{hostile.url}{path}", json=body, timeout=120).status_code == 200
    return _complete(hostile.url)


def _complete(url: str) -> str:
    response = httpx.post(f"{url}/v1/completions", json=VICTIM, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["text"]


def runner_pid(url: str) -> int:
    metrics = httpx.get(f"{url}/metrics", timeout=10).text
    return int(re.search(r'localrun_model_info\{[^}]*pid="(\d+)"', metrics).group(1))


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))


class _Victim(threading.Thread):
    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.text, self.error = url, "", None

    def run(self) -> None:
        try:
            with httpx.stream("POST", f"{self.url}/v1/completions", json={**VICTIM, "stream": True}, timeout=120) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        self.text += httpx.Response(200, content=line[6:]).json()["choices"][0]["text"]
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = e


class _Health(threading.Thread):
    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.seconds, self.stop = url, [], threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                start = time.perf_counter()
                client.get(f"{self.url}/health")
                self.seconds.append(time.perf_counter() - start)
                time.sleep(0.02)


@contextmanager
def beside_a_victim(daemon, alone: str):
    """Run the block while a victim streams and /health is polled; then check that nothing was hurt."""
    pid = runner_pid(daemon.url)
    rss = rss_kib(pid)
    victim, health = _Victim(daemon.url), _Health(daemon.url)
    health.start()
    victim.start()
    try:
        yield
    finally:
        victim.join(120)
        health.stop.set()
        health.join(30)
    assert victim.error is None and victim.text == alone, (victim.error, victim.text, alone)
    assert runner_pid(daemon.url) == pid, "the runner was replaced"
    assert statistics.median(health.seconds) < HEALTH_MEDIAN_S, health.seconds
    assert rss_kib(pid) <= rss * 1.1 + 8192, "the runner's memory grew"


def refused(daemon, path: str, body: dict | bytes, status: int = 400, **headers: str) -> str:
    """Send a hostile body; it must be refused with `status` in the dialect's shape. Its message."""
    if isinstance(body, bytes):
        response = httpx.post(f"{daemon.url}{path}", content=body, timeout=60,
                              headers={"Content-Type": "application/json", **headers})
    else:
        response = httpx.post(f"{daemon.url}{path}", json=body, timeout=60, headers=headers)
    assert response.status_code == status, (path, body if not isinstance(body, bytes) else body[:200], response.text)
    error = response.json()["error"]
    message = error["message"] if isinstance(error, dict) else error
    assert "File \"" not in message and "line " not in message, message  # no source lines
    return message


def chat(**fields) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **fields}


def messages(**fields) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **fields}


def schema(value: dict) -> dict:
    return chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": value}})


BAD_PARAMETERS = {"type": "object", "properties": "x"}
OPENAI_TOOL = {"type": "function", "function": {"name": "f", "parameters": BAD_PARAMETERS}}


def test_schemas_and_tools_that_killed_or_stalled_the_runner_are_400s(hostile, alone):
    with beside_a_victim(hostile, alone):
        for value, bound in [({"type": "string", "maxLength": 100_000_000}, "maxLength"),
                             ({"type": "array", "minItems": 100_000_000, "items": {"type": "integer"}}, "minItems"),
                             ({"type": "array", "minItems": 1_000_000, "items": {"type": "integer"}}, "minItems"),
                             ({"type": "string", "pattern": "^(a{900}){900}$"}, "pattern"),
                             ({"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 1000}
                                                                for i in range(20)}}, "add up")]:
            assert bound in refused(hostile, "/v1/chat/completions", schema(value))
        assert "'x' is not of type 'object'" in refused(
            hostile, "/v1/chat/completions", chat(tools=[OPENAI_TOOL], tool_choice="required"))
        assert "'x' is not of type 'object'" in refused(hostile, "/v1/messages", messages(
            tools=[{"name": "f", "input_schema": BAD_PARAMETERS}], tool_choice={"type": "any"}))
        assert "is not valid" in refused(hostile, "/api/chat", {
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "format": {"type": "nope"}})


def test_malformed_messages_and_choices_are_400s_naming_the_field(hostile, alone):
    with beside_a_victim(hostile, alone):
        for calls in (["x"], "abc", [{"function": "f"}]):
            body = chat(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": calls}])
            assert "messages[1].tool_calls" in refused(hostile, "/v1/chat/completions", body)
        refused(hostile, "/v1/chat/completions", chat(tool_choice={"type": "function", "function": "nope"}))
        assert "output_config.format" in refused(hostile, "/v1/messages", messages(output_config={"format": "x"}))
        for body in (chat(tool_choice="required"), chat(tool_choice={"type": "function", "function": {"name": "f"}})):
            assert "tool" in refused(hostile, "/v1/chat/completions", body)
        assert "needs tools" in refused(hostile, "/v1/messages", messages(tool_choice={"type": "any"}))


SURROGATE = "\\ud800"
TEXT_ROUTES = [
    ("/v1/chat/completions", '{"model": "smollm2", "messages": [{"role": "user", "content": "%s"}]}'),
    ("/v1/chat/completions", '{"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "stop": ["%s"]}'),
    ("/v1/completions", '{"model": "smollm2", "prompt": "%s"}'),
    ("/v1/embeddings", '{"model": "smollm2", "input": "%s"}'),
    ("/v1/messages", '{"model": "smollm2", "max_tokens": 4, "messages": [{"role": "user", "content": "%s"}]}'),
    ("/v1/messages/count_tokens", '{"model": "smollm2", "messages": [{"role": "user", "content": "%s"}]}'),
    ("/v1/score", '{"model": "smollm2", "prompt": "x", "options": ["%s"]}'),
    ("/api/generate", '{"model": "smollm2", "prompt": "%s"}'),
    ("/api/chat", '{"model": "smollm2", "messages": [{"role": "user", "content": "%s"}]}'),
    ("/api/embed", '{"model": "smollm2", "input": "%s"}'),
    ("/api/tokenize", '{"model": "smollm2", "text": "%s"}'),
    ("/v1/chat/completions", '{"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], '
                             '"tools": [{"type": "function", "function": {"name": "%s"}}]}'),
]


def test_text_that_is_not_unicode_or_holds_nul_is_a_400_on_every_text_route(hostile, alone):
    with beside_a_victim(hostile, alone):
        for path, template in TEXT_ROUTES:
            assert "unpaired surrogate" in refused(hostile, path, (template % SURROGATE).encode())
            assert "NUL" in refused(hostile, path, (template % "a\\u0000b").encode())


def test_types_are_strict_and_values_bounded(hostile, alone):
    with beside_a_victim(hostile, alone):
        for body in (chat(max_tokens="99999999999"), chat(stream="yes"), chat(n="16"), chat(n=True),
                     chat(temperature="0.5"), chat(max_tokens=4.0)):
            refused(hostile, "/v1/chat/completions", body)
        refused(hostile, "/v1/chat/completions", b'{"model": "smollm2", "messages": [], "temperature": Infinity}')
        refused(hostile, "/v1/messages", messages(max_tokens="99999999999"))
        refused(hostile, "/api/generate", {"model": MODEL, "prompt": "hi", "options": {"num_predict": "99999999999"}})
        refused(hostile, "/api/perplexity", {"model": MODEL, "text": "hello world", "ctx": 1_000_000_000})
        assert "at most 8192" in refused(hostile, "/api/perplexity", {"model": MODEL, "text": "hi", "ctx": 100_000})
        refused(hostile, "/api/embed", {"model": MODEL, "input": "hi", "dimensions": 100_000})
        for keep_alive in (b"1e400", b'"nan"', b"NaN", b"Infinity"):
            refused(hostile, "/api/generate", b'{"model": "smollm2", "prompt": "", "keep_alive": ' + keep_alive + b"}")
        echo = httpx.post(f"{hostile.url}/v1/completions", timeout=60, json={
            "model": MODEL, "prompt": "", "max_tokens": 0, "echo": True, "logprobs": 1})
        assert echo.status_code < 500, echo.text


def test_a_huge_keep_alive_means_forever_and_ps_keeps_answering(hostile, alone):
    with beside_a_victim(hostile, alone):
        for keep_alive in (1e12, "99999999h", 10**30):
            loaded = httpx.post(f"{hostile.url}/api/generate", json={"model": MODEL, "keep_alive": keep_alive},
                                timeout=60)
            assert loaded.status_code == 200, loaded.text
            ps = httpx.get(f"{hostile.url}/api/ps", timeout=10)
            assert ps.status_code == 200 and ps.json()["models"][0]["expires_at"].startswith("2318")


def test_bodies_that_stalled_the_event_loop_are_refused_without_stalling_it(hostile, alone):
    head = b'{"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "x": '
    arrays = head + b"[" + b",".join([b"[]"] * 9_000_000) + b"]}"
    deep = head + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with beside_a_victim(hostile, alone):
        started = time.perf_counter()
        assert "more than 1000000 values" in refused(hostile, "/v1/chat/completions", arrays)
        assert "nested" in refused(hostile, "/api/chat", deep)
        assert time.perf_counter() - started < 20


def test_pull_refuses_loopback_and_link_local_sources_with_one_message(hostile, alone):
    with beside_a_victim(hostile, alone):
        for url in ("http://127.0.0.1:1/x.gguf", "http://169.254.169.254/latest/x.gguf", "http://[::1]:9/x.gguf",
                    "http://localhost:22/x.gguf"):
            message = refused(hostile, "/api/pull", {"model": url, "stream": False}, status=403)
            assert "LOCALRUN_ALLOW_PRIVATE_PULL" in message


def test_removing_a_copy_keeps_the_runner_the_original_shares(hostile, alone):
    pid = runner_pid(hostile.url)
    assert httpx.post(f"{hostile.url}/api/copy", json={"source": MODEL, "destination": "victim-copy"}).status_code == 200
    assert httpx.request("DELETE", f"{hostile.url}/api/delete", json={"model": "victim-copy"}).status_code == 200
    time.sleep(0.2)
    assert [m["name"] for m in httpx.get(f"{hostile.url}/api/ps").json()["models"]] == ["smollm2:135m"]
    assert runner_pid(hostile.url) == pid
    assert _complete(hostile.url) == alone


# --- slow clients: an in-process server with the daemon's protocol and body check, short deadlines ---

async def _ok(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def short_deadlines(monkeypatch):
    from localrun.server import body, timeouts

    monkeypatch.setattr(timeouts, "HEADER_TIMEOUT_S", 0.5)
    monkeypatch.setattr(body, "BODY_IDLE_TIMEOUT_S", 0.5)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(body.BodyLimits(_ok, max_body=1 << 20), host="127.0.0.1", port=port,
                                           http=timeouts.HeaderDeadline, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield port
    server.should_exit = True
    thread.join(10)


def _closed_within(sock: socket.socket, seconds: float) -> bytes:
    sock.settimeout(seconds)
    received = b""
    while chunk := sock.recv(4096):
        received += chunk
    return received


def test_headers_that_never_end_are_cut_off_and_slow_bodies_get_408(short_deadlines):
    with socket.create_connection(("127.0.0.1", short_deadlines)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n")  # never the blank line
        started = time.perf_counter()
        assert _closed_within(sock, 5) == b""
        assert time.perf_counter() - started < 3
    with socket.create_connection(("127.0.0.1", short_deadlines)) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\n{}")
        assert b" 408 " in _closed_within(sock, 5)
    with socket.create_connection(("127.0.0.1", short_deadlines)) as sock:  # a patient client is served
        for _ in range(2):
            sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            sock.settimeout(5)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            time.sleep(0.3)
