"""Benchmark: `localrun quantize` to several types, then what each costs in perplexity against its source.

    python scripts/bench_quantize.py [--types Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q4_0,Q3_K_M] [--text FILE] [--ppl-ctx 512]

Everything runs in a temporary LOCALRUN_HOME: the bundled SmolLM2 (Q4_1, the only model at hand
offline) is pulled, quantized through the real CLI (the child process and the store import included
in the time), and every model's perplexity is computed with the engine on the same text
(CPython's LICENSE.txt by default). The source is already quantized, so no result can beat it: the
table shows what each type loses on top.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from localrun.engine.backend import Model
from localrun.engine.perplexity import perplexity
from localrun.engine.settings import physical_cores

SOURCE = "smollm2:135m"


def cli(home: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "localrun", *args], capture_output=True, text=True,
                          env={**os.environ, "LOCALRUN_HOME": home}, check=False)
    if done.returncode != 0:
        raise SystemExit(f"localrun {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--types", default="Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q4_0,Q3_K_M")
    p.add_argument("--text", help="UTF-8 text file (default: CPython's LICENSE.txt)")
    p.add_argument("--ppl-ctx", type=int, default=512)
    p.add_argument("--threads", type=int, default=physical_cores())
    args = p.parse_args()
    text = Path(args.text or Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt").read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as home:
        cli(home, "pull", "smollm2", "--quiet")
        seconds = {SOURCE: 0.0}
        for type_ in args.types.split(","):
            started = time.perf_counter()
            cli(home, "quantize", "smollm2", f"smollm2:{type_.lower()}", "--type", type_)
            seconds[f"smollm2:{type_.lower()}"] = time.perf_counter() - started
        models = {m["name"]: m for m in json.loads(cli(home, "list", "--json"))}
        rows = [_row(models[name], seconds[name], text, args) for name in seconds]
    _report(rows, args)


def _row(model: dict, seconds: float, text: str, args: argparse.Namespace) -> dict:
    loaded = Model(model["path"], None)
    try:
        result = perplexity(loaded, text, ctx=args.ppl_ctx, threads=args.threads)
    finally:
        loaded.free()
    return {"name": model["name"], "type": model["quantization"], "size": model["size"], "quantize_s": seconds,
            "perplexity": result.perplexity, "scored": result.scored}


def _report(rows: list[dict], args: argparse.Namespace) -> None:
    base = rows[0]
    print(f"perplexity over {base['scored']} scored tokens, ctx {args.ppl_ctx}; source {base['name']} ({base['type']})\n")
    print("| model | type | size (MB) | vs source | quantize (s) | perplexity | vs source |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {r['type']} | {r['size'] / 1e6:.1f} | {r['size'] / base['size']:.2f}x | "
              f"{r['quantize_s']:.1f} | {r['perplexity']:.4f} | {100 * (r['perplexity'] / base['perplexity'] - 1):+.2f}% |")
    print("\n" + json.dumps(rows))


if __name__ == "__main__":
    main()
