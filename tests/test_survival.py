"""Survival: real daemons under overload, client disconnects, a runner killed with SIGKILL, and the
daemon itself stopped with SIGTERM mid-stream. Each test watches what a client sees and checks
the daemon still serves afterwards."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.cli import run_cli
from tests.daemon import Daemon, start_daemon

NO_EOS = {"0": -100, "2": -100}  # SmolLM2's <|endoftext|> and <|im_end|>: answers run to max_tokens
PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}]


def runner_pids(daemon_pid: int) -> list[int]:
    """Runner children (`python -m localrun.runner`) of a daemon, found in /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        parent = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), 0)
        if parent == daemon_pid and b"localrun.runner" in cmdline and b"--info" not in cmdline:
            found.append(int(entry.name))
    return found


def chat_body(max_tokens: int = 32, stream: bool = True) -> dict:
    return {"model": "smollm2", "messages": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": stream,
            "logit_bias": NO_EOS}


def sse_events(response: httpx.Response):
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield line[6:]


def metric(url: str, name: str) -> float | None:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture(scope="module")
def narrow(tmp_path_factory):
    """One slot and a queue of one: capacity 2 requests."""
    d = start_daemon(tmp_path_factory.mktemp("narrow-home"), {"LOCALRUN_PARALLEL": "1", "LOCALRUN_MAX_QUEUE": "1"})
    httpx.post(f"{d.url}/v1/chat/completions", json=chat_body(1, stream=False), timeout=120).raise_for_status()
    yield d
    d.stop()


def _stream_to_end(url: str, ready: list) -> tuple[int, list[str]]:
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=chat_body(48), timeout=120) as response:
        ready.append(response.status_code)
        return response.status_code, list(sse_events(response))


def test_overload_gets_503_at_once_and_admitted_requests_complete(narrow):
    ready: list[int] = []
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        admitted = [pool.submit(_stream_to_end, narrow.url, ready) for _ in range(2)]
        deadline = time.monotonic() + 60
        while len(ready) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready == [200, 200]
        refused = []
        for path, body in [("/v1/chat/completions", chat_body()), ("/api/chat", {**chat_body(), "options": {}}),
                           ("/v1/messages", {**chat_body(), "max_tokens": 32}),
                           ("/v1/responses", {"model": "smollm2", "input": "Hi", "max_output_tokens": 32})]:
            started = time.monotonic()
            response = httpx.post(f"{narrow.url}{path}", json=body, timeout=30)
            refused.append((path, response, time.monotonic() - started))
        for future in admitted:
            status, events = future.result(timeout=120)
            assert status == 200 and events[-1] == "[DONE]"
            assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
    assert [path for path, _, _ in refused] == ["/v1/chat/completions", "/api/chat", "/v1/messages", "/v1/responses"]
    for path, response, seconds in refused:
        assert response.status_code == 503, (path, response.text)
        assert int(response.headers["retry-after"]) >= 1
        assert seconds < 2.0, f"{path} waited {seconds:.1f}s for its 503"
        body = response.json()
        if path == "/v1/messages":
            assert body["error"]["type"] == "overloaded_error"
        elif path.startswith("/v1/"):
            assert "busy" in body["error"]["message"]
        else:
            assert "busy" in body["error"]


def test_client_disconnect_frees_the_slot_at_once(narrow):
    with httpx.stream("POST", f"{narrow.url}/v1/chat/completions", json=chat_body(4000), timeout=120) as response:
        events = sse_events(response)
        for _ in range(3):
            next(events)
        assert metric(narrow.url, "localrun_running_sequences") == 1
    deadline = time.monotonic() + 3
    while metric(narrow.url, "localrun_running_sequences") != 0:
        assert time.monotonic() < deadline, "the cancelled sequence still runs"
        time.sleep(0.05)
    started = time.monotonic()
    with httpx.stream("POST", f"{narrow.url}/v1/chat/completions", json=chat_body(4), timeout=120) as response:
        events = sse_events(response)
        first = next(events)
        waited = time.monotonic() - started
        rest = list(events)
    assert json.loads(first)["choices"][0]["delta"]["role"] == "assistant"
    assert rest[-1] == "[DONE]"
    assert waited < 5.0, f"the next request waited {waited:.1f}s: the old sequence was not cancelled"


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", chat_body(4000, stream=False)),
    ("/api/chat", {"model": "smollm2", "messages": PROMPT, "stream": False,
                   "options": {"num_predict": 4000, "temperature": 0}, "logit_bias": NO_EOS}),
    ("/v1/messages", {"model": "smollm2", "messages": PROMPT, "max_tokens": 4000, "logit_bias": NO_EOS}),
])
def test_a_client_that_hangs_up_on_a_non_streamed_answer_frees_the_slot(narrow, path, body):
    """Nothing is written before the whole answer, so the daemon must watch the connection itself."""
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{narrow.url}{path}", json=body, timeout=1.5)
    started = time.monotonic()  # the one slot must be free for this at once, not after 4000 tokens (~30 s)
    httpx.post(f"{narrow.url}/v1/chat/completions", json=chat_body(4, stream=False), timeout=60).raise_for_status()
    assert time.monotonic() - started < 8, "the abandoned sequence went on running"


def test_runner_sigkill_mid_stream_is_reported_and_a_fresh_runner_serves(narrow):
    before = runner_pids(narrow.proc.pid)
    assert len(before) == 1
    with httpx.stream("POST", f"{narrow.url}/v1/chat/completions", json=chat_body(4000), timeout=60) as response:
        events = sse_events(response)
        next(events)
        os.kill(before[0], signal.SIGKILL)
        rest = list(events)
    error = json.loads(rest[-1])["error"]
    assert "runner crashed" in error["message"] and "SIGKILL" in error["message"]
    assert httpx.get(f"{narrow.url}/health", timeout=10).json()["status"] == "ok"
    answer = httpx.post(f"{narrow.url}/v1/chat/completions", json=chat_body(4, stream=False), timeout=120)
    assert answer.status_code == 200, answer.text
    after = runner_pids(narrow.proc.pid)
    assert len(after) == 1 and after != before


def test_runner_sigkill_ends_an_ollama_stream_with_an_error_line(narrow):
    httpx.post(f"{narrow.url}/v1/chat/completions", json=chat_body(1, stream=False), timeout=120).raise_for_status()
    body = {"model": "smollm2", "messages": PROMPT, "stream": True, "options": {"num_predict": 4000, "temperature": 0}}
    with httpx.stream("POST", f"{narrow.url}/api/chat", json=body, timeout=60) as response:
        lines = response.iter_lines()
        next(lines)
        os.kill(runner_pids(narrow.proc.pid)[0], signal.SIGKILL)
        rest = [json.loads(line) for line in lines if line.strip()]
    assert "runner crashed" in rest[-1]["error"]
    again = httpx.post(f"{narrow.url}/api/chat", json={**body, "stream": False, "options": {"num_predict": 4}},
                       timeout=120)
    assert again.status_code == 200, again.text


def runner_of(url: str, model: str) -> int:
    """The runner pid of a loaded model, as /metrics tells it."""
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f'localrun_model_info{{model="{model}"'):
            return int(line.split('pid="')[1].split('"')[0])
    raise AssertionError(f"{model} is not loaded")


def test_killing_one_runner_leaves_other_models_serving(narrow, gemma_path):
    pulled = run_cli("pull", str(gemma_path), env=narrow.env(), timeout=120)
    assert pulled.returncode == 0, pulled.stderr
    gemma = pulled.stdout.split("pulled ", 1)[1].split(" ", 1)[0]
    httpx.post(f"{narrow.url}/v1/chat/completions", json=chat_body(1, stream=False), timeout=120).raise_for_status()
    body = {"model": gemma, "messages": PROMPT, "max_tokens": 48, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{narrow.url}/v1/chat/completions", json=body, timeout=120) as other:
        events = sse_events(other)
        next(events)
        os.kill(runner_of(narrow.url, "smollm2:135m"), signal.SIGKILL)
        rest = list(events)
    assert rest[-1] == "[DONE]" and not any('"error"' in event for event in rest)
    assert json.loads(rest[-2])["choices"][0]["finish_reason"] in ("stop", "length")
    answer = httpx.post(f"{narrow.url}/v1/chat/completions", json=chat_body(4, stream=False), timeout=120)
    assert answer.status_code == 200, answer.text


def _pid_files(d: Daemon) -> list[Path]:
    return [p for p in d.home.rglob("*.pid")]


def test_sigterm_mid_stream_ends_the_stream_and_a_restart_serves(tmp_path):
    d = start_daemon(tmp_path / "home", {"LOCALRUN_SHUTDOWN_TIMEOUT": "1s"})  # the drain, then the error
    try:
        assert _pid_files(d), "serve writes a pid file"
        with httpx.stream("POST", f"{d.url}/v1/chat/completions", json=chat_body(100_000), timeout=60) as response:
            events = sse_events(response)
            next(events)
            runners = runner_pids(d.proc.pid)
            d.proc.send_signal(signal.SIGTERM)
            started = time.monotonic()
            rest = list(events)
            ended = time.monotonic() - started
        assert ended < 15, f"the stream took {ended:.1f}s to end after SIGTERM"
        last = json.loads(rest[-1]) if rest and rest[-1] != "[DONE]" else {}
        assert "shutting down" in last.get("error", {}).get("message", ""), rest[-3:]
        d.proc.wait(20)
        assert d.proc.returncode == 0
        assert not _pid_files(d)
        assert all(not Path(f"/proc/{pid}").exists() for pid in runners)
        assert not [p for p in d.home.rglob("partial/*") if p.suffix != ".lock"]  # lock files are kept by design
    finally:
        d.stop()
    again = start_daemon(d.home, pull=False)
    try:
        answer = httpx.post(f"{again.url}/v1/chat/completions", json=chat_body(4, stream=False), timeout=120)
        assert answer.status_code == 200
    finally:
        again.stop()
