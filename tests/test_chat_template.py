"""Chat templates render as Hugging Face's apply_chat_template does, on real templates of several families."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from localrun.engine.chat_template import builtin_for, render
from localrun.errors import InvalidRequest

TEMPLATES = Path(__file__).parent / "data" / "templates"
SYSTEM = [{"role": "system", "content": "You are terse."}]
HI = [{"role": "user", "content": "Hi"}]
TURNS = HI + [{"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


def llama3(messages, **kw) -> str:
    return render(template("meta-llama-Llama-3.2-3B-Instruct"), messages, bos_token="<|begin_of_text|>",
                  eos_token="<|eot_id|>", **kw)


@pytest.mark.parametrize(
    ("name", "messages", "bos", "eos", "expected"),
    [
        ("Qwen-Qwen2.5-7B-Instruct", SYSTEM + HI, "", "<|im_end|>",
         "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
        ("Qwen-Qwen2.5-7B-Instruct", HI, "", "<|im_end|>",
         "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
        ("google-gemma-2-2b-it", TURNS, "<bos>", "<eos>",
         "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
         "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"),
        ("microsoft-Phi-3.5-mini-instruct", SYSTEM + HI, "<s>", "<|endoftext|>",
         "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n"),
        ("mistralai-Mistral-Nemo-Instruct-2407", SYSTEM + TURNS, "<s>", "</s>",
         "<s>[INST]Hi[/INST]Hello!</s>[INST]You are terse.\n\nBye[/INST]"),
    ],
)
def test_renders_like_hugging_face(name, messages, bos, eos, expected):
    assert render(template(name), messages, bos_token=bos, eos_token=eos) == expected


def test_llama3_uses_strftime_now_for_todays_date():
    today = datetime.now().strftime("%d %b %Y")
    assert llama3(SYSTEM + HI) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        f"Cutting Knowledge Date: December 2023\nToday Date: {today}\n\nYou are terse.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


def test_llama3_extra_variables_reach_the_template():
    assert "Today Date: 01 Jan 2030" in llama3(HI, date_string="01 Jan 2030")


def test_no_generation_prompt():
    phi = render(template("microsoft-Phi-3.5-mini-instruct"), HI, add_generation_prompt=False, eos_token="<|endoftext|>")
    assert phi == "<|user|>\nHi<|end|>\n<|endoftext|>"


@pytest.mark.parametrize("name", ["Qwen-Qwen2.5-7B-Instruct", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
                                  "meta-llama-Llama-3.2-3B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407"])
def test_tools_are_rendered_as_json(name):
    out = render(template(name), HI, tools=[WEATHER], bos_token="<s>", eos_token="</s>")
    assert "get_weather" in out and '"city"' in out
    assert "Hi" in out


def test_tool_call_and_result_round_trip_in_qwen():
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]}
    result = {"role": "tool", "content": "rain"}
    out = render(template("Qwen-Qwen2.5-7B-Instruct"), HI + [call, result], tools=[WEATHER])
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in out
    assert "<tool_response>\nrain\n</tool_response>" in out


def test_tojson_keeps_non_ascii_text():
    tool = json.loads(json.dumps(WEATHER))
    tool["function"]["description"] = "Météo à Zürich 天气"
    assert "Météo à Zürich 天气" in render(template("Qwen-Qwen2.5-7B-Instruct"), HI, tools=[tool])


def test_chatml_family_smollm3():
    out = render(template("HuggingFaceTB-SmolLM3-3B"), HI)
    assert out.startswith("<|im_start|>system\n")
    assert out.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_raise_exception_becomes_invalid_request():
    with pytest.raises(InvalidRequest, match="System role not supported"):
        render(template("google-gemma-2-2b-it"), SYSTEM + HI)


def test_fallback_without_a_template_is_chatml():
    assert render(None, SYSTEM + HI) == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_fallback_by_architecture():
    assert builtin_for("gemma3") == "gemma" and builtin_for("phi3") == "phi3"
    assert builtin_for("llama") == "chatml" and builtin_for(None) == "chatml"
    assert render(None, HI, fallback="gemma") == "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_fallback_refuses_tools():
    with pytest.raises(InvalidRequest, match="no chat template"):
        render(None, HI, tools=[WEATHER])


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{% set x = messages.append(1) %}",
])
def test_sandbox_blocks_unsafe_templates(source):
    with pytest.raises(InvalidRequest):
        render(source, HI)


def test_syntax_error_is_invalid_request():
    with pytest.raises(InvalidRequest, match="syntax error"):
        render("{% for %}", HI)
