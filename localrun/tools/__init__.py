"""Tool calling, independent of any API dialect: how tools reach a model, and the grammar that forces a call.

    prompt.py    tools into the prompt: the chat template's own support, or a generic tool prompt
    grammar.py   GBNF that forces a valid call for tool_choice "required" / a named tool
    schema.py    which JSON-schema keywords a grammar can enforce (structured output refuses the rest)

Calls coming back out of generated text are the model family's business (localrun.families).
Used by the runner (which owns the template and the generated text); imports no server and no engine
beyond its JSON-schema converter.
"""

from localrun.tools.grammar import tool_call_grammar
from localrun.tools.prompt import active_tools, prepare_messages

__all__ = ["active_tools", "prepare_messages", "tool_call_grammar"]
