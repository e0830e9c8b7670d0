"""Runner lifecycle on a real daemon of its own (this file deletes models, so not the session one):
deleting a loaded model unloads its runner process, at once or when its answers in flight are done,
and loading one model never holds up requests to another that is already loaded."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import ollama
import pytest

from tests.daemon import MODEL, start_daemon

SMOLLM2 = "smollm2:135m"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = start_daemon(tmp_path_factory.mktemp("lifecycle-home"))
    yield d
    d.stop()


@pytest.fixture
def client(daemon) -> ollama.Client:
    """The daemon with the bundled model present (a test before may have deleted it) and nothing loaded."""
    cli(daemon, "pull", MODEL, "--quiet")
    c = ollama.Client(host=daemon.url, timeout=120)
    for model in c.ps().models:
        c.generate(model=model.model, prompt="", keep_alive=0)
    return c


def cli(daemon, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localrun", *args], env=daemon.env(), capture_output=True,
                          text=True, timeout=120, check=True)


def runner_pids(daemon, model_file: str = "") -> list[int]:
    """The daemon's runner child processes (real processes, read from /proc), optionally for one file."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == daemon.proc.pid and "localrun.runner" in cmdline and model_file in cmdline:
            pids.append(int(entry.name))
    return pids


def gone(pid: int, within: float = 0.0) -> bool:
    deadline = time.monotonic() + within
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def loaded_runner(daemon, client: ollama.Client) -> int:
    client.generate(model=MODEL, prompt="")  # Ollama's empty request: load it
    [pid] = runner_pids(daemon)
    return pid


def test_deleting_an_idle_loaded_model_ends_its_runner_at_once(daemon, client):
    pid = loaded_runner(daemon, client)
    assert client.delete(MODEL).status == "success"
    assert gone(pid) and client.ps().models == [] and runner_pids(daemon) == []


def test_deleting_a_busy_model_lets_the_answer_finish_then_ends_the_runner(daemon, client):
    """The answer streamed while its model is deleted is the whole answer the model gave before (which
    ends where the model ends it: at 40 tokens on one machine, at an end-of-generation token on another)."""
    request = dict(model=MODEL, prompt="1, 2, 3, 4, 5, 6, 7, 8,", raw=True,
                   options={"temperature": 0, "num_predict": 40})
    whole = client.generate(**request)
    assert whole.eval_count > 20
    [pid] = runner_pids(daemon)
    stream = client.generate(**request, stream=True)
    first = next(stream)
    assert not first.done
    assert client.delete(MODEL).status == "success"
    assert not gone(pid)  # still answering
    rest = list(stream)
    assert rest[-1].done and (rest[-1].done_reason, rest[-1].eval_count) == (whole.done_reason, whole.eval_count)
    assert "".join(chunk.response for chunk in [first, *rest]) == whole.response
    assert gone(pid, within=10) and client.ps().models == []


def test_localrun_rm_unloads_the_model_from_the_running_daemon(daemon, client):
    pid = loaded_runner(daemon, client)
    result = cli(daemon, "rm", MODEL)
    assert result.stdout.strip() == f"deleted {MODEL}"
    assert gone(pid, within=5) and client.ps().models == []
    assert MODEL not in cli(daemon, "list").stdout


def test_a_loaded_model_answers_while_another_model_loads(daemon, client, gemma_path):
    """Gemma with 4 slots of 32768 tokens takes seconds to load (a fresh runner process, the weights,
    the KV cache); a request to the already loaded SmolLM2 must not wait for it."""
    cli(daemon, "pull", str(gemma_path), "--link", "--quiet")
    gemma = gemma_path.stem
    client.generate(model=MODEL, prompt="Hi", options={"num_predict": 2})  # loaded, and its first decode done
    finished: dict[str, float] = {}

    def load_gemma() -> None:
        httpx.post(f"{daemon.url}/api/generate", json={"model": gemma, "prompt": "", "options": {"num_ctx": 32768}},
                   timeout=120).raise_for_status()
        finished["gemma"] = time.monotonic()

    loader = threading.Thread(target=load_gemma)
    loader.start()
    try:
        deadline = time.monotonic() + 30
        while not runner_pids(daemon, gemma_path.name) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runner_pids(daemon, gemma_path.name), "gemma's runner never started"
        answer = client.generate(model=MODEL, prompt="Hi", options={"num_predict": 2})
        answered = time.monotonic()
    finally:
        loader.join(120)
    assert answer.done and answer.eval_count >= 1 and answer.load_duration < 0.1e9
    # SmolLM2's runner competes for the two cores with the loading one (llama.cpp's threads spin), so its
    # answer can take as long as the load; what must not happen is the daemon holding the request back
    # until the load ends. SmolLM2's own runner measured its work: the request reached it before then.
    reached_runner = answered - (answer.prompt_eval_duration + answer.eval_duration) / 1e9
    assert reached_runner < finished["gemma"]
    assert {m.model for m in client.ps().models} == {SMOLLM2, f"{gemma}:latest"}


def test_requests_for_a_model_that_is_loading_share_one_runner(daemon, client, gemma_path):
    cli(daemon, "pull", str(gemma_path), "--link", "--quiet")
    gemma = gemma_path.stem
    client.generate(model=gemma, prompt="", keep_alive=0)  # not loaded
    answers: list[int] = []

    def ask() -> None:
        r = httpx.post(f"{daemon.url}/api/generate", timeout=120, json={
            "model": gemma, "prompt": "Hi", "stream": False, "options": {"num_ctx": 8192, "num_predict": 1}})
        answers.append(r.status_code)

    askers = [threading.Thread(target=ask) for _ in range(3)]
    for asker in askers:
        asker.start()
    seen: set[int] = set()
    while any(asker.is_alive() for asker in askers):
        seen.update(runner_pids(daemon, gemma_path.name))
        time.sleep(0.01)
    assert answers == [200, 200, 200]
    assert len(seen) == 1 and runner_pids(daemon, gemma_path.name) == list(seen)
