"""The Responses API's server-sent event sequence for one streamed response, each event numbered:

    response.created, response.in_progress           the response, status in_progress, no output yet
    response.output_item.added      (message)        with the first text, or at the end if there is none
    response.content_part.added                      an empty output_text part
    response.output_text.delta  ...                  the text as it comes
    response.output_text.done, response.content_part.done, response.output_item.done
    response.output_item.added      (function_call)  per tool call, once the call is parsed whole
    response.function_call_arguments.delta / .done, response.output_item.done
    response.completed | response.incomplete         the whole response with usage (incomplete: cut
                                                     by max_output_tokens or the context)

A failure after the first byte (a runner crash) ends the stream with `error` and `response.failed`,
numbered on from the events before them, so the writer keeps the count for the error path too.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Callable

from localrun.errors import LocalrunError
from localrun.native import Delta, Done
from localrun.server import generation
from localrun.server.responses import translate as t
from localrun.server.streaming import sse


class EventWriter:
    """Numbers events and renders them as SSE; knows the response, so it can also tell a failure."""

    def __init__(self, response: dict[str, Any]) -> None:
        self.response = response
        self.sequence = 0

    def __call__(self, kind: str, **fields: Any) -> str:
        event = sse({"type": kind, **fields, "sequence_number": self.sequence}, event=kind)
        self.sequence += 1
        return event

    def failed(self, error: LocalrunError) -> str:
        code = t.error_code(error.status)
        return (self("error", code=code, message=error.message, param=None)
                + self("response.failed", response=t.fail(self.response, error.status, error.message)))


async def response_events(gen: generation.Generation, emit: EventWriter, parallel: bool,
                          on_done: Callable[[dict[str, Any]], None]) -> AsyncIterator[str]:
    resp = emit.response
    yield emit("response.created", response=resp)
    yield emit("response.in_progress", response=resp)
    message = _Message(emit)
    async for event in gen:
        if isinstance(event, Delta):
            for chunk in message.text(event.text):
                yield chunk
            continue
        found = t.calls(event, parallel)
        items = []
        if message.open or not found:
            for chunk in message.close(t.item_status(event)):
                yield chunk
            items.append(message.item)
        for call in found:
            index, item_id = len(items), t.new_id("fc")
            item = t.call_item(item_id, call, "completed")
            yield emit("response.output_item.added", output_index=index, item=t.call_item(item_id, call, "in_progress"))
            yield emit("response.function_call_arguments.delta", item_id=item_id, output_index=index,
                       delta=item["arguments"])
            yield emit("response.function_call_arguments.done", item_id=item_id, output_index=index,
                       name=call.name, arguments=item["arguments"])
            yield emit("response.output_item.done", output_index=index, item=item)
            items.append(item)
        t.finish(resp, items, event)
        on_done(resp)
        yield emit(f"response.{resp['status']}", response=resp)


class _Message:
    """The assistant message item (output index 0): opened by the first text, closed at the end."""

    def __init__(self, emit: EventWriter) -> None:
        self.emit = emit
        self.id = t.new_id("msg")
        self.open = False
        self.parts: list[str] = []
        self.item: dict[str, Any] = {}

    def text(self, text: str) -> list[str]:
        if not text:
            return []
        out = [] if self.open else self._start()
        self.parts.append(text)
        return out + [self.emit("response.output_text.delta", item_id=self.id, output_index=0, content_index=0,
                                delta=text, logprobs=[])]

    def close(self, status: str) -> list[str]:
        out = [] if self.open else self._start()
        text = "".join(self.parts)
        self.item = t.message_item(self.id, text, status)
        where = {"item_id": self.id, "output_index": 0, "content_index": 0}
        return out + [self.emit("response.output_text.done", **where, text=text, logprobs=[]),
                      self.emit("response.content_part.done", **where, part=t.output_text(text)),
                      self.emit("response.output_item.done", output_index=0, item=self.item)]

    def _start(self) -> list[str]:
        self.open = True
        return [self.emit("response.output_item.added", output_index=0, item=t.message_item(self.id, "", "in_progress")),
                self.emit("response.content_part.added", item_id=self.id, output_index=0, content_index=0,
                          part=t.output_text(""))]
