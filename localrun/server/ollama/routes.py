"""Ollama routes: thin handlers over the store, the model manager and the one generation path."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from localrun import __version__
from localrun.server.manager import Loaded

router = APIRouter(tags=["ollama"])

FOREVER = datetime(2318, 1, 1, tzinfo=timezone.utc)  # what Ollama shows for keep_alive < 0


@router.get("/", response_class=PlainTextResponse)
async def root() -> str:
    return "localrun is running"


@router.get("/api/version")
async def version() -> dict[str, str]:
    return {"version": __version__}


@router.get("/api/ps")
async def ps(request: Request) -> dict[str, Any]:
    return {"models": [_running(m) for m in request.app.state.manager.running()]}


def details(model: Any) -> dict[str, Any]:
    return {"parent_model": "", "format": "gguf", "family": model.architecture, "families": [model.architecture],
            "parameter_size": model.parameter_size, "quantization_level": model.quantization}


def _running(loaded: Loaded) -> dict[str, Any]:
    model = loaded.model
    return {
        "name": model.name, "model": model.name, "size": loaded.size, "digest": model.digest.removeprefix("sha256:"),
        "details": details(model), "expires_at": _expires_at(loaded).isoformat(),
        "size_vram": loaded.size if loaded.runner.info.get("gpu_layers") else 0,
        "context_length": loaded.options.ctx_size,
        "parallel": loaded.options.parallel, "kv_cache_type": loaded.options.kv_cache_type,
        "threads": loaded.runner.info.get("threads"), "active_requests": loaded.pending,
    }


def _expires_at(loaded: Loaded) -> datetime:
    now = datetime.now(timezone.utc)
    if loaded.keep_alive < 0:
        return FOREVER
    if loaded.expires_at is None:  # busy: the clock starts when the last request ends
        return now + timedelta(seconds=loaded.keep_alive)
    return now + timedelta(seconds=max(0.0, loaded.expires_at - time.monotonic()))
