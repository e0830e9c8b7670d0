"""What localrun in front of an upstream engine costs: a model served by another daemon, asked directly
and through a front daemon that has it in backends.toml, in the same run.

    python scripts/bench_upstream.py [--tokens 64] [--rounds 5] [--concurrent 4]

The upstream is a localrun daemon (the baseline any OpenAI-compatible engine would be). Measures
time to first token and decode tok/s of one stream, and the aggregate tok/s of `--concurrent`
streams, direct and through the front; direct and fronted rounds alternate so background load hits
both alike, and the medians are compared.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.daemon import MODEL, start_daemon  # noqa: E402

PROMPTS = [f"Write a short story about a {animal}." for animal in ("fox", "cat", "owl", "bear", "wolf", "hare", "crow")]


async def stream(client: httpx.AsyncClient, url: str, model: str, prompt: str, tokens: int) -> tuple[float, float, int]:
    """(seconds to the first content chunk, seconds in all, content chunks) of one streamed chat."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True, "max_tokens": tokens,
            "temperature": 0, "ignore_eos": True}
    started, first, chunks = time.perf_counter(), None, 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:") and '"content":"' in line.replace(" ", "") and '"content":""' not in line:
                first = first or time.perf_counter()
                chunks += 1
    return (first or time.perf_counter()) - started, time.perf_counter() - started, chunks


async def round_(url: str, model: str, tokens: int, concurrent: int) -> tuple[float, float, float]:
    """(TTFT s, single-stream tok/s, aggregate tok/s of `concurrent` streams)."""
    async with httpx.AsyncClient(timeout=600) as client:
        ttft, total, chunks = await stream(client, url, model, PROMPTS[0], tokens)
        started = time.perf_counter()
        many = await asyncio.gather(*(stream(client, url, model, PROMPTS[i % len(PROMPTS)], tokens)
                                      for i in range(concurrent)))
        elapsed = time.perf_counter() - started
    return ttft, chunks / max(1e-9, total - ttft), sum(c for _, _, c in many) / elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--concurrent", type=int, default=4)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        upstream = start_daemon(Path(tmp) / "upstream")
        front_home = Path(tmp) / "front"
        (front_home / "config").mkdir(parents=True)
        (front_home / "config" / "backends.toml").write_text(
            f'[backends.bench]\nurl = "{upstream.url}/v1"\nmodels = ["{MODEL}"]\n')
        front = start_daemon(front_home, pull=False)
        try:
            asyncio.run(round_(upstream.url, MODEL, 8, 1))  # load the model once
            results: dict[str, list[tuple[float, float, float]]] = {"direct": [], "through localrun": []}
            for _ in range(args.rounds):
                results["direct"].append(asyncio.run(round_(upstream.url, MODEL, args.tokens, args.concurrent)))
                results["through localrun"].append(asyncio.run(round_(front.url, MODEL, args.tokens, args.concurrent)))
        finally:
            front.stop()
            upstream.stop()
    print(f"{args.rounds} rounds, {args.tokens} tokens, {args.concurrent} concurrent; medians; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'path':<18} {'TTFT ms':>8} {'1-stream tok/s':>15} {f'{args.concurrent}-stream tok/s':>15}")
    for name, rows in results.items():
        ttft, single, many = (statistics.median(col) for col in zip(*rows))
        print(f"{name:<18} {ttft * 1000:>8.1f} {single:>15.1f} {many:>15.1f}")


if __name__ == "__main__":
    main()
