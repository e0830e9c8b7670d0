"""Quantized KV caches (q8_0, q4_0): flash attention switched on by auto, refused at start when it is
off, served and reported by `localrun ps`, and a perplexity cost that stays small."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from localrun.engine import Engine, EngineSettings, Request
from localrun.engine.backend import Model
from localrun.engine.perplexity import perplexity
from localrun.sampling import SamplingParams
from tests.cli import run_cli
from tests.daemon import start_daemon
from tests.test_perplexity import CTX, TEXT
from tests.test_engine import THREADS


@pytest.mark.parametrize("kv", ["q8_0", "q4_0"])
def test_engine_loads_and_generates_with_a_quantized_cache(smollm2_path, kv):
    settings = EngineSettings(parallel=1, ctx_size=256, kv_cache_type=kv, threads=THREADS)
    with Engine(str(smollm2_path), settings) as engine:
        assert engine.info["kv_cache_type"] == kv and engine.info["flash_attn"] == "on"
        engine.add(Request("r", engine.tokenize("The capital of France is"), SamplingParams(temperature=0, max_tokens=6)))
        events = []
        while engine.has_work:
            events += engine.step()
    assert events[-1].reason == "length" and "".join(getattr(e, "text", "") for e in events).strip()


def test_quantized_caches_cost_little_perplexity(smollm2_path):
    model = Model(str(smollm2_path), None)
    try:
        ppl = {kv: perplexity(model, TEXT, ctx=CTX, batch=4 * CTX, threads=THREADS, kv_type=kv,
                              flash_attn="off" if kv == "f16" else "on").perplexity for kv in ("f16", "q8_0", "q4_0")}
    finally:
        model.free()
    assert ppl["q8_0"] == pytest.approx(ppl["f16"], rel=0.01)
    assert ppl["q4_0"] == pytest.approx(ppl["f16"], rel=0.10)
    assert ppl["q4_0"] != ppl["f16"]  # the cache really was quantized


@pytest.mark.parametrize("args, env, message", [
    (["--kv-cache-type", "q4_0"], {"LOCALRUN_FLASH_ATTN": "off"}, "error: a q4_0 KV cache needs flash attention"),
    ([], {"LOCALRUN_KV_CACHE_TYPE": "q8_0", "LOCALRUN_FLASH_ATTN": "off"}, "error: a q8_0 KV cache needs flash attention"),
    (["--kv-cache-type", "q5"], {}, "error: --kv-cache-type must be one of f16, q8_0, q4_0, got 'q5'"),
])
def test_serve_refuses_what_llama_cpp_would_refuse(args, env, message):
    done = run_cli("serve", "--port", "1", *args, env=env, timeout=60)
    assert done.returncode == 2
    assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [done.stderr.splitlines()[-1]]
    assert done.stderr.splitlines()[-1].startswith(message)


def test_daemon_serves_a_q8_0_cache_and_ps_reports_it(tmp_path):
    daemon = start_daemon(tmp_path / "home", {"LOCALRUN_KV_CACHE_TYPE": "q8_0", "LOCALRUN_PARALLEL": "1",
                                              "LOCALRUN_CTX_SIZE": "512"})
    try:
        body = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 6,
                "temperature": 0}
        answer = httpx.post(f"{daemon.url}/v1/chat/completions", json=body, timeout=120)
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] > 0
        assert httpx.get(f"{daemon.url}/api/ps").json()["models"][0]["kv_cache_type"] == "q8_0"
        listing = run_cli("ps", env=daemon.env()).stdout.splitlines()
        assert "512 (KV q8_0)" in listing[1]
    finally:
        daemon.stop()


def test_daemon_runs_flash_attention_over_a_prefix_and_ps_reports_it(tmp_path):
    """`LOCALRUN_FLASH_ATTN=prefix` through a real daemon: two concurrent chats, one with a prompt
    longer than the prefix (its cells move to the other context while it decodes beside the short
    one), are answered in full, and `/api/ps` tells the mode in effect (batched answers equal solo ones:
    tests/test_engine.py)."""
    daemon = start_daemon(tmp_path / "home", {"LOCALRUN_FLASH_ATTN": "prefix", "LOCALRUN_PARALLEL": "2",
                                              "LOCALRUN_CTX_SIZE": "1024"})
    long = "Summarise these notes. " + " ".join(f"Note {i}: bed {i} grows beans." for i in range(40))
    bodies = [{"model": "smollm2", "messages": [{"role": "user", "content": text}], "max_tokens": 12,
               "temperature": 0, "ignore_eos": True} for text in (long, "Say hi.")]

    def answer(body: dict) -> dict:
        reply = httpx.post(f"{daemon.url}/v1/chat/completions", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        return reply.json()["usage"]

    try:
        with ThreadPoolExecutor(2) as pool:
            usage = list(pool.map(answer, bodies))
        assert usage[0]["prompt_tokens"] > 256 and [u["completion_tokens"] for u in usage] == [12, 12]
        assert httpx.get(f"{daemon.url}/api/ps").json()["models"][0]["flash_attn"] == "prefix"
    finally:
        daemon.stop()
