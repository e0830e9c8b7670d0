"""Assistant prefill: a conversation that ends with an assistant message is continued, in every dialect,
exactly as a raw completion of the rendered conversation cut after that message would continue."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from localrun.engine import Engine, EngineSettings
from localrun.errors import InvalidRequest
from localrun.runner.prompt import _continuing, _prefill

MODEL = "smollm2"
QUESTION = {"role": "user", "content": "What is the capital of France? Answer in JSON."}
PREFILL = '{"capital": "'


@pytest.fixture(scope="module")
def reference(daemon, smollm2_path) -> str:
    """Greedy text after the conversation rendered with a generation prompt and the prefill appended."""
    with Engine(str(smollm2_path), EngineSettings(parallel=1, ctx_size=512, threads=1)) as engine:
        prompt = engine.render_chat([QUESTION], add_generation_prompt=True) + PREFILL
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 12, "temperature": 0}
    text = httpx.post(f"{daemon.url}/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]
    assert text and not text.startswith("<|im_start|>")
    return text


def conversation() -> list[dict]:
    return [QUESTION, {"role": "assistant", "content": PREFILL}]


def test_anthropic_messages_continue_the_prefill(daemon, reference):
    client = anthropic.Anthropic(base_url=daemon.url, api_key="unused", max_retries=0)
    message = client.messages.create(model=MODEL, max_tokens=12, messages=conversation(), extra_body={"temperature": 0})
    assert message.content[0].text == reference


def test_openai_chat_continues_the_prefill(daemon, reference):
    client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(model=MODEL, max_tokens=12, temperature=0, messages=conversation())
    assert answer.choices[0].message.content == reference


def test_ollama_chat_continues_the_prefill(daemon, reference):
    body = {"model": MODEL, "messages": conversation(), "stream": False, "options": {"temperature": 0, "num_predict": 12}}
    answer = httpx.post(f"{daemon.url}/api/chat", json=body, timeout=60).json()
    assert answer["message"]["content"] == reference


def test_what_counts_as_a_prefill():
    assert _prefill(conversation()) == PREFILL
    assert _prefill([QUESTION]) is None
    assert _prefill([QUESTION, {"role": "assistant", "content": "  \n"}]) is None  # nothing to continue
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert _prefill([QUESTION, {"role": "assistant", "content": "x", "tool_calls": calls}]) is None


def test_the_rendered_conversation_is_cut_right_after_the_prefill():
    rendered = "<|im_start|>assistant\nSure: yes<|im_end|>\n"
    assert _continuing(rendered, "Sure: yes") == "<|im_start|>assistant\nSure: yes"
    assert _continuing(rendered, "Sure: yes  ") == "<|im_start|>assistant\nSure: yes"  # the template stripped it
    with pytest.raises(InvalidRequest, match="cannot be continued"):
        _continuing(rendered, "something else")
