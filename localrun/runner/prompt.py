"""From a native request to what the engine runs: prompt tokens and a grammar.

Chat requests go through the model's chat template; completion prompts are used as written.
Templates usually write the BOS token themselves, so it is only added when the text lacks it.
Tools reach the template when it knows them, else as localrun's generic tool prompt (see
localrun.tools.prompt); a required or named tool_choice becomes a grammar that forces one call.
"""

from __future__ import annotations

from localrun.engine import Engine, schema_to_grammar
from localrun.native import GenerateRequest
from localrun.tools import active_tools, prepare_messages, tool_call_grammar
from localrun.tools.schema import check_supported, normalized


def build_prompt(engine: Engine, request: GenerateRequest) -> list[int]:
    if request.messages is None:
        return engine.tokenize(request.prompt or "", add_special=True, parse_special=True)
    tools = active_tools(request.tools, request.tool_choice)
    messages, template_tools = prepare_messages(request.messages, tools, engine.model.chat_template())
    text = engine.render_chat(messages, tools=template_tools, add_generation_prompt=True)
    bos = engine.info.get("bos_token") or ""
    return engine.tokenize(text, add_special=not (bos and text.startswith(bos)), parse_special=True)


def build_grammar(request: GenerateRequest) -> str | None:
    """A GBNF grammar that forces the requested output shape, or None for free text."""
    forced = tool_call_grammar(active_tools(request.tools, request.tool_choice), request.tool_choice)
    if forced is not None:
        return forced
    if request.json_schema is not None:
        schema = normalized(request.json_schema)
        check_supported(schema)
        return schema_to_grammar(schema)
    if request.json_mode:
        return schema_to_grammar({"type": "object"})
    return None
