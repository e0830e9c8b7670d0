"""Continuous batching on llama.cpp's low-level API. Imports no HTTP, no pydantic, no store.

    engine = Engine(path, EngineSettings(parallel=4))
    engine.add(Request("r1", engine.tokenize(prompt), SamplingParams(temperature=0)))
    while engine.has_work:
        for event in engine.step():   # Token(...) as text appears, Finished(...) at the end
            ...

One thread owns an Engine: every method must be called from the thread that created it.
"""

from typing import Any

from localrun.config import EngineSettings
from localrun.engine.events import Event, Finished, FinishReason, Timings, Token
from localrun.engine.sequence import Request

# Loaded on first use: these need llama_cpp, and the scheduler, sequences and events are plain data
# that tests and the daemon import without it.
_LAZY = {"Engine": ("localrun.engine.engine", "Engine"),
         "render_chat_template": ("localrun.engine.chat_template", "render"),
         "schema_to_grammar": ("localrun.engine.grammar", "schema_to_grammar")}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'localrun.engine' has no attribute {name!r}")
    import importlib

    module, attribute = _LAZY[name]
    return getattr(importlib.import_module(module), attribute)


__all__ = [
    "Engine", "EngineSettings", "Event", "Finished", "FinishReason", "Request", "Timings", "Token",
    "render_chat_template", "schema_to_grammar",
]
