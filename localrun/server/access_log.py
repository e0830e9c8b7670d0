"""The access log: one line per HTTP request, and the request id a client sees.

    127.0.0.1 POST /v1/chat/completions 200 model=smollm2:135m prompt=12 generated=40 first=0.21s total=1.34s id=7f3a…

`AccessLog` is the outermost ASGI middleware, so refused requests (401, 403, 413) are logged too. It
gives each request an id, the client's own `X-Request-Id` when that is a short plain token, else a
new one, and sends it back in the `X-Request-Id` response header, so a user can find their request
in `localrun logs`. The line is written when the response ends: the route template (never the raw
path with its query string), the status, the model and token counts when the request generated, the
time to the response's first byte and the total. Never the prompt, a header or a body.

Handlers note the model and tokens through `note()`, which finds the request's record in a context
variable: the handler, its streaming body and the generation path all run in tasks that inherit it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import time
import uuid
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localrun.server.metrics import method_label, route_label

log = logging.getLogger("localrun.access")

HEADER = "x-request-id"
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


@dataclass(slots=True)
class Record:
    """What one request's log line says beyond its route and status, filled in as it runs."""

    id: str
    model: str = ""
    prompt_tokens: int = 0
    generated_tokens: int = 0


_current: contextvars.ContextVar[Record | None] = contextvars.ContextVar("localrun_access_record", default=None)


def note(model: str = "", prompt_tokens: int = 0, generated_tokens: int = 0) -> None:
    """Add to the current request's line (a no-op outside a request, e.g. in tests of the parts)."""
    record = _current.get()
    if record is None:
        return
    record.model = model or record.model
    record.prompt_tokens += prompt_tokens
    record.generated_tokens += generated_tokens


def request_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's X-Request-Id when it is a plain token (it ends up in a log line), else a new one."""
    for name, value in headers:
        if name.lower() == HEADER.encode():
            text = value.decode("latin-1").strip()
            if _CLIENT_ID.fullmatch(text):
                return text
    return uuid.uuid4().hex[:16]


def line(scope: Scope, status: int, record: Record, first_s: float | None, total_s: float) -> str:
    """One request as a log line (pure: the tests check it from plain data)."""
    client = scope.get("client")
    parts = [client[0] if client else "-", method_label(scope), _route(scope), str(status)]
    if record.model:
        parts.append(f"model={record.model}")
    if record.prompt_tokens or record.generated_tokens:
        parts += [f"prompt={record.prompt_tokens}", f"generated={record.generated_tokens}"]
    if first_s is not None:
        parts.append(f"first={first_s:.3f}s")
    parts += [f"total={total_s:.3f}s", f"id={record.id}"]
    return " ".join(parts)


def _route(scope: Scope) -> str:
    """The route template; for a path no route matched, the path alone (no query), cut and made printable."""
    route = route_label(scope)
    if route != "unrouted":
        return route
    path = str(scope.get("path", ""))[:80]
    return "".join(c if c.isprintable() and not c.isspace() else "?" for c in path) or "/"


class AccessLog:
    """ASGI middleware: the request id header and one log line per HTTP request (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        record = Record(request_id(scope.get("headers", [])))
        token = _current.set(record)
        started = time.perf_counter()
        first: float | None = None
        status = 500

        async def logging_send(message: Message) -> None:
            nonlocal first, status
            if message["type"] == "http.response.start":
                first, status = time.perf_counter() - started, message["status"]
                message["headers"] = [*message.get("headers", []), (HEADER.encode(), record.id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, logging_send)
        except asyncio.CancelledError:
            status = status if first is not None else 499  # the client left before an answer (nginx's code)
            raise
        finally:
            _current.reset(token)
            log.info("%s", line(scope, status, record, first, time.perf_counter() - started))


__all__ = ["AccessLog", "HEADER", "Record", "line", "note", "request_id"]
