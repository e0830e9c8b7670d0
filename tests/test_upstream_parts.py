"""The upstream package's pure parts from plain data: backends.toml, the OpenAI wire both ways, and the
replica choice; and `localrun backend add/list/rm` editing the file through the real CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from localrun.errors import UsageError
from localrun.native import Delta, Done, GenerateRequest
from localrun.sampling import SamplingParams
from localrun.upstream import backends, wire
from localrun.upstream.replicas import AFFINITY_SLACK, NoReplica, Replica, choose, conversation_key
from tests.cli import run_cli


# --- backends.toml --------------------------------------------------------------------------------

def test_a_backend_table_is_parsed_with_its_replicas_and_limits():
    b = backends.parse("gpu", {"url": ["http://a:8000/v1/", "http://b:8000"], "models": ["llama3:70b"],
                               "api_key_env": "VLLM_KEY", "timeout": "2m", "max_concurrent": 8})
    assert b.urls == ("http://a:8000/v1", "http://b:8000/v1") and b.models == ("llama3:70b",)
    assert (b.timeout, b.connect_timeout, b.max_concurrent) == (120.0, 5.0, 8)


@pytest.mark.parametrize("table, says", [
    ({"url": "ftp://a"}, "url"),
    ({"url": "http://user:pw@a/v1"}, "credentials"),
    ({}, "url"),
    ({"url": "http://a", "api_key_env": "sk-abc123"}, "api_key_env"),
    ({"url": "http://a", "timeout": "soon"}, "timeout"),
    ({"url": "http://a", "max_concurrent": -1}, "max_concurrent"),
    ({"url": "http://a", "modles": []}, "unknown key"),
    ({"url": "http://a", "models": "llama"}, "models"),
])
def test_a_bad_backend_table_is_one_error_naming_the_backend_and_the_key(table, says):
    with pytest.raises(UsageError, match=says) as e:
        backends.parse("gpu", table)
    assert "'gpu'" in e.value.message


def test_the_file_round_trips_and_a_key_is_read_from_the_environment_only(tmp_path, monkeypatch):
    path = tmp_path / "backends.toml"
    with backends.editing(path) as f:
        f.backends["gpu"] = backends.parse("gpu", {"url": "http://a:1/v1", "api_key_env": "K", "timeout": 30})
    monkeypatch.setenv("K", "sk-secret")
    loaded = backends.load(path).backends["gpu"]
    assert loaded.headers() == {"Authorization": "Bearer sk-secret"} and loaded.timeout == 30
    assert "sk-secret" not in path.read_text() and "sk-secret" not in json.dumps(loaded.summary())


def test_a_broken_file_is_one_error_naming_it(tmp_path):
    path = tmp_path / "backends.toml"
    path.write_text("[backends.gpu\nurl=1")
    with pytest.raises(UsageError, match="backends.toml"):
        backends.load(path)


def test_backend_commands_edit_the_file_and_list_never_prints_a_key(localrun_home):
    env = {"VLLM_KEY": "sk-very-secret"}
    added = run_cli("backend", "add", "gpu", "http://127.0.0.1:9/v1", "-m", "big", "--api-key-env", "VLLM_KEY", env=env)
    assert added.returncode == 0, added.stderr
    again = run_cli("backend", "add", "gpu", "http://127.0.0.1:9/v1", env=env)
    assert again.returncode == 2 and again.stderr.startswith("error: backend 'gpu' exists")
    listed = run_cli("backend", "list", "--json", env=env)
    assert json.loads(listed.stdout)[0]["api_key_set"] is True and "sk-very-secret" not in listed.stdout
    models = run_cli("list", "--json", env=env)
    assert {"name": "big", "backend": "gpu"} in json.loads(models.stdout)
    doctor = run_cli("doctor", "--json", env=env)
    (replica,) = json.loads(doctor.stdout)["backends"][0]["replicas"]
    assert replica["ok"] is False and "sk-very-secret" not in doctor.stdout
    assert run_cli("backend", "rm", "gpu").returncode == 0
    gone = run_cli("backend", "rm", "gpu")
    assert gone.returncode == 1 and "no backend 'gpu'" in gone.stderr


# --- the wire -----------------------------------------------------------------------------------

def test_a_chat_request_becomes_an_openai_body_with_tools_and_json_arguments():
    request = GenerateRequest(
        model="m", messages=[{"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}]}],
        tools=[{"name": "add", "description": "", "parameters": {"type": "object"}}], tool_choice={"name": "add"},
        sampling=SamplingParams(temperature=0, max_tokens=5, stop=["\n"], seed=1))
    path, body = wire.request_body(request, "up-id")
    assert path == "/chat/completions" and body["model"] == "up-id" and body["stream"] is True
    assert body["messages"][0]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
    assert body["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    assert (body["temperature"], body["max_tokens"], body["stop"], body["seed"]) == (0, 5, ["\n"], 1)
    assert "repeat_penalty" not in body and "n" not in body and "parallel_tool_calls" not in body
    assert wire.request_body(replace(request, parallel_tool_calls=False), "up-id")[1]["parallel_tool_calls"] is False


def test_a_prompt_becomes_a_completions_body():
    path, body = wire.request_body(GenerateRequest(model="m", prompt="Once", json_mode=True), "m")
    assert path == "/completions" and body["prompt"] == "Once" and "messages" not in body


def test_a_stream_gives_deltas_as_they_come_and_one_done_with_usage_and_tool_calls():
    reader = wire.StreamReader()
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
        {"choices": [{"index": 0, "delta": {"content": "lo"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": '{"x"'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 2}"}}]}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 3}}},
    ]
    events = [e for chunk in chunks for e in reader.feed(chunk)]
    assert [e.text for e in events] == ["Hel", "lo"] and all(isinstance(e, Delta) for e in events)
    (done,) = reader.finish(first_ms=10.0, last_ms=30.0)
    assert isinstance(done, Done) and done.text == "Hello" and done.finish_reason == "tool_calls"
    assert (done.tool_calls[0].name, done.tool_calls[0].arguments) == ("f", {"x": 2})
    t = done.timings
    assert (t.prompt_tokens, t.cached_tokens, t.generated_tokens, t.prompt_ms, t.generation_ms) == (7, 3, 4, 10.0, 20.0)


@pytest.mark.parametrize("think, effort, budget, sent", [
    (None, None, None, {}),
    (False, None, None, {"chat_template_kwargs": {"enable_thinking": False}}),
    (True, "high", 64, {"chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "high",
                        "reasoning_budget": 64}),
])
def test_thinking_switch_effort_and_budget_go_upstream_as_vllm_and_llama_server_read_them(think, effort, budget, sent):
    request = GenerateRequest(model="m", messages=[{"role": "user", "content": "hi"}], think=think,
                              reasoning_effort=effort, reasoning_budget=budget)
    _, body = wire.request_body(request, "m")
    assert {k: body[k] for k in ("chat_template_kwargs", "reasoning_effort", "reasoning_budget") if k in body} == sent


def test_an_upstreams_thinking_comes_back_as_reasoning_under_either_name():
    reader = wire.StreamReader()
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "Let me"}}]},
        {"choices": [{"index": 0, "delta": {"reasoning": " think."}}]},  # vLLM's newer field name
        {"choices": [{"index": 0, "delta": {"content": "Paris."}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6,
                                  "completion_tokens_details": {"reasoning_tokens": 4}}},
    ]
    events = [e for chunk in chunks for e in reader.feed(chunk)]
    assert [(e.reasoning, e.text) for e in events] == [("Let me", ""), (" think.", ""), ("", "Paris.")]
    (done,) = reader.finish(first_ms=1.0, last_ms=2.0)
    assert (done.reasoning, done.text, done.timings.reasoning_tokens) == ("Let me think.", "Paris.", 4)


def test_several_choices_count_their_own_thinking_and_an_upstream_without_the_count_is_counted_too():
    """Usage counts every choice together, so with n > 1 each choice counts its own chunks, as it does
    its answer's; an upstream that streams thinking without `reasoning_tokens` is counted the same way."""
    reader = wire.StreamReader()
    for chunk in [
        {"choices": [{"index": 0, "delta": {"reasoning_content": "Hm"}}, {"index": 1, "delta": {"content": "A"}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "."}}, {"index": 1, "delta": {"content": "B"}}]},
        {"choices": [{"index": 0, "delta": {"content": "C"}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": 2}}},
    ]:
        reader.feed(chunk)
    first, second = reader.finish(first_ms=1.0, last_ms=2.0)
    assert (first.timings.reasoning_tokens, first.timings.generated_tokens) == (2, 3)
    assert (second.timings.reasoning_tokens, second.timings.generated_tokens) == (0, 2)
    alone = wire.StreamReader()
    alone.feed({"choices": [{"index": 0, "delta": {"reasoning_content": "Hm"}}]})
    alone.feed({"choices": [{"index": 0, "delta": {"content": "Yes."}, "finish_reason": "stop"}],
                "usage": {"completion_tokens": 2}})
    assert alone.finish(first_ms=1.0, last_ms=2.0)[0].timings.reasoning_tokens == 1


def test_llama_server_timings_are_taken_when_the_upstream_sends_them():
    reader = wire.StreamReader()
    reader.feed({"choices": [{"index": 0, "text": "a", "finish_reason": "length"}], "usage": {"prompt_tokens": 2},
                 "timings": {"prompt_ms": 1.5, "predicted_ms": 9.0, "cache_n": 1}})
    (done,) = reader.finish(100.0, 200.0)
    assert (done.finish_reason, done.timings.prompt_ms, done.timings.generation_ms, done.timings.cached_tokens) == (
        "length", 1.5, 9.0, 1)


def test_sse_lines_other_than_data_and_done_are_skipped():
    assert wire.sse_data('data: {"a": 1}') == {"a": 1}
    assert wire.sse_data("data: [DONE]") is None and wire.sse_data(": keep-alive") is None


# --- choosing a replica ---------------------------------------------------------------------------

def _replicas(*in_flight: int, limit: int = 0) -> list[Replica]:
    b = backends.Backend("gpu", ("http://a/v1",), max_concurrent=limit)
    return [Replica(b, f"http://r{i}/v1", in_flight=n, last_used=float(i)) for i, n in enumerate(in_flight)]


def test_the_least_busy_replica_is_chosen_and_a_tie_goes_to_the_one_used_longest_ago():
    rs = _replicas(3, 1, 1)
    assert choose(rs, 0.0, set()) is rs[1]


def test_a_conversation_stays_on_its_replica_unless_it_is_much_busier():
    rs = _replicas(0, AFFINITY_SLACK)
    assert choose(rs, 0.0, set(), preferred=rs[1]) is rs[1]
    rs[1].in_flight += 1
    assert choose(rs, 0.0, set(), preferred=rs[1]) is rs[0]


def test_an_open_circuit_is_skipped_until_its_cooldown_ends_and_then_tried_again():
    rs = _replicas(0, 5)
    rs[0].failed(now=100.0, reason="refused")
    assert choose(rs, 100.5, set()) is rs[1]
    assert choose(rs, 101.0, set()) is rs[0]
    rs[0].failed(now=101.0, reason="refused")
    assert choose(rs, 102.5, set()) is rs[1]  # the second failure in a row waits twice as long


def test_no_replica_says_whether_all_are_down_or_all_are_full():
    rs = _replicas(0, 0)
    with pytest.raises(NoReplica) as down:
        choose(rs, 0.0, {id(r) for r in rs})
    assert not down.value.busy
    with pytest.raises(NoReplica) as full:
        choose(_replicas(2, 2, limit=2), 0.0, set())
    assert full.value.busy


def test_the_turns_of_a_conversation_share_a_key_and_other_conversations_do_not():
    first = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    later = first + [{"role": "assistant", "content": "yo"}, {"role": "user", "content": "more"}]
    other = [{"role": "system", "content": "s"}, {"role": "user", "content": "bye"}]
    assert conversation_key("m", first, None) == conversation_key("m", later, None)
    assert conversation_key("m", first, None) != conversation_key("m", other, None)


def test_a_model_served_by_two_backends_is_listed_once_with_both_and_routes_to_all_their_replicas():
    from localrun.upstream.pool import Upstreams

    a = backends.parse("a", {"url": ["http://a1/v1", "http://a2/v1"], "models": ["llama:70b"]})
    b = backends.parse("b", {"url": "http://b1/v1"})  # discovers its models
    upstreams = Upstreams([a, b])
    upstreams.replicas[2].models = ("llama:70b", "qwen:latest")
    listed = {m.name: (m.backends, m.declared) for m in upstreams.models()}
    assert listed == {"llama:70b": (("a", "b"), True), "qwen:latest": (("b",), False)}
    assert [r.url for r in upstreams.route("llama:70b").replicas] == ["http://a1/v1", "http://a2/v1", "http://b1/v1"]
    assert upstreams.route("qwen").model.upstream_id == "qwen:latest" and upstreams.route("nope") is None


def test_a_health_check_opens_the_circuit_of_a_failing_replica_and_closes_it_when_it_answers_again():
    """HTTP swapped at the transport (the one seam Upstreams takes): /models fails, then answers."""
    import asyncio

    import httpx

    from localrun.upstream.pool import Upstreams

    answers = iter([httpx.Response(503), httpx.Response(200, json={"data": [{"id": "m1"}]})])
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return next(answers)

    b = backends.parse("b", {"url": "http://b1/v1", "api_key_env": "B_KEY"})
    upstreams = Upstreams([b], transport=httpx.MockTransport(handler))
    replica = upstreams.replicas[0]

    async def run() -> None:
        await upstreams.check(replica)
        assert replica.state == "down" and "503" in replica.last_error and upstreams.models() == []
        await upstreams.check(replica)
        assert replica.state == "up" and replica.models == ("m1",) and replica.available(0.0)
        await upstreams.close()

    asyncio.run(run())
    assert str(seen[0].url) == "http://b1/v1/models"
