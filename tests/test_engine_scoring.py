"""Exact option scoring on the real model: equal to evaluating the prompt, then the option, as two
batches; independent of the other options and their order; the prompt evaluated once, as generation
evaluates it, so that an option's first token scores what generation logs for it. Without flash
attention and in prefix mode (flash attention for each sequence's first 256 cells, the default on CPUs)."""

from __future__ import annotations

import random

import llama_cpp
import numpy as np
import pytest

from localrun.engine import Engine, EngineSettings, Request, Token
from localrun.engine.flashrows import RowRules, row_rules
from localrun.engine.scoring import spans
from localrun.errors import ContextOverflow, InvalidRequest
from localrun.sampling import SamplingParams
from tests.test_engine import GREEDY, THREADS, generate, items

WORDS = "Paris London Berlin is a city the capital of France and Germany , . yes no maybe".split()


@pytest.fixture(scope="module", params=["off", "prefix"])
def engine(request, smollm2_path):
    eng = Engine(str(smollm2_path), EngineSettings(parallel=2, ctx_size=512, threads=THREADS, flash_attn=request.param))
    assert eng.info["flash_attn"] == request.param
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def reference(engine, smollm2_path):
    """The prompt, then the option (but its last token), evaluated with llama-cpp-python as two batches (for prompts and
    options under 64 tokens: flash attention's one-row kernel in prefix mode), log-softmax in numpy."""
    llm = llama_cpp.Llama(str(smollm2_path), n_ctx=512, n_threads=THREADS, n_threads_batch=THREADS, logits_all=True,
                          flash_attn=engine.info["flash_attn"] == "prefix", verbose=False)

    def score(prompt: list[int], option: list[int]) -> float:
        assert len(prompt) < 64 and len(option) < 64
        llm.reset()
        llm.eval(prompt)
        if len(option) > 1:
            llm.eval(option[:-1])
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
    assert engine.scoring_cached_tokens == {"cold": 0, "warm": len(prompt), "partly warm": len(prompt) - 3}[cache]
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
    assert engine.scoring_cached_tokens == len(prompt)


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
    differently from one in a batch (this case differed by 0.02 nats when it did). Its second call
    reuses the whole prompt and its last row."""
    if text == "chat":
        text = engine.render_chat([{"role": "user", "content": "What is 2 + 2? Answer with one word."}])
    prompt = engine.tokenize(text)
    options = [words(engine, t) for t in (" the", " Paris", " four", " 4", " London and")]
    engine.score(prompt, options)
    engine.score(prompt[:-1], options)  # then a prompt one token shorter: its last two evaluated again
    assert engine.scoring_cached_tokens == len(prompt) - 3
    warm = engine.score(prompt, options)
    assert engine.scoring_cached_tokens == len(prompt) - 2
    assert warm == pytest.approx([reference(prompt, o) for o in options], abs=1e-6)


@pytest.mark.parametrize("n_prompt", [100, 257, 300])
def test_the_first_token_scores_what_generation_logs(engine, n_prompt):
    """Prompts generation cuts into tiles of 64 rows, whose last token is alone past the prefix's end
    (257), or crosses it: the greedy first token's log-probability equals its score as an option,
    with the prompt's head cached, and an option crossing the prefix's end scores alike. (A head
    cached from a prompt under 64 tokens would not: `flashrows`, the prefix cache's old limit.)"""
    prompt = engine.tokenize(items(64))[:n_prompt]
    first = generate(engine, prompt, "g", max_tokens=1, logprobs=0, **GREEDY).events[0]
    engine.score(prompt[:-10] + [28, 29], [[7042]])  # its head cached: computed in tiles too
    assert engine.score(prompt, [[first.token]]) == [pytest.approx(first.logprob, abs=1e-6)]
    assert engine.scoring_cached_tokens > 0
    crossing = words(engine, " and" * 40)
    alone = engine.score(prompt[:230], [crossing])
    engine.score(prompt, [[7042]])
    assert engine.score(prompt[:230], [[7042], crossing]) == [pytest.approx(engine.score(prompt[:230], [[7042]])[0]),
                                                              alone[0]]


def test_spans_cut_as_the_scheduler_cuts_a_prompt():
    prefix = row_rules(False, "f16", prefix=True)
    assert spans(0, 300, 300, prefix, 512) == [(0, 256), (256, 44)]
    assert spans(0, 257, 257, prefix, 512) == [(0, 256), (256, 1)]  # the prompt's whole part past the end
    assert spans(36, 100, 100, prefix, 512) == [(36, 64)]
    assert spans(0, 200, 200, prefix, 100) == [(0, 100), (100, 100)]
    assert spans(0, 150, 150, prefix, 100) == [(0, 86), (86, 64)]  # a tile left for the last piece
    assert spans(0, 40, 40, prefix, 16) == [(0, 16), (16, 16), (16 * 2, 8)]  # under a tile: any pieces
    assert spans(0, 9, 9, RowRules(), 8) == [(0, 7), (7, 2)]  # never a lone token
