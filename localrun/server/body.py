"""Request bodies: read once within limits, parsed once without stalling the event loop, checked,
and handed to the route already parsed (jsonbody.py).

A 30 MB body of `[[],[],...]` used to take ~28 s to check, on the event loop: `/health` and every
other client's stream waited that long. Now:

- While the body streams in, each chunk's `[`, `{` and `,` are counted (C speed, a few µs per chunk):
  an upper bound on the JSON values in it. Over `MAX_JSON_VALUES`, the count is redone outside the
  strings (a prompt full of code has brackets) in a Python loop, which lets the event loop in every
  few milliseconds; still over, the body is refused before any parse. So `json.loads`, which holds
  the interpreter for its whole run, only ever sees bodies it parses in tens of milliseconds.
- Bodies over `INLINE_BYTES` are parsed and checked on a worker thread; small ones inline, where the
  hop to a thread would cost more than the parse.
- One `json.loads` per request: the route reuses the result.
- Checks on the parsed value: nesting depth, text that is not Unicode (a lone surrogate, `\\ud800`,
  which broke every text route with a 500) or holds NUL, and the counts in `Limits`.
- A client that stops sending its body gets 408 after `BODY_IDLE_TIMEOUT_S` (timeouts.py bounds the
  headers).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localrun.server.errors import dialect, error_response, field_path

PARSED = "localrun.json"  # where the parsed body waits for the route in the ASGI scope
MAX_JSON_DEPTH = 64
MAX_JSON_VALUES = 1_000_000  # json.loads makes about 30 million small values a second
INLINE_BYTES = 256 << 10
BODY_IDLE_TIMEOUT_S = 30.0
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BAD_ESCAPE = re.compile(rb"\\u(?:[dD][89abAB][0-9a-fA-F]{2}|[dD][c-fC-F][0-9a-fA-F]{2}|0000)")
_BAD_TEXT = re.compile("[\ud800-\udfff\x00]")


def structure(data: bytes, start: int = 0, end: int | None = None) -> int:
    """`[`, `{` and `,` in data[start:end]: at least the number of JSON values there, less one."""
    end = len(data) if end is None else end
    return data.count(b"[", start, end) + data.count(b"{", start, end) + data.count(b",", start, end)


def structure_outside_strings(body: bytes) -> int:
    """`structure` of the body with its strings left out: a loop over strings, not one long call."""
    count, pos = 0, 0
    for match in _STRING.finditer(body):
        count += structure(body, pos, match.start())
        pos = match.end()
    return count + structure(body, pos)


@dataclass(slots=True)
class Parsed:
    data: Any = None
    ok: bool = False  # the body was JSON and `data` is it
    refusal: str | None = None
    param: str | None = None  # the field at fault, when there is one


def parse(body: bytes, values: int, check: Any = None) -> Parsed:
    """Parse and check a body whose `structure` is `values`; `check(data)` adds the request limits.

    A body that does not look like JSON is left to the route (which answers in its dialect)."""
    if body.lstrip()[:1] not in (b"{", b"["):
        return Parsed()
    if values > MAX_JSON_VALUES and structure_outside_strings(body) > MAX_JSON_VALUES:
        return Parsed(refusal=f"JSON body has more than {MAX_JSON_VALUES} values")
    try:
        data = json.loads(body)
    except RecursionError:
        return Parsed(refusal=f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    except ValueError as e:
        return Parsed(refusal=f"invalid JSON body: {e}")
    refused = _walk(data, check_text=_BAD_ESCAPE.search(body) is not None)
    if refused is not None:
        return refused
    return Parsed(data, True, check(data) if check is not None else None)


def _walk(data: Any, check_text: bool) -> Parsed | None:
    """Why the parsed body is refused (too deep, text that is not Unicode or holds NUL), or None."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, (dict, list)) and len(path) >= MAX_JSON_DEPTH:
            return Parsed(refusal=f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
        if isinstance(value, dict):
            for key, item in value.items():
                if check_text and _BAD_TEXT.search(key):
                    return _bad_text(path + (key,), key)
                if isinstance(item, (dict, list, str)):
                    stack.append((item, path + (key,)))
        elif isinstance(value, list):
            stack.extend((item, path + (i,)) for i, item in enumerate(value) if isinstance(item, (dict, list, str)))
        elif check_text and isinstance(value, str) and _BAD_TEXT.search(value):
            return _bad_text(path, value)
    return None


def _bad_text(path: tuple[Any, ...], text: str) -> Parsed:
    where = field_path(path)
    if "\x00" in text:
        problem = "text must not contain NUL (\\u0000)"
    else:
        problem = "text contains an unpaired surrogate (\\ud800-\\udfff), which is not valid Unicode"
    return Parsed(refusal=f"{where or 'body'}: {problem}", param=where or None)


class BodyLimits:
    """ASGI middleware: every POST body read, bounded, parsed and checked before any route runs."""

    def __init__(self, app: ASGIApp, max_body: int, check: Any = None, streamed: tuple[str, ...] = ()) -> None:
        """`streamed`: path prefixes whose routes read their bodies themselves (uploads, streamed to disk)."""
        self.app, self.max_body, self.check, self.streamed = app, max_body, check, streamed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS")
                or scope["path"].startswith(self.streamed)):
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers", [])).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_body:
            return await self._too_large(scope, receive, send)
        try:
            read = await self._read(receive)
        except asyncio.TimeoutError:
            message = f"the request body did not arrive within {BODY_IDLE_TIMEOUT_S:.0f} s"
            return await error_response(dialect(scope), 408, message, {"Connection": "close"})(scope, receive, send)
        if read is None:
            return await self._too_large(scope, receive, send)
        body, values = read
        if len(body) > INLINE_BYTES:
            parsed = await asyncio.to_thread(parse, body, values, self.check)
        else:
            parsed = parse(body, values, self.check)
        if parsed.refusal:
            return await error_response(dialect(scope), 400, parsed.refusal, param=parsed.param)(scope, receive, send)
        if parsed.ok:
            scope[PARSED] = parsed.data  # in the scope itself: the outer middlewares read what routing adds
        await self.app(scope, _replay(body, receive), send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"request body larger than {self.max_body} bytes (LOCALRUN_MAX_BODY)"
        await error_response(dialect(scope), 413, message, {"Connection": "close"})(scope, receive, send)

    async def _read(self, receive: Receive) -> tuple[bytes, int] | None:
        """(the whole body, its `structure`), or None as soon as it passes the size limit."""
        chunks: list[bytes] = []
        size = values = 0
        while True:
            message = await asyncio.wait_for(receive(), BODY_IDLE_TIMEOUT_S)
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            values += structure(chunk)
            if not message.get("more_body"):
                break
        return b"".join(chunks), values


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body already read, then the client's later messages (disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


__all__ = ["BODY_IDLE_TIMEOUT_S", "BodyLimits", "MAX_JSON_DEPTH", "MAX_JSON_VALUES", "PARSED", "Parsed",
           "parse", "structure", "structure_outside_strings"]
