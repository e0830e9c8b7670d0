"""Thinking end to end: the bundled SmolLM2 under DeepSeek R1's real chat template (whose generation
prompt opens `<think>`), through a real daemon and the official openai, ollama and anthropic clients
(chat completions, the Responses API, Ollama's chat, Anthropic's messages).

SmolLM2 never closes a thought by itself, so its whole output is thinking, until a reasoning budget
makes the engine force the family's end marker; then the answer follows (a tiny model may go on to
imitate the marker in its answer; only the first one closes the thought). Turning thinking off uses
the template's own switch (`enable_thinking`), which closes the thought in the prompt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest

from localrun.errors import InvalidRequest
from localrun.native import thinking
from localrun.server.anthropic.translate import thinking as anthropic_thinking
from tests.test_openapi_conformance import conforms
from tests.tiny_gguf import with_chat_template

MODEL = "r1-smollm2"
TEMPLATE = Path(__file__).parent / "data" / "templates" / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
ASK = [{"role": "user", "content": "What is the capital of France?"}]
BUDGET = 6


@pytest.mark.parametrize("value, expected", [
    (None, (None, None)), (True, (True, None)), (False, (False, None)), ("none", (False, None)),
    ("minimal", (True, "low")), ("low", (True, "low")), ("medium", (True, "medium")), ("high", (True, "high")),
    ("xhigh", (True, "high")), ("max", (True, "high")),
])
def test_ollama_think_and_openai_effort_become_one_switch(value, expected):
    assert thinking(value, "think") == expected


@pytest.mark.parametrize("config, expected", [
    (None, (None, None)), ({"type": "disabled"}, (False, None)), ({"type": "adaptive"}, (True, None)),
    ({"type": "enabled", "budget_tokens": 2048}, (True, 2048)),
])
def test_anthropic_thinking_config_becomes_a_switch_and_a_budget(config, expected):
    assert anthropic_thinking(config) == expected


@pytest.mark.parametrize("bad", [{"type": "enabled"}, {"type": "enabled", "budget_tokens": 0},
                                 {"type": "enabled", "budget_tokens": True}, {"type": "sometimes"}])
def test_a_bad_anthropic_thinking_config_is_refused(bad):
    with pytest.raises(InvalidRequest, match="thinking"):
        anthropic_thinking(bad)


@pytest.fixture(scope="module")
def model(daemon, smollm2_path, tmp_path_factory) -> str:
    path = with_chat_template(smollm2_path, tmp_path_factory.mktemp("r1") / f"{MODEL}.gguf", TEMPLATE.read_text())
    subprocess.run([sys.executable, "-m", "localrun", "pull", str(path), "--quiet"], env=daemon.env(),
                   check=True, capture_output=True, timeout=120)
    return MODEL


@pytest.fixture(scope="module")
def oai(daemon, model) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", timeout=120)


def test_show_says_the_model_thinks(daemon, model):
    shown = httpx.post(f"{daemon.url}/api/show", json={"model": MODEL}, timeout=30).json()
    assert "thinking" in shown["capabilities"] and "thinking_always" not in shown["capabilities"]


def test_openai_thinking_is_reasoning_content_and_the_budget_lets_the_answer_follow(daemon, oai):
    request = dict(model=MODEL, messages=ASK, temperature=0, max_tokens=30)
    unbounded = oai.chat.completions.create(**request).choices[0].message
    assert unbounded.content == "" and unbounded.reasoning_content  # the thought never closes by itself
    assert "<think>" not in unbounded.reasoning_content

    whole = oai.chat.completions.create(**request, extra_body={"reasoning_budget": BUDGET})
    answer = whole.choices[0]
    thought, content = answer.message.reasoning_content, answer.message.content
    assert thought and content and "think>" not in thought and not content.startswith(("<", "\n"))
    assert unbounded.reasoning_content.startswith(thought)  # the same thought, cut at the budget
    tokens = httpx.post(f"{daemon.url}/api/tokenize", json={"model": MODEL, "text": thought}, timeout=30).json()["tokens"]
    assert len(tokens) <= BUDGET + 1
    # the budget's thinking tokens, then the end-of-thought marker the engine wrote, are the thought
    assert BUDGET <= whole.usage.completion_tokens_details.reasoning_tokens < whole.usage.completion_tokens

    chunks = list(oai.chat.completions.create(**request, extra_body={"reasoning_budget": BUDGET}, stream=True,
                                              stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == thought
    assert "".join(d.content or "" for d in deltas) == content
    streamed = chunks[-1].usage
    assert (streamed.completion_tokens, streamed.completion_tokens_details) == \
        (whole.usage.completion_tokens, whole.usage.completion_tokens_details)


def test_openai_reasoning_effort_none_turns_thinking_off(oai):
    answer = oai.chat.completions.create(model=MODEL, messages=ASK, temperature=0, max_tokens=12, reasoning_effort="none")
    message = answer.choices[0].message
    assert message.content and getattr(message, "reasoning_content", None) is None
    assert answer.usage.completion_tokens_details.reasoning_tokens == 0 < answer.usage.completion_tokens


def test_ollama_thinking_is_message_thinking(daemon, model):
    client = ollama.Client(host=daemon.url, timeout=120)
    options = {"temperature": 0, "num_predict": 30, "reasoning_budget": BUDGET}
    answer = client.chat(model=MODEL, messages=ASK, think=True, options=options).message
    assert answer.thinking and answer.content and "think>" not in answer.thinking
    pieces = list(client.chat(model=MODEL, messages=ASK, think=True, options=options, stream=True))
    assert "".join(p.message.thinking or "" for p in pieces) == answer.thinking
    assert "".join(p.message.content or "" for p in pieces) == answer.content
    off = client.chat(model=MODEL, messages=ASK, think=False, options={"temperature": 0, "num_predict": 12}).message
    assert off.content and not off.thinking


def test_ollama_refuses_an_unknown_think_value(daemon, model):
    response = httpx.post(f"{daemon.url}/api/chat", json={"model": MODEL, "messages": ASK, "think": "very"}, timeout=30)
    assert response.status_code == 400 and "think" in response.json()["error"]


def test_anthropic_thinking_blocks_with_a_budget(daemon, model):
    client = anthropic.Anthropic(base_url=daemon.url, api_key="unused", timeout=120)
    request = dict(model=MODEL, max_tokens=30, extra_body={"temperature": 0}, messages=ASK,
                   thinking={"type": "enabled", "budget_tokens": BUDGET})
    message = client.messages.create(**request)
    assert [block.type for block in message.content] == ["thinking", "text"]
    with client.messages.stream(**request) as stream:
        kinds = {event.delta.type for event in stream if event.type == "content_block_delta"}
        streamed = stream.get_final_message()
    assert {"thinking_delta", "text_delta"} <= kinds
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in streamed.content] == \
        [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in message.content]
    body = {"model": MODEL, "max_tokens": 30, "messages": ASK, "thinking": {"type": "enabled"}}
    refused = httpx.post(f"{daemon.url}/v1/messages", json=body, timeout=30)
    assert refused.status_code == 400


def test_thinking_sent_back_is_accepted_on_every_route(daemon, model, oai):
    """A later turn carries the earlier thinking back (each dialect's own field); this template drops
    it, as DeepSeek R1's does, and the request simply works."""
    turn = [*ASK, {"role": "assistant", "content": "Paris.", "reasoning_content": "Easy."},
            {"role": "user", "content": "And of Spain?"}]
    assert oai.chat.completions.create(model=MODEL, messages=turn, max_tokens=4).choices[0].finish_reason
    ollama_turn = [*ASK, {"role": "assistant", "content": "Paris.", "thinking": "Easy."}, turn[-1]]
    assert ollama.Client(host=daemon.url).chat(model=MODEL, messages=ollama_turn, options={"num_predict": 4}).done
    anthropic_turn = [*ASK, {"role": "assistant", "content": [{"type": "thinking", "thinking": "Easy.", "signature": ""},
                                                              {"type": "text", "text": "Paris."}]}, turn[-1]]
    client = anthropic.Anthropic(base_url=daemon.url, api_key="unused")
    assert client.messages.create(model=MODEL, max_tokens=4, messages=anthropic_turn).stop_reason


def test_a_forced_tool_call_turns_thinking_off_and_streams_with_its_own_index(oai):
    # the city is one of a list: a free string let the Zen 3's greedy path write a date-time without end
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "enum": ["Oslo", "Bergen"]}}, "required": ["city"]}}}
    # the call is forced in DeepSeek R1's own format, whose markers SmolLM2's vocabulary spells out in many tokens
    request = dict(model=MODEL, messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=[weather],
                   tool_choice="required", temperature=0, max_tokens=160)
    whole = oai.chat.completions.create(**request).choices[0]
    assert whole.finish_reason == "tool_calls" and getattr(whole.message, "reasoning_content", None) is None
    assert whole.message.tool_calls[0].function.name == "get_weather"
    chunks = [c for c in oai.chat.completions.create(**request, stream=True) if c.choices]
    calls = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
    assert [(d.index, d.function.name) for d in calls if d.function.name] == [(0, "get_weather")]
    assert "".join(d.function.arguments or "" for d in calls) == whole.message.tool_calls[0].function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not "".join(c.choices[0].delta.content or "" for c in chunks)


def test_responses_put_the_reasoning_item_before_the_message_and_stream_it_in_order(daemon, oai):
    request = dict(model=MODEL, input=ASK[0]["content"], temperature=0, max_output_tokens=30,
                   extra_body={"reasoning_budget": BUDGET})
    chat = oai.chat.completions.create(model=MODEL, messages=ASK, temperature=0, max_tokens=30,
                                       extra_body={"reasoning_budget": BUDGET}).choices[0].message
    answer = oai.responses.create(**request)
    reasoning, message = answer.output
    assert (reasoning.type, reasoning.summary, reasoning.status) == ("reasoning", [], "completed")
    assert [(p.type, p.text) for p in reasoning.content] == [("reasoning_text", chat.reasoning_content)]
    assert message.type == "message" and answer.output_text == chat.content
    # the budget's thinking tokens, then the end-of-thought marker the engine wrote, are the thought
    assert BUDGET <= answer.usage.output_tokens_details.reasoning_tokens < answer.usage.output_tokens
    conforms(answer.model_dump(mode="json", exclude_unset=True), "Response")

    events = list(oai.responses.create(**request, stream=True))
    kinds = [e.type for e in events]
    thoughts, texts = kinds.count("response.reasoning_text.delta"), kinds.count("response.output_text.delta")
    assert thoughts and texts and kinds == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", *["response.reasoning_text.delta"] * thoughts,
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", *["response.output_text.delta"] * texts,
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        f"response.{answer.status}"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.output_index for e in events if e.type == "response.output_item.done"] == [0, 1]
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == chat.reasoning_content
    assert events[-1].response.output_text == answer.output_text
    assert [item.type for item in events[-1].response.output] == ["reasoning", "message"]
    for event in events:
        conforms(event.model_dump(mode="json", exclude_unset=True), "ResponseStreamEvent")


def test_responses_reasoning_effort_is_the_thinking_switch(oai):
    request = dict(model=MODEL, input=ASK[0]["content"], temperature=0, max_output_tokens=12)
    off = oai.responses.create(**request, reasoning={"effort": "none"})
    assert [item.type for item in off.output] == ["message"] and off.output_text
    assert off.usage.output_tokens_details.reasoning_tokens == 0
    # unbounded, SmolLM2 thinks until the limit: the one item is the cut thought
    [thought] = oai.responses.create(**request, reasoning={"effort": "xhigh"}).output
    assert thought.type == "reasoning" and thought.status == "incomplete" and thought.content[0].text
    assert oai.responses.create(**request, reasoning={"effort": "some-new-name"}).output[0].type == "reasoning"


def test_a_reasoning_item_sent_back_continues_the_conversation(oai):
    first = oai.responses.create(model=MODEL, input=ASK[0]["content"], temperature=0, max_output_tokens=30,
                                 extra_body={"reasoning_budget": BUDGET})
    history = [*ASK, *[item.model_dump(mode="json", exclude_none=True) for item in first.output],
               {"role": "user", "content": "And of Spain?"}]
    sent = oai.responses.create(model=MODEL, input=history, max_output_tokens=4, store=False)
    chained = oai.responses.create(model=MODEL, input="And of Spain?", previous_response_id=first.id,
                                   max_output_tokens=4, store=False)
    # DeepSeek R1's template drops past thinking: both prompts hold the same turns
    assert sent.usage.input_tokens == chained.usage.input_tokens > first.usage.input_tokens
