"""The model manager's scheduling decisions, with a stand-in runner factory and store: which
runner serves, when a request is refused, what is evicted and when keep-alive unloads."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from localrun.config import EngineSettings, Settings
from localrun.errors import InvalidRequest, LoadCrashed, ModelLoadError, ModelNotFound, Overloaded
from localrun.server.manager import ModelManager
from localrun.memory import KvShape, default_context, estimate_bytes
from localrun.store import Facts
from localrun.sizes import parse_size
from localrun.store.ggufinfo import kv_bytes_per_token


@dataclass
class StubModel:
    name: str
    digest: str
    path: Path
    size: int = 1000
    facts: object = field(default_factory=lambda: type("Facts", (), {"kv_bytes_per_token": 0})())
    defaults: dict = field(default_factory=dict)


@dataclass
class StubStore:
    models: dict[str, StubModel] = field(default_factory=dict)

    def resolve(self, name: str) -> StubModel:
        if name not in self.models:
            raise ModelNotFound(name)
        return self.models[name]


class StubRunner:
    INFO: dict = {}  # what the runner's "ready" message told
    death_signal = None

    def __init__(self, path, options) -> None:
        self.path, self.options, self.info = path, options, dict(self.INFO)
        self.alive, self.closed = True, False

    async def close(self) -> None:
        self.closed, self.alive = True, False


def manager(**overrides) -> tuple[ModelManager, list[StubRunner]]:
    """A manager with these settings (names of LOCALRUN_* variables in lower case, without the prefix)."""
    settings = dict(keep_alive="5m", max_loaded_models=2, memory_budget="1GiB", max_queue=1, parallel=1,
                    ctx_size=512)
    settings.update(overrides)
    environ = {f"LOCALRUN_{name.upper()}": str(value) for name, value in settings.items()}
    store = StubStore({n: StubModel(n, f"sha256:{n}", Path(n)) for n in ("a", "b", "c")})
    spawned: list[StubRunner] = []

    async def spawn(path, options):
        spawned.append(StubRunner(path, options))
        return spawned[-1]

    return ModelManager(Settings.from_env(environ), store, spawn), spawned


def run(coro):
    return asyncio.run(coro)


def test_one_runner_per_model_reused_across_requests():
    async def main():
        m, spawned = manager()
        async with m.lease("a"):
            pass
        async with m.lease("a"):
            pass
        assert len(spawned) == 1 and [x.model.name for x in m.running()] == ["a"]
        await m.close()
    run(main())


def test_full_queue_is_refused_at_once_and_admits_again_after():
    async def main():
        m, _ = manager(parallel=1, max_queue=1)
        async with m.lease("a"), m.lease("a"):  # one running + one queued = capacity
            with pytest.raises(Overloaded) as e:
                async with m.lease("a"):
                    pass
            assert e.value.retry_after >= 1
        async with m.lease("a"):
            pass
        await m.close()
    run(main())


def test_least_recently_used_idle_model_is_evicted_at_the_count_limit():
    async def main():
        m, spawned = manager(max_loaded_models=2)
        for name in ("a", "b", "a", "c"):
            async with m.lease(name):
                pass
        assert sorted(x.model.name for x in m.running()) == ["a", "c"]
        assert spawned[1].closed  # b was least recently used
        await m.close()
    run(main())


def test_busy_models_are_never_evicted():
    async def main():
        m, _ = manager(max_loaded_models=1)
        async with m.lease("a"):
            with pytest.raises(Overloaded, match="busy"):
                async with m.lease("b"):
                    pass
        await m.close()
    run(main())


def test_keep_alive_zero_unloads_after_the_request_and_negative_keeps_forever():
    async def main():
        m, spawned = manager()
        async with m.lease("a", keep_alive=0):
            pass
        await asyncio.sleep(0.05)
        assert spawned[0].closed and not m.loaded
        async with m.lease("b", keep_alive=-1):
            pass
        assert m.running()[0].expires_at is None
        await m.close()
    run(main())


def test_keep_alive_expiry_unloads_idle_models(monkeypatch):
    monkeypatch.setattr("localrun.server.manager.REAP_INTERVAL_S", 0.05)

    async def main():
        m, spawned = manager()
        async with m.lease("a", keep_alive="100ms"):
            pass
        assert m.loaded
        await asyncio.sleep(0.4)
        assert not m.loaded and spawned[0].closed
    run(main())


def test_new_context_size_reloads_an_idle_model_and_a_dead_runner_is_replaced():
    async def main():
        m, spawned = manager()
        async with m.lease("a"):
            pass
        async with m.lease("a", num_ctx=2048):
            pass
        assert len(spawned) == 2 and spawned[1].options.ctx_size == 2048
        spawned[1].alive = False
        async with m.lease("a"):
            pass
        assert len(spawned) == 3
        await m.close()
    run(main())


async def use(m: ModelManager, *names: str) -> None:
    """One finished request for each model, in order."""
    for name in names:
        async with m.lease(name):
            pass


def test_resolving_a_name_does_not_hold_up_requests_to_a_loaded_model():
    """The store reads manifests and GGUF headers from disk: a slow disk must not stall the event loop."""
    async def main():
        m, _ = manager()
        await use(m, "a")
        disk = threading.Event()
        plain = m.store.resolve

        def resolve(name: str) -> StubModel:
            if name == "b":
                disk.wait(10)
            return plain(name)

        m.store.resolve = resolve
        started = time.monotonic()
        slow = asyncio.create_task(use(m, "b"))
        await asyncio.sleep(0)  # the request for "b" starts resolving its name
        await use(m, "a")  # and one for "a" is served meanwhile
        assert time.monotonic() - started < 5 and not slow.done()
        disk.set()
        await slow
        await m.close()
    run(main())


def test_a_models_default_context_applies_unless_the_request_names_one():
    async def main():
        m, spawned = manager()
        m.store.models["a"].defaults["num_ctx"] = 1024
        await use(m, "a", "b")
        assert [x.options.ctx_size for x in spawned] == [1024, 512]  # the model's default, else LOCALRUN_CTX_SIZE
        async with m.lease("a", num_ctx=2048) as loaded:
            assert loaded.options.ctx_size == 2048
        await m.close()
    run(main())


MIB = 2**20


@pytest.mark.parametrize("trained, budget, ceiling, expected", [
    (8192, 0, 0, (8192, "its trained length")),  # no budget known: the trained length
    (8192, 2**31, 0, (8192, "its trained length")),
    # (1 GiB - 100 MiB - 2048 x 30 KiB for embeddings - 5 x 256 x 30 KiB for the prefix contexts)
    # / (4 slots and the scoring context) / 30 KiB, in 256s
    (131072, 2**30, 0, (5632, "the memory budget (LOCALRUN_MEMORY_BUDGET)")),
    (131072, 2**30, 4096, (4096, "LOCALRUN_MAX_CTX")),
    (8192, 50 * MIB, 0, (256, "the memory budget (LOCALRUN_MEMORY_BUDGET)")),  # the weights alone do not fit
    (0, 2**30, 0, (4096, "its trained length is unknown")),
])
def test_the_automatic_context_is_the_trained_length_within_the_memory_budget_and_the_ceiling(
        trained, budget, ceiling, expected):
    options = EngineSettings(parallel=4)
    assert default_context(trained, KvShape(30 * 1024), 100 * MIB, options, budget, ceiling) == expected


def test_a_model_loads_with_its_trained_context_unless_memory_or_a_setting_says_less():
    async def main():
        m, spawned = manager(ctx_size="auto", memory_budget="64MiB", max_ctx=0)
        for name, trained in (("a", 2048), ("b", 65536)):
            m.store.models[name].facts = Facts(context_length=trained, kv_bytes_per_token=1024)
        await use(m, "a", "b")
        # b: (64 MiB - 1000 B - 2048 x 1 KiB for embeddings - 2 x 256 x 1 KiB for the prefix contexts)
        # / 1 KiB for the slot and 1 KiB for scoring, in 256s
        assert [x.options.ctx_size for x in spawned] == [2048, 31232]
        with pytest.raises(InvalidRequest, match=r"b cannot be loaded: .* KV cache \(65536 tokens x 1 slots, f16, "
                                                 r"and the scoring and embeddings contexts'\) do not fit the memory "
                                                 r"budget of 0.1 GiB"):
            async with m.lease("b", num_ctx=65536):
                pass
        await m.close()
        m, spawned = manager(ctx_size="auto", max_ctx=1024)
        m.store.models["a"].facts = Facts(context_length=2048, kv_bytes_per_token=1024)
        await use(m, "a")
        assert spawned[0].options.ctx_size == 1024
        await m.close()
    run(main())


def test_memory_budget_evicts_to_fit():
    async def main():
        m, spawned = manager(memory_budget="1500", max_loaded_models=5)
        await use(m, "a", "b")
        assert [x.model.name for x in m.running()] == ["b"] and spawned[0].closed
        await m.close()
    run(main())


def test_kv_cache_estimate_from_gguf_metadata():
    meta = {"block_count": 30, "embedding_length": 576, "attention.head_count": 9, "attention.head_count_kv": 3}
    per_token = kv_bytes_per_token(lambda key, default: meta.get(key, default))
    assert per_token == 30 * 3 * (64 + 64) * 2
    f16 = EngineSettings(parallel=2, ctx_size=100, embed_ctx_size=50, flash_attn="off")
    shape = KvShape(per_token)
    assert estimate_bytes(1000, shape, f16) == 1000 + per_token * (200 + 100 + 50)  # 2 slots, scoring, embeddings
    quantized = replace(f16, kv_cache_type="q8_0", flash_attn="on")
    assert estimate_bytes(1000, shape, quantized) < estimate_bytes(1000, shape, f16)
    longer = replace(f16, ctx_size=1000, flash_attn="prefix")  # the slots' and scoring's first 256 cells: twice
    assert estimate_bytes(1000, shape, longer) == 1000 + per_token * (2000 + 2 * 256 + 1000 + 256 + 50)
    assert estimate_bytes(1000, shape, replace(longer, flash_attn="auto")) == estimate_bytes(1000, shape, longer)
    assert estimate_bytes(1000, KvShape(per_token, window=512), longer) == 1000 + per_token * (2000 + 1000 + 50)
    assert parse_size("8GiB") == 8 * 2**30 and parse_size("512MB") == 512 * 10**6


def gated_manager(**overrides):
    """A manager whose runner for model "a" starts only when the test opens `gate` (a load in progress)."""
    m, spawned = manager(**overrides)
    gate = asyncio.Event()
    plain = m.spawn

    async def spawn(path, options):
        if path == Path("a"):
            await gate.wait()
        return await plain(path, options)

    m.spawn = spawn
    return m, spawned, gate


def test_a_loaded_model_is_served_while_another_loads():
    async def main():
        m, spawned, gate = gated_manager()
        async with m.lease("b"):
            pass
        loading = asyncio.create_task(m._acquire("a", None, 60.0))
        await asyncio.sleep(0.05)
        assert not loading.done() and "sha256:a" in m.loading
        async with m.lease("b") as b:  # served at once: the load of "a" holds nothing b needs
            assert b.model.name == "b"
        gate.set()
        assert (await loading).model.name == "a" and len(spawned) == 2
        await m.close()
    run(main())


def test_requests_for_a_loading_model_share_one_load_and_are_all_admitted():
    async def main():
        m, spawned, gate = gated_manager(parallel=2, max_queue=1)
        waiters = [asyncio.create_task(m._acquire("a", None, 60.0)) for _ in range(3)]
        await asyncio.sleep(0.05)
        with pytest.raises(Overloaded, match="loading"):  # the fourth is over the queue limit, at once
            await m._acquire("a", None, 60.0)
        gate.set()
        loaded = {id(await w) for w in waiters}
        assert len(spawned) == 1 and len(loaded) == 1 and m.running()[0].pending == 3
        await m.close()
    run(main())


def test_a_failed_load_fails_every_waiter_and_the_next_request_tries_again():
    async def main():
        m, spawned = manager()
        attempts = []

        async def spawn(path, options):
            attempts.append(path)
            await asyncio.sleep(0.05)
            if len(attempts) == 1:
                raise ModelLoadError("model failed to load: bad file")
            return StubRunner(path, options)

        m.spawn = spawn
        results = await asyncio.gather(*(m._acquire("a", None, 60.0) for _ in range(2)), return_exceptions=True)
        assert len(attempts) == 1 and all(isinstance(r, ModelLoadError) for r in results)
        assert not m.loading and not m.loaded
        async with m.lease("a"):
            assert len(attempts) == 2
        await m.close()
    run(main())


def crashing_spawn(crashes: int, error=LoadCrashed):
    """A runner factory whose first `crashes` starts die while loading; records each start's options."""
    starts: list[EngineSettings] = []

    async def spawn(path, options):
        starts.append(options)
        if len(starts) <= crashes:
            raise error("model failed to load: killed by signal SIGILL")
        return StubRunner(path, options)

    return spawn, starts


def test_a_load_that_crashes_is_retried_once_in_safe_mode_and_remembered():
    async def main():
        m, _ = manager()
        m.spawn, starts = crashing_spawn(1)
        async with m.lease("a") as loaded:
            assert [o.safe_mode for o in starts] == [False, True] and loaded.options.safe_mode
        await m.close()
        later, _ = manager()  # a daemon started afterwards, same home
        assert later.safe_mode.needed and later.options(later.store.models["a"], None).safe_mode
        assert "SIGILL" in later.safe_mode.reason
    run(main())


@pytest.mark.parametrize("crashes, error, starts_expected", [(2, LoadCrashed, 2), (1, ModelLoadError, 1)])
def test_only_one_retry_and_only_after_a_crash(crashes, error, starts_expected):
    async def main():
        m, _ = manager()
        m.spawn, starts = crashing_spawn(crashes, error)
        with pytest.raises(error):
            await m._acquire("a", None, 60.0)
        assert len(starts) == starts_expected and not m.safe_mode.needed
        await m.close()
    run(main())


def test_a_runner_that_died_of_sigill_is_replaced_by_one_in_safe_mode():
    async def main():
        m, spawned = manager()
        async with m.lease("a"):
            pass
        spawned[0].alive, spawned[0].death_signal = False, "SIGILL"
        async with m.lease("a") as loaded:
            assert len(spawned) == 2 and loaded.options.safe_mode
        await m.close()
    run(main())


def test_a_waiter_that_leaves_gives_its_place_back():
    async def main():
        m, _, gate = gated_manager()
        gone = asyncio.create_task(m._acquire("a", None, 60.0))
        await asyncio.sleep(0.05)
        gone.cancel()
        await asyncio.sleep(0)
        assert m.loading["sha256:a"].claims == 0
        gate.set()
        await asyncio.sleep(0.05)
        loaded = m.running()[0]
        assert loaded.idle and loaded.expires_at is not None  # nobody holds it; its keep-alive runs
        await m.close()
    run(main())


def test_expire_unloads_an_idle_model_now_and_a_busy_one_when_its_requests_end():
    async def main():
        m, spawned = manager()
        async with m.lease("a"):
            pass
        assert await m.expire("sha256:a") and spawned[0].closed and not m.loaded
        async with m.lease("b") as b:
            assert await m.expire("sha256:b")
            assert not spawned[1].closed and b.runner.alive  # the request in flight is not cut off
        await asyncio.sleep(0.05)
        assert spawned[1].closed and not m.loaded
        assert not await m.expire("sha256:c")
        await m.close()
    run(main())


def test_a_job_context_counts_against_the_budget_while_it_runs():
    async def main():
        m, spawned = manager(memory_budget="2500", max_loaded_models=5)
        await use(m, "a", "b")
        async with m.lease("b") as b:
            with m.reserve(b, 400):  # fits beside "a": nothing is evicted
                assert b.size == 1400 and not spawned[0].closed
            assert b.size == 1000
            with m.reserve(b, 600):  # "a" (idle) makes room
                await asyncio.sleep(0)
                assert spawned[0].closed and [x.model.name for x in m.running()] == ["b"]
            with pytest.raises(Overloaded, match="memory budget"):
                with m.reserve(b, 2000):  # over the budget even alone
                    pass
            assert b.size == 1000
        await m.close()
    run(main())


@pytest.mark.parametrize("exact, warned", [(False, True), (True, False), (None, False)])
def test_a_runner_that_drafts_inexactly_is_logged(caplog, monkeypatch, exact, warned):
    monkeypatch.setattr(StubRunner, "INFO", {"speculative": 16, "speculative_exact": exact})

    async def main():
        m, _ = manager()
        await use(m, "a")
        await m.close()
    with caplog.at_level("WARNING", logger="localrun.manager"):
        run(main())
    assert ("drafted answers can differ" in caplog.text) is warned
