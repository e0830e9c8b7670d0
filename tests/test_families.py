"""Model families (pure): each family is chosen from its real chat template, reads the tool calls that
template writes for a past turn, splits thinking from the answer as it streams, and steers thinking
through the template's own switch. Templates: tests/data/templates (see its README)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localrun.engine.chat_template import render
from localrun.families import Family, OutputParser, family_for

TEMPLATES = Path(__file__).parent / "data" / "templates"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CALL = {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
ASK = [{"role": "user", "content": "Weather in Oslo?"}]


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


def family(name: str) -> Family:
    return family_for(template(name))


def prompt(name: str, messages: list[dict] = ASK, **extra) -> str:
    return render(template(name), messages, tools=[WEATHER], bos_token="<s>", eos_token="</s>", **extra)


def parse(fam: Family, text: str, prompt_text: str = "", pieces: int = 1) -> tuple[str, str, list]:
    """(thinking, answer, calls) after streaming `text` in pieces of `pieces` characters."""
    parser = OutputParser(fam, prompt_text, {"get_weather"})
    reasoning, content = "", ""
    for start in range(0, len(text), pieces):
        r, c = parser.push(text[start:start + pieces])
        reasoning, content = reasoning + r, content + c
    r, c, calls = parser.finish()
    return reasoning + r, content + c, [(call.name, call.arguments) for call in calls]


CHOSEN = [  # template, family, thinks, a switch turns the thinking off
    ("Qwen-Qwen2.5-7B-Instruct", "hermes", False, True),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes", False, True),
    ("Qwen-Qwen3-0.6B", "think", True, True),
    ("Qwen-QwQ-32B", "think", True, True),
    ("HuggingFaceTB-SmolLM3-3B", "think", True, True),
    ("Qwen3-Coder", "qwen3-coder", False, True),
    ("openai-gpt-oss-120b", "gpt-oss", True, False),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek", True, True),
    ("deepseek-ai-DeepSeek-V3.1", "deepseek", True, True),
    ("mistralai-Ministral-3-14B-Reasoning-2512", "magistral", True, False),
    ("unsloth-mistral-Devstral-Small-2507", "mistral", False, True),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistral", False, True),
    ("GLM-4.6", "glm", True, True),
    ("moonshotai-Kimi-K2", "kimi-k2", False, True),
    ("Kimi-K2-Thinking", "kimi-k2", True, False),
    ("ibm-granite-granite-3.3-2B-Instruct", "granite", True, True),
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", "command-r", True, True),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama3", False, True),
    ("meta-llama-Llama-3.2-3B-Instruct", "generic", False, True),
    ("google-gemma-2-2b-it", "generic", False, True),
]


@pytest.mark.parametrize("name, expected, thinks, can_stop", CHOSEN)
def test_the_family_is_chosen_from_the_chat_template(name, expected, thinks, can_stop):
    fam = family(name)
    assert (fam.name, fam.thinks, fam.can_stop_thinking) == (expected, thinks, can_stop)


WRITES_CALLS = [  # templates that write a past call the way the model writes it
    "Qwen-Qwen2.5-7B-Instruct", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "Qwen-Qwen3-0.6B", "Qwen3-Coder",
    "openai-gpt-oss-120b", "deepseek-ai-DeepSeek-V3.1", "mistralai-Ministral-3-14B-Reasoning-2512",
    "unsloth-mistral-Devstral-Small-2507", "mistralai-Mistral-Nemo-Instruct-2407", "GLM-4.6", "moonshotai-Kimi-K2",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use", "meta-llama-Llama-3.1-8B-Instruct",
    "meta-llama-Llama-3.2-3B-Instruct",
]


@pytest.mark.parametrize("name", WRITES_CALLS)
@pytest.mark.parametrize("pieces", [1, 1000])
def test_each_family_reads_the_call_its_own_template_writes(name, pieces):
    """The template renders a past assistant call; what follows the generation prompt is exactly
    what the model would have generated, so the family's parser must find the call in it."""
    asked = prompt(name)
    whole = prompt(name, [*ASK, {"role": "assistant", "content": "", "tool_calls": [CALL]}], add_generation_prompt=False)
    assert whole.startswith(asked)
    reasoning, content, calls = parse(family(name), whole[len(asked):], asked, pieces)
    assert calls == [("get_weather", {"city": "Oslo"})]
    assert "get_weather" not in content and "Oslo" not in content and not reasoning


CONSTRUCTED = [  # templates that do not write past calls the model's way: outputs as the model cards show them
    ("ibm-granite-granite-3.3-2B-Instruct", '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Oslo"}}]'),
    ("HuggingFaceTB-SmolLM3-3B", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", 'Oslo it is.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'
     'function<｜tool▁sep｜>get_weather\n```json\n{"city": "Oslo"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
    ("Kimi-K2-Thinking", '<think>Look it up.</think><|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0'
     '<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|><|tool_calls_section_end|>'),
    ("google-gemma-2-2b-it", '{"name": "get_weather", "arguments": {"city": "Oslo"}}'),
    ("Qwen-QwQ-32B", '<think>\nCall it.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'),
]


@pytest.mark.parametrize("name, output", CONSTRUCTED)
@pytest.mark.parametrize("pieces", [1, 3, 1000])
def test_each_family_reads_calls_written_as_its_model_writes_them(name, output, pieces):
    asked = prompt(name, add_generation_prompt=True)
    if name == "Kimi-K2-Thinking":  # its template mutates lists, which Jinja's sandbox (and HF's) refuses
        asked = ""
    _, content, calls = parse(family(name), output, asked, pieces)
    assert calls == [("get_weather", {"city": "Oslo"})] and "get_weather" not in content


THOUGHTS = [  # template, output, template variables, (thinking, answer)
    ("Qwen-Qwen3-0.6B", "<think>\nThe user greets me.\n</think>\n\nHello!", {}, ("The user greets me.", "Hello!")),
    ("Qwen-Qwen3-0.6B", "Hello!", {"enable_thinking": False}, ("", "Hello!")),
    ("HuggingFaceTB-SmolLM3-3B", "<think>\nGreet back.\n</think>\nHello!", {}, ("Greet back.", "Hello!")),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "Greet back.\n</think>\n\nHello!", {"enable_thinking": True},
     ("Greet back.", "Hello!")),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "Hello!", {"enable_thinking": False}, ("", "Hello!")),
    ("GLM-4.6", "<think>Greet back.</think>\nHello!", {}, ("Greet back.", "Hello!")),
    ("openai-gpt-oss-120b", "<|channel|>analysis<|message|>Greet back.<|end|><|start|>assistant<|channel|>final"
     "<|message|>Hello!", {}, ("Greet back.", "Hello!")),
    ("mistralai-Ministral-3-14B-Reasoning-2512", "[THINK]Greet back.[/THINK]Hello!", {}, ("Greet back.", "Hello!")),
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", "<|START_THINKING|>Greet back.<|END_THINKING|>"
     "<|START_RESPONSE|>Hello!", {}, ("Greet back.", "<|START_RESPONSE|>Hello!")),
    ("ibm-granite-granite-3.3-2B-Instruct", "<think>Greet back.</think><response>Hello!</response>",
     {"thinking": True}, ("Greet back.", "<response>Hello!</response>")),
    ("Qwen-Qwen3-0.6B", "I think <think> is a tag.", {}, ("", "I think <think> is a tag.")),  # only at the start
]


@pytest.mark.parametrize("name, output, variables, expected", THOUGHTS)
@pytest.mark.parametrize("pieces", [1, 2, 1000])
def test_thinking_is_split_from_the_answer_as_it_streams(name, output, variables, expected, pieces):
    asked = prompt(name, **variables)
    reasoning, content, calls = parse(family(name), output, asked, pieces)
    assert (reasoning, content, calls) == (*expected, [])


SWITCHES = [  # template, think, effort, what the rendered prompt then shows
    ("Qwen-Qwen3-0.6B", False, None, lambda p: p.endswith("<think>\n\n</think>\n\n")),
    ("Qwen-Qwen3-0.6B", True, None, lambda p: p.endswith("<|im_start|>assistant\n")),
    ("HuggingFaceTB-SmolLM3-3B", False, None, lambda p: "/no_think" in p),
    ("HuggingFaceTB-SmolLM3-3B", True, None, lambda p: "/think" in p),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", None, None, lambda p: p.endswith("<think>\n")),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", False, None, lambda p: p.endswith("<think>\n</think>")),
    ("GLM-4.6", False, None, lambda p: p.endswith("<think></think>")),
    ("openai-gpt-oss-120b", None, "low", lambda p: "Reasoning: low" in p),
    ("openai-gpt-oss-120b", None, "high", lambda p: "Reasoning: high" in p),
    ("ibm-granite-granite-3.3-2B-Instruct", None, None, lambda p: "<think>" not in p),
    ("ibm-granite-granite-3.3-2B-Instruct", True, None, lambda p: "<think>" in p),
]


@pytest.mark.parametrize("name, think, effort, shows", SWITCHES)
def test_thinking_is_steered_by_the_templates_own_switch(name, think, effort, shows):
    fam = family(name)
    rendered = render(template(name), ASK, bos_token="<s>", eos_token="</s>", **fam.template_vars(think, effort))
    assert shows(rendered), rendered[-300:]


def test_a_prompt_that_opens_a_thought_starts_the_output_inside_it():
    fam = family("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")
    assert fam.splitter(prompt("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", enable_thinking=True)).thinking
    assert not fam.splitter(prompt("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", enable_thinking=False)).thinking


HISTORY = [  # template, how the past thinking shows in the prompt (None: the template drops it)
    ("Qwen-Qwen3-0.6B", "<think>\nI need the weather.\n</think>"),
    ("openai-gpt-oss-120b", "<|channel|>analysis<|message|>I need the weather.<|end|>"),
    ("mistralai-Ministral-3-14B-Reasoning-2512", "[THINK]I need the weather.[/THINK]"),
    ("GLM-4.6", "<think>I need the weather.</think>"),
    ("deepseek-ai-DeepSeek-V3.1", None),
]


@pytest.mark.parametrize("name, shown", HISTORY)
def test_thinking_sent_back_is_rendered_where_the_template_reads_it(name, shown):
    fam = family(name)
    past = fam.with_history({"role": "assistant", "content": "", "tool_calls": [CALL],
                             "reasoning_content": "I need the weather."})
    rendered = prompt(name, [*ASK, past, {"role": "tool", "tool_call_id": "call12345", "content": "12 C"}])
    if shown is None:
        assert "I need the weather." not in rendered
    else:
        assert shown in rendered


MALFORMED = [
    ("Qwen3-Coder", "<tool_call>\n<function=get_weather>\n<oops/>\n</function>\n</tool_call>"),
    ("openai-gpt-oss-120b", "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{oops"),
    ("moonshotai-Kimi-K2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
     "<|tool_call_argument_begin|>{oops<|tool_call_end|><|tool_calls_section_end|>"),
    ("deepseek-ai-DeepSeek-V3.1", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>[1]<｜tool▁call▁end｜>"),
    ("GLM-4.6", "<tool_call>get_weather\nnot arguments\n</tool_call>"),
    ("ibm-granite-granite-3.3-2B-Instruct", "<|tool_call|>[{\"name\": 3}]"),
]


@pytest.mark.parametrize("name, output", MALFORMED)
def test_a_malformed_call_comes_back_as_text(name, output):
    _, content, calls = parse(family(name), output, "", 2)
    assert calls == [] and "oops" in content or "not arguments" in content or "[1]" in content or '"name": 3' in content


MARKERS = sorted({m for name, *_ in CHOSEN for m in (*family(name).call_markers, *(family(name).think or ()))}
                 | {"<|channel|>", "<|message|>", "<|end|>", "<|start|>", "to=functions.get_weather", "</tool_call>"})


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from([c[0] for c in CHOSEN if c[0] != "Kimi-K2-Thinking"]),
       pieces=st.lists(st.sampled_from([*MARKERS, '{"city": "Oslo"}', "{", "}", "\n", " ", "text", "get_weather"])
                       | st.text(max_size=4), max_size=25))
def test_no_output_makes_a_parser_raise_and_plain_text_passes_unchanged(name, pieces):
    """Whatever the model writes, the parser answers; text with no marker character in it comes
    out as the answer exactly as it streamed in."""
    parser = OutputParser(family(name), "", {"get_weather"})
    streamed = "".join(parser.push(piece)[1] for piece in pieces)
    reasoning, rest, _ = parser.finish()
    text = "".join(pieces)
    if not any(char in text for char in "<[{|"):
        assert (reasoning, streamed + rest) == ("", text)


@pytest.mark.parametrize("name", [c[0] for c in CHOSEN])
def test_every_family_reads_the_generic_call_a_forced_tool_choice_writes(name):
    forced = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    _, content, calls = parse(family(name), forced, "", 4)
    assert (content, calls) == ("", [("get_weather", {"city": "Oslo"})])


@pytest.mark.parametrize("name, expected", [
    ("Qwen-Qwen2.5-7B-Instruct", ["completion", "tools", "embedding"]),
    ("Qwen-Qwen3-0.6B", ["completion", "tools", "embedding", "thinking"]),
    ("openai-gpt-oss-120b", ["completion", "tools", "embedding", "thinking", "thinking_always"]),
])
def test_api_show_capabilities_say_whether_a_model_thinks_and_whether_it_can_stop(name, expected):
    from types import SimpleNamespace

    from localrun.server.ollama.translate import capabilities

    info = SimpleNamespace(architecture="llama", metadata={}, chat_template=template(name))
    assert capabilities(info) == expected


def test_a_call_cut_short_leaves_no_markup_but_a_complete_malformed_one_stays_text():
    fam = family("Qwen-Qwen2.5-7B-Instruct")
    for cut_off, expected in ((True, "Let me check.\n"), (False, 'Let me check.\n<tool_call>\n{"name": "get_wea')):
        parser = OutputParser(fam, "", {"get_weather"})
        streamed = parser.push('Let me check.\n<tool_call>\n{"name": "get_wea')[1]
        _, rest, calls = parser.finish(cut_off=cut_off)
        assert (streamed + rest, calls) == (expected, [])
