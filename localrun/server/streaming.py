"""Streaming responses: server-sent events and NDJSON, with errors that arrive after the first byte.

Once a stream has begun the status line is sent, so a failure mid-stream (a runner crash) is told
as a final event in the dialect's own shape; the formatter for that comes from the dialect.
"""

from __future__ import annotations

import json
import logging
from typing import Any, AsyncIterator, Callable

from starlette.responses import StreamingResponse

from localrun.errors import LocalrunError

log = logging.getLogger("localrun.server")

NO_BUFFERING = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(data: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"{head}data: {body}\n\n"


def ndjson(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n"


async def _guarded(chunks: AsyncIterator[str], on_error: Callable[[LocalrunError], str]) -> AsyncIterator[str]:
    try:
        async for chunk in chunks:
            yield chunk
    except LocalrunError as e:
        yield on_error(e)
    except Exception as e:  # never drop a stream silently: tell the client and log the cause
        log.exception("stream failed")
        yield on_error(LocalrunError(f"internal error: {type(e).__name__}: {e}"))


def event_stream(chunks: AsyncIterator[str], on_error: Callable[[LocalrunError], str]) -> StreamingResponse:
    return StreamingResponse(_guarded(chunks, on_error), media_type="text/event-stream", headers=NO_BUFFERING)


def ndjson_stream(chunks: AsyncIterator[str], on_error: Callable[[LocalrunError], str]) -> StreamingResponse:
    return StreamingResponse(_guarded(chunks, on_error), media_type="application/x-ndjson", headers=NO_BUFFERING)
