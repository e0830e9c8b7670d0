"""Tool calling: the parser, the streaming holdback, the prompt and grammar (pure), then tool calls
through the official openai and ollama clients on the real model."""

from __future__ import annotations

import json

import jsonschema
import llama_cpp as L
import ollama
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localrun.errors import InvalidRequest
from localrun.families import CallHoldback, parse_tool_calls
from localrun.families.call_format import HARMONY, HERMES, LLAMA3, QWEN3_CODER
from localrun.families.json_calls import HERMES_OPEN
from localrun.tools import lazy_call_grammar, prepare_messages, tool_call_grammar
from localrun.tools.prompt import format_call
from tests.tool_fixtures import ADD, BOOK, CITY_WEATHER, WEATHER, as_ollama, openai_tool, two_shot

MODEL = "smollm2"
NAMES = {"get_weather", "add"}

# --- parser -----------------------------------------------------------------------------------------

PARSED = [
    # (text, remaining text, [(name, arguments)])
    ('<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', "", [("add", {"a": 1, "b": 2})]),
    ('Let me check.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>',
     "Let me check.", [("get_weather", {"city": "Oslo"})]),
    ('<tool_call>{"name":"add","arguments":{"a":1,"b":2}}</tool_call>\n'
     '<tool_call>{"name":"add","arguments":{"a":3,"b":4}}</tool_call>', "",
     [("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})]),
    ('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}', "", [("add", {"a": 1, "b": 2})]),  # unclosed
    ('<tool_call>{"name": "add", "arguments": "{\\"a\\": 5}"}</tool_call>', "", [("add", {"a": 5})]),  # string args
    ('{"name": "get_weather", "parameters": {"city": "Rome"}}', "", [("get_weather", {"city": "Rome"})]),  # Llama 3
    ('  {"name": "add", "arguments": {"a": 1}}; {"name": "add", "arguments": {"a": 2}}', "",
     [("add", {"a": 1}), ("add", {"a": 2})]),
    ('[{"name": "add", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "X"}}] done', "done",
     [("add", {}), ("get_weather", {"city": "X"})]),
    ('[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 1}}]', "", [("add", {"a": 1, "b": 1})]),  # Mistral
    ('[TOOL_CALLS]add[ARGS]{"a": 2}[TOOL_CALLS]get_weather[ARGS]{"city": "Lima"}', "",
     [("add", {"a": 2}), ("get_weather", {"city": "Lima"})]),  # Mistral v11
    ('{"type": "function", "function": {"name": "add", "arguments": {"a": 9}}}', "", [("add", {"a": 9})]),
]
NOT_CALLS = [
    "The weather is nice.",
    '{"name": "Alice", "age": 3}',  # bare JSON that names no known tool
    '{"answer": 42}',
    "<tool_call>not json</tool_call>",
    '<tool_call>{"arguments": {}}</tool_call>',  # no name
    '<tool_call>{"name": "add", "arguments": [1, 2]}</tool_call>',  # arguments not an object
    'I would call {"name": "add", "arguments": {}} here',  # bare JSON mid-text is prose
    "[1, 2, 3]",
    "[TOOL_CALLS]",
    "<tool_call>",
]


@pytest.mark.parametrize("text, rest, calls", PARSED)
def test_parser_finds_calls_and_keeps_the_text_around_them(text, rest, calls):
    remaining, found = parse_tool_calls(text, NAMES)
    assert remaining == rest
    assert [(c.name, c.arguments) for c in found] == calls
    assert all(c.id.startswith("call_") and len(c.id) > 10 for c in found)
    assert len({c.id for c in found}) == len(found)


@pytest.mark.parametrize("text", NOT_CALLS)
def test_text_without_calls_comes_back_unchanged(text):
    assert parse_tool_calls(text, NAMES) == (text, [])


PIECES = st.lists(st.sampled_from([
    "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", '{"name": "add", ', '"arguments": {"a": 1}}',
    "{", "}", "[", "]", '"', "\\", "\n", " ", "<tool", "_call>", "add", "text", "é", ";",
]) | st.text(max_size=5), max_size=30)


@settings(max_examples=300, deadline=None)
@given(PIECES)
def test_parser_never_raises_and_holdback_streams_exactly_the_text(pieces):
    text = "".join(pieces)
    remaining, calls = parse_tool_calls(text, NAMES)
    assert isinstance(remaining, str)
    assert all(isinstance(c.arguments, dict) for c in calls)
    holdback = CallHoldback()
    streamed = "".join(holdback.push(piece) for piece in pieces)
    assert streamed + holdback.finish() == text


def test_holdback_keeps_calls_out_of_the_stream():
    holdback = CallHoldback()
    tokens = ["Sure", ", checking.", "\n<", "tool", "_call>", '{"name": "add", "arguments": {}}', "</tool_call>"]
    streamed = [holdback.push(t) for t in tokens]
    assert "".join(streamed) == "Sure, checking.\n"
    assert holdback.finish().startswith("<tool_call>")
    bare = CallHoldback()
    assert bare.push("\n ") == "" and bare.push('{"name"') == "" and bare.push(": 1}") == ""
    prose = CallHoldback()
    assert prose.push("<") == "" and prose.push("b>bold") == "<b>bold"


# --- prompt and grammar -------------------------------------------------------------------------------

SMOL_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
TOOLS_TEMPLATE = "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}"


def test_templates_without_tools_get_the_generic_prompt_and_written_out_history():
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "5"}, {"role": "tool", "content": "ok"}]
    messages, template_tools = prepare_messages(history, [ADD], SMOL_TEMPLATE)
    assert template_tools is None
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("Be brief.\n\nYou can call tools.")
    assert json.dumps(ADD) in messages[0]["content"]
    assert messages[2] == {"role": "assistant", "content": format_call("add", {"a": 2, "b": 3})}
    assert messages[3] == {"role": "user", "content": "<tool_response>\n5\n</tool_response>\n"
                                                       "<tool_response>\nok\n</tool_response>"}
    assert len(messages) == 4


def test_templates_with_tools_get_them_in_hugging_face_shape():
    history = [{"role": "user", "content": "hi"}]
    messages, template_tools = prepare_messages(history, [ADD], TOOLS_TEMPLATE)
    assert messages == history
    assert template_tools == [{"type": "function", "function": ADD}]


def test_grammar_only_for_required_and_named_choices():
    assert tool_call_grammar([ADD], "auto") is None
    assert tool_call_grammar([ADD], None) is None
    assert tool_call_grammar(None, "required") is None
    assert tool_call_grammar([ADD, WEATHER], {"name": "add"}).startswith('root ::= "<tool_call>\\n{\\"name\\": \\"" (call0-0)')
    with pytest.raises(InvalidRequest, match="not among the tools"):
        tool_call_grammar([ADD], {"name": "nope"})


def test_auto_choice_gets_a_lazy_grammar_woken_by_each_forms_call_marker():
    generic = lazy_call_grammar([ADD], "auto", (HERMES, HERMES), (HERMES_OPEN,))
    assert generic is not None and generic[1] == ["<tool_call>"]
    assert generic[0].startswith('root ::= one ([ \\n]* one)*\none ::= "<tool_call>\\n{\\"name\\": \\"" (call0-0)')
    single = lazy_call_grammar([ADD], "auto", (HERMES,), (HERMES_OPEN,), several=False)  # parallel calls off
    assert single is not None and single[0].startswith('root ::= "<tool_call>\\n{\\"name\\": \\"" (call0-0)')
    grammar, triggers = lazy_call_grammar([ADD], None, (QWEN3_CODER, HERMES), ("<tool_call>", "<function="))
    assert triggers == ["<tool_call>"] and 'one ::= ("<tool_call>\\n<function=" (call0-0)' in grammar
    assert '| ("<tool_call>\\n{\\"name\\": \\"" (call1-0)' in grammar
    assert lazy_call_grammar([ADD], "auto", (LLAMA3, HERMES), (HERMES_OPEN,))[1] == ["<tool_call>"]  # bare JSON: free
    assert lazy_call_grammar([ADD], "auto", (HARMONY,), ())[1] == [r"<\|channel\|>commentary to=functions\."]
    assert lazy_call_grammar([ADD], "auto", (HERMES,), (HERMES_OPEN,), ("<think>", "</think>"), True)[1] == \
        [r"</think>[\s\S]*?(<tool_call>)"]
    for tools, choice in (([ADD], "required"), ([ADD], {"name": "add"}), ([ADD], "none"), (None, "auto")):
        assert lazy_call_grammar(tools, choice, (HERMES,), (HERMES_OPEN,)) is None
    unsupported = {**ADD, "parameters": {"$ref": "https://example.com/schema.json"}}
    assert lazy_call_grammar([unsupported], "auto", (HERMES,), (HERMES_OPEN,)) is None  # the answer stays free


@pytest.mark.parametrize("in_thought", [False, True])
def test_a_call_drafted_inside_a_thought_does_not_wake_the_lazy_grammar(smollm2_path, in_thought):
    """llama.cpp's own matcher (std::regex) on SmolLM2's tokens: `<tool_call>` inside the thought
    leaves any token allowed; after the thought closes, it wakes the grammar, which then refuses words."""
    from localrun.engine.backend import Model
    from localrun.engine.sampler import Sampler
    from localrun.sampling import SamplingParams

    model = Model(str(smollm2_path), None)
    grammar, patterns = lazy_call_grammar([ADD], "auto", (HERMES,), (HERMES_OPEN,), ("<think>", "</think>"), in_thought)
    sampler = Sampler(model.vocab, model.n_vocab, SamplingParams(grammar=grammar, grammar_triggers=patterns).filled(), seed=1)
    word = model.tokenize(" banana", add_special=False, parse_special=False)[0]

    def write(text: str) -> None:
        for token in model.tokenize(text, add_special=False, parse_special=False):
            assert sampler.allows(token), text
            L.llama_sampler_accept(sampler.grammar, token)

    write(("" if in_thought else "<think>") + "I could write <tool_call> here.")
    assert sampler.allows(word)  # still asleep
    write("</think>\n<tool_call>\n")
    assert not sampler.allows(word) and sampler.allows(model.tokenize("{", add_special=False, parse_special=False)[0])
    sampler.free()


def test_each_tools_definitions_stay_its_own_in_the_grammar():
    other = {**BOOK, "name": "other", "parameters": {**BOOK["parameters"], "$defs": {"Person": {"type": "string"}}}}
    grammar = tool_call_grammar([BOOK, other], "required")
    assert 'call0-0 ::= "book_trip\\", \\"arguments\\": " tool0-0-args' in grammar
    assert "tool0-0-travellers-item ::= tool0-0-Person" in grammar and "tool0-1-travellers-item ::= tool0-1-string" in grammar


# --- the real model through the official clients ---------------------------------------------------------

@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0)


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("tool, choice", [
    (WEATHER, "required"), (ADD, {"type": "function", "function": {"name": "add"}}), (BOOK, "required"),
])
def test_forced_tool_call_arguments_match_the_schema(client, tool, choice):
    answer = client.chat.completions.create(
        model=MODEL, messages=ask("Plan my afternoon in Paris with Ann (30)."),
        tools=[openai_tool(tool), openai_tool(CITY_WEATHER | {"name": "other"})], tool_choice=choice,
        temperature=0, max_tokens=120)
    choice0 = answer.choices[0]
    assert choice0.finish_reason == "tool_calls"
    assert choice0.message.content is None
    [call] = choice0.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == tool["name"]
    jsonschema.validate(json.loads(call.function.arguments), tool["parameters"])


def test_streamed_tool_call_reassembles_into_the_same_call(client):
    request = dict(model=MODEL, messages=ask("What is 2 plus 3?"), tools=[openai_tool(ADD), openai_tool(WEATHER)],
                   tool_choice="required", temperature=0, max_tokens=80)
    whole = client.chat.completions.create(**request).choices[0].message.tool_calls
    chunks = list(client.chat.completions.create(**request, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == ""  # the call's raw text never leaks as content
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += delta.id or ""
            entry["name"] += delta.function.name or ""
            entry["arguments"] += delta.function.arguments or ""
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in whole]
    assert all(c["id"].startswith("call_") for c in calls.values())


def test_auto_choice_calls_after_examples_and_streams_no_raw_call(client):
    request = dict(model=MODEL, messages=two_shot("Weather in Rome?"), tools=[openai_tool(CITY_WEATHER)],
                   temperature=0, max_tokens=60)
    whole = client.chat.completions.create(**request).choices[0]
    assert whole.finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in whole.message.tool_calls] == \
        [("get_weather", {"city": "Rome"})]
    chunks = list(client.chat.completions.create(**request, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "<tool_call>" not in content and "get_weather" not in content
    named = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or [] if d.function.name]
    assert [(d.index, d.function.name) for d in named] == [(0, "get_weather")]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_parallel_calls_are_all_reported_unless_the_request_turns_them_off(client):
    request = dict(model=MODEL, messages=two_shot("Weather in Berlin and in Madrid?", calls=2),
                   tools=[openai_tool(CITY_WEATHER)], temperature=0, max_tokens=80)
    both = client.chat.completions.create(**request)
    assert [json.loads(c.function.arguments) for c in both.choices[0].message.tool_calls] == \
        [{"city": "Berlin"}, {"city": "Madrid"}]
    one = client.chat.completions.create(**request, parallel_tool_calls=False)
    assert [json.loads(c.function.arguments) for c in one.choices[0].message.tool_calls] == [{"city": "Berlin"}]
    assert one.choices[0].finish_reason == "tool_calls"
    # the lazy grammar ends the answer after one call, as llama-server's does: no second call is written
    assert one.usage.completion_tokens < both.usage.completion_tokens
    chunks = list(client.chat.completions.create(**request, parallel_tool_calls=False, stream=True))
    named = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or [] if d.function.name]
    assert [(d.index, d.function.name) for d in named] == [(0, "get_weather")]


def test_a_call_the_model_starts_under_auto_is_held_to_the_schema(client):
    """The history calls get_weather with any city; here the tool takes only three. Left free, the model
    copies its examples and calls it for Rome, a call the schema refuses; the lazy grammar, awake from
    the call's `<tool_call>`, makes it write a city the tool takes (the raw output, read from the
    logprobs, is that call and nothing more)."""
    cities = ["Paris", "London", "Berlin"]
    tool = {**CITY_WEATHER, "parameters": {"type": "object", "properties": {"city": {"enum": cities}},
                                           "required": ["city"]}}
    answer = client.chat.completions.create(model=MODEL, messages=two_shot("Weather in Rome?"), tools=[openai_tool(tool)],
                                            temperature=0, max_tokens=60, logprobs=True).choices[0]
    [call] = answer.message.tool_calls
    arguments = json.loads(call.function.arguments)
    assert answer.finish_reason == "tool_calls" and arguments["city"] in cities
    raw = "".join(token.token for token in answer.logprobs.content)
    assert raw == '<tool_call>\n{"name": "get_weather", "arguments": ' + json.dumps(arguments) + "}\n</tool_call>"


def test_tool_choice_none_answers_in_text(client):
    answer = client.chat.completions.create(model=MODEL, messages=two_shot("Weather in Rome?"),
                                            tools=[openai_tool(CITY_WEATHER)], tool_choice="none",
                                            temperature=0, max_tokens=30)
    assert answer.choices[0].message.tool_calls is None
    assert answer.choices[0].message.content


def test_unknown_named_tool_is_a_400(client):
    with pytest.raises(openai.BadRequestError, match="not among the tools"):
        client.chat.completions.create(model=MODEL, messages=ask("hi"), tools=[openai_tool(ADD)],
                                       tool_choice={"type": "function", "function": {"name": "nope"}}, max_tokens=5)


def test_ollama_client_tool_calls_and_round_trip(daemon):
    client = ollama.Client(host=daemon.url)
    history = as_ollama(two_shot("Weather in Rome?"))
    tools = [openai_tool(CITY_WEATHER)]
    answer = client.chat(model=MODEL, messages=history, tools=tools, options={"temperature": 0, "num_predict": 60})
    [call] = answer.message.tool_calls
    assert (call.function.name, dict(call.function.arguments)) == ("get_weather", {"city": "Rome"})
    streamed = list(client.chat(model=MODEL, messages=history, tools=tools, stream=True,
                                options={"temperature": 0, "num_predict": 60}))
    assert "<tool_call>" not in "".join(part.message.content or "" for part in streamed)
    calls = [c for part in streamed for c in (part.message.tool_calls or [])]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Rome"})]
    history += [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                                                    "arguments": {"city": "Rome"}}}]},
                {"role": "tool", "content": "25 C", "tool_name": "get_weather"}]
    final = client.chat(model=MODEL, messages=history, tools=tools, options={"temperature": 0, "num_predict": 30})
    assert final.message.content and not final.message.tool_calls
