"""GET /v1/models and /v1/models/{id}: the models this daemon serves, in the caller's dialect.

OpenAI and Anthropic share these paths. A request that carries `anthropic-version` (the official
anthropic SDKs send it on every call) gets Anthropic's ModelInfo shape, paged by `after_id`,
`before_id` and `limit`, and Anthropic's errors; any other gets OpenAI's list (server/errors.py's
`dialect` says which, so errors and answers agree).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from localrun.server.anthropic import translate as anthropic
from localrun.server.errors import dialect
from localrun.server.openai import translate as openai

router = APIRouter(tags=["openai", "anthropic"])


@router.get("/v1/models")
async def list_models(request: Request, after_id: str | None = None, before_id: str | None = None,
                      limit: int = Query(20, ge=1, le=1000, description="Anthropic: models per page"),
                      ) -> dict[str, Any]:
    models = request.app.state.store.list()
    upstreams = request.app.state.manager.upstreams
    remote = upstreams.models() if upstreams else []
    if dialect(request.scope) == "anthropic":
        infos = [anthropic.model_info(m.name, m.modified, m.facts.context_length) for m in models] + \
                [anthropic.model_info(m.name, None) for m in remote]
        return anthropic.model_page(infos, after_id, before_id, limit)
    return {"object": "list", "data": [openai.model(m) for m in models] + [openai.upstream_model(m) for m in remote]}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    route = await request.app.state.manager.upstream(model_id)
    local = None if route is not None else request.app.state.store.resolve(model_id)
    if dialect(request.scope) == "anthropic":
        return (anthropic.model_info(local.name, local.modified, local.facts.context_length) if local else
                anthropic.model_info(route.model.name, None))
    return openai.model(local) if local else openai.upstream_model(route.model)
