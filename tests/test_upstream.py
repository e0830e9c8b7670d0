"""Upstream backends on loopback: two extra localrun daemons stand in for vLLM replicas of the model
`remote-smollm` behind a front daemon, which also serves the bundled model itself. Every dialect
reaches the replicas through the front; requests spread over both; when one is killed the other
answers, and when both are gone the answer is a 502 naming the backend while the local model works.

The tests run in file order: the last ones kill the replicas."""

from __future__ import annotations

import json
import time

import anthropic
import httpx
import jsonschema
import ollama
import openai
import pytest

from localrun.api_types import ListedModel, ShowResponse
from tests.cli import run_cli
from tests.daemon import MODEL, give_bundled_model, start_daemon
from tests.test_anthropic_api import anthropic_tool
from tests.test_thinking_api import ASK, BUDGET
from tests.test_thinking_api import TEMPLATE as THINKING_TEMPLATE
from tests.tiny_gguf import with_chat_template
from tests.tool_fixtures import ADD

REMOTE = "remote-smollm"
THINKER = "remote-thinker"  # SmolLM2 under DeepSeek R1's chat template (tests/test_thinking_api.py)
FRONT_KEY, UPSTREAM_KEY = "front-secret", "upstream-secret"
GREEDY = {"temperature": 0, "max_tokens": 12}
HELLO = [{"role": "user", "content": "Name a colour."}]


def _replica(home, thinker):
    """A daemon serving the bundled model under the name `remote-smollm`, and a thinking model, behind an
    API key."""
    home.mkdir(parents=True)
    give_bundled_model(home)
    env = {"LOCALRUN_HOME": str(home)}
    run_cli("cp", MODEL, REMOTE, env=env).check_returncode()
    run_cli("pull", str(thinker), "--quiet", env=env).check_returncode()
    return start_daemon(home, {"LOCALRUN_API_KEY": UPSTREAM_KEY}, pull=False)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory, smollm2_path):
    thinker = with_chat_template(smollm2_path, tmp_path_factory.mktemp("thinker") / f"{THINKER}.gguf",
                                 THINKING_TEMPLATE.read_text())
    started = [_replica(tmp_path_factory.mktemp("replica") / "home", thinker) for _ in range(2)]
    yield started
    for d in started:
        d.stop()


@pytest.fixture(scope="module")
def front(tmp_path_factory, replicas):
    home = tmp_path_factory.mktemp("front")
    (home / "config").mkdir()
    urls = ", ".join(f'"{r.url}/v1"' for r in replicas)
    (home / "config" / "backends.toml").write_text(
        f'[backends.gpu]\nurl = [{urls}]\nmodels = ["{REMOTE}", "{THINKER}"]\napi_key_env = "UPSTREAM_KEY"\n'
        'health_interval = "1s"\nconnect_timeout = "2s"\n')
    d = start_daemon(home, {"LOCALRUN_API_KEY": FRONT_KEY, "UPSTREAM_KEY": UPSTREAM_KEY})
    yield d
    d.stop()


def _openai(d):
    return openai.OpenAI(base_url=f"{d.url}/v1", api_key=FRONT_KEY, max_retries=0)


def _chat(d, model=REMOTE, key=FRONT_KEY, messages=HELLO):
    return httpx.post(f"{d.url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "messages": messages, **GREEDY}, timeout=300)


def _served(replicas) -> list[int]:
    """How many chat requests each replica has answered (its access log, written once an answer ended)."""
    return [sum("POST /v1/chat/completions" in line for line in r.log.read_text().splitlines()) for r in replicas]


def _settled(replicas) -> list[int]:
    """`_served` once no line has been added for half a second: an earlier test's answer can end at the
    client a moment before its replica writes the line, and would be counted as a new request."""
    counts = _served(replicas)
    while True:
        time.sleep(0.5)
        now = _served(replicas)
        if now == counts:
            return counts
        counts = now


def _count_after(replicas, before: list[int], total: int) -> list[int]:
    """The new requests per replica, once `total` of them are in the logs."""
    deadline = time.monotonic() + 10
    while True:
        new = [a - b for a, b in zip(_served(replicas), before)]
        if sum(new) >= total or time.monotonic() > deadline:
            return new
        time.sleep(0.1)


def test_upstream_model_is_listed_beside_local_ones_and_marked_with_its_backend(front):
    headers = {"Authorization": f"Bearer {FRONT_KEY}"}
    models = {m["id"]: m for m in httpx.get(f"{front.url}/v1/models", headers=headers).json()["data"]}
    assert models[REMOTE]["owned_by"] == "backend:gpu" and models["smollm2:135m"]["owned_by"] == "localrun"
    tags = {m["name"]: m for m in httpx.get(f"{front.url}/api/tags", headers=headers).json()["models"]}
    assert tags[REMOTE]["remote_host"] == "backend:gpu" and "remote_host" not in tags["smollm2:135m"]
    assert httpx.get(f"{front.url}/v1/models/{REMOTE}", headers=headers).json()["owned_by"] == "backend:gpu"
    anthropic_headers = {**headers, "anthropic-version": "2023-06-01"}
    page = httpx.get(f"{front.url}/v1/models", headers=anthropic_headers).json()
    assert {REMOTE, "smollm2:135m"} <= {m["id"] for m in page["data"]}
    info = httpx.get(f"{front.url}/v1/models/{REMOTE}", headers=anthropic_headers).json()
    assert (info["type"], info["id"], info["created_at"]) == ("model", REMOTE, "1970-01-01T00:00:00Z")


def test_openai_chat_through_the_front_gives_the_replicas_greedy_answer_with_usage(front, replicas):
    through = _chat(front).json()
    direct = _chat(replicas[0], key=UPSTREAM_KEY).json()
    assert through["choices"][0]["message"]["content"] == direct["choices"][0]["message"]["content"] != ""
    assert through["usage"]["prompt_tokens"] == direct["usage"]["prompt_tokens"] > 0
    assert through["usage"]["completion_tokens"] == direct["usage"]["completion_tokens"] > 0
    assert through["timings"]["predicted_n"] > 0


def test_an_upstream_model_needs_the_fronts_api_key(front):
    response = _chat(front, key="wrong")
    assert response.status_code == 401


def test_openai_stream_passes_chunks_through_and_ends_with_usage(front):
    stream = _openai(front).chat.completions.create(model=REMOTE, messages=HELLO, stream=True,
                                                    stream_options={"include_usage": True}, **GREEDY)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert text and chunks[-1].usage.completion_tokens > 0


def test_openai_completions_reach_the_upstream(front):
    done = _openai(front).completions.create(model=REMOTE, prompt="The capital of France is", **GREEDY)
    assert done.choices[0].text and done.usage.completion_tokens > 0


def test_anthropic_messages_reach_an_openai_only_upstream(front):
    client = anthropic.Anthropic(base_url=front.url, api_key=FRONT_KEY, max_retries=0)
    message = client.messages.create(model=REMOTE, max_tokens=12, messages=HELLO, extra_body={"temperature": 0})
    assert message.content[0].text and message.usage.output_tokens > 0
    with client.messages.stream(model=REMOTE, max_tokens=12, messages=HELLO, extra_body={"temperature": 0}) as stream:
        assert "".join(stream.text_stream) == message.content[0].text


def test_a_tool_call_crosses_from_anthropic_to_an_openai_upstream_and_back(front):
    """The Claude Code path: Anthropic tools in, OpenAI tools upstream, tool_calls back as tool_use."""
    client = anthropic.Anthropic(base_url=front.url, api_key=FRONT_KEY, max_retries=0)
    message = client.messages.create(model=REMOTE, max_tokens=80, tools=[anthropic_tool(ADD)], tool_choice={"type": "tool", "name": "add"},
                                     messages=[{"role": "user", "content": "What is 2 plus 3?"}],
                                     extra_body={"temperature": 0})
    [use] = message.content
    assert (use.type, use.name, message.stop_reason) == ("tool_use", "add", "tool_use")
    jsonschema.validate(use.input, ADD["parameters"])


def test_ollama_chat_reaches_the_upstream_streamed_and_not(front):
    client = ollama.Client(host=front.url, headers={"Authorization": f"Bearer {FRONT_KEY}"})
    options = {"temperature": 0, "num_predict": 12}
    whole = client.chat(model=REMOTE, messages=HELLO, options=options)
    parts = list(client.chat(model=REMOTE, messages=HELLO, options=options, stream=True))
    assert whole.message.content and "".join(p.message.content for p in parts) == whole.message.content
    assert parts[-1].eval_count > 0 and parts[-1].prompt_eval_count > 0
    assert client.generate(model=REMOTE, prompt="Say hi.", options=options).response
    assert client.show(REMOTE).modelfile.startswith(f"# {REMOTE} is served by backend gpu")


def test_an_upstream_models_thinking_reaches_each_dialect_as_its_own_field(front, replicas):
    """The replicas split the thought out (their own parser, as vLLM's reasoning parser does); the front
    passes the switch and the budget up and the thought back, as reasoning_content and Ollama's thinking:
    each answer is the one a replica gives when asked directly."""
    request = dict(model=THINKER, messages=ASK, temperature=0, max_tokens=30, extra_body={"reasoning_budget": BUDGET})
    answer = _openai(front).chat.completions.create(**request)
    message = answer.choices[0].message
    assert message.reasoning_content and message.content and "think>" not in message.reasoning_content
    assert BUDGET <= answer.usage.completion_tokens_details.reasoning_tokens < answer.usage.completion_tokens
    direct = openai.OpenAI(base_url=f"{replicas[0].url}/v1", api_key=UPSTREAM_KEY).chat.completions.create(**request)
    assert (message.reasoning_content, message.content) == (direct.choices[0].message.reasoning_content,
                                                             direct.choices[0].message.content)

    def ollama_client(d, key: str) -> ollama.Client:
        return ollama.Client(host=d.url, headers={"Authorization": f"Bearer {key}"}, timeout=120)

    options = {"temperature": 0, "num_predict": 30, "reasoning_budget": BUDGET}
    pieces = list(ollama_client(front, FRONT_KEY).chat(model=THINKER, messages=ASK, think=True, options=options,
                                                       stream=True))
    alone = ollama_client(replicas[0], UPSTREAM_KEY).chat(model=THINKER, messages=ASK, think=True, options=options)
    assert alone.message.thinking and alone.message.content
    assert "".join(p.message.thinking or "" for p in pieces) == alone.message.thinking
    assert "".join(p.message.content or "" for p in pieces) == alone.message.content
    off = ollama_client(front, FRONT_KEY).chat(model=THINKER, messages=ASK, think=False,
                                               options={"temperature": 0, "num_predict": 12}).message
    assert off.content and not off.thinking


def test_conversations_spread_over_both_replicas(front, replicas):
    before = _settled(replicas)
    for i in range(4):
        assert _chat(front, messages=[{"role": "user", "content": f"Count to {i + 2}."}]).status_code == 200
    assert _count_after(replicas, before, 4) == [2, 2]


def test_the_turns_of_one_conversation_stay_on_the_replica_that_holds_its_prefix(front, replicas):
    before = _settled(replicas)
    turns = [{"role": "user", "content": "Tell me about cats."}]
    for _ in range(3):
        answer = _chat(front, messages=turns).json()["choices"][0]["message"]["content"]
        turns += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
    assert sorted(_count_after(replicas, before, 3)) == [0, 3]


def test_doctor_checks_each_replica_of_the_backend(front):
    out = run_cli("doctor", "--json", env={**front.env(), "UPSTREAM_KEY": UPSTREAM_KEY}, timeout=120)
    (gpu,) = json.loads(out.stdout)["backends"]
    assert [r["ok"] for r in gpu["replicas"]] == [True, True] and gpu["api_key_set"] is True
    assert all("remote-smollm:latest" in r["models"] for r in gpu["replicas"])


def test_an_upstream_models_tags_and_show_round_trip_through_the_shared_types(front):
    headers = {"Authorization": f"Bearer {FRONT_KEY}"}
    tags = httpx.get(f"{front.url}/api/tags", headers=headers, timeout=30).json()["models"]
    entry = next(m for m in tags if m["name"] == REMOTE)
    assert ListedModel.from_dict(entry).to_dict() == entry and entry["remote_host"] == "backend:gpu"
    shown = httpx.post(f"{front.url}/api/show", json={"model": REMOTE}, headers=headers, timeout=30).json()
    assert ShowResponse.from_dict(shown).to_dict() == shown and shown["remote_host"] == "backend:gpu"


def test_an_operation_the_upstream_api_lacks_is_a_clear_400(front):
    response = httpx.post(f"{front.url}/v1/embeddings", headers={"Authorization": f"Bearer {FRONT_KEY}"},
                          json={"model": REMOTE, "input": "hi"}, timeout=30)
    assert response.status_code in (400, 404) and "gpu" in response.text or REMOTE in response.text
    response = httpx.post(f"{front.url}/api/perplexity", headers={"Authorization": f"Bearer {FRONT_KEY}"},
                          json={"model": REMOTE, "text": "hi " * 40, "ctx": 16}, timeout=30)
    assert response.status_code == 400 and "perplexity is not available" in response.text


def _admitted(replica) -> int:
    """Requests the replica's model holds right now (its /metrics)."""
    text = httpx.get(f"{replica.url}/metrics", headers={"Authorization": f"Bearer {UPSTREAM_KEY}"}).text
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("localrun_requests_admitted{"))


def test_a_stream_cut_by_its_replica_dying_ends_with_an_error_and_is_not_retried(front, replicas):
    body = {"model": REMOTE, "messages": [{"role": "user", "content": "Write a long story."}], "stream": True,
            "max_tokens": 400, "ignore_eos": True, "temperature": 0}
    with httpx.stream("POST", f"{front.url}/v1/chat/completions", json=body, timeout=300,
                      headers={"Authorization": f"Bearer {FRONT_KEY}"}) as response:
        lines = response.iter_lines()
        next(line for line in lines if '"content":"' in line.replace(" ", "") and '"content":""' not in line.replace(" ", ""))
        (serving,) = [r for r in replicas if _admitted(r) > 0]
        serving.proc.kill()
        serving.proc.wait()
        rest = [line for line in lines if line.startswith("data:")]
    errors = [json.loads(line[5:]) for line in rest if '"error"' in line]
    assert errors and "backend gpu" in errors[-1]["error"]["message"] and "not retried" in errors[-1]["error"]["message"]


def test_with_one_replica_killed_the_other_answers_every_request(front, replicas):
    for _ in range(3):
        response = _chat(front)
        assert response.status_code == 200, response.text


def test_both_killed_every_dialect_gets_a_502_naming_the_backend_and_local_models_still_work(front, replicas):
    for replica in replicas:
        replica.proc.kill()
        replica.proc.wait()
    headers = {"Authorization": f"Bearer {FRONT_KEY}", "x-api-key": FRONT_KEY}
    calls = {
        "openai": ("/v1/chat/completions", {"model": REMOTE, "messages": HELLO}),
        "anthropic": ("/v1/messages", {"model": REMOTE, "messages": HELLO, "max_tokens": 5}),
        "ollama": ("/api/chat", {"model": REMOTE, "messages": HELLO}),
    }
    for dialect, (path, body) in calls.items():
        response = httpx.post(front.url + path, headers=headers, json=body, timeout=30)
        assert response.status_code == 502, (dialect, response.text)
        error = response.json()["error"]
        message = error if isinstance(error, str) else error["message"]
        assert "backend gpu" in message, (dialect, message)
    assert _chat(front, model=MODEL).status_code == 200
    assert httpx.get(f"{front.url}/health").json()["status"] == "ok"


def test_list_shows_the_declared_upstream_model_with_its_backend(front):
    out = run_cli("list", "--json", env=front.env(), timeout=60)
    rows = {row["name"]: row for row in json.loads(out.stdout)}
    assert rows[REMOTE]["backend"] == "gpu"
