"""Tool calling, independent of any API dialect: how tools reach a model and how calls come back.

    prompt.py    tools into the prompt: the chat template's own support, or a generic tool prompt
    grammar.py   GBNF that forces a valid call for tool_choice "required" / a named tool
    parse.py     tool calls out of generated text (Hermes, Llama 3 JSON, Mistral, plain JSON)
    stream.py    hold back streamed text that may be a tool call, so it never leaks as content
    schema.py    which JSON-schema keywords a grammar can enforce (structured output refuses the rest)

Used by the runner (which owns the template and the generated text); imports no server and no engine
beyond its JSON-schema converter.
"""

from localrun.tools.grammar import tool_call_grammar
from localrun.tools.parse import parse_tool_calls
from localrun.tools.prompt import active_tools, prepare_messages
from localrun.tools.stream import CallHoldback

__all__ = ["CallHoldback", "active_tools", "parse_tool_calls", "prepare_messages", "tool_call_grammar"]
