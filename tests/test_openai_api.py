"""The OpenAI-compatible API through the official `openai` client, against the real daemon."""

from __future__ import annotations

import asyncio
import math

import httpx
import openai
import pytest

MODEL = "smollm2"
GREEDY = {"temperature": 0, "max_tokens": 12}


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def aclient(daemon):
    return openai.AsyncOpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0)


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_models_list_and_get(client):
    ids = [m.id for m in client.models.list()]
    assert "smollm2:135m" in ids
    assert client.models.retrieve("smollm2").id == "smollm2:135m"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_chat_completion_reports_usage_and_cached_prefix(client):
    first = client.chat.completions.create(model=MODEL, messages=ask("Name a color."), **GREEDY)
    second = client.chat.completions.create(model=MODEL, messages=ask("Name a color."), **GREEDY)
    assert first.choices[0].message.role == "assistant"
    assert first.choices[0].message.content
    assert first.choices[0].finish_reason in ("stop", "length")
    assert second.choices[0].message.content == first.choices[0].message.content
    assert second.usage.prompt_tokens == first.usage.prompt_tokens > 5
    assert second.usage.prompt_tokens_details.cached_tokens >= second.usage.prompt_tokens - 2  # MIN_PREFILL
    assert second.usage.completion_tokens <= 12


def test_streamed_chat_equals_non_streamed(client):
    whole = client.chat.completions.create(model=MODEL, messages=ask("Count to five."), **GREEDY)
    stream = client.chat.completions.create(model=MODEL, messages=ask("Count to five."), stream=True,
                                            stream_options={"include_usage": True}, **GREEDY)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].model_extra["timings"]["predicted_n"] == whole.usage.completion_tokens


def test_max_tokens_and_max_completion_tokens_cut_with_length(client):
    for field in ("max_tokens", "max_completion_tokens"):
        out = client.chat.completions.create(model=MODEL, messages=ask("Write a long story."), temperature=0,
                                             **{field: 3})
        assert out.usage.completion_tokens == 3
        assert out.choices[0].finish_reason == "length"


def test_stop_strings_end_the_answer_without_leaking(client):
    free = client.chat.completions.create(model=MODEL, messages=ask("Count from 1 to 10."), temperature=0,
                                          max_tokens=40).choices[0].message.content
    assert "4" in free
    stop = free[free.index("4"):][:2]
    cut = client.chat.completions.create(model=MODEL, messages=ask("Count from 1 to 10."), temperature=0,
                                         max_tokens=40, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert stop not in cut.choices[0].message.content
    assert free.startswith(cut.choices[0].message.content)


def test_seed_reproduces_sampled_output(client):
    args = dict(model=MODEL, messages=ask("Invent a name."), temperature=1.0, max_tokens=10)
    a = client.chat.completions.create(seed=7, **args).choices[0].message.content
    b = client.chat.completions.create(seed=7, **args).choices[0].message.content
    assert a == b


def test_n_choices(client):
    out = client.chat.completions.create(model=MODEL, messages=ask("Say a word."), n=3, temperature=1.0,
                                         seed=1, max_tokens=5)
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert len({c.message.content for c in out.choices}) > 1  # each choice draws with its own seed
    again = client.chat.completions.create(model=MODEL, messages=ask("Say a word."), n=3, temperature=1.0,
                                           seed=1, max_tokens=5)
    assert [c.message.content for c in again.choices] == [c.message.content for c in out.choices]


def test_n_greedy_choices_share_the_prompt_and_equal_one_answer(client):
    question = ask("List the planets of the solar system in order, with one fact about each of them.")
    one = client.chat.completions.create(model=MODEL, messages=question, temperature=0, max_tokens=16)
    out = client.chat.completions.create(model=MODEL, messages=question, n=3, temperature=0, max_tokens=16)
    assert [c.message.content for c in out.choices] == [one.choices[0].message.content] * 3
    assert out.usage.completion_tokens == 3 * one.usage.completion_tokens


def test_logprobs_are_full_distribution_values(client):
    out = client.chat.completions.create(model=MODEL, messages=ask("Hi"), logprobs=True, top_logprobs=5, **GREEDY)
    content = out.choices[0].logprobs.content
    eog = 1 if out.choices[0].finish_reason == "stop" else 0  # the end-of-generation token has no text
    assert len(content) == out.usage.completion_tokens - eog
    for item in content:
        assert item.logprob <= 0
        assert len(item.top_logprobs) == 5
        assert item.top_logprobs[0].logprob >= item.top_logprobs[-1].logprob
        assert math.isclose(item.logprob, item.top_logprobs[0].logprob, abs_tol=1e-4)  # greedy picks the top


def test_logit_bias_bans_a_token(client, daemon):
    first = client.chat.completions.create(model=MODEL, messages=ask("Say yes."), logprobs=True, **GREEDY)
    token = first.choices[0].logprobs.content[0].token
    tokens = httpx.post(f"{daemon.url}/api/tokenize", json={"model": MODEL, "text": token}, timeout=30)
    assert tokens.status_code == 200
    banned = client.chat.completions.create(model=MODEL, messages=ask("Say yes."), logprobs=True,
                                            logit_bias={str(tokens.json()["tokens"][0]): -100}, **GREEDY)
    assert banned.choices[0].logprobs.content[0].token != token


def test_json_object_response_format_parses(client):
    import json

    out = client.chat.completions.create(model=MODEL, messages=ask(
        'Reply with a JSON object with one key "answer" whose value is yes.'),
                                         response_format={"type": "json_object"}, temperature=0, max_tokens=100)
    assert out.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(out.choices[0].message.content), dict)


def test_context_size_per_request(client, daemon):
    client.chat.completions.create(model=MODEL, messages=ask("Hi"), extra_body={"num_ctx": 1024}, **GREEDY)
    ps = httpx.get(f"{daemon.url}/api/ps", timeout=10).json()["models"]
    assert ps[0]["context_length"] == 1024
    client.chat.completions.create(model=MODEL, messages=ask("Hi"), extra_body={"num_ctx": 4096}, **GREEDY)
    assert httpx.get(f"{daemon.url}/api/ps", timeout=10).json()["models"][0]["context_length"] == 4096


def test_prompt_over_the_context_is_a_400(client):
    with pytest.raises(openai.BadRequestError, match="context"):
        client.chat.completions.create(model=MODEL, messages=ask("word " * 3000), extra_body={"num_ctx": 512},
                                       **GREEDY)


def test_text_completion_stream_and_echo(client):
    out = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=5, temperature=0)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=5, temperature=0, stream=True) if c.choices)
    assert out.choices[0].text == streamed and out.object == "text_completion"
    echoed = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=5, temperature=0,
                                       echo=True)
    assert echoed.choices[0].text == "The capital of France is" + out.choices[0].text
    chunks = [c for c in client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=5,
                                                   temperature=0, echo=True, logprobs=2, stream=True) if c.choices]
    assert "".join(c.choices[0].text for c in chunks) == echoed.choices[0].text
    assert chunks[0].choices[0].text == "The capital of France is"  # the prompt first, as OpenAI streams it
    prompt_logprobs = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=0,
                                                echo=True, logprobs=2).choices[0].logprobs
    assert chunks[0].choices[0].logprobs.tokens == prompt_logprobs.tokens
    assert chunks[0].choices[0].logprobs.token_logprobs == prompt_logprobs.token_logprobs


def test_embeddings_are_normalized_and_batched(client):
    out = client.embeddings.create(model=MODEL, input=["a cat", "a dog", "stock markets"])
    vectors = [d.embedding for d in out.data]
    assert len(vectors) == 3 and len(vectors[0]) > 100
    for v in vectors:
        assert math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-3)
    assert out.usage.prompt_tokens > 3


def test_errors_are_openai_shaped(client, daemon):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nope:1b", messages=ask("hi"))
    assert "nope" in e.value.message
    r = httpx.post(f"{daemon.url}/v1/chat/completions", json={"model": MODEL}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(f"{daemon.url}/v1/chat/completions", content=b"{not json", timeout=10,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = httpx.post(f"{daemon.url}/v1/chat/completions", json={"model": MODEL, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]}, timeout=10)
    assert r.status_code == 400 and "image_url" in r.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError, match="suffix: fill-in-the-middle is not supported"):
        client.completions.create(model=MODEL, prompt="def add(a, b):\n", suffix="\n    return c", max_tokens=5)


def test_unknown_fields_are_accepted(client):
    out = client.chat.completions.create(model=MODEL, messages=ask("Hi"), extra_body={"frobnicate": True,
                                         "user_tier": 3}, **GREEDY)
    assert out.choices[0].message.content


def test_async_client_concurrent_streams(aclient):
    async def one(i: int) -> str:
        stream = await aclient.chat.completions.create(model=MODEL, messages=ask(f"Say the number {i}."),
                                                       stream=True, **GREEDY)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def main() -> list[str]:
        return await asyncio.gather(*(one(i) for i in range(4)))

    results = asyncio.run(main())
    assert all(results)
