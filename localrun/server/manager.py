"""The model manager schedules runners, not tokens: load on demand, keep-alive, eviction, admission.

One runner process per loaded model. A request leases the model (`async with manager.lease(...)`):
the lease loads the runner if needed, refuses at once with `Overloaded` (503 + Retry-After) when the
model already has `parallel + max_queue` requests, and on release starts the keep-alive clock.
Loading evicts the least recently used idle models to stay within the model count and the memory
budget. The runner factory is injectable so the scheduling decisions can be tested without models.

The bookkeeping is synchronous code on the event loop (no lock): a decision and the change it makes
happen without an await in between. A load runs as its own task, so a slow load of one model never
delays requests to another that is already loaded; requests for a model that is loading claim a
place in its queue and share that one load (and its error, when it fails).

A model that lives on another server (backends.toml) is leased from `localrun.upstream` instead:
nothing loads here, and routing, health and replicas are that package's business.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

from localrun.config import EngineSettings, Settings
from localrun.durations import parse_duration
from localrun.errors import DaemonUnavailable, InvalidRequest, LoadCrashed, LocalrunError, Overloaded
from localrun.safe_mode import SafeModeMemory
from localrun.server import access_log
from localrun.memory import KvShape, context_for, estimate_bytes, fits, memory_budget
from localrun.server.defaults import context_size
from localrun.server.runner_process import RunnerProcess
from localrun.upstream.pool import Route, UpstreamLease, Upstreams

log = logging.getLogger("localrun.manager")

REAP_INTERVAL_S = 1.0

Spawn = Callable[[Any, EngineSettings], Awaitable[RunnerProcess]]


@dataclass(slots=True, eq=False)
class Loaded:
    """A loaded model: its runner and the bookkeeping the scheduler decides from."""

    # The runner serves every name of its file (`cp`, `create`), which differ in their Modelfile
    # defaults: `model` is the one the latest lease asked for, set when it is admitted and read by
    # that lease's holder before its next await (generation.start), so each request gets its own name's.
    model: Any
    runner: RunnerProcess
    options: EngineSettings
    size: int
    keep_alive: float
    pending: int = 0  # admitted requests: running plus queued in the runner
    last_used: float = field(default_factory=time.monotonic)
    expires_at: float | None = None  # monotonic deadline while idle; None while busy or kept forever

    @property
    def idle(self) -> bool:
        return self.pending == 0

    def release(self, now: float) -> None:
        self.pending -= 1
        self.last_used = now
        if self.idle:
            self.start_clock(now)

    def start_clock(self, now: float) -> None:
        """Idle from `now`: keep-alive counts down (a negative keep-alive never does)."""
        self.expires_at = None if self.keep_alive < 0 else now + self.keep_alive


@dataclass(slots=True, eq=False)
class _Loading:
    """A load in progress. `claims` are the requests waiting for it: each holds a place in the model's
    queue, so they are admitted together when it is ready and the queue limit holds while it loads."""

    size: int
    capacity: int
    task: asyncio.Task[Loaded] | None = None
    claims: int = 0


def check_context(model: Any, num_ctx: int | None, field: str = "num_ctx") -> None:
    """A request may not ask for more context than the model was trained for: it buys nothing, and a
    huge one makes llama.cpp try (for minutes) to allocate it."""
    limit = getattr(getattr(model, "facts", None), "context_length", 0)
    if num_ctx is not None and limit and num_ctx > limit:
        raise InvalidRequest(f"{field}: {model.name} supports at most {limit} tokens of context, not {num_ctx}",
                             param=field)


def _seen(task: asyncio.Task[Any]) -> None:
    """Mark a load's error as seen: the requests that waited for it may all have left."""
    if not task.cancelled():
        task.exception()


class ModelManager:
    def __init__(self, config: Settings, store: Any, spawn: Spawn | None = None,
                 safe_mode: SafeModeMemory | None = None, upstreams: Upstreams | None = None) -> None:
        self.config = config
        self.store = store
        self.upstreams = upstreams  # models served by other servers (backends.toml)
        self.spawn: Spawn = spawn or RunnerProcess.start
        self.safe_mode = safe_mode or SafeModeMemory()
        self.loaded: dict[str, Loaded] = {}  # by blob digest
        self.loading: dict[str, _Loading] = {}  # by blob digest, while its runner starts
        self.default_keep_alive = config.keep_alive
        self.budget = memory_budget(config.memory_budget)
        self._reaper: asyncio.Task[None] | None = None
        self.closing = False

    def options(self, model: Any, num_ctx: int | None) -> EngineSettings:
        """The server's engine settings for loading `model`, in safe mode when this build on this CPU
        needs it, with the context per slot of `localrun.memory.context_for`: `num_ctx` (the request's or
        the model's), then LOCALRUN_CTX_SIZE when set, then the model's trained length within the budget."""
        ctx, _ = context_for(model, num_ctx, self.config)
        return replace(self.config.engine, ctx_size=ctx, safe_mode=self.safe_mode.needed)

    @contextlib.asynccontextmanager
    async def lease(self, name: str, num_ctx: int | None = None,
                    keep_alive: Any = None) -> AsyncIterator[Loaded | UpstreamLease]:
        """The loaded model for `name`, admitted for one request; released (keep-alive starts) on exit.
        A model that lives upstream gets the upstream's lease, which generation uses the same way."""
        keep = self.default_keep_alive if keep_alive is None else parse_duration(keep_alive)
        route = await self.upstream(name)
        if route is not None:
            assert self.upstreams is not None
            async with self.upstreams.lease(route) as leased:
                access_log.note(model=route.model.name)
                yield leased
            return
        loaded = await self._acquire(name, num_ctx, keep)
        access_log.note(model=loaded.model.name)
        try:
            yield loaded
        finally:
            self._release(loaded)

    async def upstream(self, name: str) -> Route | None:
        """The upstream route for `name` when it lives on another server: a model named in backends.toml
        always does; one only discovered from an upstream's /v1/models does when the store lacks it, so
        discovery never hides a local model."""
        route = self.upstreams.route(name) if self.upstreams is not None else None
        if route is None or route.model.declared:
            return route
        try:
            await asyncio.to_thread(self.store.resolve, name)
        except LocalrunError:
            return route
        return None

    def _release(self, loaded: Loaded) -> None:
        loaded.release(time.monotonic())
        if loaded.idle and loaded.keep_alive == 0:
            # A task, not an await: the lease may be closing inside a cancelled request.
            asyncio.get_running_loop().create_task(self._unload_if_idle(loaded))

    async def _acquire(self, name: str, num_ctx: int | None, keep: float) -> Loaded:
        model = await asyncio.to_thread(self.store.resolve, name)  # reads manifests and GGUF headers: off the loop
        if self.closing:
            raise DaemonUnavailable("the server is shutting down")
        num_ctx = context_size(num_ctx, model.defaults)
        check_context(model, num_ctx)
        loaded = self.loaded.get(model.digest)
        if loaded is not None and not self._stale(loaded, num_ctx):
            self._admit(loaded)
            loaded.keep_alive = keep
            loaded.model = model  # see Loaded.model
            return loaded
        loading = self.loading.get(model.digest) or self._start_load(model, self._options_after(model, loaded, num_ctx),
                                                                     loaded)
        loaded = await self._wait(model, loading)
        loaded.keep_alive = keep
        loaded.model = model
        return loaded

    def _options_after(self, model: Any, previous: Loaded | None, num_ctx: int | None) -> EngineSettings:
        """The options for a new runner: safe mode when the one it replaces died of SIGILL."""
        options = self.options(model, num_ctx)
        if previous is not None and previous.runner.death_signal == "SIGILL":
            log.warning("%s: its runner died of SIGILL; loading it again in safe mode", previous.model.name)
            return replace(options, safe_mode=True)
        return options

    def _stale(self, loaded: Loaded, num_ctx: int | None) -> bool:
        """A dead runner is replaced; an idle one is reloaded when the request asks for another context size."""
        if not loaded.runner.alive:
            return True
        return loaded.idle and num_ctx is not None and num_ctx != loaded.options.ctx_size

    def _admit(self, loaded: Loaded) -> None:
        capacity = loaded.options.parallel + self.config.max_queue
        if loaded.pending >= capacity:
            raise Overloaded(f"model {loaded.model.name} is busy ({loaded.pending} requests queued); retry later",
                             retry_after=1 + loaded.pending // max(1, loaded.options.parallel))
        loaded.pending += 1
        loaded.expires_at = None

    # -- loading --------------------------------------------------------------------------------

    def _start_load(self, model: Any, options: EngineSettings, stale: Loaded | None) -> _Loading:
        """Decide now (room, victims) and start the load as a task of its own; the stale runner of this
        model, if any, and the evicted ones are closed by that task before the new runner starts."""
        too_big = fits(model.size, KvShape.of(model.facts), options, self.budget)
        if too_big is not None:
            raise InvalidRequest(f"{model.name} cannot be loaded: {too_big}; ask for a smaller num_ctx, or use "
                                 f"a quantized KV cache (LOCALRUN_KV_CACHE_TYPE) or fewer slots (LOCALRUN_PARALLEL)")
        retired = [stale] if stale is not None and self._detach(stale) else []
        size = estimate_bytes(model.size, KvShape.of(model.facts), options)
        try:
            self._make_room(size)
        except Overloaded:
            for loaded in retired:
                asyncio.get_running_loop().create_task(loaded.runner.close())
            raise
        retired += [victim for victim in self._victims(size) if self._detach(victim)]
        loading = _Loading(size, options.parallel + self.config.max_queue)
        loading.task = asyncio.get_running_loop().create_task(self._load(model, options, loading, retired))
        loading.task.add_done_callback(_seen)
        self.loading[model.digest] = loading
        return loading

    async def _load(self, model: Any, options: EngineSettings, loading: _Loading, retired: list[Loaded]) -> Loaded:
        try:
            for old in retired:
                log.info("unloading %s", old.model.name)
                await old.runner.close()
            log.info("loading %s (ctx %d x %d slots%s)", model.name, options.ctx_size, options.parallel,
                     ", safe mode" if options.safe_mode else "")
            runner = await self._start_runner(model, options)
            for line in runner.info.get("cpu", []):
                log.info("%s: %s", model.name, line)
            if runner.info.get("speculative_exact") is False:
                log.warning("%s: speculative decoding is on but this build computes a verified draft's rows "
                            "differently from one-by-one decoding, so drafted answers can differ where two tokens "
                            "nearly tie (README, Exactness; a q8_0 KV cache often makes them identical)", model.name)
        finally:
            del self.loading[model.digest]
        if self.closing:
            await runner.close()
            raise DaemonUnavailable("the server is shutting down")
        # Every request still waiting is admitted at once, before any other code can evict the model.
        loaded = Loaded(model=model, runner=runner, options=runner.options, size=loading.size,
                        keep_alive=self.default_keep_alive, pending=loading.claims)
        if loaded.idle:  # every waiter gave up
            loaded.start_clock(time.monotonic())
        self.loaded[model.digest] = loaded
        self._ensure_reaper()
        return loaded

    async def _start_runner(self, model: Any, options: EngineSettings) -> RunnerProcess:
        """Start the runner. When it dies of a signal while loading (a build for another CPU, a kernel
        that faults here), retry once in safe mode; when that works, remember it for this build and CPU."""
        try:
            return await self.spawn(model.path, options)
        except LoadCrashed as e:
            if options.safe_mode:
                raise
            log.warning("%s: %s; retrying once in safe mode (no weight repacking, no AMX)", model.name, e.message)
            runner = await self.spawn(model.path, replace(options, safe_mode=True))
            self.safe_mode.remember(e.message)
            log.warning("%s loaded in safe mode; later loads with this llama.cpp build on this CPU start in safe "
                        "mode (%s lists it; delete it after rebuilding llama-cpp-python)", model.name, self.safe_mode.path)
            return runner

    async def _wait(self, model: Any, loading: _Loading) -> Loaded:
        """Claim a place in the loading model's queue and wait for the load (its error is raised here)."""
        if loading.claims >= loading.capacity:
            raise Overloaded(f"model {model.name} is loading and {loading.claims} requests wait for it; retry later",
                             retry_after=1)
        loading.claims += 1
        assert loading.task is not None
        try:
            return await asyncio.shield(loading.task)
        except asyncio.CancelledError:  # the request went away: give its place back
            task = loading.task
            if task.done() and not task.cancelled() and task.exception() is None:
                self._release(task.result())
            else:
                loading.claims -= 1
            raise

    def _make_room(self, size: int) -> None:
        """Refuse now when even evicting every idle model cannot make room (loads in progress count as busy)."""
        busy = [m.size for m in self.loaded.values() if not m.idle] + [m.size for m in self.loading.values()]
        if len(busy) >= self.config.max_loaded_models:
            raise Overloaded(f"{len(busy)} models are loaded and busy (LOCALRUN_MAX_LOADED_MODELS); retry later")
        if self.budget and busy and sum(busy) + size > self.budget:
            raise Overloaded("not enough memory budget while other models are busy (LOCALRUN_MEMORY_BUDGET)")

    def _victims(self, size: int) -> list[Loaded]:
        """Least recently used idle models to unload so the new one fits the count and the budget."""
        victims: list[Loaded] = []
        idle = sorted((m for m in self.loaded.values() if m.idle), key=lambda m: m.last_used)
        held = [*self.loaded.values(), *self.loading.values()]
        count, used = len(held), sum(m.size for m in held)
        while idle and (count >= self.config.max_loaded_models or (self.budget and used + size > self.budget)):
            victim = idle.pop(0)
            victims.append(victim)
            count, used = count - 1, used - victim.size
        return victims

    @contextlib.contextmanager
    def reserve(self, loaded: Loaded, extra: int) -> Iterator[None]:
        """Count `extra` bytes against the budget for `loaded` while one of its jobs holds them (the
        context of a perplexity run): idle models are evicted to make room, and when even that
        cannot make room the job is refused as a load would be."""
        if self.budget:
            held = [*self.loaded.values(), *self.loading.values()]
            used = sum(m.size for m in held) + extra
            idle = sorted((m for m in self.loaded.values() if m.idle and m is not loaded), key=lambda m: m.last_used)
            if used - sum(m.size for m in idle) > self.budget:
                raise Overloaded("not enough memory budget for this job while other models are busy "
                                 "(LOCALRUN_MEMORY_BUDGET)")
            while used > self.budget:
                victim = idle.pop(0)
                used -= victim.size
                if self._detach(victim):
                    log.info("unloading %s to make room", victim.model.name)
                    asyncio.get_running_loop().create_task(victim.runner.close())
        loaded.size += extra
        try:
            yield
        finally:
            loaded.size -= extra

    # -- unloading ------------------------------------------------------------------------------

    def _detach(self, loaded: Loaded) -> bool:
        """Forget `loaded` if it is still the model's runner; whoever detaches it closes it."""
        if self.loaded.get(loaded.model.digest) is not loaded:
            return False
        del self.loaded[loaded.model.digest]
        return True

    async def unload(self, loaded: Loaded) -> None:
        """Stop the runner now, whatever it is doing (shutdown)."""
        if self._detach(loaded):
            log.info("unloading %s", loaded.model.name)
            await loaded.runner.close()

    async def _unload_if_idle(self, loaded: Loaded) -> None:
        if loaded.idle:
            await self.unload(loaded)

    async def expire(self, digest: str) -> bool:
        """Unload the runner of the blob `digest` as Ollama expires one: now when it is idle, else as soon
        as the requests in flight have finished (they are not cut off). False when it is not loaded."""
        loaded = self.loaded.get(digest)
        if loaded is None:
            return False
        loaded.keep_alive = 0
        await self._unload_if_idle(loaded)
        return True

    async def unload_name(self, name: str) -> bool:
        """Expire `name` if it is loaded (keep_alive 0 with an empty prompt); an upstream model never is."""
        if await self.upstream(name) is not None:
            return False
        model = await asyncio.to_thread(self.store.resolve, name)
        return await self.expire(model.digest)

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap())

    async def _reap(self) -> None:
        """Unload idle models whose keep-alive ran out, and forget runners that died while idle."""
        while self.loaded:
            await asyncio.sleep(REAP_INTERVAL_S)
            now = time.monotonic()
            for loaded in list(self.loaded.values()):
                expired = loaded.idle and loaded.expires_at is not None and loaded.expires_at <= now
                if expired or (loaded.idle and not loaded.runner.alive):
                    await self._unload_if_idle(loaded)

    def begin_shutdown(self, drain_s: float = 0.0) -> None:
        """Admit nothing more (SIGTERM) and give the requests in flight `drain_s` seconds to finish; then
        end the rest with a clear error, so that streams get a final error event before the server's
        own graceful wait runs out and cuts them."""
        self.closing = True
        asyncio.get_running_loop().call_later(max(0.0, drain_s), self._end_in_flight)

    def _end_in_flight(self) -> None:
        for loaded in self.loaded.values():
            loaded.runner.fail_all("the server is shutting down", "DaemonUnavailable")

    async def close(self) -> None:
        self.closing = True
        if self._reaper is not None:
            self._reaper.cancel()
        if self.upstreams is not None:
            await self.upstreams.close()
        loads = [loading.task for loading in self.loading.values() if loading.task is not None]
        await asyncio.gather(*loads, return_exceptions=True)  # each closes its own runner when closing
        for loaded in list(self.loaded.values()):
            await self.unload(loaded)

    def running(self) -> list[Loaded]:
        return sorted(self.loaded.values(), key=lambda m: -m.last_used)
