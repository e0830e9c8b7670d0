"""The daemon's ASGI application: the dialect routers, the error shapes, and the shared state
(config, store, model manager) the handlers find on `request.app.state`."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator

from fastapi import FastAPI

from localrun import __version__
from localrun.config import Settings
from localrun.server import errors, metrics, security
from localrun.server.ollama import blobs
from localrun.server.access_log import AccessLog
from localrun.server.manager import ModelManager
from localrun.server.responses.store import ResponseStore
from localrun.upstream import backends
from localrun.upstream.pool import Upstreams


def create_app(config: Settings | None = None, store: Any = None, manager: ModelManager | None = None) -> FastAPI:
    config = config or Settings.from_env()
    if store is None:
        from localrun.store import Store
        from localrun.store.download import Guard, Policy

        store = Store(policy=Policy(guard=Guard.from_env()))  # pulls for HTTP clients: no private addresses
    manager = manager or ModelManager(config, store, upstreams=_upstreams())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if manager.upstreams is not None:
            await manager.upstreams.start()
        yield
        await manager.close()

    app = FastAPI(title="localrun", version=__version__, lifespan=lifespan,
                  description="Local LLM runner: OpenAI- (chat, completions, responses), Ollama- and Anthropic-compatible APIs.")
    app.state.config, app.state.store, app.state.manager = config, store, manager
    app.state.responses = ResponseStore(config.max_responses)
    errors.install(app)
    security.install(app, config, streamed=(blobs.PREFIX,))
    app.add_middleware(metrics.RequestCounter)  # outermost: refused requests are counted too
    app.add_middleware(AccessLog)  # ... and logged, with the request id header

    @app.get("/health", tags=["system"])
    async def health() -> dict[str, Any]:
        return {"status": "ok", "version": __version__, "loaded_models": len(manager.loaded)}

    from localrun.server.anthropic.routes import router as anthropic
    from localrun.server.model_list import router as model_list
    from localrun.server.ollama.routes import router as ollama
    from localrun.server.openai.routes import router as openai
    from localrun.server.perplexity import router as perplexity
    from localrun.server.responses.routes import router as responses
    from localrun.server.score import router as score
    from localrun.server.tokens import router as tokens

    app.include_router(metrics.router)
    if config.ui:  # before the Ollama routes: its GET / answers browsers, theirs everyone else
        from localrun.server.web import router as web

        app.include_router(web)
    app.include_router(openai)
    app.include_router(model_list)
    app.include_router(responses)
    app.include_router(ollama)
    app.include_router(blobs.router)
    app.include_router(anthropic)
    app.include_router(tokens)
    app.include_router(perplexity)
    app.include_router(score)
    return app


def _upstreams() -> Upstreams | None:
    """The backends of backends.toml in the config directory, when it declares any."""
    declared = backends.load().backends
    return Upstreams(list(declared.values())) if declared else None
