"""Anthropic's server-sent event sequence for one streamed message:

    (": keep-alive" comments)         every PING_INTERVAL_S while the request waits for a sequence slot
    message_start                     the message with empty content and the prompt's usage
    ping                              at once, then at least every PING_INTERVAL_S while nothing else is sent
    content_block_start  (index i)    a thinking block when thinking appears, a text block when text
                                      appears, a tool_use block per call
    content_block_delta  (index i)    thinking_delta or text_delta pieces, or the call's input as one input_json_delta
    content_block_stop   (index i)
    message_delta                     stop_reason, stop_sequence and the final usage
    message_stop

Pings matter while a long prompt (Claude Code sends tens of thousands of tokens) is prefilled: the
first token may be minutes away and clients time out a silent connection.

Usage is counted one way throughout, Anthropic's: `input_tokens` are the prompt tokens evaluated
anew, `cache_read_input_tokens` the ones found in the cache. So message_start waits until the
request has its slot (the runner's `Started`, which says what the cache held; usually within one
engine step) and reports what message_delta will; until then only SSE comments keep the connection
alive, since a client may read nothing before message_start. A model served upstream cannot say
before its end: its message_start counts the whole prompt as input.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any, AsyncIterator, TypeVar

from localrun.native import Delta, Done, Started, Timings
from localrun.server import generation
from localrun.server.anthropic import translate as t
from localrun.server.streaming import sse

PING_INTERVAL_S = 5.0
KEEP_ALIVE = ": keep-alive\n\n"  # an SSE comment: every SSE reader skips it
T = TypeVar("T")


async def message_events(gen: generation.Generation, model: str,
                         ping_interval: float = PING_INTERVAL_S) -> AsyncIterator[str]:
    blocks, opened = _Blocks(), False
    async for event in with_pings(gen.with_started(), ping_interval):
        if not opened and event is not None:
            yield _event("message_start", message=_started(model, gen.prompt_tokens, event))
            yield _event("ping")
            opened = True
        if event is None:
            yield _event("ping") if opened else KEEP_ALIVE
        elif isinstance(event, Started):
            continue
        elif isinstance(event, Delta):
            for chunk in blocks.thinking(event.reasoning) + blocks.text(event.text):
                yield chunk
        else:
            for chunk in blocks.done(event):
                yield chunk


async def with_pings(events: AsyncIterator[T], interval: float) -> AsyncIterator[T | None]:
    """The events, with None whenever `interval` seconds pass without one. The pending read is
    cancelled when the consumer stops early, so the generation behind it is cancelled too."""
    iterator = aiter(events)
    pending: asyncio.Future[T] | None = None
    try:
        while True:
            pending = pending or asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield None
                continue
            try:
                event = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            yield event
    finally:
        if pending is not None and not pending.done():
            pending.cancel()


class _Blocks:
    """Content block bookkeeping: a thinking or text block opens with its first piece and closes when
    the other kind begins; each call is its own block."""

    def __init__(self) -> None:
        self.index = 0
        self.open: str | None = None  # the kind of the open block: "thinking" | "text"

    def thinking(self, text: str) -> list[str]:
        return self._piece("thinking", {"type": "thinking", "thinking": "", "signature": ""},
                           {"type": "thinking_delta", "thinking": text}) if text else []

    def text(self, text: str) -> list[str]:
        return self._piece("text", t.text_block(""), {"type": "text_delta", "text": text}) if text else []

    def _piece(self, kind: str, block: dict[str, Any], delta: dict[str, Any]) -> list[str]:
        out = [] if self.open == kind else self._close() + [_start(self.index, block)]
        self.open = kind
        return out + [_delta(self.index, delta)]

    def done(self, done: Done) -> list[str]:
        out = self._close()
        for call in done.tool_calls:
            out += [_start(self.index, {**t.tool_use(call), "input": {}}),
                    _delta(self.index, {"type": "input_json_delta", "partial_json": json.dumps(call.arguments)}),
                    _event("content_block_stop", index=self.index)]
            self.index += 1
        delta = {"stop_reason": t.stop_reason(done), "stop_sequence": t.stop_sequence(done)}
        return out + [_event("message_delta", delta=delta, usage=t.usage(done.timings)), _event("message_stop")]

    def _close(self) -> list[str]:
        if self.open is None:
            return []
        closing = [_delta(self.index, {"type": "signature_delta", "signature": ""})] if self.open == "thinking" else []
        self.open = None
        self.index += 1
        return closing + [_event("content_block_stop", index=self.index - 1)]


def _started(model: str, prompt_tokens: int, first: Started | Delta | Done) -> dict[str, Any]:
    """The message as message_start has it: the prompt's usage as the first event tells it (a Done
    has the final one; a Delta before any Started means the cache is not known: none counted)."""
    if isinstance(first, Done):
        timings = first.timings
    else:
        cached = first.cached_tokens if isinstance(first, Started) else 0
        timings = Timings(prompt_tokens=prompt_tokens, cached_tokens=cached)
    usage = t.usage(replace(timings, generated_tokens=0))
    return {"id": t.new_id(), "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": usage, "container": None}


def _start(index: int, block: dict[str, Any]) -> str:
    return _event("content_block_start", index=index, content_block=block)


def _delta(index: int, delta: dict[str, Any]) -> str:
    return _event("content_block_delta", index=index, delta=delta)


def _event(kind: str, **fields: Any) -> str:
    return sse({"type": kind, **fields}, event=kind)
