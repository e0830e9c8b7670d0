"""Speculative decoding on the real model: drafted tokens are verified so that the output is the
output of plain decoding, token for token, alone and batched, greedy and seeded.

Bit-identical logits need llama.cpp to compute a row the same way whether it is evaluated alone
or among several rows of one sequence. On the CPU that holds with a quantized KV cache (flash
attention's per-row path) and weights without batched kernels (SmolLM2's Q4_1); the default f16
cache runs attention through a multi-row matmul kernel instead (see the README's Exactness), so
the identity tests use q8_0 and the f16 test checks that drafting works there too.
"""

from __future__ import annotations

import llama_cpp
import pytest

from localrun.engine import Engine, EngineSettings, Request, schema_to_grammar
from localrun.sampling import SamplingParams
from tests.test_engine import THREADS, Run, drain

TEXT = ("The river starts high in the mountains, where snow melts every spring. It runs through "
        "forests and small villages, turns a mill wheel, and fills a lake that farmers use for water. "
        "In summer children swim near the old bridge, and in autumn the water turns cold and grey.")
CODE = ("def mean(values):\n    total = 0\n    for value in values:\n        total += value\n"
        "    return total / len(values)\n")
COPYING = [f"Repeat this text exactly:\n{TEXT}", f"Copy this code exactly:\n{CODE}",
           f"Which sentences of this text mention water?\n{TEXT}"]
FREE = ["Write a poem about the sea.", "List the numbers from 1 to 30, separated by commas.",
        "Give three tips for learning to cook."]
DRAFT = 16


@pytest.fixture(scope="module")
def engine(smollm2_path):
    with Engine(str(smollm2_path), EngineSettings(parallel=6, ctx_size=1024, threads=THREADS,
                                                  kv_cache_type="q8_0")) as eng:
        yield eng


def chat(engine: Engine, text: str) -> list[int]:
    return engine.tokenize(engine.render_chat([{"role": "user", "content": text}]))


def run_all(engine: Engine, prompts: list[str], speculative: int, **sampling) -> list[Run]:
    sampling = {"temperature": 0.0, "max_tokens": 96, **sampling}
    for i, text in enumerate(prompts):
        engine.add(Request(f"r{i}", chat(engine, text), SamplingParams(speculative=speculative, **sampling)))
    runs = drain(engine, {})
    return [runs[f"r{i}"] for i in range(len(prompts))]


def run_each(engine: Engine, prompts: list[str], speculative: int, **sampling) -> list[Run]:
    return [run_all(engine, [text], speculative, **sampling)[0] for text in prompts]


def test_the_engine_measures_that_rows_are_computed_alike_with_a_q8_0_cache(smollm2_path):
    with Engine(str(smollm2_path), EngineSettings(parallel=1, ctx_size=256, threads=THREADS, kv_cache_type="q8_0",
                                                  speculative=DRAFT)) as eng:
        assert eng.info["speculative_exact"] is True
    with Engine(str(smollm2_path), EngineSettings(parallel=1, ctx_size=256, threads=THREADS)) as eng:
        assert eng.info["speculative_exact"] is None  # not measured while drafting is off by default


def test_greedy_output_with_drafts_is_the_output_without_alone_and_batched(engine):
    plain = run_each(engine, COPYING + FREE, 0)
    alone = run_each(engine, COPYING + FREE, DRAFT)
    batched = run_all(engine, COPYING + FREE, DRAFT)
    for p, a, b in zip(plain, alone, batched):
        assert a.tokens == p.tokens and b.tokens == p.tokens
        assert a.text == p.text and a.finished.reason == p.finished.reason
    assert alone[0].finished.timings.draft_accepted >= 30, "copying must be drafted and confirmed"
    assert all(r.finished.timings.draft_tokens == 0 for r in plain)
    t = alone[0].finished.timings
    assert 0 < t.draft_accepted <= t.draft_tokens and t.generated_tokens == plain[0].finished.timings.generated_tokens


def test_with_flash_attention_an_f16_cache_drafts_exactly_too(smollm2_path):
    """CPU flash attention computes a draft's rows with its one-row kernel, as plain decoding does,
    while a draft stays under 64 rows (`flashrows`): the probe says so and the answers agree."""
    with Engine(str(smollm2_path), EngineSettings(parallel=3, ctx_size=1024, threads=2, flash_attn="on",
                                                  speculative=64)) as eng:
        assert eng.info["speculative_exact"] is True
        prompts = COPYING[:2] + FREE[:1]
        plain = run_each(eng, prompts, 0)
        batched = run_all(eng, prompts, 64)
    assert [b.tokens for b in batched] == [p.tokens for p in plain]
    assert batched[0].finished.timings.draft_accepted >= 30


def test_seeded_sampling_and_logprobs_are_unchanged_by_drafts(engine):
    sampling = dict(temperature=0.7, seed=11, logprobs=2)
    plain = run_each(engine, COPYING[:2], 0, **sampling)
    drafted = run_each(engine, COPYING[:2], DRAFT, **sampling)
    for p, d in zip(plain, drafted):
        assert d.tokens == p.tokens
        assert [(e.logprob, e.top_logprobs) for e in d.events] == [(e.logprob, e.top_logprobs) for e in p.events]
    assert sum(r.finished.timings.draft_accepted for r in drafted) > 0


def test_a_grammar_sees_drafted_tokens_one_by_one(engine):
    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    prompt = f"Answer in JSON with the field text holding this text exactly:\n{TEXT}"
    constrained = dict(grammar=schema_to_grammar(schema), max_tokens=80)
    plain = run_each(engine, [prompt], 0, **constrained)[0]
    drafted = run_each(engine, [prompt], DRAFT, **constrained)[0]
    assert drafted.tokens == plain.tokens and '"text": "The river starts' in drafted.text
    assert drafted.finished.timings.draft_accepted > 0


@pytest.mark.parametrize("limit", [dict(max_tokens=5), dict(max_tokens=40, stop=["forests"])])
def test_limits_inside_a_draft_end_the_answer_where_plain_decoding_ends_it(engine, limit):
    plain = run_each(engine, COPYING[:1], 0, **limit)[0]
    drafted = run_each(engine, COPYING[:1], DRAFT, **limit)[0]
    assert drafted.tokens == plain.tokens and drafted.text == plain.text
    assert drafted.finished.reason == plain.finished.reason and drafted.finished.stop_text == plain.finished.stop_text


def test_the_server_default_applies_to_requests_that_do_not_choose(smollm2_path):
    with Engine(str(smollm2_path), EngineSettings(parallel=1, ctx_size=1024, threads=THREADS,
                                                  speculative=DRAFT)) as eng:
        assert eng.info["speculative"] == DRAFT
        # this CPU build's llamafile sums multi-row f16 attention in another order (README, Exactness)
        assert eng.info["speculative_exact"] is not (b"LLAMAFILE = 1" in llama_cpp.llama_print_system_info())
        default, off = run_all(eng, COPYING[:1], None)[0], run_all(eng, COPYING[:1], 0)[0]
    # f16 cache: drafting runs and is mostly confirmed, but rows may round differently (see above)
    assert default.finished.timings.draft_accepted >= 10
    assert off.finished.timings.draft_tokens == 0


def test_sliding_window_models_decode_without_drafts(gemma_path):
    with Engine(str(gemma_path), EngineSettings(parallel=1, ctx_size=512, threads=THREADS, speculative=DRAFT)) as eng:
        assert eng.info["speculative"] == 0  # a refused draft could not leave the window cache
        run = run_all(eng, COPYING[:1], DRAFT, max_tokens=16)[0]
    assert len(run.tokens) == 16 and run.finished.timings.draft_tokens == 0


def test_an_out_of_range_draft_length_is_refused(engine, smollm2_path):
    from localrun.errors import InvalidRequest, UsageError

    with pytest.raises(UsageError, match="speculative"):
        Engine(str(smollm2_path), EngineSettings(speculative=65))
    with pytest.raises(InvalidRequest, match="speculative"):
        engine.add(Request("bad", [1, 2, 3], SamplingParams(speculative=-1)))
    assert not engine.has_work


def test_the_row_probe_tells_the_cache_types_apart(smollm2_path):
    from localrun.engine.backend import Model
    from localrun.engine.rowcheck import rows_alike

    model = Model(str(smollm2_path), 0)
    try:
        assert rows_alike(model, 9, threads=THREADS, flash_attn="on", kv_type="q4_0") is True
        assert rows_alike(model, 9, threads=THREADS, flash_attn="on", kv_type="f16") is True  # the one-row kernel
        assert rows_alike(model, 64, threads=THREADS, flash_attn="on", kv_type="f16") is False  # a tile: tiled
        assert rows_alike(model, 9, threads=THREADS, flash_attn="off", kv_type="f16") is False  # tinyBLAS
    finally:
        model.free()
