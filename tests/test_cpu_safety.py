"""Runners on machines whose CPU or OS cannot run what the llama.cpp build uses: the AMX buffer type is
left out where the decision says so, safe mode answers like a normal load, and a runner killed by
SIGILL gets a clear error and one retry in safe mode, remembered for later loads. The SIGILLs are real
signals sent to real runner processes (a machine that raises them by itself cannot be chosen here)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from localrun.config import EngineSettings
from localrun.errors import LoadCrashed, RunnerCrashed
from localrun.native import GenerateRequest
from localrun.safe_mode import FILE_NAME
from localrun.sampling import SamplingParams
from localrun.server.runner_process import RunnerProcess
from tests.daemon import start_daemon

PROMPTS = ["The capital of France is", "Write a haiku about the sea.", "List three prime numbers:"]


def greedy(engine, prompt: str, n: int = 24) -> list[int]:
    from localrun.engine import Request

    engine.add(Request(prompt, engine.tokenize(prompt), SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)))
    tokens: list[int] = []
    while engine.has_work:
        tokens += [e.token for e in engine.step() if hasattr(e, "token")]
    return tokens


def test_safe_mode_answers_token_for_token_like_a_normal_load(smollm2_path):
    from localrun.engine import Engine

    answers = {}
    for safe in (False, True):
        with Engine(str(smollm2_path), EngineSettings(parallel=1, ctx_size=512, safe_mode=safe)) as engine:
            assert engine.info["safe_mode"] is safe and (safe is False or engine.info["extra_buffer_types"] == [])
            answers[safe] = [greedy(engine, p) for p in PROMPTS]
    assert answers[True] == answers[False]


def test_weights_never_go_to_a_buffer_type_the_decision_rules_out():
    from localrun.engine import backend

    plan = backend.init_backend()
    names = backend.extra_buffer_types()
    assert ("AMX" in names) is (not plan.avoid_amx and "AMX" in names)
    if plan.avoid_amx:
        assert "AMX" not in names


def test_dropping_one_extra_buffer_type_keeps_the_others():
    script = ("from localrun.engine import backend; backend.init_backend(probe_amx=False); "
              "before = backend.extra_buffer_types(); import json; "
              "print(json.dumps([before, backend.drop_extra_buffer_type(before[0]) if before else False, "
              "backend.extra_buffer_types()]))")
    before, dropped, after = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                                       timeout=60, check=True).stdout)
    if not before:
        pytest.skip("this llama.cpp build has no extra buffer types")
    assert dropped and after == before[1:]


class RunnerKiller:
    """Sends a real SIGILL to the first runner process started for `model` (found in /proc)."""

    def __init__(self, model: Path) -> None:
        self.model, self.killed = str(model), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> RunnerKiller:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def _watch(self) -> None:
        while not self._stop.is_set() and not self.killed:
            for pid in _runner_pids(self.model):
                os.kill(pid, signal.SIGILL)
                self.killed = pid
                return
            time.sleep(0.002)


def _runner_pids(model: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"localrun.runner" in argv and model.encode() in argv:
                pids.append(int(entry.name))
    return pids


def test_a_runner_killed_by_sigill_while_loading_names_the_cause_and_the_fix(smollm2_path, tmp_path):
    model = shutil.copy(smollm2_path, tmp_path / "sigill.gguf")

    async def main() -> None:
        with RunnerKiller(model) as killer:
            with pytest.raises(LoadCrashed) as crash:
                await RunnerProcess.start(model, EngineSettings(parallel=1, ctx_size=256))
        assert killer.killed
        assert "SIGILL" in crash.value.message and "-DGGML_NATIVE=OFF" in crash.value.message

    asyncio.run(main())


@pytest.fixture(scope="module")
def crashing_home(tmp_path_factory, smollm2_path):
    """A home whose first runner is killed by SIGILL while it loads."""
    home = tmp_path_factory.mktemp("sigill-home")
    daemon = start_daemon(home)
    try:
        with RunnerKiller(_blob(home)) as killer:
            answer = _ask(daemon)
        yield daemon, home, killer, answer
    finally:
        daemon.stop()


def _blob(home: Path) -> Path:
    return next((home / "models" / "blobs").iterdir())


def _ask(daemon, max_tokens: int = 8) -> httpx.Response:
    return httpx.post(f"{daemon.url}/v1/chat/completions", timeout=120, json={
        "model": "smollm2", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": max_tokens,
        "temperature": 0})


def test_a_load_killed_by_sigill_is_retried_once_in_safe_mode(crashing_home):
    daemon, home, killer, answer = crashing_home
    assert killer.killed and answer.status_code == 200, answer.text
    log = daemon.log.read_text()
    assert log.count("retrying once in safe mode") == 1 and "SIGILL" in log
    (model,) = httpx.get(f"{daemon.url}/api/ps").json()["models"]
    assert model["safe_mode"] is True and model["extra_buffer_types"] == []


def test_safe_mode_is_remembered_for_this_build_on_this_cpu(crashing_home):
    daemon, home, _, _ = crashing_home
    remembered = json.loads((home / FILE_NAME).read_text())
    (key, reason), = remembered.items()
    assert "llama-cpp-python" in key and "SIGILL" in reason
    doctor = subprocess.run([sys.executable, "-m", "localrun", "doctor"], env=daemon.env(), capture_output=True,
                            text=True, timeout=120)
    assert "safe mode" in doctor.stdout and "remembered" in doctor.stdout

    daemon.stop()
    restarted = start_daemon(home, pull=False)
    try:
        assert _ask(restarted).status_code == 200
        (model,) = httpx.get(f"{restarted.url}/api/ps").json()["models"]
        assert model["safe_mode"] is True
        assert "retrying" not in restarted.log.read_text()
    finally:
        restarted.stop()


def test_sigill_mid_request_tells_every_request_the_cause_and_the_fix(smollm2_path, tmp_path):
    model = shutil.copy(smollm2_path, tmp_path / "midway.gguf")

    async def main() -> None:
        runner = await RunnerProcess.start(model, EngineSettings(parallel=1, ctx_size=512))
        sampling = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
        request = GenerateRequest(model="m", prompt="Tell a long story.", sampling=sampling).to_dict()
        with pytest.raises(RunnerCrashed) as crash:
            async for message in runner.stream("generate", request=request):
                if message["type"] == "delta":
                    os.kill(runner.pid, signal.SIGILL)
        assert "SIGILL" in crash.value.message and "-DGGML_NATIVE=OFF" in crash.value.message
        assert runner.death_signal == "SIGILL"

    asyncio.run(main())
