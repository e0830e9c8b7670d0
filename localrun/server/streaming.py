"""Streaming responses: server-sent events and NDJSON, with errors that arrive after the first byte.

Once a stream has begun the status line is sent, so a failure mid-stream (a runner crash) is told
as a final event in the dialect's own shape; the formatter for that comes from the dialect.
"""

from __future__ import annotations

import json
import logging
from json.encoder import encode_basestring  # the C string escaper json.dumps itself uses
from typing import Any, AsyncIterator, Callable

from starlette.responses import StreamingResponse

from localrun.errors import LocalrunError

log = logging.getLogger("localrun.server")

NO_BUFFERING = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
HOLE = "\x00hole\x00"  # a Template's placeholder value; no model name or constant field contains it
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # built once: it runs per token
_HOLE_JSON = _JSON.encode(HOLE)


def sse(data: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    body = data if isinstance(data, str) else _JSON.encode(data)
    return f"{head}data: {body}\n\n"


def ndjson(data: Any) -> str:
    return _JSON.encode(data) + "\n"


class Template:
    """A streamed chunk rendered once with HOLE values, filled with strings per call: a token's
    chunk then costs one JSON string escape instead of building and dumping the whole object.
    `Template(sse({"choices": [{"text": HOLE, ...}], ...}))("Hi")` equals the chunk with "Hi"."""

    __slots__ = ("_parts",)

    def __init__(self, rendered: str) -> None:
        self._parts = rendered.split(_HOLE_JSON)

    def __call__(self, *texts: str) -> str:
        parts = self._parts
        if len(texts) != len(parts) - 1:
            raise ValueError(f"this template has {len(parts) - 1} holes, got {len(texts)} strings")
        out = [parts[0]]
        for text, part in zip(texts, parts[1:]):
            out += (encode_basestring(text), part)
        return "".join(out)


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
