"""The daemon's side of the upstream backends: HTTP to the replicas, failover, health checks, discovery.

`Upstreams.lease(route)` gives what the model manager gives for a local model: an object with a
`model` (name, defaults) and a `runner` whose `stream("generate", request=...)` yields the runner
protocol's messages (one acceptance, then `native.encode_event` deltas and dones). Generation and the
dialects use it unchanged.

A request goes to the replica `replicas.choose` picks. When it fails before the upstream's first
chunk (refused connection, timeout, 5xx) that replica's circuit opens and the next one is tried; the
request is accepted only once a first chunk arrived, so a failure before it is a clean 502/503 in the
dialect's shape. After that bytes have gone to the client and nothing is retried: a failure is the
stream's error event. A 4xx is the caller's mistake and goes back as such, naming the backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator

import httpx

from localrun.errors import BackendUnavailable, InvalidRequest, LocalrunError, ModelNotFound, Overloaded
from localrun.native import GenerateRequest, encode_event
from localrun.upstream import wire
from localrun.upstream.backends import Backend
from localrun.upstream.replicas import Affinity, NoReplica, Replica, choose, conversation_key

log = logging.getLogger("localrun.upstream")


@dataclass(frozen=True, slots=True)
class UpstreamModel:
    """What the server needs of a model that lives upstream (a local model has the same fields)."""

    name: str
    upstream_id: str  # the name the upstream knows it by
    backends: tuple[str, ...]
    declared: bool  # named in backends.toml (else discovered from an upstream's /v1/models)
    defaults: dict[str, Any] = field(default_factory=dict)
    system: str = ""  # what a Modelfile sets for a local model; an upstream model has none of it
    template: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class Route:
    model: UpstreamModel
    replicas: list[Replica]


def _same(name: str, other: str) -> bool:
    """Model names match as Ollama's do: `name` and `name:latest` are one model."""
    return name == other or name.removesuffix(":latest") == other.removesuffix(":latest")


class Upstreams:
    def __init__(self, backends: list[Backend], transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.backends = backends
        self.replicas = [Replica(b, url) for b in backends for url in b.urls]
        self.affinity = Affinity()
        self._client = httpx.AsyncClient(transport=transport)
        self._health: list[asyncio.Task[None]] = []

    # -- which models live where ------------------------------------------------------------------

    def models(self) -> list[UpstreamModel]:
        """Every upstream model once, in the file's order, with every backend that serves it."""
        found: list[UpstreamModel] = []
        for replica in self.replicas:
            backend = replica.backend
            for name in backend.models or replica.models:
                i = next((i for i, m in enumerate(found) if _same(m.name, name)), None)
                if i is None:
                    found.append(UpstreamModel(name, name, (backend.name,), bool(backend.models)))
                elif backend.name not in found[i].backends or backend.models:
                    m = found[i]
                    found[i] = replace(m, backends=tuple(dict.fromkeys((*m.backends, backend.name))),
                                       declared=m.declared or bool(backend.models))
        return found

    def route(self, name: str) -> Route | None:
        """The replicas serving `name`, or None when no backend has it."""
        model = next((m for m in self.models() if _same(m.name, name)), None)
        if model is None:
            return None
        serving = [r for r in self.replicas if any(_same(m, model.upstream_id) for m in r.backend.models or r.models)]
        return Route(model, serving)

    # -- leases -----------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lease(self, route: Route) -> AsyncIterator[UpstreamLease]:
        yield UpstreamLease(route.model, UpstreamRunner(self, route))

    async def send(self, route: Route, request: GenerateRequest) -> AsyncIterator[dict[str, Any]]:
        """The runner protocol's messages for `request`, from the first replica that answers."""
        path, body = wire.request_body(request, route.model.upstream_id)
        key = conversation_key(route.model.upstream_id, request.messages, request.prompt)
        tried: set[int] = set()
        while True:
            replica = self._pick(route, tried, self.affinity.get(key))
            tried.add(id(replica))
            replica.in_flight += 1
            try:
                async with contextlib.AsyncExitStack() as stack:
                    opened = await self._open(stack, replica, path, body)
                    if opened is None:
                        continue
                    self.affinity.remember(key, replica)
                    async for message in self._relay(replica, *opened):
                        yield message
                    return
            finally:
                replica.in_flight -= 1
                replica.last_used = time.monotonic()

    async def _relay(self, replica: Replica, lines: AsyncIterator[str], reader: wire.StreamReader, started: float,
                     first: list[Any], first_ms: float) -> AsyncIterator[dict[str, Any]]:
        """Acceptance, the events of the first chunk, then the rest as it arrives, then one Done per choice."""
        yield {"prompt_tokens": int(reader.usage.get("prompt_tokens") or 0)}
        for event in first:
            yield encode_event("", event)
        try:
            async for line in lines:
                for event in reader.feed(wire.sse_data(line) or {}):
                    yield encode_event("", event)
        except (httpx.HTTPError, ValueError) as e:
            replica.failed(time.monotonic(), _reason(e))
            raise BackendUnavailable(f"backend {replica.backend.name}: {replica.url} failed mid-answer "
                                     f"({_reason(e)}); not retried, part of the answer was sent") from None
        last_ms = (time.perf_counter() - started) * 1000.0
        for done in reader.finish(first_ms, last_ms):
            yield encode_event("", done)

    def _pick(self, route: Route, tried: set[int], preferred: Replica | None) -> Replica:
        try:
            return choose(route.replicas, time.monotonic(), tried, preferred)
        except NoReplica as e:
            names = ", ".join(route.model.backends)
            if e.busy:
                raise Overloaded(f"backend {names}: every replica of {route.model.name} is at its max_concurrent; "
                                 "retry later") from None
            errors = "; ".join(f"{r.url}: {r.last_error}" for r in route.replicas if r.last_error)
            raise BackendUnavailable(f"backend {names}: no replica of {route.model.name} is reachable"
                                     + (f" ({errors})" if errors else "")) from None

    async def _open(self, stack: contextlib.AsyncExitStack, replica: Replica, path: str,
                    body: dict[str, Any]) -> tuple[Any, wire.StreamReader, float, list[Any], float] | None:
        """Send the request and read up to its first content chunk; None (circuit opened) when the
        replica fails before that, so the caller tries another."""
        backend = replica.backend
        timeout = httpx.Timeout(backend.timeout, connect=backend.connect_timeout)
        started = time.perf_counter()
        try:
            response = await stack.enter_async_context(self._client.stream(
                "POST", replica.url + path, json=body, headers=backend.headers(), timeout=timeout))
            if response.status_code >= 500:
                raise _Failed(f"HTTP {response.status_code}: {_message(await response.aread())}")
            if response.status_code >= 400:
                raise _refused(backend, response.status_code, _message(await response.aread()))
            lines = response.aiter_lines()
            reader = wire.StreamReader()
            async for line in lines:
                chunk = wire.sse_data(line)
                if chunk is None:
                    continue
                if isinstance(chunk.get("error"), dict):
                    raise _Failed(f"error: {_message(chunk)}")
                events = reader.feed(chunk)
                if chunk.get("choices"):
                    replica.succeeded()
                    return lines, reader, started, events, (time.perf_counter() - started) * 1000.0
            raise _Failed("the stream ended before any answer")
        except (_Failed, httpx.HTTPError, ValueError) as e:
            replica.failed(time.monotonic(), _reason(e))
            log.warning("backend %s: %s failed before answering (%s); trying another replica", backend.name,
                        replica.url, _reason(e))
            return None

    # -- health -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Check every replica once (discovering models), then keep checking in the background."""
        await asyncio.gather(*(self.check(r) for r in self.replicas))
        self._health = [asyncio.create_task(self._watch(r)) for r in self.replicas]

    async def _watch(self, replica: Replica) -> None:
        while True:
            await asyncio.sleep(replica.backend.health_interval)
            await self.check(replica)

    async def check(self, replica: Replica) -> None:
        """GET /models: up (and its model list) or down (the circuit opens)."""
        backend = replica.backend
        try:
            response = await self._client.get(replica.url + "/models", headers=backend.headers(),
                                              timeout=httpx.Timeout(backend.connect_timeout))
            response.raise_for_status()
            data = response.json().get("data") or []
            replica.models = tuple(str(m["id"]) for m in data if isinstance(m, dict) and m.get("id"))
        except (httpx.HTTPError, ValueError, AttributeError, TypeError) as e:
            if not replica.failures:
                log.warning("backend %s: %s is down (%s)", backend.name, replica.url, _reason(e))
            replica.failed(time.monotonic(), _reason(e))
            return
        if replica.failures:
            log.info("backend %s: %s is up again", backend.name, replica.url)
        replica.succeeded()

    async def close(self) -> None:
        for task in self._health:
            task.cancel()
        await asyncio.gather(*self._health, return_exceptions=True)
        await self._client.aclose()


@dataclass(slots=True)
class UpstreamLease:
    """Looks like the manager's `Loaded` where generation reads it."""

    model: UpstreamModel
    runner: UpstreamRunner


class UpstreamRunner:
    """Looks like a `RunnerProcess` for generation; other runner operations are not available upstream."""

    def __init__(self, upstreams: Upstreams, route: Route) -> None:
        self.upstreams, self.route = upstreams, route

    def stream(self, op: str, **fields: Any) -> AsyncIterator[dict[str, Any]]:
        if op != "generate":
            raise self.unsupported(op)
        return self.upstreams.send(self.route, GenerateRequest.from_dict(fields["request"]))

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        raise self.unsupported(op)

    def unsupported(self, op: str) -> InvalidRequest:
        where = ", ".join(self.route.model.backends)
        return InvalidRequest(f"{op.replace('_', ' ')} is not available for {self.route.model.name}: it is served "
                              f"by backend {where}, which localrun reaches through its OpenAI chat/completions API only")


class _Failed(Exception):
    """A replica failed before its first chunk: try another."""


def _refused(backend: Backend, status: int, message: str) -> LocalrunError:
    text = f"backend {backend.name} answered HTTP {status}: {message}"
    if status == 404:
        return ModelNotFound(text)
    if status == 429:
        return Overloaded(text)
    if status in (401, 403):
        return BackendUnavailable(text + f" (check the key in ${backend.api_key_env or 'api_key_env'})")
    return InvalidRequest(text)


def _message(body: bytes | dict[str, Any]) -> str:
    """The error message inside an upstream's error body (OpenAI's or Ollama's shape), shortened."""
    try:
        data = json.loads(body) if isinstance(body, bytes) else body
    except ValueError:
        return body.decode("utf-8", "replace")[:300].strip() if isinstance(body, bytes) else ""
    error = data.get("error", data) if isinstance(data, dict) else data
    message = error.get("message", error) if isinstance(error, dict) else error
    return str(message)[:300]


def _reason(e: BaseException) -> str:
    return str(e) or type(e).__name__


__all__ = ["Route", "UpstreamLease", "UpstreamModel", "UpstreamRunner", "Upstreams"]
