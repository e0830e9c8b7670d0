"""Continuous batching on llama.cpp's low-level API. Imports no HTTP, no pydantic, no store.

    engine = Engine(path, EngineSettings(parallel=4))
    engine.add(Request("r1", engine.tokenize(prompt), SamplingParams(temperature=0)))
    while engine.has_work:
        for event in engine.step():   # Token(...) as text appears, Finished(...) at the end
            ...

One thread owns an Engine: every method must be called from the thread that created it.
"""

from localrun.engine.chat_template import render as render_chat_template
from localrun.engine.engine import Engine
from localrun.engine.events import Event, Finished, FinishReason, Timings, Token
from localrun.engine.grammar import schema_to_grammar
from localrun.engine.sequence import Request
from localrun.config import EngineSettings

__all__ = [
    "Engine", "EngineSettings", "Event", "Finished", "FinishReason", "Request", "Timings", "Token",
    "render_chat_template", "schema_to_grammar",
]
