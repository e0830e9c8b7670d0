"""Fuzzing every route of a real daemon from its own OpenAPI schema (schemathesis), in a CI-sized
budget: no answer is a 5xx, none hangs, and the daemon still serves at the end.

The fuzzed daemon has a small context and LOCALRUN_MAX_TOKENS, so a generated request that does
reach the model stays short; half of the cases that name a model are pointed at the real one, so
the generation paths are fuzzed too, not only the "model not found" answer.
"""

from __future__ import annotations

import itertools

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings

from tests.daemon import start_daemon

MODEL = "smollm2:135m"
EXCLUDED = {
    ("POST", "/api/pull"): "downloads from the network (there is none in CI) or imports files from the daemon's disk",
    ("DELETE", "/api/delete"): "deletes the model every other route needs; covered by the Ollama API tests",
}
CALL_TIMEOUT_S = 30  # "no hang": one answer must come within this
# The CI budget: 8 generated cases per route with a fixed seed, plus schemathesis' coverage phase
# (boundary values of every field, and unexpected methods): about 45 s on 2 busy cores. The coverage
# phase found a perplexity `batch` at its upper bound answering 503; bounds are real limits now.
SEED = 7
MAX_EXAMPLES = 8


@pytest.fixture(scope="module")
def fuzz_daemon(tmp_path_factory):
    d = start_daemon(tmp_path_factory.mktemp("fuzz-home"), {
        "LOCALRUN_CTX_SIZE": "256", "LOCALRUN_MAX_TOKENS": "8", "LOCALRUN_PARALLEL": "2", "LOCALRUN_MAX_QUEUE": "4",
    })
    yield d
    d.stop()


@pytest.fixture(scope="module")
def api_schema(fuzz_daemon):
    config = schemathesis.config.SchemathesisConfig.from_dict({
        "seed": SEED, "generation": {"max-examples": MAX_EXAMPLES}, "phases": {"coverage": {"enabled": True}}})
    return schemathesis.openapi.from_url(f"{fuzz_daemon.url}/openapi.json", config=config)


schema = schemathesis.pytest.from_fixture("api_schema")
for _method, _path in EXCLUDED:
    schema = schema.exclude(method=_method, path=_path)
_turn = itertools.count()


def _aim_at_the_real_model(case) -> None:
    if isinstance(case.body, dict) and isinstance(case.body.get("model"), str) and next(_turn) % 2:
        case.body["model"] = MODEL


@schema.parametrize()
@settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
def test_no_route_answers_5xx_or_hangs(case, fuzz_daemon):
    _aim_at_the_real_model(case)
    response = case.call(base_url=fuzz_daemon.url, timeout=CALL_TIMEOUT_S)
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}\nbody: {case.body!r}"[:2000])


def test_excluded_routes_exist(fuzz_daemon):
    """The exclusions name real routes (a renamed route must not silently escape the fuzzer)."""
    paths = httpx.get(f"{fuzz_daemon.url}/openapi.json", timeout=10).json()["paths"]
    for method, path in EXCLUDED:
        assert method.lower() in paths.get(path, {}), (method, path)


# What fuzzing found, kept as regression tests.


def test_unknown_token_ids_are_refused_not_fatal_to_the_runner(fuzz_daemon):
    """llama.cpp aborted (std::out_of_range) on a token id past the vocabulary, killing the runner."""
    for tokens in ([99_999_999], [-1], [2**63 - 1], [10**30]):
        response = httpx.post(f"{fuzz_daemon.url}/api/detokenize", json={"model": MODEL, "tokens": tokens}, timeout=30)
        assert response.status_code == 400 and "vocabulary" in response.json()["error"], response.text
    ps = httpx.get(f"{fuzz_daemon.url}/api/ps", timeout=10).json()["models"]
    pid = [line for line in httpx.get(f"{fuzz_daemon.url}/metrics", timeout=10).text.splitlines()
           if line.startswith("localrun_model_info")]
    assert len(ps) == 1 and len(pid) == 1
    ok = httpx.post(f"{fuzz_daemon.url}/api/detokenize", json={"model": MODEL, "tokens": [1, 2]}, timeout=30)
    assert ok.status_code == 200
    assert pid == [line for line in httpx.get(f"{fuzz_daemon.url}/metrics", timeout=10).text.splitlines()
                   if line.startswith("localrun_model_info")], "the runner was replaced"


def test_a_context_beyond_the_model_is_refused_at_once(fuzz_daemon):
    """num_ctx=10**9 made llama.cpp try for over a minute to allocate it, then answered 500."""
    for path, body in [("/v1/chat/completions", {"num_ctx": 10**9}), ("/api/generate", {"options": {"num_ctx": 10**8}})]:
        response = httpx.post(f"{fuzz_daemon.url}{path}", timeout=10, json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "prompt": "hi", **body})
        assert response.status_code == 400, response.text
        assert "at most 8192 tokens of context" in response.text


def test_the_daemon_still_serves_after_fuzzing(fuzz_daemon):
    assert fuzz_daemon.proc.poll() is None
    answer = httpx.post(f"{fuzz_daemon.url}/v1/chat/completions", timeout=60,
                        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                              "num_ctx": 256})  # a fuzzed request may have reloaded it with a tiny context
    assert answer.status_code == 200, answer.text
