"""Tools and conversations the tool tests share: realistic schemas, and a two-shot history after
which even SmolLM2-135M calls a tool on its own (tool_choice auto)."""

from __future__ import annotations

import json

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"],
    },
}
CITY_WEATHER = {  # what the two-shot history calls
    "name": "get_weather",
    "description": "Get the current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ADD = {
    "name": "add",
    "description": "Add two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"], "additionalProperties": False},
}
BOOK = {  # nested objects, arrays and a $ref into $defs, as pydantic writes them
    "name": "book_trip",
    "description": "Book a trip for some travellers",
    "parameters": {
        "type": "object",
        "properties": {
            "destination": {"type": "string"},
            "travellers": {"type": "array", "items": {"$ref": "#/$defs/Person"}, "minItems": 1, "maxItems": 3},
        },
        "required": ["destination", "travellers"],
        "$defs": {"Person": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                             "required": ["name", "age"], "additionalProperties": False}},
    },
}


def openai_tool(tool: dict) -> dict:
    return {"type": "function", "function": tool}


SHOTS = ((("Paris", "18 C"), ("Rome", "21 C")), (("London", "12 C"), ("Oslo", "5 C")))


def two_shot(question: str, calls: int = 1) -> list[dict]:
    """OpenAI-shaped history: two weather questions answered through get_weather, then `question`. With
    `calls=2` each of them names two cities, answered by two calls in one turn: after it SmolLM2 calls in
    parallel too."""
    messages: list[dict] = []
    for i, shot in enumerate(SHOTS):
        asked = shot[:calls]
        ids = [f"call_{i}"] + [f"call_{i}_{j}" for j in range(1, calls)]
        made = [{"id": id_, "type": "function", "function": {"name": "get_weather", "arguments": f'{{"city": "{city}"}}'}}
                for id_, (city, _) in zip(ids, asked)]
        said = " and ".join(f"{result} in {city}" for city, result in asked)
        messages += [
            {"role": "user", "content": "Weather in " + " and in ".join(city for city, _ in asked) + "?"},
            {"role": "assistant", "content": None, "tool_calls": made},
            *[{"role": "tool", "tool_call_id": id_, "content": result} for id_, (_, result) in zip(ids, asked)],
            {"role": "assistant", "content": f"It is {said}."}]
    return messages + [{"role": "user", "content": question}]


def as_ollama(messages: list[dict]) -> list[dict]:
    """OpenAI-shaped messages as Ollama writes them: arguments as objects, tool results without ids."""
    def convert(message: dict) -> dict:
        out = {k: v for k, v in message.items() if k not in ("tool_call_id", "tool_calls")}
        if message.get("tool_calls"):
            out["tool_calls"] = [{"function": {"name": c["function"]["name"],
                                               "arguments": json.loads(c["function"]["arguments"])}}
                                 for c in message["tool_calls"]]
        return out

    return [convert(m) for m in messages]


def as_anthropic(messages: list[dict]) -> list[dict]:
    """OpenAI-shaped messages as Anthropic writes them: calls as tool_use blocks, the results of one turn
    as one user message of tool_result blocks."""
    out: list[dict] = []
    for message in messages:
        if message["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": message["content"]}
            if out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif message.get("tool_calls"):
            out.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                 "input": json.loads(c["function"]["arguments"])} for c in message["tool_calls"]]})
        else:
            out.append({"role": message["role"], "content": message["content"]})
    return out


def as_responses(messages: list[dict]) -> list[dict]:
    """OpenAI chat messages as Responses API input items: calls and their results as items of their own."""
    items: list[dict] = []
    for message in messages:
        if message["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"],
                          "output": message["content"]})
        elif message.get("tool_calls"):
            items += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                       "arguments": c["function"]["arguments"]} for c in message["tool_calls"]]
        elif message["role"] == "assistant":
            items.append({"role": "assistant", "content": [{"type": "output_text", "text": message["content"]}]})
        else:
            items.append({"role": message["role"], "content": message["content"]})
    return items
