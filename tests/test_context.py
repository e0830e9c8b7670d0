"""The context policy on a real daemon: a model loads with its trained length as far as the memory
budget allows, /api/ps says what it got, and a prompt over it or a context over the budget is a 400
that says why and how to change it. (The policy's arithmetic is table-tested in tests/test_manager.py.)"""

from __future__ import annotations

import httpx
import pytest

from tests.daemon import start_daemon

# SmolLM2 135M: 98 MB of weights, 23040 bytes of f16 KV cache per token, for the one slot and again for
# the scoring context, each with 256 more for its first cells in prefix mode (`auto` on CPUs), and 47 MB
# for the embeddings context (2048 tokens). 256 MB leaves room for 2396 tokens, 2140 past the prefix,
# so the policy picks 2048 of its trained 8192.
BUDGET = {"LOCALRUN_MEMORY_BUDGET": "256MB", "LOCALRUN_PARALLEL": "1"}


@pytest.fixture(scope="module")
def tight(tmp_path_factory):
    d = start_daemon(tmp_path_factory.mktemp("context-home"), BUDGET)
    yield d
    d.stop()


def test_a_model_gets_the_context_its_memory_budget_holds_and_ps_says_so(tight):
    answer = httpx.post(f"{tight.url}/v1/chat/completions", timeout=120, json={
        "model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}).json()
    assert answer["usage"]["completion_tokens"] == 1
    [loaded] = httpx.get(f"{tight.url}/api/ps", timeout=10).json()["models"]
    assert (loaded["context_length"], loaded["parallel"]) == (2048, 1)


def test_a_prompt_over_the_context_is_a_400_that_says_how_to_raise_it(tight):
    long = "word " * 3000
    for route, body, error in [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": long}]}, lambda r: r["error"]["message"]),
        ("/api/chat", {"messages": [{"role": "user", "content": long}], "stream": False}, lambda r: r["error"]),
        ("/v1/messages", {"messages": [{"role": "user", "content": long}], "max_tokens": 8},
         lambda r: r["error"]["message"]),
    ]:
        refused = httpx.post(f"{tight.url}{route}", timeout=120, json={"model": "smollm2", **body})
        assert refused.status_code == 400, (route, refused.text)
        message = error(refused.json())
        assert message.startswith("prompt is too long: "), message  # Anthropic's words: Claude Code compacts on them
        assert "smollm2:135m holds 2048 tokens per request (up to 8192, its trained length)" in message, message
        assert "num_ctx" in message and "Modelfile" in message and "LOCALRUN_CTX_SIZE" in message


def test_a_context_over_the_memory_budget_is_refused_saying_why(tight):
    refused = httpx.post(f"{tight.url}/v1/chat/completions", timeout=120, json={
        "model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "num_ctx": 8192})
    assert refused.status_code == 400
    message = refused.json()["error"]["message"]
    assert "smollm2:135m cannot be loaded" in message and "8192 tokens x 1 slots" in message, message
    assert "LOCALRUN_MEMORY_BUDGET" in message
