"""Tool calls in each family's own format, end to end: the bundled SmolLM2 under a family's real chat
template (a Modelfile TEMPLATE over /api/create, so every family shares one runner), with a forced
tool_choice whose grammar writes the family's format (Qwen3-Coder's XML, gpt-oss's harmony header,
Mistral's [TOOL_CALLS], Llama 3's JSON, DeepSeek's and Kimi's tool tokens ...), read back by the
family's own parser, over OpenAI chat (streamed and not) and Ollama /api/chat.

The raw output is checked through the logprobs, which carry every generated token, also those of a
call held back from the content: so a grammar falling back to the generic `<tool_call>` format,
which every parser also reads, would fail here. Templates: tests/data/templates (see its README)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import ollama
import openai
import pytest

from localrun.engine.chat_template import render
from localrun.families import OutputParser, family_for
from localrun.families.call_format import HERMES
from localrun.tools.grammar import tool_call_grammar
from tests.tool_fixtures import ADD, CITY_WEATHER, WEATHER, openai_tool

TEMPLATES = Path(__file__).parent / "data" / "templates"
GENERIC_CALL = '<tool_call>\n{"name"'
FAMILIES = {  # template: (the family chosen, what its raw forced call of `add` starts with)
    "Qwen3-Coder": ("qwen3-coder", "<tool_call>\n<function=add>\n<parameter=a>\n"),
    "openai-gpt-oss-120b": ("gpt-oss", "<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"),
    "unsloth-mistral-Devstral-Small-2507": ("mistral", "[TOOL_CALLS]add[ARGS]{"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("mistral", '[TOOL_CALLS][{"name": "add", "arguments": {'),
    "meta-llama-Llama-3.1-8B-Instruct": ("llama3", '{"name": "add", "parameters": {'),
    "deepseek-ai-DeepSeek-V3.1": ("deepseek", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": (
        "deepseek", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{"),
    "GLM-4.6": ("glm", "<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>"),
    "moonshotai-Kimi-K2": ("kimi-k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.add:0"
                                      "<|tool_call_argument_begin|>{"),
    "ibm-granite-granite-3.3-2B-Instruct": ("granite", '<|tool_call|>[{"name": "add", "arguments": {'),
}
ADD_NAMED = {"type": "function", "function": {"name": "add"}}
QUESTION = [{"role": "user", "content": "What is 2 plus 3?"}]


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


def model_name(name: str) -> str:
    return "fam-" + name.lower().replace(".", "-")[:40]


# --- pure: each family's forcing grammar and written call ------------------------------------------------

@pytest.mark.parametrize("name", FAMILIES)
def test_each_family_forces_its_own_call_format_and_its_parser_reads_it(name):
    family = family_for(template(name))
    expected_family, start = FAMILIES[name]
    assert family.name == expected_family
    written = family.call_format.write("add", {"a": 2, "b": 3})
    assert written.startswith(start)
    parser = OutputParser(family, "", {"add"})
    streamed = "".join(parser.push(char)[1] for char in written)
    _, rest, calls = parser.finish()
    assert (streamed + rest, [(c.name, c.arguments) for c in calls]) == ("", [("add", {"a": 2, "b": 3})])
    grammar = tool_call_grammar([ADD, WEATHER], "required", family.call_format)
    assert start.split("add")[0].replace("\n", "\\n").replace('"', '\\"') in grammar


WRITES_CALLS = ["Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "Qwen3-Coder", "deepseek-ai-DeepSeek-V3.1",
                "mistralai-Ministral-3-14B-Reasoning-2512", "unsloth-mistral-Devstral-Small-2507", "GLM-4.6",
                "moonshotai-Kimi-K2", "CohereForAI-c4ai-command-r7b-12-2024-tool_use", "meta-llama-Llama-3.1-8B-Instruct"]


@pytest.mark.parametrize("name", WRITES_CALLS)
def test_a_forced_call_is_what_the_familys_template_writes_for_a_past_call(name):
    """(gpt-oss's template writes the recipient before the channel, its model card after; Mistral
    Nemo's adds the call's id: both read back the same, as the test above shows.)"""
    call = {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    rendered = render(template(name), [{"role": "user", "content": "Weather in Oslo?"},
                                       {"role": "assistant", "content": "", "tool_calls": [call]}],
                      tools=[openai_tool(CITY_WEATHER)], bos_token="<s>", eos_token="</s>")
    assert family_for(template(name)).call_format.write("get_weather", {"city": "Oslo"}) in rendered


NEMO = "mistralai-Mistral-Nemo-Instruct-2407"
ROUND_TRIP = [*QUESTION, {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call_3f2a9c0d1e2b4a5f6c7d8e9f", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
    {"role": "tool", "tool_call_id": "call_3f2a9c0d1e2b4a5f6c7d8e9f", "content": "5"}]


@pytest.mark.parametrize("history", [ROUND_TRIP, [{k: v for k, v in m.items() if k != "tool_call_id"} for m in ROUND_TRIP]])
def test_mistral_v3_templates_get_the_nine_character_call_ids_they_insist_on(history):
    """OpenAI's ids (call_...) and Ollama's results without an id both reach Nemo's template as one
    9-character id shared by the call and its result; unmapped, the template refuses them."""
    family = family_for(template(NEMO))
    with pytest.raises(Exception, match="length 9"):
        render(template(NEMO), ROUND_TRIP, bos_token="<s>", eos_token="</s>")
    shaped = family.with_call_ids(history)
    call_id, result_id = shaped[1]["tool_calls"][0]["id"], shaped[2]["tool_call_id"]
    assert call_id == result_id and len(call_id) == 9 and call_id.isalnum()
    assert f'"call_id": "{call_id}"' in render(template(NEMO), shaped, bos_token="<s>", eos_token="</s>")
    assert family_for(template("unsloth-mistral-Devstral-Small-2507")).with_call_ids(history) == history


def test_command_rs_action_format_reads_back():
    """Command R (not R7B) has no template among the test data: its marker alone chooses it."""
    family = family_for("{{ 'Action: ```json' }}")
    written = family.call_format.write("add", {"a": 2, "b": 3})
    parser = OutputParser(family, "", {"add"})
    parser.push(written)
    _, rest, calls = parser.finish()
    assert (family.name, rest, [(c.name, c.arguments) for c in calls]) == ("command-r", "", [("add", {"a": 2, "b": 3})])


@pytest.mark.parametrize("name", ["Qwen3-Coder", "GLM-4.6"])
def test_xml_formats_take_strings_bare_enums_as_words_and_the_rest_as_json(name):
    family = family_for(template(name))
    grammar = tool_call_grammar([WEATHER, ADD], "required", family.call_format)
    assert "xml-text" in grammar and '("celsius" | "fahrenheit")' in grammar and "tool0-1-0-root" in grammar
    optional = {**CITY_WEATHER, "parameters": {**CITY_WEATHER["parameters"], "required": []}}
    assert ")?" in tool_call_grammar([optional], "required", family.call_format)  # an optional argument may be left out


def test_the_generic_family_still_forces_the_hermes_call():
    assert family_for(template("google-gemma-2-2b-it")).call_format == HERMES
    assert tool_call_grammar([ADD], "required").startswith('root ::= "<tool_call>\\n{\\"name\\": \\"" (call0-0)')


# --- the real model over HTTP ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def models(daemon) -> dict[str, str]:
    """One created model per family template, all over the bundled SmolLM2's blob."""
    made = {}
    for name in OVER_HTTP:
        reply = httpx.post(f"{daemon.url}/api/create", timeout=60, json={
            "model": model_name(name), "from": "smollm2", "template": template(name), "stream": False})
        assert reply.status_code == 200, reply.text
        made[name] = model_name(name)
    return made


@pytest.fixture(scope="module")
def oai(daemon) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0, timeout=180)


def forced(oai: openai.OpenAI, model: str, **extra):
    return oai.chat.completions.create(model=model, messages=QUESTION, tools=[openai_tool(WEATHER), openai_tool(ADD)],
                                       tool_choice=ADD_NAMED, temperature=0, max_tokens=160, **extra)


OVER_HTTP = ["Qwen3-Coder", "openai-gpt-oss-120b", "mistralai-Mistral-Nemo-Instruct-2407", "meta-llama-Llama-3.1-8B-Instruct",
             "deepseek-ai-DeepSeek-V3.1"]  # the rest are covered above from plain data (each costs a prefill)


@pytest.mark.parametrize("name", OVER_HTTP)
def test_a_forced_call_is_written_in_the_familys_format_and_comes_back_parsed(oai, models, name):
    whole = forced(oai, models[name], logprobs=True).choices[0]
    raw = bytes(byte for item in whole.logprobs.content for byte in item.bytes).decode()
    assert raw.startswith(FAMILIES[name][1]) and GENERIC_CALL not in raw, raw
    assert whole.finish_reason == "tool_calls" and whole.message.content is None
    [call] = whole.message.tool_calls
    assert call.function.name == "add" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), ADD["parameters"])

    chunks = list(forced(oai, models[name], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert [d.index for d in deltas] == [0, 0]  # the call opens with its name, its arguments follow as a delta
    assert deltas[0].id.startswith("call_") and (deltas[0].function.name, deltas[0].function.arguments) == ("add", "")
    assert json.loads(deltas[1].function.arguments) == json.loads(call.function.arguments)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


LLAMA3 = "meta-llama-Llama-3.1-8B-Instruct"


def llama3_call(name: str, arguments: dict) -> dict:
    """A JSON schema that makes the model write one Llama 3 JSON call (`{"name": ..., "parameters": ...}`):
    Ollama's API has no tool_choice, but its `format` forces this family's call all the same."""
    return {"type": "object", "properties": {"name": {"const": name}, "parameters": arguments},
            "required": ["name", "parameters"], "additionalProperties": False}


def test_ollama_chat_reads_a_llama3_call_streamed_and_not(daemon, models):
    client = ollama.Client(host=daemon.url, timeout=180)
    request = dict(model=models[LLAMA3], messages=QUESTION, tools=[openai_tool(ADD)],
                   format=llama3_call("add", ADD["parameters"]), options={"temperature": 0, "num_predict": 60})
    answer = client.chat(**request)
    [call] = answer.message.tool_calls
    assert call.function.name == "add" and answer.message.content == "" and answer.done_reason == "stop"
    jsonschema.validate(dict(call.function.arguments), ADD["parameters"])
    streamed = list(client.chat(**request, stream=True))
    assert "".join(part.message.content or "" for part in streamed) == ""
    calls = [c for part in streamed for c in part.message.tool_calls or []]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [("add", dict(call.function.arguments))]


def test_two_calls_stream_with_distinct_indices_and_their_arguments_as_deltas(oai, models):
    """Two Llama 3 calls in one answer (a JSON list, as the family writes several), forced by a schema."""
    two = {"type": "array", "items": llama3_call("add", ADD["parameters"]), "minItems": 2, "maxItems": 2}
    request = dict(model=models[LLAMA3], messages=QUESTION, tools=[openai_tool(ADD)], temperature=0, max_tokens=80,
                   response_format={"type": "json_schema", "json_schema": {"name": "calls", "schema": two}})
    whole = oai.chat.completions.create(**request).choices[0]
    assert whole.finish_reason == "tool_calls" and [c.function.name for c in whole.message.tool_calls] == ["add", "add"]
    chunks = list(oai.chat.completions.create(**request, stream=True))
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    opened = [(d.index, d.function.name) for d in deltas if d.id]
    assert opened == [(0, "add"), (1, "add")] and len({d.id for d in deltas if d.id}) == 2
    arguments = {i: "".join(d.function.arguments or "" for d in deltas if d.index == i) for i in (0, 1)}
    assert [json.loads(arguments[i]) for i in (0, 1)] == [json.loads(c.function.arguments) for c in whole.message.tool_calls]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_tool_round_trip_reaches_mistral_nemo_over_ollama_and_openai(daemon, oai, models):
    """Before, Nemo's template refused both: Ollama's results carry no id, OpenAI's ids are not 9 characters."""
    answer = ollama.Client(host=daemon.url, timeout=180).chat(
        model=models[NEMO], tools=[openai_tool(ADD)], options={"temperature": 0, "num_predict": 8},
        messages=[*QUESTION, {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]}, {"role": "tool", "content": "5"}])
    assert answer.done
    reply = oai.chat.completions.create(model=models[NEMO], messages=ROUND_TRIP, tools=[openai_tool(ADD)],
                                        temperature=0, max_tokens=8)
    assert reply.choices[0].finish_reason


MALFORMED = [  # a Llama 3 call the model writes whole, which is not a call of the offered tools
    llama3_call("subtract", ADD["parameters"]),  # a tool nobody offered
    llama3_call("add", {"type": "string", "enum": ["two and three"]}),  # arguments that are not an object
]


@pytest.mark.parametrize("schema", MALFORMED)
def test_a_malformed_call_comes_back_as_text_and_the_request_succeeds(daemon, oai, models, schema):
    answer = oai.chat.completions.create(
        model=models[LLAMA3], messages=QUESTION, tools=[openai_tool(ADD)], temperature=0, max_tokens=60,
        response_format={"type": "json_schema", "json_schema": {"name": "call", "schema": schema}}).choices[0]
    assert answer.finish_reason == "stop" and answer.message.tool_calls is None
    assert json.loads(answer.message.content)["name"] == schema["properties"]["name"]["const"]
    chunks = list(oai.chat.completions.create(
        model=models[LLAMA3], messages=QUESTION, tools=[openai_tool(ADD)], temperature=0, max_tokens=60, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "call", "schema": schema}}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer.message.content
    assert chunks[-1].choices[0].finish_reason == "stop"
    client = ollama.Client(host=daemon.url, timeout=180)
    native = client.chat(model=models[LLAMA3], messages=QUESTION, tools=[openai_tool(ADD)], format=schema,
                         options={"temperature": 0, "num_predict": 60})
    assert not native.message.tool_calls  # (Ollama's sampling defaults differ from OpenAI's: so may the spacing)
    assert json.loads(native.message.content)["name"] == schema["properties"]["name"]["const"]
