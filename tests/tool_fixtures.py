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


def two_shot(question: str) -> list[dict]:
    """OpenAI-shaped history: two weather questions answered through get_weather, then `question`."""
    messages: list[dict] = []
    for i, (city, result) in enumerate((("Paris", "18 C"), ("London", "12 C"))):
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "get_weather", "arguments": f'{{"city": "{city}"}}'}}
        messages += [{"role": "user", "content": f"Weather in {city}?"},
                     {"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"call_{i}", "content": result},
                     {"role": "assistant", "content": f"It is {result} in {city}."}]
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
