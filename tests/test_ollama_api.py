"""The Ollama-compatible API through the official `ollama` client, against the real session daemon
serving the bundled SmolLM2. Answers are kept to a few tokens; greedy where outputs are compared."""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path

import httpx
import ollama
import pytest

from tests.fileserver import FileServer
from tests.tiny_gguf import write_tiny_gguf

MODEL = "smollm2"
GREEDY = {"temperature": 0, "num_predict": 8}
LONG_SYSTEM = "You are a pirate captain who only ever talks about the sea, ships, storms and treasure. " * 3


@pytest.fixture(scope="module")
def client(daemon) -> ollama.Client:
    return ollama.Client(host=daemon.url, timeout=120)


def running(client: ollama.Client) -> list[str]:
    return [m.model for m in client.ps().models]


# --- generation ----------------------------------------------------------------------------------

def test_generate_reports_ollama_stats_in_nanoseconds(client):
    r = client.generate(model=MODEL, prompt="Say hello.", options=GREEDY)
    assert r.done and r.done_reason in ("stop", "length") and r.response
    assert 0 < r.eval_count <= 8 and r.prompt_eval_count > 3
    # nanoseconds: a generation takes well over a millisecond; milliseconds would read as minutes here
    assert r.total_duration > 1_000_000 and r.eval_duration > 1_000_000 and r.prompt_eval_duration > 0
    assert r.total_duration >= r.eval_duration + r.prompt_eval_duration
    assert r.load_duration is not None and r.created_at.endswith("Z")


def test_streamed_generate_equals_non_streamed(client):
    whole = client.generate(model=MODEL, prompt="Name a colour.", options=GREEDY)
    parts = list(client.generate(model=MODEL, prompt="Name a colour.", options=GREEDY, stream=True))
    assert len(parts) > 2 and not any(p.done for p in parts[:-1])
    last = parts[-1]
    assert last.done and last.done_reason == whole.done_reason and last.eval_count == whole.eval_count
    assert "".join(p.response for p in parts) == whole.response


def test_num_predict_ends_with_length(client):
    r = client.generate(model=MODEL, prompt="Tell me a long story about a dragon.", options={"num_predict": 3})
    assert r.done_reason == "length" and r.eval_count == 3


def test_system_and_raw_shape_the_prompt(client):
    plain = client.generate(model=MODEL, prompt="Hi", options={"num_predict": 1})
    system = client.generate(model=MODEL, prompt="Hi", system=LONG_SYSTEM, options={"num_predict": 1})
    raw = client.generate(model=MODEL, prompt="Hi", raw=True, options={"num_predict": 1})
    assert system.prompt_eval_count > plain.prompt_eval_count + 20  # the system text went into the prompt
    assert raw.prompt_eval_count < 5  # no chat template around the prompt


def test_chat_with_system_and_options(client):
    messages = [{"role": "user", "content": "Hi"}]
    plain = client.chat(model=MODEL, messages=messages, options={"num_predict": 1})
    r = client.chat(model=MODEL, messages=[{"role": "system", "content": LONG_SYSTEM}, *messages],
                    options={"num_predict": 4, "temperature": 0, "top_k": 20, "repeat_penalty": 1.2,
                             "stop": ["\n\n"], "num_gpu": 99, "mirostat": 2})  # the last two are ignored
    assert r.message.role == "assistant" and r.message.content and r.done
    assert r.prompt_eval_count > plain.prompt_eval_count + 20 and r.eval_count <= 4


def test_streamed_chat_equals_non_streamed(client):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    whole = client.chat(model=MODEL, messages=messages, options=GREEDY)
    parts = list(client.chat(model=MODEL, messages=messages, options=GREEDY, stream=True))
    assert parts[-1].done and parts[-1].eval_count == whole.eval_count
    assert all(p.message.role == "assistant" for p in parts)
    assert "".join(p.message.content for p in parts) == whole.message.content


def test_format_json_and_schema_parse(client):
    r = client.chat(model=MODEL, messages=[{"role": "user", "content": "What is 2+2? Answer in JSON."}],
                    format="json", options={"temperature": 0, "num_predict": 48})
    assert isinstance(json.loads(r.message.content), dict)
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    r = client.generate(model=MODEL, prompt="What is 2+2?", format=schema,
                        options={"temperature": 0, "num_predict": 24})
    assert isinstance(json.loads(r.response)["answer"], int)


def test_seed_reproduces_sampled_output(client):
    def sample(seed: int) -> str:
        return client.generate(model=MODEL, prompt="Write a word.",
                               options={"seed": seed, "temperature": 1.5, "num_predict": 6}).response

    assert sample(7) == sample(7)
    assert len({sample(seed) for seed in (1, 2, 3)}) > 1  # the seed does steer the draw


def test_tools_are_accepted_and_mapped(client):
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tool = {"type": "function",
            "function": {"name": "get_weather", "description": "Weather in a city", "parameters": parameters}}
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                                                  "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "18 C and sunny", "tool_name": "get_weather"}]
    r = client.chat(model=MODEL, messages=messages, tools=[tool], options={"num_predict": 4})
    assert r.done and r.message.role == "assistant"
    for call in r.message.tool_calls or []:
        assert isinstance(call.function.arguments, dict)


# --- models --------------------------------------------------------------------------------------

def test_list_and_show(client):
    listed = {m.model: m for m in client.list().models}
    m = listed["smollm2:135m"]
    assert m.size > 50_000_000 and len(m.digest) == 64 and m.modified_at is not None
    assert m.details.family == "llama" and m.details.quantization_level == "Q4_1" and m.details.format == "gguf"
    shown = client.show(MODEL)
    assert shown.license == "apache-2.0" and "<|im_start|>" in shown.template
    assert shown.modelfile.startswith("# Modelfile") and "\nFROM " in shown.modelfile
    assert shown.modelinfo["general.architecture"] == "llama" and shown.modelinfo["general.parameter_count"] > 1e8
    assert "completion" in shown.capabilities and shown.details.parameter_size == "135M"
    assert not shown.parameters  # no invented defaults: the catalogue's context length is in modelinfo
    assert shown.modelinfo["llama.context_length"] == 8192


def test_pull_copy_delete_from_a_loopback_server(client, tmp_path):
    gguf = write_tiny_gguf(tmp_path / "ollama-api-tiny.gguf", floats=200_000, license="mit")
    with FileServer() as server:
        url = server.add("/models/ollama-api-tiny.gguf", gguf)
        steps = list(client.pull(url, stream=True))
        assert steps[0].status == "pulling manifest" and steps[-1].status == "success"
        progress = [s for s in steps if s.status.startswith("pulling ") and s.total]
        assert progress and progress[-1].completed == progress[-1].total == gguf.stat().st_size
        assert client.pull(url).status == "success"  # not streamed: one final status
        with pytest.raises(ollama.ResponseError, match="not found"):
            list(client.pull(server.url("/models/missing.gguf"), stream=True))
        with pytest.raises(ollama.ResponseError, match="not found"):
            client.pull(server.url("/models/missing.gguf"))
    assert client.show("ollama-api-tiny").license == "mit"
    assert client.copy("ollama-api-tiny", "ollama-api-copy:v1").status == "success"
    names = {m.model for m in client.list().models}
    assert {"ollama-api-tiny:latest", "ollama-api-copy:v1"} <= names
    assert client.delete("ollama-api-copy:v1").status == "success"
    assert client.delete("ollama-api-tiny").status == "success"
    names = {m.model for m in client.list().models}
    assert "ollama-api-tiny:latest" not in names and "ollama-api-copy:v1" not in names
    with pytest.raises(ollama.ResponseError) as e:
        client.delete("ollama-api-tiny")
    assert e.value.status_code == 404


# --- embeddings ----------------------------------------------------------------------------------

def test_embed_and_legacy_embeddings(client):
    r = client.embed(model=MODEL, input=["hello world", "a cat sat on the mat"])
    assert len(r.embeddings) == 2 and len(r.embeddings[0]) == len(r.embeddings[1]) > 100
    assert math.isclose(math.fsum(x * x for x in r.embeddings[0]), 1.0, rel_tol=1e-3)
    assert r.prompt_eval_count > 5 and r.total_duration > 0
    legacy = client.embeddings(model=MODEL, prompt="hello world").embedding
    assert all(math.isclose(a, b, abs_tol=1e-4) for a, b in zip(legacy, r.embeddings[0]))
    cut = client.embed(model=MODEL, input="hello world", dimensions=32).embeddings[0]
    assert len(cut) == 32 and math.isclose(math.fsum(x * x for x in cut), 1.0, rel_tol=1e-3)


# --- keep-alive ----------------------------------------------------------------------------------

def test_keep_alive_zero_unloads_and_an_empty_request_loads(client):
    client.chat(model=MODEL, messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 1}, keep_alive=0)
    deadline = time.monotonic() + 10
    while "smollm2:135m" in running(client) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "smollm2:135m" not in running(client)  # unloaded once the answer was done
    loaded = client.generate(model=MODEL, prompt="")
    assert loaded.done and loaded.done_reason == "load" and loaded.response == ""
    assert "smollm2:135m" in running(client)
    unloaded = client.generate(model=MODEL, prompt="", keep_alive=0)
    assert unloaded.done_reason == "unload" and "smollm2:135m" not in running(client)
    assert [p.done_reason for p in client.chat(model=MODEL, messages=[], keep_alive=-1, stream=True)] == ["load"]
    ps = client.ps().models[0]
    assert ps.model == "smollm2:135m" and ps.expires_at.year > 2200 and ps.context_length > 0  # -1: forever


# --- errors --------------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda c: c.generate(model="no-such-model", prompt="hi"),
    lambda c: c.chat(model="no-such-model", messages=[{"role": "user", "content": "hi"}]),
    lambda c: c.show("no-such-model"),
    lambda c: c.embed(model="no-such-model", input="hi"),
    lambda c: c.copy("no-such-model", "other"),
])
def test_unknown_model_is_404(client, call):
    with pytest.raises(ollama.ResponseError) as e:
        call(client)
    assert e.value.status_code == 404 and "no-such-model" in e.value.error


@pytest.mark.parametrize("body, words", [
    ({"prompt": "hi", "options": {"temperature": "hot"}}, "temperature"),
    ({"prompt": "hi", "options": {"num_ctx": -5}}, "num_ctx"),
    ({"prompt": "hi", "options": {"top_p": 3}}, "top_p"),
    ({"prompt": "hi", "format": "yaml"}, "format"),
    ({"prompt": "hi", "images": ["aGVsbG8="]}, "images"),
    ({"prompt": "hi", "template": "{{ .Prompt }}"}, "template"),
    ({"prompt": "hi", "keep_alive": "soon"}, "duration"),
    ({"prompt": 5}, "prompt"),
])
def test_bad_generate_input_is_400(daemon, body, words):
    r = httpx.post(f"{daemon.url}/api/generate", json={"model": MODEL, "stream": False, **body}, timeout=60)
    assert r.status_code == 400 and words in r.json()["error"]


def test_bad_chat_input_is_400(daemon):
    for messages in ([{"role": "robot", "content": "hi"}], [{"role": "user", "content": "hi", "images": ["eA=="]}]):
        r = httpx.post(f"{daemon.url}/api/chat", json={"model": MODEL, "messages": messages}, timeout=60)
        assert r.status_code == 400 and set(r.json()) == {"error"}


def test_root_and_version(daemon):
    assert httpx.get(daemon.url + "/").text == "localrun is running"
    assert httpx.head(daemon.url + "/").status_code == 200
    assert httpx.get(daemon.url + "/api/version").json()["version"]


def test_curl_style_body_and_default_streaming(daemon):
    """`curl URL -d '{...}'` sends a form content type; Ollama reads it as JSON, and streams by default."""
    body = json.dumps({"model": MODEL, "prompt": "Hi", "options": {"num_predict": 2}})
    r = httpx.post(f"{daemon.url}/api/generate", content=body, timeout=60,
                   headers={"Content-Type": "application/x-www-form-urlencoded"})
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    assert len(lines) >= 2 and lines[-1]["done"] is True and lines[-1]["eval_count"] == 2


def test_error_after_streaming_began_arrives_as_a_final_line(client, daemon):
    stream = client.generate(model=MODEL, prompt="Write a very long story about the sea.", stream=True,
                             options={"num_predict": 400})
    assert not next(stream).done
    for pid in _runner_pids(daemon.proc.pid):
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(ollama.ResponseError):
        for _ in stream:
            pass
    assert client.generate(model=MODEL, prompt="Hi", options={"num_predict": 1}).done  # a fresh runner


def _runner_pids(parent: int) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"localrun.runner" in cmdline:
            pids.append(int(proc.name))
    assert pids, "the daemon has no runner child"
    return pids


@pytest.mark.parametrize("ref", ["/etc/passwd.gguf", "./model.gguf", "../x.gguf"])
def test_pull_over_http_refuses_local_paths(daemon, ref):
    """An HTTP client must not make the daemon import files from its own disk."""
    r = httpx.post(f"{daemon.url}/api/pull", json={"model": ref}, timeout=30)
    assert r.status_code == 400 and "local path" in r.json()["error"]
