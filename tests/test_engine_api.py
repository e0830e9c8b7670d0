"""The engine's public surface cannot drift by accident: the runner and server build on these names."""

from __future__ import annotations

import dataclasses

import localrun.engine as engine
from localrun.engine import EngineSettings, Finished, Request, Token


def test_public_names():
    assert sorted(engine.__all__) == sorted([
        "Engine", "EngineSettings", "Event", "Finished", "FinishReason", "Request", "Timings", "Token",
        "render_chat_template", "schema_to_grammar",
    ])
    for name in engine.__all__:
        assert hasattr(engine, name)


def test_engine_methods():
    for name in ("add", "cancel", "step", "has_work", "tokenize", "detokenize", "embed", "render_chat",
                 "info", "close", "score"):
        assert hasattr(engine.Engine, name), name


def test_settings_defaults():
    s = EngineSettings()
    assert (s.parallel, s.ctx_size, s.batch_size, s.threads, s.flash_attn, s.kv_cache_type,
            s.gpu_layers) == (4, 4096, 512, None, "auto", "f16", None)
    assert not hasattr(s, "__dict__")  # slots


def test_event_fields():
    def fields(cls):
        return [f.name for f in dataclasses.fields(cls)]

    assert fields(Token) == ["request_id", "text", "token", "logprob", "top_logprobs"]
    assert fields(Finished) == ["request_id", "reason", "timings", "stop_text", "error"]
    assert fields(Request) == ["id", "prompt", "sampling", "truncate", "special_text"]
