"""Tool calling, independent of any API dialect: how tools reach a model, and the grammar that forces a call.

    prompt.py    tools into the prompt: the chat template's own support, or a generic tool prompt
    grammar.py   GBNF that holds a call to its schema: forced for tool_choice "required" / a named tool,
                 lazy (from the call's first marker) for "auto"
    schema.py    which JSON-schema keywords a grammar can enforce (structured output refuses the rest)
    bounds.py    what a schema may cost as a grammar (checked at the server's edge)

Calls coming back out of generated text are the model family's business (localrun.families).
Used by the runner (which owns the template and the generated text) and by the server, which checks
schemas before a runner sees them; imports no server, and the engine's JSON-schema converter only
when a grammar is first made, so the daemon does not load llama.cpp to check a request.
"""

from typing import Any

from localrun.tools.prompt import active_tools, prepare_messages


def __getattr__(name: str) -> Any:
    if name in ("lazy_call_grammar", "tool_call_grammar"):
        from localrun.tools import grammar

        return getattr(grammar, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["active_tools", "lazy_call_grammar", "prepare_messages", "tool_call_grammar"]
