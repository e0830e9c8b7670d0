"""Tool calling, independent of any API dialect: how tools reach a model and how calls come back.

    prompt.py    tools into the prompt: the chat template's own support, or a generic tool prompt
    grammar.py   GBNF that forces a valid call for tool_choice "required" / a named tool
    parse.py     tool calls out of generated text (Hermes, Llama 3 JSON, Mistral, plain JSON)
    stream.py    hold back streamed text that may be a tool call, so it never leaks as content
    schema.py    which JSON-schema keywords a grammar can enforce (structured output refuses the rest)

    bounds.py    what a schema may cost as a grammar (checked at the server's edge)

Used by the runner (which owns the template and the generated text) and by the server, which checks
schemas before a runner sees them; imports no server, and the engine's JSON-schema converter only
when `tool_call_grammar` is first used, so the daemon does not load llama.cpp to check a request.
"""

from typing import Any

from localrun.tools.parse import parse_tool_calls
from localrun.tools.prompt import active_tools, prepare_messages
from localrun.tools.stream import CallHoldback


def __getattr__(name: str) -> Any:
    if name == "tool_call_grammar":
        from localrun.tools.grammar import tool_call_grammar

        return tool_call_grammar
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CallHoldback", "active_tools", "parse_tool_calls", "prepare_messages", "tool_call_grammar"]
