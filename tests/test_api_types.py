"""The Ollama API's model answers (localrun/api_types.py) that the server writes and the client reads:
each real answer of the daemon reads back into the shared types and writes out unchanged, and the
client hands out those types."""

from __future__ import annotations

import json

import httpx
import pytest

from localrun.api_types import ListedModel, PullProgress, RunningModel, ShowResponse
from localrun.client import Client
from localrun.engine.settings import allowed_cpus
from localrun.runner.interval import AUTO_MS
from tests.cli import run_cli
from tests.fileserver import FileServer
from tests.tiny_gguf import write_tiny_gguf

MODEL = "smollm2"
MODELFILE = {"from": MODEL, "system": "You are terse.", "parameters": {"temperature": 0.25, "stop": ["END", "STOP"]},
             "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}


@pytest.fixture(scope="module")
def client(daemon):
    with Client(daemon.url) as c:
        yield c


def test_every_listed_model_round_trips_and_the_client_reads_the_same(daemon, client):
    answer = httpx.get(f"{daemon.url}/api/tags", timeout=30).json()["models"]
    assert answer and [ListedModel.from_dict(m).to_dict() for m in answer] == answer
    listed = client.tags()
    assert listed == [ListedModel.from_dict(m) for m in answer]
    smollm2 = next(m for m in listed if m.name == "smollm2:135m")
    assert len(smollm2.digest) == 64 and smollm2.size > 50_000_000 and smollm2.modified is not None
    assert (smollm2.details.family, smollm2.details.quantization_level) == ("llama", "Q4_1")


def test_a_shown_model_round_trips_and_the_client_reads_its_facts(daemon, client):
    answer = httpx.post(f"{daemon.url}/api/show", json={"model": MODEL}, timeout=60).json()
    assert ShowResponse.from_dict(answer).to_dict() == answer
    shown = client.show(MODEL)
    assert shown == ShowResponse.from_dict(answer)
    assert (shown.architecture, shown.context_length, shown.license) == ("llama", 8192, "apache-2.0")
    assert shown.embedding_length > 0 and shown.parameter_count > 1e8 and client.trained_context(MODEL) == 8192


def test_a_model_with_a_modelfile_round_trips_with_its_system_prompt_and_messages(daemon, client):
    client.create("api-types-made", MODELFILE)
    try:
        answer = httpx.post(f"{daemon.url}/api/show", json={"model": "api-types-made"}, timeout=60).json()
        assert answer["system"] == "You are terse." and len(answer["messages"]) == 2
        assert ShowResponse.from_dict(answer).to_dict() == answer
        shown = client.show("api-types-made")
        assert shown.system == "You are terse." and shown.messages == MODELFILE["messages"]
        assert "temperature" in (shown.parameters or "")
    finally:
        client.delete("api-types-made")


def test_another_ollamas_answer_without_template_or_license_reads_as_not_told():
    shown = ShowResponse.from_dict({"modelfile": "FROM x\n", "details": {"family": "llama"},
                                    "model_info": {"llama.context_length": 131072, "general.parameter_count": "?"}})
    assert (shown.template, shown.license, shown.system) == (None, None, None)
    assert (shown.architecture, shown.context_length, shown.parameter_count) == ("llama", 131072, 0)
    listed = ListedModel.from_dict({"model": "llama3.2:latest", "digest": "sha256:" + "a" * 64, "size": "big"})
    assert (listed.name, listed.digest, listed.size, listed.modified) == ("llama3.2:latest", "a" * 64, 0, None)


def test_every_line_of_a_streamed_pull_round_trips_and_the_client_reads_the_same(daemon, client, tmp_path):
    gguf = write_tiny_gguf(tmp_path / "api-types-tiny.gguf")
    with FileServer() as files:
        url = files.add("/models/api-types-tiny.gguf", gguf)
        with httpx.stream("POST", f"{daemon.url}/api/pull", json={"model": url}, timeout=60) as response:
            lines = [json.loads(line) for line in response.iter_lines() if line.strip()]
        again = list(client.pull(url))  # present now: the short way to success
    try:
        assert lines[-1] == {"status": "success", "digest": lines[-1]["digest"]}
        assert any(line.get("total") == line.get("completed") == gguf.stat().st_size for line in lines)
        assert [PullProgress.from_dict(line).to_dict() for line in lines] == lines
        assert again[-1] == PullProgress.from_dict(lines[-1])
    finally:
        client.delete("api-types-tiny")


def test_a_loaded_model_round_trips_through_ps_with_every_member_and_the_cli_prints_the_same(daemon, client):
    httpx.post(f"{daemon.url}/api/generate", json={"model": MODEL}, timeout=120).raise_for_status()  # load only
    answer = httpx.get(f"{daemon.url}/api/ps", timeout=30).json()["models"]
    assert answer and [RunningModel.from_dict(m).to_dict() for m in answer] == answer
    running = client.ps()
    assert running == [RunningModel.from_dict(m) for m in answer]
    smollm2 = next(m for m in running if m.name == "smollm2:135m")
    assert (smollm2.model, smollm2.kv_cache_type, smollm2.details.family) == ("smollm2:135m", "f16", "llama")
    assert smollm2.context_length > 0 and smollm2.parallel > 0 and smollm2.size > 50_000_000
    assert isinstance(smollm2.threads, int) and smollm2.cpu and smollm2.expires_at
    no_cpu_spare = smollm2.threads >= len(allowed_cpus())  # the default, auto, holds a stream's tokens then
    assert smollm2.stream_interval_ms == (AUTO_MS if no_cpu_spare else 0)
    printed = json.loads(run_cli("ps", "--json", env=daemon.env()).stdout)
    assert [m["name"] for m in printed] == [m.name for m in running]
    assert set(printed[0]) == {"name", "digest", "size", "size_vram", "context_length", "expires_at", "kv_cache_type"}


def test_another_ollamas_ps_answer_reads_with_localruns_members_empty():
    running = RunningModel.from_dict({"model": "llama3.2:latest", "size": 3_000_000, "size_vram": 3_000_000,
                                      "expires_at": "2026-12-01T20:30:00Z", "context_length": 4096,
                                      "details": {"family": "llama"}, "threads": "many"})
    assert (running.name, running.size_vram, running.context_length, running.details.family) == (
        "llama3.2:latest", 3_000_000, 4096, "llama")
    assert (running.kv_cache_type, running.threads, running.speculative_exact, running.cpu,
            running.stream_interval_ms) == ("", None, None, [], None)
