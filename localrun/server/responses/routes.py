"""Responses routes: thin handlers over translate.py, stream.py, the store of earlier responses and
the one generation path."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request

from localrun.errors import InvalidRequest
from localrun.server import generation
from localrun.server.hangup import unless_hung_up
from localrun.server.jsonbody import JSONBodyRoute
from localrun.server.responses import translate as t
from localrun.server.responses.protocol import ResponsesRequest
from localrun.server.responses.store import ResponseStore
from localrun.server.responses.stream import EventWriter, response_events
from localrun.server.streaming import event_stream

router = APIRouter(tags=["responses"], route_class=JSONBodyRoute)


@router.post("/v1/responses")
async def create(body: ResponsesRequest, request: Request,
                 num_ctx: int | None = Query(None, ge=16, description="localrun: num_ctx for clients that cannot "
                                             "add body fields (Codex's query_params); the body's wins")) -> Any:
    if body.num_ctx is None:
        body.num_ctx = num_ctx
    if body.background:
        raise InvalidRequest("background: responses run in the foreground here; send background: false",
                             "background")
    store: ResponseStore = request.app.state.responses
    items = _earlier(store, body.previous_response_id) + t.input_items(body)
    native = t.generate_request(body, items)
    resp = t.response(body, native, t.new_id("resp"), t.now())

    def keep(finished: dict[str, Any]) -> None:
        if body.store:
            store.put(finished, items)

    manager = request.app.state.manager
    if body.stream:
        gen = await generation.start(manager, native)
        emit = EventWriter(resp)
        return event_stream(response_events(gen, emit, keep), emit.failed)
    result = await unless_hung_up(request, generation.collect(manager, native))
    done = result.choices[0]
    keep(t.finish(resp, t.output(done), done))
    return resp


def _earlier(store: ResponseStore, previous_id: str | None) -> list[dict[str, Any]]:
    if previous_id is None:
        return []
    previous = store.get(previous_id)
    if previous is None:
        raise InvalidRequest(f"previous_response_id: no stored response {previous_id!r} (it was sent with "
                             "store: false, deleted, forgotten as the oldest, or the daemon restarted)"[:300],
                             "previous_response_id")
    return previous.conversation


@router.get("/v1/responses/{response_id}")
async def retrieve(response_id: str, request: Request) -> dict[str, Any]:
    return _stored(request, response_id).response


@router.delete("/v1/responses/{response_id}")
async def delete(response_id: str, request: Request) -> dict[str, Any]:
    if not request.app.state.responses.delete(response_id):
        raise _not_found(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


def _stored(request: Request, response_id: str) -> Any:
    stored = request.app.state.responses.get(response_id)
    if stored is None:
        raise _not_found(response_id)
    return stored


def _not_found(response_id: str) -> HTTPException:
    return HTTPException(404, f"no stored response {response_id!r}"[:300])

