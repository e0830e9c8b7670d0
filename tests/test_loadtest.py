"""The short version of scripts/loadtest.py: 8 streaming clients for 10 s mixing every dialect the
daemon has and cancellations, against its own real daemon. It must pass: no errors but 503s,
every greedy answer equal to the same request run alone, no memory growth."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "loadtest.py"


def test_short_load_passes():
    result = subprocess.run([sys.executable, str(SCRIPT), "--clients", "8", "--duration", "6", "--prompts", "3",
                             "--max-tokens", "16", "--json"], capture_output=True, text=True, timeout=240)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.returncode == 0 and summary["pass"], summary
    assert summary["errors"] == 0 and summary["mismatches"] == 0
    assert summary["completed"] >= 8 and summary["cancelled"] >= 1
    assert {"openai", "ollama"} <= set(summary["dialects"])
    assert summary["rss_growth"] is not None and summary["rss_growth"] <= 0.10
    assert summary["ttft_p50_ms"] > 0


def test_only_loopback_daemons_are_loaded():
    result = subprocess.run([sys.executable, str(SCRIPT), "--url", "http://192.0.2.1:11435", "--duration", "1"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "loopback daemons only" in result.stderr


def _first_logprobs(engine, requests: list[tuple[str, str]], max_tokens: int) -> dict[str, float]:
    """Run greedy requests through the engine together; each one's first-token logprob."""
    from localrun.engine import Request, Token
    from localrun.native import GenerateRequest
    from localrun.runner.prompt import build_prompt
    from localrun.sampling import SamplingParams

    for rid, question in requests:
        prompt = build_prompt(engine, GenerateRequest(model="", messages=[{"role": "user", "content": question}]))
        engine.add(Request(id=rid, prompt=prompt, sampling=SamplingParams(temperature=0, max_tokens=max_tokens, logprobs=0)))
    first: dict[str, float] = {}
    while engine.has_work:
        for event in engine.step():
            if isinstance(event, Token):
                first.setdefault(event.request_id, event.logprob)
    return first


def test_a_deep_queue_gives_every_request_the_logits_it_gets_alone(smollm2_path):
    """What the load test found, made deterministic in-process: 40 queued greedy requests over 4 slots.
    Before prompt chunks got llama_decode calls of their own, three of them got other first-token
    logprobs than alone (r21 "What is 2 + 2?": -1.87867 instead of -1.89697): r21's 12-token prompt
    tail shared a batch with three decode tokens, and llama.cpp's per-stream split evaluated its first
    token as a lone row, which attends with other kernels than a chunk does."""
    import random

    from localrun.engine import Engine, EngineSettings

    from scripts.loadtest import PROMPTS

    engine = Engine(str(smollm2_path), EngineSettings(parallel=4, ctx_size=4096, batch_size=512, threads=2))
    try:
        alone = {q: _first_logprobs(engine, [("alone", q)], 1)["alone"] for q in PROMPTS}
        rng = random.Random(0)
        queued = [(f"r{i}", rng.choice(PROMPTS)) for i in range(40)]
        together = _first_logprobs(engine, queued, 24)  # answers as long as the load test's: the same schedule
    finally:
        engine.close()
    differing = [(rid, q, together[rid], alone[q]) for rid, q in queued if together[rid] != alone[q]]
    assert not differing
