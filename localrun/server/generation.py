"""The one generation path. Every dialect builds a GenerateRequest, calls `start`, and renders the
Delta/Done events in its own wire format; nothing else in the server talks to a runner about
generation.

`start` returns only once the runner has accepted the request, so that an unknown model, a full
queue or a prompt over the context is raised before a dialect sends any byte (a proper 4xx/503,
not a 200 stream that ends in an error).
"""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Callable, Mapping

from localrun.native import Delta, Done, Event, GenerateRequest, Started, Timings, TokenLogprob, Usage, decode_event
from localrun.server import access_log
from localrun.errors import ContextOverflow
from localrun.server.defaults import for_model, how_to_raise
from localrun.server.manager import Loaded, ModelManager
from localrun.server.metrics import Observer
from localrun.server.validate import check_generate


@dataclass(slots=True)
class Generation:
    """An accepted generation. Iterate it once for its events, or once `with_started()`; leaving
    early cancels it."""

    prompt_tokens: int
    _events: Callable[[bool], AsyncIterator[Any]]

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events(False)

    def with_started(self) -> AsyncIterator[Event | Started]:
        """The events, and before a choice's first Delta its `Started` (the prompt tokens its slot had
        cached) when the runner can tell: for a dialect that reports usage before the first token."""
        return self._events(True)


async def start(manager: ModelManager, request: GenerateRequest,
                api_defaults: Mapping[str, Any] | None = None) -> Generation:
    """Start `request`; `api_defaults` are the dialect's documented sampling defaults, when they differ
    from llama.cpp's (server/defaults.py says where they come in the precedence)."""
    check_generate(request)
    stack = contextlib.AsyncExitStack()
    started = time.perf_counter()
    try:
        loaded = await stack.enter_async_context(manager.lease(request.model, request.num_ctx, request.keep_alive))
        load_ms = (time.perf_counter() - started) * 1000.0  # the one load time: how long this request waited for it
        request = for_model(request, loaded.model, api_defaults)
        stream = loaded.runner.stream("generate", request=request.to_dict())
        stack.push_async_callback(stream.aclose)
        accepted = await _accepted(stream, loaded)
    except BaseException:
        await stack.aclose()
        raise
    observer = Observer(loaded.model.name, started, accepted["prompt_tokens"])
    access_log.note(prompt_tokens=accepted["prompt_tokens"])
    events = functools.partial(_events, stack, stream, load_ms, observer, request.parallel_tool_calls)
    return Generation(accepted["prompt_tokens"], events)


async def _accepted(stream: AsyncIterator[dict[str, Any]], loaded: Loaded) -> dict[str, Any]:
    """The runner's acceptance; a prompt over the context is refused saying how to make room."""
    try:
        return await anext(stream)
    except ContextOverflow as e:
        raise ContextOverflow(f"{e.message}: {how_to_raise(loaded.model, loaded.options.ctx_size)}") from None


async def _events(stack: contextlib.AsyncExitStack, stream: AsyncIterator[dict[str, Any]], load_ms: float,
                  observer: Observer, parallel_calls: bool, started: bool) -> AsyncIterator[Event | Started]:
    async with stack:
        async for message in stream:
            event = decode_event(message)
            if isinstance(event, Started):
                if started:
                    yield event
                continue
            if isinstance(event, Done):
                event.timings.load_ms = load_ms
                if not parallel_calls:  # one place for local runners and upstreams alike
                    del event.tool_calls[1:]
            observer.see(event)  # the one place tokens, TTFT and speed are counted, for every dialect
            if isinstance(event, Done):
                access_log.note(generated_tokens=event.timings.generated_tokens)
            yield event


@dataclass(slots=True)
class Collected:
    """A whole (non-streamed) generation: one Done per choice, in order, and the logprobs seen."""

    choices: list[Done] = field(default_factory=list)
    logprobs: dict[int, list[TokenLogprob]] = field(default_factory=dict)

    @property
    def timings(self) -> Timings:
        return self.choices[0].timings

    @property
    def usage(self) -> Usage:
        return Usage.of(self.choices)


async def collect(manager: ModelManager, request: GenerateRequest,
                  api_defaults: Mapping[str, Any] | None = None) -> Collected:
    """The whole answer. Its text comes with each choice's Done, so the runner sends deltas only for
    their logprobs."""
    result = Collected()
    request = replace(request, deltas=request.sampling.logprobs is not None)
    async for event in await start(manager, request, api_defaults):
        if isinstance(event, Delta):
            result.logprobs.setdefault(event.index, []).extend(event.logprobs)
        else:
            result.choices.append(event)
    result.choices.sort(key=lambda c: c.index)
    return result
