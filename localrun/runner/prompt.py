"""From a native request to what the engine runs: prompt tokens and a grammar.

Chat requests go through the model's chat template; completion prompts are used as written.
Templates usually write the BOS token themselves, so it is only added when the text lacks it.
"""

from __future__ import annotations

from localrun.engine import Engine, schema_to_grammar
from localrun.native import GenerateRequest


def build_prompt(engine: Engine, request: GenerateRequest) -> list[int]:
    if request.messages is None:
        return engine.tokenize(request.prompt or "", add_special=True, parse_special=True)
    text = engine.render_chat(request.messages, tools=request.tools, add_generation_prompt=True)
    bos = engine.info.get("bos_token") or ""
    return engine.tokenize(text, add_special=not (bos and text.startswith(bos)), parse_special=True)


def build_grammar(request: GenerateRequest) -> str | None:
    """A GBNF grammar that forces the requested output shape, or None for free text."""
    if request.json_schema is not None:
        return schema_to_grammar(request.json_schema)
    if request.json_mode:
        return schema_to_grammar({"type": "object"})
    return None
