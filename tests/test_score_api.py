"""Exact option scoring through `POST /v1/score` and `localrun score`, on the real daemon."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import httpx
import pytest

from localrun.api_types import ScoreResponse
from localrun.client import Client

PROMPT = "Question: What is the capital of France?\nAnswer:"
OPTIONS = [" Paris", " London", " Berlin", " Paris, the city of light"]


def score(daemon, **body) -> httpx.Response:
    return httpx.post(f"{daemon.url}/v1/score", json={"model": "smollm2", **body}, timeout=120)


def test_scores_are_exact_sums_and_probabilities_over_the_options(daemon):
    r = score(daemon, prompt=PROMPT, options=OPTIONS)
    assert r.status_code == 200, r.text
    data = r.json()
    choices = data["choices"]
    assert [c["option"] for c in choices] == OPTIONS
    assert all(c["logprob"] < 0 and c["tokens"] >= 1 for c in choices)
    assert choices[3]["tokens"] > choices[0]["tokens"]  # multi-token option; a prefix of it is option 0
    assert math.isclose(sum(c["prob"] for c in choices), 1.0, rel_tol=1e-9)
    assert max(choices, key=lambda c: c["prob"])["option"] == " Paris"
    assert data["usage"]["prompt_tokens"] > 5 and data["usage"]["option_tokens"] == sum(c["tokens"] for c in choices)



def test_the_answer_round_trips_through_the_shared_type_and_the_client_reads_the_same(daemon):
    for normalize in ("sum", "mean"):
        answer = score(daemon, prompt=PROMPT, options=OPTIONS, normalize=normalize).json()
        assert ScoreResponse.from_dict(answer).to_dict() == answer
        with Client(daemon.url) as client:
            scored = client.score("smollm2", PROMPT, OPTIONS, normalize=normalize)
        assert [c.option for c in scored.choices] == OPTIONS and scored.option_tokens == answer["usage"]["option_tokens"]
        for mine, theirs in zip(scored.choices, ScoreResponse.from_dict(answer).choices):
            assert (mine.tokens, mine.logprob) == (theirs.tokens, pytest.approx(theirs.logprob, abs=1e-5))
        assert scored.prompt_tokens > 5 and scored.score_ms > 0

def test_order_of_the_options_does_not_change_their_numbers(daemon):
    forward = {c["option"]: c["logprob"] for c in score(daemon, prompt=PROMPT, options=OPTIONS).json()["choices"]}
    backward = {c["option"]: c["logprob"] for c in score(daemon, prompt=PROMPT, options=OPTIONS[::-1]).json()["choices"]}
    for option in OPTIONS:
        assert forward[option] == pytest.approx(backward[option], abs=1e-5)


def test_option_logprob_equals_generation_logprob_of_the_same_token(daemon):
    """The greedy first token's logprob from /v1/completions equals that one-token option's score."""
    prompt = "The capital of France is"
    out = httpx.post(f"{daemon.url}/v1/completions", json={"model": "smollm2", "prompt": prompt, "max_tokens": 1,
                                                           "temperature": 0, "logprobs": 1}, timeout=120).json()
    token, logprob = out["choices"][0]["logprobs"]["tokens"][0], out["choices"][0]["logprobs"]["token_logprobs"][0]
    scored = score(daemon, prompt=prompt, options=[token, token + "zz"]).json()["choices"][0]
    assert scored["tokens"] == 1
    assert scored["logprob"] == pytest.approx(logprob, abs=1e-3)


def test_mean_normalisation_and_chat_messages(daemon):
    r = score(daemon, messages=[{"role": "user", "content": "Is the sky blue? Answer yes or no."}],
              options=["Yes", "No"], normalize="mean")
    assert r.status_code == 200, r.text
    for c in r.json()["choices"]:
        assert c["score"] == pytest.approx(c["logprob"] / c["tokens"])


def test_a_single_option_and_many_options(daemon):
    one = score(daemon, prompt=PROMPT, options=[" Paris"]).json()["choices"]
    assert one[0]["prob"] == 1.0
    many = score(daemon, prompt=PROMPT, options=[f" {i}" for i in range(64)]).json()["choices"]
    assert len(many) == 64 and all(c["logprob"] < 0 for c in many)


@pytest.mark.parametrize("body, fragment", [
    ({"prompt": PROMPT, "options": []}, "options"),
    ({"prompt": PROMPT, "options": [" a", ""]}, "empty"),
    ({"prompt": PROMPT, "options": [" a", " a"]}, "different"),
    ({"prompt": PROMPT, "options": [f" {i}" for i in range(300)]}, "options"),
    ({"options": [" a"]}, "prompt or messages"),
    ({"prompt": "word " * 9000, "options": [" a"]}, "context"),  # over SmolLM2's trained 8192
])
def test_bad_requests_are_400_in_openai_shape(daemon, body, fragment):
    r = score(daemon, **body)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]["message"]


def test_cli_prints_probabilities_and_json(daemon):
    args = [sys.executable, "-m", "localrun", "score", "smollm2", PROMPT, "-o", " Paris", "-o", " London"]
    text = subprocess.run(args, env=daemon.env(), capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert " Paris" in text.stdout and "%" in text.stdout and "\x1b[" not in text.stdout
    out = subprocess.run(args + ["--json"], env=daemon.env(), capture_output=True, text=True, timeout=120)
    assert [c["option"] for c in json.loads(out.stdout)["choices"]] == [" Paris", " London"]


def test_echo_logprobs_of_the_prompt_equal_the_scoring_path(daemon):
    """lm-evaluation-harness's local-completions loglikelihood: echo + logprobs + max_tokens 0."""
    context, continuation = "The capital of France is", " Paris, a city on the Seine."
    r = httpx.post(f"{daemon.url}/v1/completions", json={"model": "smollm2", "prompt": context + continuation,
                                                         "echo": True, "logprobs": 3, "max_tokens": 0}, timeout=120)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    lp = choice["logprobs"]
    assert choice["text"] == context + continuation and r.json()["usage"]["completion_tokens"] == 0
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(x <= 0 for x in lp["token_logprobs"][1:]) and all(len(top) == 3 for top in lp["top_logprobs"][1:])
    assert "".join(lp["tokens"]) == context + continuation
    # the continuation's tokens, scored as an option after the context, give the same sum
    n_context = len(httpx.post(f"{daemon.url}/api/tokenize", json={"model": "smollm2", "text": context,
                                                                    "add_special": True}, timeout=30).json()["tokens"])
    scored = score(daemon, prompt=context, options=[continuation]).json()["choices"][0]
    assert scored["tokens"] == len(lp["tokens"]) - n_context  # it tokenizes the same alone as after the context
    assert sum(lp["token_logprobs"][n_context:]) == pytest.approx(scored["logprob"], abs=1e-4)
