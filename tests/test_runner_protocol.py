"""The runner's generation messages: one encode/decode pair per native type, so what the runner sends is
what the daemon reads, field for field (a timing added to the engine cannot vanish on the way)."""

from __future__ import annotations

import dataclasses
import json

from localrun import native
from localrun.engine import events
from localrun.native import Delta, Done, GenerateRequest, Timings, TokenLogprob, ToolCall, decode_event, encode_event
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


def test_a_prompts_first_token_has_no_log_probability():
    first = TokenLogprob("<s>", None)
    assert TokenLogprob.from_wire(json.loads(json.dumps(first.to_wire()))) == first


def test_a_generate_request_round_trips():
    request = GenerateRequest(model="m", messages=[{"role": "user", "content": "hi"}], n=2, num_ctx=512,
                              sampling=SamplingParams(temperature=0, logit_bias={5: -1.0}, stop=["x"]))
    assert GenerateRequest.from_dict(json.loads(json.dumps(request.to_dict()))) == request
