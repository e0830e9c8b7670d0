"""The Responses API's server-sent event sequence for one streamed response, each event numbered:

    response.created, response.in_progress           the response, status in_progress, no output yet
    response.output_item.added      (reasoning)      with the first thinking, when the family splits it out
    response.content_part.added                      an empty reasoning_text part
    response.reasoning_text.delta  ...               the thought as it comes
    response.reasoning_text.done, response.content_part.done, response.output_item.done
    response.output_item.added      (message)        with the first text, or at the end if there is nothing
    response.content_part.added                      an empty output_text part
    response.output_text.delta  ...                  the text as it comes
    response.output_text.done, response.content_part.done, response.output_item.done
    response.output_item.added      (function_call)  per tool call, once the call is parsed whole
    response.function_call_arguments.delta / .done, response.output_item.done
    response.completed | response.incomplete         the whole response with usage (incomplete: cut
                                                     by max_output_tokens or the context)

Items are numbered (output_index) in the order they open; thinking that comes back after the answer
began opens a new reasoning item, as the model wrote it. A failure after the first byte (a runner
crash) ends the stream with `error` and `response.failed`, numbered on from the events before them,
so the writer keeps the count for the error path too.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Callable

from localrun.errors import LocalrunError
from localrun.native import Delta
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


async def response_events(gen: generation.Generation, emit: EventWriter,
                          on_done: Callable[[dict[str, Any]], None]) -> AsyncIterator[str]:
    resp = emit.response
    yield emit("response.created", response=resp)
    yield emit("response.in_progress", response=resp)
    output = _Output(emit)
    async for event in gen:
        if isinstance(event, Delta):
            for chunk in output.add("reasoning", event.reasoning) + output.add("message", event.text):
                yield chunk
            continue
        found = event.tool_calls
        empty = [] if output.open or output.items or found else output.open_as("message")  # nothing at all
        for chunk in empty + output.close(t.item_status(event)):
            yield chunk
        for call in found:
            index, item_id = len(output.items), t.new_id("fc")
            item = t.call_item(item_id, call, "completed")
            yield emit("response.output_item.added", output_index=index, item=t.call_item(item_id, call, "in_progress"))
            yield emit("response.function_call_arguments.delta", item_id=item_id, output_index=index,
                       delta=item["arguments"])
            yield emit("response.function_call_arguments.done", item_id=item_id, output_index=index,
                       name=call.name, arguments=item["arguments"])
            yield emit("response.output_item.done", output_index=index, item=item)
            output.items.append(item)
        t.finish(resp, output.items, event)
        on_done(resp)
        yield emit(f"response.{resp['status']}", response=resp)


class _Output:
    """The output items streamed so far, and the one still open (reasoning or the message)."""

    def __init__(self, emit: EventWriter) -> None:
        self.emit = emit
        self.items: list[dict[str, Any]] = []
        self.open: _Item | None = None

    def add(self, kind: str, text: str) -> list[str]:
        if not text:
            return []
        out = self.open_as(kind)
        return out + [self.open.delta(text)]

    def open_as(self, kind: str) -> list[str]:
        """Events that leave an item of `kind` open: another kind's item is closed first."""
        if self.open is not None and self.open.kind == kind:
            return []
        out = self.close("completed")
        self.open = _Item(self.emit, kind, len(self.items))
        return out + self.open.start()

    def close(self, status: str) -> list[str]:
        if self.open is None:
            return []
        out = self.open.close(status)
        self.items.append(self.open.item)
        self.open = None
        return out


class _Item:
    """One output item with one streamed content part: reasoning_text in a reasoning item, or
    output_text in the assistant message."""

    _KINDS = {"reasoning": ("rs", "reasoning_text", t.reasoning_item, t.reasoning_text, {}),
              "message": ("msg", "output_text", t.message_item, t.output_text, {"logprobs": []})}

    def __init__(self, emit: EventWriter, kind: str, index: int) -> None:
        prefix, self.part, self.make_item, self.make_part, self.extra = self._KINDS[kind]
        self.emit, self.kind, self.index = emit, kind, index
        self.id = t.new_id(prefix)
        self.where = {"item_id": self.id, "output_index": index, "content_index": 0}
        self.texts: list[str] = []
        self.item: dict[str, Any] = {}

    def start(self) -> list[str]:
        return [self.emit("response.output_item.added", output_index=self.index,
                          item=self.make_item(self.id, "", "in_progress")),
                self.emit("response.content_part.added", **self.where, part=self.make_part(""))]

    def delta(self, text: str) -> str:
        self.texts.append(text)
        return self.emit(f"response.{self.part}.delta", **self.where, delta=text, **self.extra)

    def close(self, status: str) -> list[str]:
        text = "".join(self.texts)
        self.item = self.make_item(self.id, text, status)
        return [self.emit(f"response.{self.part}.done", **self.where, text=text, **self.extra),
                self.emit("response.content_part.done", **self.where, part=self.make_part(text)),
                self.emit("response.output_item.done", output_index=self.index, item=self.item)]
