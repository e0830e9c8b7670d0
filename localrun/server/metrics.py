"""`GET /metrics`: the daemon's counters in Prometheus text format (no client library needed).

Three sources feed it, each in one place:

    RequestCounter   ASGI middleware: every HTTP request by route template, method and status
    observe()        wraps the one generation path (server/generation.py): tokens in and out,
                     time to first token and tokens per second, by model
    scrape time      the model manager's plain data: loaded models, admitted requests, queue depth,
                     and each runner's own count of running sequences

The counters live in one module-level `METRICS`, like prometheus_client's default registry: one
daemon per process, and the generation path needs no handle to the app to count.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localrun.native import Delta, Done, Event

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TPS_BUCKETS = (1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 400.0, 800.0, 1600.0)
RUNNER_HEALTH_TIMEOUT_S = 1.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

Labels = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets) + 1)
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value

    def lines(self, name: str, labels: Labels) -> Iterable[str]:
        counts = self.counts or [0] * (len(self.buckets) + 1)
        running = 0
        for bound, count in zip((*map(_number, self.buckets), "+Inf"), counts):
            running += count
            yield f"{name}_bucket{_labels((*labels, ('le', bound)))} {running}"
        yield f"{name}_sum{_labels(labels)} {_number(self.total)}"
        yield f"{name}_count{_labels(labels)} {running}"


@dataclass(slots=True)
class Metrics:
    """Every counter and histogram the daemon keeps, keyed by label tuples."""

    requests: dict[Labels, int] = field(default_factory=dict)
    tokens_in: dict[Labels, int] = field(default_factory=dict)
    tokens_out: dict[Labels, int] = field(default_factory=dict)
    ttft: dict[Labels, Histogram] = field(default_factory=dict)
    tps: dict[Labels, Histogram] = field(default_factory=dict)
    drafted: dict[Labels, int] = field(default_factory=dict)
    draft_accepted: dict[Labels, int] = field(default_factory=dict)

    def count_request(self, route: str, method: str, status: int) -> None:
        key = (("route", route), ("method", method), ("status", str(status)))
        self.requests[key] = self.requests.get(key, 0) + 1

    def add_tokens(self, model: str, prompt: int = 0, generated: int = 0) -> None:
        key = (("model", model),)
        self.tokens_in[key] = self.tokens_in.get(key, 0) + prompt
        self.tokens_out[key] = self.tokens_out.get(key, 0) + generated

    def add_drafts(self, model: str, drafted: int, accepted: int) -> None:
        key = (("model", model),)
        self.drafted[key] = self.drafted.get(key, 0) + drafted
        self.draft_accepted[key] = self.draft_accepted.get(key, 0) + accepted

    def observe_ttft(self, model: str, seconds: float) -> None:
        self.ttft.setdefault((("model", model),), Histogram(TTFT_BUCKETS)).observe(seconds)

    def observe_tps(self, model: str, rate: float) -> None:
        self.tps.setdefault((("model", model),), Histogram(TPS_BUCKETS)).observe(rate)

    def render(self, gauges: Iterable[str] = ()) -> str:
        out: list[str] = []
        out += _family("localrun_requests_total", "counter", "HTTP requests by route, method and status.",
                       (f"localrun_requests_total{_labels(k)} {v}" for k, v in sorted(self.requests.items())))
        out += _family("localrun_prompt_tokens_total", "counter", "Prompt tokens of accepted generations.",
                       (f"localrun_prompt_tokens_total{_labels(k)} {v}" for k, v in sorted(self.tokens_in.items())))
        out += _family("localrun_generated_tokens_total", "counter", "Tokens generated.",
                       (f"localrun_generated_tokens_total{_labels(k)} {v}" for k, v in sorted(self.tokens_out.items())))
        out += _family("localrun_draft_tokens_total", "counter", "Tokens drafted by speculative decoding.",
                       (f"localrun_draft_tokens_total{_labels(k)} {v}" for k, v in sorted(self.drafted.items())))
        out += _family("localrun_draft_accepted_tokens_total", "counter",
                       "Drafted tokens the model confirmed (the acceptance rate is this over the drafted total).",
                       (f"localrun_draft_accepted_tokens_total{_labels(k)} {v}"
                        for k, v in sorted(self.draft_accepted.items())))
        out += _family("localrun_time_to_first_token_seconds", "histogram",
                       "From the request to its first token (load and queueing included).",
                       (line for k, h in sorted(self.ttft.items()) for line in h.lines("localrun_time_to_first_token_seconds", k)))
        out += _family("localrun_tokens_per_second", "histogram", "Decode speed of each finished choice.",
                       (line for k, h in sorted(self.tps.items()) for line in h.lines("localrun_tokens_per_second", k)))
        out += gauges
        return "\n".join(out) + "\n"


METRICS = Metrics()


class Observer:
    """Counts one accepted generation as its events pass (see generation.start)."""

    def __init__(self, model: str, started: float, prompt_tokens: int, metrics: Metrics = METRICS) -> None:
        self.model, self.started, self.metrics = model, started, metrics
        self.first = True
        metrics.add_tokens(model, prompt=prompt_tokens)

    def see(self, event: Event) -> None:
        if self.first and isinstance(event, Delta):
            self.first = False
            self.metrics.observe_ttft(self.model, time.perf_counter() - self.started)
        if isinstance(event, Done):
            t = event.timings
            if self.first and t.generated_tokens:  # no deltas came (GenerateRequest.deltas): the first token
                self.first = False                 # was generation_ms before this Done
                self.metrics.observe_ttft(self.model, time.perf_counter() - self.started - t.generation_ms / 1000.0)
            self.metrics.add_tokens(self.model, generated=t.generated_tokens)
            if t.draft_tokens:
                self.metrics.add_drafts(self.model, t.draft_tokens, t.draft_accepted)
            if t.generated_tokens > 1 and t.generation_ms > 0:
                self.metrics.observe_tps(self.model, t.generated_tokens / t.generation_ms * 1000.0)


class RequestCounter:
    """ASGI middleware, outermost: counts every HTTP request, the refused ones included, once its
    status is known. Routes are labelled by template (`/v1/models/{model_id:path}`), never by the raw
    path, and invented methods are "other", so hostile requests cannot grow the label set."""

    def __init__(self, app: ASGIApp, metrics: Metrics = METRICS) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        counted = False

        async def counting_send(message: Message) -> None:
            nonlocal counted
            if message["type"] == "http.response.start" and not counted:
                counted = True
                self.metrics.count_request(route_label(scope), method_label(scope), message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        except Exception:
            if not counted:
                self.metrics.count_request(route_label(scope), method_label(scope), 500)
            raise


def route_label(scope: Scope) -> str:
    """The route template the request reached; "unrouted" for those refused by a guard or matching no route."""
    return getattr(scope.get("route"), "path", None) or "unrouted"


def method_label(scope: Scope) -> str:
    """The HTTP method, or "other" for invented ones (a client may send any token as a method)."""
    return scope["method"] if scope["method"] in _METHODS else "other"


async def manager_gauges(manager: Any) -> list[str]:
    """Loaded models, admitted requests, queue depth, running sequences and decode threads, read at scrape time."""
    loaded = manager.running()
    health = await asyncio.gather(*(m.runner.health(RUNNER_HEALTH_TIMEOUT_S) for m in loaded))
    rows = [((("model", m.model.name),), m, h) for m, h in zip(loaded, health)]
    out = _family("localrun_loaded_models", "gauge", "Models loaded in a runner.", [f"localrun_loaded_models {len(loaded)}"])
    out += _family("localrun_model_info", "gauge", "One per loaded model: its runner's pid and context length.",
                   (f"localrun_model_info{_labels((*k, ('pid', str(m.runner.pid)), ('ctx', str(m.options.ctx_size))))} 1"
                    for k, m, _ in rows))
    out += _family("localrun_requests_admitted", "gauge", "Requests holding a model: running plus queued.",
                   (f"localrun_requests_admitted{_labels(k)} {m.pending}" for k, m, _ in rows))
    out += _family("localrun_queue_depth", "gauge", "Admitted requests waiting for a sequence slot.",
                   (f"localrun_queue_depth{_labels(k)} {max(0, m.pending - m.options.parallel)}" for k, m, _ in rows))
    out += _family("localrun_running_sequences", "gauge", "Sequences the runner's engine is working on.",
                   (f"localrun_running_sequences{_labels(k)} {h.running}" for k, _, h in rows if h is not None))
    out += _family("localrun_decode_threads", "gauge", "CPU threads the runner's engine decodes with now.",
                   (f"localrun_decode_threads{_labels(k)} {h.threads}" for k, _, h in rows if h and h.threads is not None))
    out += _family("localrun_parallel_slots", "gauge", "Sequence slots per model.",
                   (f"localrun_parallel_slots{_labels(k)} {m.options.parallel}" for k, m, _ in rows))
    return out


def _family(name: str, kind: str, help: str, samples: Iterable[str]) -> list[str]:
    return [f"# HELP {name} {help}", f"# TYPE {name} {kind}", *samples]


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value))


router = APIRouter(tags=["system"])


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text exposition format, version 0.0.4."""
    gauges = await manager_gauges(request.app.state.manager)
    return PlainTextResponse(METRICS.render(gauges), media_type=CONTENT_TYPE)


__all__ = ["METRICS", "Metrics", "Histogram", "Observer", "RequestCounter", "manager_gauges", "route_label", "router"]
