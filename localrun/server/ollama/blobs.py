"""Ollama's blob routes: `HEAD /api/blobs/<digest>` (is the file here?) and `POST /api/blobs/<digest>`
(here it is), which `ollama create` and the Ollama clients use before `/api/create` with `files`, to
make a model from a GGUF file on the client's machine.

The body is a model file, gigabytes long, so it is not read by BodyLimits (body.py) like every other
body: it streams to disk in batches written on a worker thread, and a client that stops sending gets
408 after the same idle time. Whatever goes wrong (a wrong digest, not GGUF, a hang-up, a full
disk), nothing is left behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, Response

from localrun.errors import BodyTimeout, Cancelled
from localrun.server.body import BODY_IDLE_TIMEOUT_S

router = APIRouter(tags=["ollama"])

PREFIX = "/api/blobs/"
BATCH = 4 << 20  # bytes handed to the writing thread at a time (one thread hop per batch, not per read)


@router.head(PREFIX + "{digest}")
async def has_blob(digest: str, request: Request) -> Response:
    present = await asyncio.to_thread(request.app.state.store.has_blob, digest)
    return Response(status_code=200 if present else 404)


@router.post(PREFIX + "{digest}")
async def create_blob(digest: str, request: Request) -> Response:
    """201 when the file was received and verified; 200 when it was here already (the body is read and
    dropped: a client still sending it must not have the connection cut under it)."""
    store = request.app.state.store
    if await asyncio.to_thread(store.has_blob, digest):
        async for _ in _batches(request):
            pass
        return Response(status_code=200)
    declared = request.headers.get("content-length", "")
    upload = await asyncio.to_thread(store.receive_blob, digest, int(declared) if declared.isdigit() else 0)
    try:
        async for batch in _batches(request):
            await asyncio.to_thread(upload.write, batch)
        await asyncio.to_thread(upload.finish)
    finally:
        upload.discard()  # after finish, a no-op; on any failure or cancellation, the partial file goes
    return Response(status_code=201)


async def _batches(request: Request) -> AsyncIterator[bytes]:
    """The body in pieces of about BATCH bytes; raises when the client hangs up or stops sending."""
    pending, size = [], 0
    while True:
        try:
            message = await asyncio.wait_for(request.receive(), BODY_IDLE_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise BodyTimeout(f"the request body did not arrive within {BODY_IDLE_TIMEOUT_S:.0f} s") from None
        if message["type"] == "http.disconnect":
            raise Cancelled("the client closed the connection during the upload")
        pending.append(message.get("body", b""))
        size += len(pending[-1])
        more = message.get("more_body", False)
        if size >= BATCH or not more:
            yield b"".join(pending)
            pending, size = [], 0
        if not more:
            return


__all__ = ["PREFIX", "router"]
