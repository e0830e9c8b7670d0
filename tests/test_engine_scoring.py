"""Exact option scoring on the real model: equal to a plain full-sequence evaluation, independent of
the other options and their order, prompt evaluated once."""

from __future__ import annotations

import random

import llama_cpp
import numpy as np
import pytest

from localrun.engine import Engine, EngineSettings, Request, Token
from localrun.errors import ContextOverflow, InvalidRequest
from localrun.sampling import SamplingParams
from tests.test_engine import THREADS

WORDS = "Paris London Berlin is a city the capital of France and Germany , . yes no maybe".split()


@pytest.fixture(scope="module")
def engine(smollm2_path):
    eng = Engine(str(smollm2_path), EngineSettings(parallel=2, ctx_size=512, threads=THREADS))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def reference(smollm2_path):
    """Plain evaluation of prompt + option with llama-cpp-python, log-softmax in numpy."""
    llm = llama_cpp.Llama(str(smollm2_path), n_ctx=512, n_threads=THREADS, n_threads_batch=THREADS, logits_all=True, verbose=False)

    def score(prompt: list[int], option: list[int]) -> float:
        llm.reset()
        llm.eval(prompt + option)
        logits = np.array(llm.scores[: len(prompt) + len(option)], dtype=np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        logprobs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        return float(sum(logprobs[len(prompt) - 1 + j, t] for j, t in enumerate(option)))

    return score


@pytest.fixture(scope="module")
def prompt(engine):
    return engine.tokenize("Question: What is the capital of France? Give a short answer.\nAnswer:")


def words(engine, text: str) -> list[int]:
    return engine.tokenize(text, add_special=False)


@pytest.mark.parametrize("cache", ["cold", "warm", "partly warm"])
def test_equals_plain_evaluation(engine, reference, prompt, cache):
    options = [words(engine, t) for t in (" Paris", " London", " Berlin is a city", " Paris, France", " Rome.")]
    assert sorted(map(len, options)) == [1, 1, 2, 3, 4]
    if cache == "partly warm":
        engine.score(prompt[:-3] + [28, 29, 30], [[7042]])
    scores = engine.score(prompt, options)
    assert engine.scoring_cached_tokens == {"cold": 0, "warm": len(prompt) - 2, "partly warm": len(prompt) - 4}[cache]
    assert scores == pytest.approx([reference(prompt, o) for o in options], abs=1e-4)
    assert scores[0] > scores[1]  # the model knows this much


def test_independent_of_the_other_options_and_their_order(engine, prompt):
    rng = random.Random(3)
    options = [words(engine, " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))) for _ in range(64)]
    together = engine.score(prompt, options)
    alone = [engine.score(prompt, [o])[0] for o in options]
    assert together == pytest.approx(alone, abs=1e-5)
    order = list(range(64))
    rng.shuffle(order)
    shuffled = engine.score(prompt, [options[i] for i in order])
    assert shuffled == pytest.approx([together[i] for i in order], abs=1e-5)


def test_prefix_options_and_duplicates(engine, reference, prompt):
    short, longer = words(engine, " Paris"), words(engine, " Paris is the capital")
    a, b, c = engine.score(prompt, [short, longer, short])
    assert a == c
    assert b < a  # more tokens after the same start: a lower sum
    assert b == pytest.approx(reference(prompt, longer), abs=1e-4)


def test_prompt_is_evaluated_once_and_reused(engine, prompt):
    engine.score(prompt[:10] + [28, 29], [[7042]])  # a prompt sharing 10 tokens first
    engine.score(prompt, [[7042], [4528]])
    assert engine.scoring_cached_tokens == 10
    engine.score(prompt, [[7042]])
    assert engine.scoring_cached_tokens == len(prompt) - 2  # the last two go with every option


def test_does_not_disturb_running_generation(engine, prompt):
    sampling = SamplingParams(temperature=0.0, max_tokens=16)
    engine.add(Request("alone", prompt, sampling))
    alone = [e.token for _ in range(40) if engine.has_work for e in engine.step() if isinstance(e, Token)]
    engine.add(Request("mixed", prompt, SamplingParams(temperature=0.0, max_tokens=16)))
    mixed = []
    while engine.has_work:
        mixed += [e.token for e in engine.step() if isinstance(e, Token)]
        engine.score(prompt[:5], [[7042], [4528, 28]])
    assert mixed == alone


def test_bad_inputs(engine, prompt):
    with pytest.raises(InvalidRequest, match="no empty option"):
        engine.score(prompt, [[7042], []])
    with pytest.raises(InvalidRequest, match="at least one option"):
        engine.score(prompt, [])
    with pytest.raises(InvalidRequest, match="non-empty prompt"):
        engine.score([], [[7042]])
    with pytest.raises(ContextOverflow):
        engine.score(prompt * 40, [[7042]])


@pytest.mark.parametrize("text", [
    "The quick brown fox jumps over the lazy dog. Alice met Bob at the station at noon, and they took the train to Paris where they visited",
    "chat",
])
def test_a_cached_prompt_scores_like_a_cold_one(engine, reference, text):
    """A prompt whose head is cached must not re-evaluate a lone token: llama.cpp computes a token alone
    differently from one in a batch (this case differed by 0.02 nats when it did)."""
    if text == "chat":
        text = engine.render_chat([{"role": "user", "content": "What is 2 + 2? Answer with one word."}])
    prompt = engine.tokenize(text)
    options = [words(engine, t) for t in (" the", " Paris", " four", " 4", " London and")]
    engine.score(prompt, options)
    warm = engine.score(prompt, options)
    assert engine.scoring_cached_tokens == len(prompt) - 2
    assert warm == pytest.approx([reference(prompt, o) for o in options], abs=1e-6)
