"""The runner's generation messages: one encode/decode pair per native type, so what the runner sends is
what the daemon reads, field for field (a timing added to the engine cannot vanish on the way)."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from localrun import native, ops
from localrun.engine import events
from localrun.native import (
    Delta, Done, GenerateRequest, Started, Timings, TokenLogprob, ToolCall, decode_event, encode_event,
)
from localrun.runner.protocol import encode
from localrun.sampling import SamplingParams


def over_the_pipe(message: dict) -> dict:
    return json.loads(encode(message))


def test_every_timing_crosses_the_pipe():
    timings = Timings(**{f.name: i + 1 for i, f in enumerate(dataclasses.fields(Timings))})
    done = Done(1, "stop", timings, "text", [], "END")
    assert decode_event(over_the_pipe(encode_event("r1", done))) == done


def test_the_engine_reports_the_daemons_timings_class():
    assert events.Timings is native.Timings


def test_a_delta_with_log_probabilities_round_trips():
    delta = Delta(0, " Paris", [TokenLogprob(" Paris", -0.25, [(" Paris", -0.25), (" London", -2.5)]),
                                TokenLogprob(",", -1.0, [])])
    message = over_the_pipe(encode_event("r7", delta))
    assert (message["type"], message["id"]) == ("delta", "r7")
    assert decode_event(message) == delta


def test_a_done_with_tool_calls_round_trips():
    done = Done(2, "tool_calls", Timings(prompt_tokens=5, generated_tokens=3), "",
                [ToolCall("call_1", "get_weather", {"city": "Paris", "days": [1, 2]})])
    message = over_the_pipe(encode_event("r2", done))
    assert message["type"] == "done" and decode_event(message) == done


def test_a_started_choice_round_trips():
    started = Started(1, 42)
    message = over_the_pipe(encode_event("r5", started))
    assert message["type"] == "started" and decode_event(message) == started


def test_a_prompts_first_token_has_no_log_probability():
    first = TokenLogprob("<s>", None)
    assert TokenLogprob.from_wire(json.loads(json.dumps(first.to_wire()))) == first


def test_a_generate_request_round_trips():
    request = GenerateRequest(model="m", messages=[{"role": "user", "content": "hi"}], n=2, num_ctx=512,
                              sampling=SamplingParams(temperature=0, logit_bias={5: -1.0}, stop=["x"]))
    assert GenerateRequest.from_dict(json.loads(json.dumps(request.to_dict()))) == request


# --- the other operations (localrun.ops): a request and an answer each --------------------------

OPERATIONS = [
    (ops.Tokenize("hello <b>", special=False), ops.Tokens([1, 22, 333])),
    (ops.Detokenize([1, 22, 333]), ops.Text("hello")),
    (ops.Render([{"role": "user", "content": "hi"}], [{"name": "f", "parameters": {}}], "auto", "{{ x }}"),
     ops.Tokens([5, 6])),
    (ops.Embed(["a", "b"], truncate=True), ops.Embeddings([[0.5, -0.25], [1.0, 0.0]], 4)),
    (ops.Score([" Paris", " Lyon"], messages=[{"role": "user", "content": "capital?"}]),
     ops.Scores([-0.5, -3.25], [1, 2], 9, 4, 12.5)),
    (ops.PromptLogprobs("The sky", top=2),
     ops.PromptTokens([TokenLogprob("<s>", None), TokenLogprob(" sky", -1.5, [(" sky", -1.5), (" sea", -2.0)])])),
    (ops.Perplexity("text " * 10, ctx=32, batch=64), ops.PerplexityResult(12.5, 2.5, 40, 15, 1, 32, 0.25)),
    (ops.HealthCheck(), ops.Health(3)),
]


@pytest.mark.parametrize("op, answer", OPERATIONS, ids=[op.OP for op, _ in OPERATIONS])
def test_every_operation_and_its_answer_round_trip(op, answer):
    message = over_the_pipe({"op": op.OP, "id": "r3", **op.to_dict()})
    assert ops.OPS[message["op"]].from_dict(message) == op  # what the runner reads is what the daemon sent
    assert isinstance(answer, op.RESULT)
    assert op.RESULT.from_dict(over_the_pipe(answer.to_dict())) == answer


def test_every_operation_has_a_round_trip_case():
    assert {op.OP for op, _ in OPERATIONS} == set(ops.OPS)


def test_ask_sends_the_operation_and_decodes_its_answer():
    """`ask` over a runner that answers as the runner host does: the op's fields under its name, the answer typed."""
    sent = []

    class Runner:
        async def call(self, op, **fields):
            sent.append((op, fields))
            return over_the_pipe(ops.Scores([-1.0], [1], 3, 0, 2.0).to_dict())

    answer = asyncio.run(ops.ask(Runner(), ops.Score([" yes"], prompt="Is it?")))
    assert sent == [("score", {"options": [" yes"], "prompt": "Is it?", "messages": None})]
    assert answer == ops.Scores([-1.0], [1], 3, 0, 2.0)
