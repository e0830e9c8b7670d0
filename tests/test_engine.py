"""The engine on the real model (SmolLM2-135M): greedy parity with llama-cpp-python, isolation
between batched sequences, prefix reuse, stops, streaming text, seeds, cancellation, limits."""

from __future__ import annotations

import json
import math

import llama_cpp
import pytest

from localrun.engine import Engine, EngineSettings, Finished, Request, Token, schema_to_grammar
from localrun.engine.contexts import FLASH, MAIN
from localrun.engine.cpuuse import CpuUse
from localrun.engine.flashrows import TILE_ROWS
from localrun.engine.scheduler import common_prefix
from localrun.engine.threads import ThreadTuner
from localrun.errors import ContextOverflow, InvalidRequest, ModelLoadError
from localrun.sampling import SamplingParams

PROMPTS = [
    "Once upon a time", "The capital of France is", "def fib(n):", "List three colors:",
    "The best way to learn Python is", "Water boils at", "In 1492, Columbus", "My favourite recipe is",
]
GREEDY = dict(temperature=0.0)
THREADS = 2  # the suite runs alone (.ci/run): both cores; one thread made this file 1.7x slower (115 against 69 s)


@pytest.fixture(scope="module")
def engine(smollm2_path):
    eng = Engine(str(smollm2_path), EngineSettings(parallel=8, ctx_size=1024, threads=THREADS))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def solo(smollm2_path):
    """One slot: every request runs alone."""
    eng = Engine(str(smollm2_path), EngineSettings(parallel=1, ctx_size=1024, threads=THREADS))
    yield eng
    eng.close()


class Run:
    """What one request produced: tokens, the streamed text pieces, and its Finished event."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.pieces: list[str] = []
        self.events: list[Token] = []
        self.finished: Finished | None = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def items(n: int) -> str:
    """A long prompt: `n` numbered short sentences."""
    return " ".join(f"Item {i} is a {c}." for i, c in enumerate(["red box", "blue cup"] * (n // 2)))


def drain(engine: Engine, runs: dict[str, Run], on_step=None) -> dict[str, Run]:
    step = 0
    while engine.has_work:
        for event in engine.step():
            run = runs.setdefault(event.request_id, Run())
            if isinstance(event, Token):
                run.tokens.append(event.token)
                run.pieces.append(event.text)
                run.events.append(event)
            else:
                assert run.finished is None
                run.finished = event
        step += 1
        if on_step:
            on_step(step)
    return runs


def generate(engine: Engine, prompt: list[int] | str, rid: str = "r", **sampling) -> Run:
    tokens = engine.tokenize(prompt) if isinstance(prompt, str) else prompt
    engine.add(Request(rid, tokens, SamplingParams(**sampling)))
    return drain(engine, {})[rid]


def llama_like(engine: Engine, path, n_ctx: int, **options) -> llama_cpp.Llama:
    """llama-cpp-python computing as the engine does for sequences within their first 256 cells: with
    flash attention in prefix mode (the default on CPUs), without it where the engine has it off."""
    return llama_cpp.Llama(str(path), n_ctx=n_ctx, n_threads=THREADS, n_threads_batch=THREADS, verbose=False,
                           flash_attn=engine.info["flash_attn"] == "prefix", **options)


def test_greedy_matches_llama_cpp_python(engine, smollm2_path):
    llm = llama_like(engine, smollm2_path, 1024)
    for i, prompt in enumerate(PROMPTS[:5]):
        tokens = engine.tokenize(prompt)
        assert len(tokens) + 64 < 256
        ours = generate(engine, tokens, f"g{i}", max_tokens=64, **GREEDY)
        ref = llm.create_completion(tokens, max_tokens=64, temperature=0.0)
        assert ours.text == ref["choices"][0]["text"], prompt
        assert len(ours.tokens) == ref["usage"]["completion_tokens"] == 64
        assert ours.finished.reason == ref["choices"][0]["finish_reason"] == "length"


def test_batched_equals_solo_with_different_lengths(engine, solo):
    lengths = [48, 8, 30, 16, 48, 4, 40, 24]  # requests finish at different times
    alone = [generate(solo, p, f"s{i}", max_tokens=n, **GREEDY).tokens for i, (p, n) in enumerate(zip(PROMPTS, lengths))]
    for i, (p, n) in enumerate(zip(PROMPTS, lengths)):
        engine.add(Request(f"b{i}", engine.tokenize(p), SamplingParams(max_tokens=n, **GREEDY)))
    runs = drain(engine, {})
    assert [runs[f"b{i}"].tokens for i in range(8)] == alone
    assert [len(t) for t in alone] == lengths


def test_long_prompt_arriving_while_others_decode(smollm2_path, solo):
    eng = Engine(str(smollm2_path), EngineSettings(parallel=4, ctx_size=1024, batch_size=32, threads=THREADS))
    try:
        long_prompt = eng.tokenize(items(40))
        assert len(long_prompt) > 280  # ten chunks of the 32-token budget
        alone_long = generate(solo, long_prompt, "sl", max_tokens=24, **GREEDY).tokens
        alone = [generate(solo, p, f"s{i}", max_tokens=40, **GREEDY).tokens for i, p in enumerate(PROMPTS[:3])]
        for i, p in enumerate(PROMPTS[:3]):
            eng.add(Request(f"d{i}", eng.tokenize(p), SamplingParams(max_tokens=40, **GREEDY)))
        produced_during_prefill: list[int] = []

        def join(step: int) -> None:
            if step == 3:
                eng.add(Request("long", long_prompt, SamplingParams(max_tokens=24, **GREEDY)))
            elif step > 3 and (seq := eng.scheduler.find("long")) and seq.prefilling:
                produced_during_prefill.append(sum(len(runs[f"d{i}"].tokens) for i in range(3)))

        runs: dict[str, Run] = {}
        drain(eng, runs, join)
        assert runs["long"].tokens == alone_long
        assert [runs[f"d{i}"].tokens for i in range(3)] == alone
        # the short streams kept producing while the long prompt was being prefilled
        assert len(produced_during_prefill) >= 5 and produced_during_prefill[-1] > produced_during_prefill[0]
    finally:
        eng.close()


def test_a_long_prompt_beside_a_stream_takes_a_slice_of_each_step_and_changes_no_answer(smollm2_path, solo):
    """The batch (512 tokens) would hold the 256 tokens before the flash-attention prefix's end of a
    300-token prompt in one step, and the rest in the next, while the stream waits for it; the prompt
    pace (`promptpace`) gives the prompt about 50 ms of each step instead (at least two tiles of 64
    rows: `promptpace.least_for`), and neither answer changes."""
    settings = EngineSettings(parallel=2, ctx_size=1024, threads=THREADS, prefill_slice_ms=50)
    with Engine(str(smollm2_path), settings) as eng:
        long_prompt = eng.tokenize(items(40))
        alone = [generate(solo, p, f"s{i}", max_tokens=n, **GREEDY).tokens
                 for i, (p, n) in enumerate([(eng.tokenize(PROMPTS[0]), 40), (long_prompt, 8)])]
        eng.add(Request("stream", eng.tokenize(PROMPTS[0]), SamplingParams(max_tokens=40, **GREEDY)))
        evaluated: list[int] = []

        def join(step: int) -> None:
            if step == 2:
                eng.add(Request("long", long_prompt, SamplingParams(max_tokens=8, **GREEDY)))
            elif (seq := eng.scheduler.find("long")) and seq.n_evaluated <= seq.n_prompt:
                evaluated.append(seq.n_evaluated)

        runs = drain(eng, {}, join)
    assert [runs["stream"].tokens, runs["long"].tokens] == alone
    slices = [b - a for a, b in zip([0, *evaluated], evaluated)]
    assert len(slices) >= 3 and max(slices) <= 2 * TILE_ROWS, slices  # the stream had a token after each


def test_a_chat_arriving_while_a_long_prompt_loads_alone_is_answered_first_and_changes_no_answer(smollm2_path, solo):
    """A lone long prompt takes a few slices of prompt work a step (`promptpace.ALONE`), not the whole
    batch (512 tokens, this 300-token prompt at once), and prompts go shortest rest first: a chat
    arriving meanwhile gets its first token in the next step, not after the whole long prompt."""
    settings = EngineSettings(parallel=2, ctx_size=1024, threads=THREADS, prefill_slice_ms=10)
    with Engine(str(smollm2_path), settings) as eng:
        long_prompt, chat = eng.tokenize(items(40)), eng.tokenize(PROMPTS[1])
        alone = [generate(solo, p, f"s{i}", max_tokens=n, **GREEDY).tokens
                 for i, (p, n) in enumerate([(long_prompt, 8), (chat, 16)])]
        generate(eng, " ".join(PROMPTS), "measured", max_tokens=1)  # a prompt call of 32+ tokens: measured
        eng.add(Request("long", long_prompt, SamplingParams(max_tokens=8, **GREEDY)))
        runs: dict[str, Run] = {}
        answered_while_long_loads: list[int] = []

        def join(step: int) -> None:
            if step == 1:
                eng.add(Request("chat", chat, SamplingParams(max_tokens=16, **GREEDY)))
            elif (seq := eng.scheduler.find("long")) and seq.prefilling and "chat" in runs:
                answered_while_long_loads.append(step)

        drain(eng, runs, join)
    assert [runs["long"].tokens, runs["chat"].tokens] == alone
    assert answered_while_long_loads[:1] == [2]


def test_a_long_cache_decodes_in_a_call_of_its_own_and_every_answer_equals_solo(smollm2_path):
    """Without flash attention every row of a llama_decode call attends over its longest stream's cells
    (rounded up to 256): a 0.8k-token conversation's decode token goes in a call apart from seven short
    ones (`decodecalls`), and that changes no answer. Prompt work is bounded by the batch size, not by
    time: on a slow minute a time bound left the long prompt loading until the short answers were done."""
    settings = dict(ctx_size=1024, threads=THREADS, prefill_slice_ms=0)
    with Engine(str(smollm2_path), EngineSettings(parallel=1, **settings)) as alone_engine:
        long_prompt = alone_engine.tokenize(items(90))
        assert 768 < len(long_prompt) < 1000  # 1024 cells attended where the short ones need 256
        prompts = [long_prompt, *(alone_engine.tokenize(p) for p in PROMPTS[:7])]
        alone = [generate(alone_engine, p, f"s{i}", max_tokens=16, **GREEDY).tokens for i, p in enumerate(prompts)]
    with Engine(str(smollm2_path), EngineSettings(parallel=8, **settings)) as eng:
        for i, p in enumerate(prompts):
            eng.add(Request(f"b{i}", p, SamplingParams(max_tokens=16, **GREEDY)))
        tokens: dict[str, list[int]] = {f"b{i}": [] for i in range(8)}
        calls_when_all_decode = []
        while eng.has_work:
            all_decode = len(eng.scheduler.running) == 8 and not any(q.prefilling for q in eng.scheduler.running)
            calls = 0
            for events in eng.calls():
                calls += 1
                for event in events:
                    if isinstance(event, Token):
                        tokens[event.request_id].append(event.token)
            if all_decode:
                calls_when_all_decode.append(calls)
        assert calls_when_all_decode and set(calls_when_all_decode) == {2}
        assert [tokens[f"b{i}"] for i in range(8)] == alone


def logprobs_alone_and_batched(path, flash_attn: str, mid_pairs: int, lengths: list[int]):
    """Greedy answers to a 278-token prompt, a middle one (`mid_pairs` pairs of list rows) and six
    short ones, answering `lengths` tokens each: the prompts, every chosen token's log-probability
    alone (one slot) and batched (eight), and the flash attention the engine ran with."""
    settings = dict(ctx_size=1024, threads=2, flash_attn=flash_attn)
    logged = dict(logprobs=0, **GREEDY)
    with Engine(str(path), EngineSettings(parallel=1, **settings)) as alone_engine:
        mode = alone_engine.info["flash_attn"]
        rows = " ".join(f"Row {i}: {c}." for i, c in enumerate(["figs", "pears"] * mid_pairs))
        prompts = [alone_engine.tokenize(items(32)), alone_engine.tokenize("Describe this list. " + rows),
                   *(alone_engine.tokenize(p) for p in PROMPTS[:6])]
        alone = [[e.logprob for e in generate(alone_engine, p, f"s{i}", max_tokens=n, **logged).events]
                 for i, (p, n) in enumerate(zip(prompts, lengths))]
    with Engine(str(path), EngineSettings(parallel=8, **settings)) as eng:
        for i, (p, n) in enumerate(zip(prompts, lengths)):
            eng.add(Request(f"b{i}", p, SamplingParams(max_tokens=n, **logged)))
        runs = drain(eng, {})
    return prompts, alone, [[e.logprob for e in runs[f"b{i}"].events] for i in range(8)], mode


def test_with_flash_attention_every_logit_batched_equals_solo(smollm2_path):
    """CPU flash attention sums a row in another order in a piece of 64+ rows, in fewer, and for a lone
    row over 512+ cells (`flashrows`): a 278-token prompt cut into pieces beside short prompts, and its
    answer's tokens decoded beside others and then alone, keep every chosen token's log-probability
    bit for bit. Two threads: with one, the lone row's split path is the one-row kernel."""
    lengths = [48, 32] + [12] * 6  # the long answer decodes alone at the end
    prompts, alone, batched, _ = logprobs_alone_and_batched(smollm2_path, "on", 9, lengths)
    assert len(prompts[0]) > 256 and 64 < len(prompts[1]) < 256
    assert batched == alone


def test_with_flash_attention_over_a_prefix_every_logit_batched_equals_solo(smollm2_path):
    """Prefix mode (`RowRules.prefix`, `engine/contexts.py`): a sequence's first 256 cells are computed
    in a flash-attention context, the rest in one without. A 278-token prompt is cut at the boundary,
    a 150-token one's answer crosses it while decoding, and each moves its cells over; every chosen
    token's log-probability equals the same request's alone, bit for bit."""
    lengths = [24, 140] + [12] * 6
    prompts, alone, batched, mode = logprobs_alone_and_batched(smollm2_path, "prefix", 12, lengths)
    assert mode == "prefix"
    assert len(prompts[0]) > 256 and len(prompts[1]) < 256 < len(prompts[1]) + lengths[1]
    assert batched == alone


def test_a_bridge_row_joins_short_chats_around_a_long_conversation_and_changes_no_answer(smollm2_path):
    """Prefix mode: a 278-token conversation in slot 3 decodes in the context without flash attention;
    the seven short chats in slots 0-2 and 4-7 would be two micro-batches of the other context (llama.cpp
    joins only consecutive sequence ids), so slot 3's empty stream there gets a throwaway row
    (`decodecalls.bridges`), removed after each call. Every chosen token's log-probability equals the
    same request's alone, bit for bit, and no bridge cell stays behind."""
    settings = dict(ctx_size=1024, threads=THREADS, flash_attn="prefix")
    logged = dict(logprobs=0, **GREEDY)
    with Engine(str(smollm2_path), EngineSettings(parallel=1, **settings)) as alone_engine:
        prompts = [alone_engine.tokenize(p) for p in PROMPTS[:3]] + [alone_engine.tokenize(items(32))] + [
            alone_engine.tokenize(p) for p in PROMPTS[3:7]]
        alone = [[e.logprob for e in generate(alone_engine, p, f"s{i}", max_tokens=12, **logged).events]
                 for i, p in enumerate(prompts)]
    with Engine(str(smollm2_path), EngineSettings(parallel=8, **settings)) as eng:
        assert eng.info["flash_attn"] == "prefix" and len(prompts[3]) > 256
        dropped: list[tuple[int, int]] = []
        drop = eng._contexts.drop
        eng._contexts.drop = lambda ctx, slot, start: (dropped.append((slot, start)), drop(ctx, slot, start))
        for i, p in enumerate(prompts):
            eng.add(Request(f"b{i}", p, SamplingParams(max_tokens=12, **logged)))
        runs = drain(eng, {})
        assert eng.scheduler.slots[3].tokens[:len(prompts[3])] == prompts[3]  # the conversation was in slot 3
        flash = eng._contexts.flash
        assert [eng._contexts.next_position(flash, 3)] == [0]  # nothing of it in the flash-attention context
    assert dropped and set(dropped) == {(3, 0)}
    assert [[e.logprob for e in runs[f"b{i}"].events] for i in range(8)] == alone


def test_with_flash_attention_over_a_prefix_a_reused_prefix_moves_between_contexts(smollm2_path):
    """Prefix mode: a cached prompt longer than the prefix lives in the context without flash
    attention. A prompt sharing 150 of its tokens gets them copied into another slot and moved to the
    flash-attention context (the values re-laid, `kvstate`), evaluates only its own rest and answers
    as from a cold cache; one sharing 300+ is served where they are and answers as cold too."""
    shared = "Here is a long document about gardens. " + " ".join(
        f"Bed {i} grows {plant} beside the path." for i, plant in enumerate(["tomatoes", "roses", "mint", "beans"] * 12))
    settings = dict(ctx_size=1024, threads=THREADS, flash_attn="prefix")
    with Engine(str(smollm2_path), EngineSettings(parallel=2, **settings)) as eng:
        first = eng.tokenize(shared + "\nQuestion: what grows in bed 3?")
        second = eng.tokenize(shared + "\nQuestion: what grows in bed 7? Answer briefly.")
        third = first[:150] + eng.tokenize(" Which bed has roses?", add_special=False)
        common = next(i for i, (x, y) in enumerate(zip(first, second)) if x != y)
        assert common > 300
        generate(eng, first, "a", max_tokens=8, **GREEDY)
        generate(eng, PROMPTS[0], "busy", max_tokens=1, **GREEDY)  # the other slot: a short cache, nothing shared
        homes = list(eng._contexts.homes)
        short = generate(eng, third, "c", max_tokens=24, **GREEDY)
        warm = generate(eng, second, "b", max_tokens=24, **GREEDY)
    assert sorted(homes) == [MAIN, FLASH]
    assert 64 <= short.finished.timings.cached_tokens <= 150  # copied from the long prompt's slot, then moved
    for run, prompt in ((warm, second), (short, third)):
        with Engine(str(smollm2_path), EngineSettings(parallel=1, **settings)) as cold_eng:
            assert run.tokens == generate(cold_eng, prompt, "cold", max_tokens=24, **GREEDY).tokens
    assert warm.finished.timings.cached_tokens == common


def test_prefix_mode_needs_a_plain_f16_cache_per_slot(smollm2_path):
    """Where a sequence's cells could not move between contexts (one buffer for all slots), prefix
    mode is flash attention off, which it equals past the prefix."""
    with Engine(str(smollm2_path), EngineSettings(parallel=2, ctx_size=512, threads=THREADS, flash_attn="prefix",
                                                  kv_unified=True)) as eng:
        assert eng.flash_attn == "off" and len(eng._contexts.all) == 1


def test_concurrent_requests_with_one_prompt_evaluate_it_once_and_equal_solo(engine, solo):
    """The n choices of a request (or requests sharing a long system prompt) arriving together: the
    first evaluates the prompt, the others wait for it and get a copy of its slot's cache."""
    system = "You are a gardener. " + " ".join(f"Bed {i} grows {p}." for i, p in enumerate(["mint", "beans"] * 10))
    prompts = [engine.tokenize(system + q) for q in ("\nWhat grows in bed 3?", "\nWhat grows in bed 3?",
                                                     "\nWhat grows in bed 3?", "\nName a bed with beans.")]
    seeded = dict(temperature=0.9, seed=11)
    requests = [("c0", prompts[0], GREEDY), ("c1", prompts[1], GREEDY), ("c2", prompts[2], seeded), ("d", prompts[3], GREEDY)]
    for rid, tokens, sampling in requests:
        engine.add(Request(rid, tokens, SamplingParams(max_tokens=24, **sampling)))
    together = drain(engine, {})
    for rid, tokens, sampling in requests:
        alone = generate(solo, tokens, rid, max_tokens=24, **sampling)
        assert together[rid].tokens == alone.tokens, rid
    common = next(i for i, (x, y) in enumerate(zip(prompts[0], prompts[3])) if x != y)
    assert common >= 100
    cached = {rid: together[rid].finished.timings.cached_tokens for rid, _, _ in requests}
    copied = len(prompts[0]) - TILE_ROWS  # all but the last tile (with flash attention off: all but two tokens)
    assert cached["c1"] == cached["c2"] == copied
    assert cached["d"] == min(common, len(prompts[3]) - TILE_ROWS)
    assert cached["c0"] < copied  # the one that evaluated it


def test_prefix_reuse_evaluates_only_new_tokens_and_equals_cold(smollm2_path):
    shared = "Here is a long document about gardens. " + " ".join(
        f"Bed {i} grows {plant} beside the path." for i, plant in enumerate(["tomatoes", "roses", "mint", "beans"] * 12))
    eng = Engine(str(smollm2_path), EngineSettings(parallel=2, ctx_size=1024, threads=THREADS))
    cold_eng = Engine(str(smollm2_path), EngineSettings(parallel=1, ctx_size=1024, threads=THREADS))
    try:
        first = eng.tokenize(shared + "\nQuestion: what grows in bed 3?")
        second = eng.tokenize(shared + "\nQuestion: what grows in bed 7? Answer briefly.")
        assert len(first) > 450
        generate(eng, first, "a", max_tokens=8, **GREEDY)
        warm = generate(eng, second, "b", max_tokens=32, **GREEDY)
        cold = generate(cold_eng, second, "c", max_tokens=32, **GREEDY)
        common = next(i for i, (x, y) in enumerate(zip(first, second)) if x != y)
        assert common > 450
        assert warm.finished.timings.cached_tokens == common
        assert warm.finished.timings.prompt_tokens == len(second)
        assert cold.finished.timings.cached_tokens == 0
        assert warm.tokens == cold.tokens
        # the same prompt again re-evaluates only its last two tokens (never a lone one: MIN_PREFILL)
        again = generate(eng, second, "d", max_tokens=4, **GREEDY)
        assert again.finished.timings.cached_tokens == len(second) - 2
        assert again.tokens == cold.tokens[:4]
    finally:
        eng.close()
        cold_eng.close()


def test_a_new_chat_gets_the_template_copied_and_the_old_conversation_stays_cached(smollm2_path, solo):
    """Sharing only the chat template's start with a longer conversation, a new chat takes an empty
    slot and the shared tokens are copied there (a copy of 1024 cells saves 4+ tokens): it evaluates
    only the rest, answers as from a cold cache, and the conversation's next turn still finds its cache
    (all but the last 64 tokens of a prompt under 256: flash attention's tile, `scheduler.cached_keep`)."""
    def chat(text: str) -> list[int]:
        return solo.tokenize(solo.render_chat([{"role": "user", "content": text}]))

    conversation = chat("Tell me about gardens. " + items(12))
    new = chat("Write a haiku about rain.")
    shared = common_prefix(conversation, new)
    assert 4 <= shared and 2 * shared < len(conversation)
    with Engine(str(smollm2_path), EngineSettings(parallel=2, ctx_size=1024, threads=THREADS)) as eng:
        generate(eng, conversation, "a", max_tokens=4, **GREEDY)
        warm = generate(eng, new, "b", max_tokens=16, **GREEDY)
        again = generate(eng, conversation + [1, 2], "c", max_tokens=1, **GREEDY)
    assert warm.finished.timings.cached_tokens == shared
    assert warm.tokens == generate(solo, new, "d", max_tokens=16, **GREEDY).tokens
    assert again.finished.timings.cached_tokens == len(conversation) + 2 - TILE_ROWS  # a tile left to evaluate


def test_stop_string_across_a_token_boundary(engine):
    full = generate(engine, PROMPTS[0], max_tokens=40, **GREEDY)
    pieces = [engine.detokenize([t]) for t in full.tokens]
    k = next(i for i in range(3, len(pieces) - 1) if pieces[i].strip() and pieces[i + 1].strip())
    stop = pieces[k][-2:] + pieces[k + 1][:2]  # spans tokens k and k+1
    expected = full.text[: full.text.find(stop)]
    run = generate(engine, PROMPTS[0], max_tokens=40, stop=["never-appears", stop], **GREEDY)
    assert run.text == expected
    assert run.finished.reason == "stop" and run.finished.stop_text == stop
    assert all(stop not in p for p in run.pieces)
    assert "" in run.pieces[-3:]  # the possible stop prefix was held back, not leaked


def test_held_back_text_is_released_when_no_stop_follows(engine):
    full = generate(engine, PROMPTS[1], max_tokens=20, **GREEDY)
    tail = full.text[-3:]
    run = generate(engine, PROMPTS[1], max_tokens=20, stop=[tail + "#never"], **GREEDY)
    assert run.text == full.text and run.finished.reason == "length"


@pytest.mark.parametrize("prompt", ["Emoji time: 😀😃😄😁 more emoji: 🎉", "请用中文回答：你好世界。你好世界。"])
def test_multibyte_text_streams_whole_characters(engine, prompt):
    run = generate(engine, prompt, max_tokens=30, **GREEDY)
    assert any(ord(c) > 0x2FFF for c in run.text)  # the model did produce emoji / CJK
    assert "" in run.pieces  # some characters spanned tokens and were held back
    assert "\ufffd" not in run.text
    whole = engine.detokenize(run.tokens)
    assert whole.startswith(run.text) and len(whole.encode()) - len(run.text.encode()) < 4


def test_seed_reproduces(engine):
    sampling = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=24)
    a = generate(engine, PROMPTS[4], "a", seed=1234, **sampling)
    b = generate(engine, PROMPTS[4], "b", seed=1234, **sampling)
    c = generate(engine, PROMPTS[4], "c", seed=99, **sampling)
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens


def test_seeded_requests_are_reproducible_when_batched(engine):
    sampling = SamplingParams(temperature=0.9, seed=7, max_tokens=16)
    alone = generate(engine, PROMPTS[2], "alone", **sampling.to_dict()).tokens
    for i in range(4):
        engine.add(Request(f"p{i}", engine.tokenize(PROMPTS[2]), SamplingParams(**sampling.to_dict())))
    runs = drain(engine, {})
    assert all(runs[f"p{i}"].tokens == alone for i in range(4))


def test_cancel_frees_the_slot_within_one_step(smollm2_path):
    eng = Engine(str(smollm2_path), EngineSettings(parallel=2, ctx_size=512, threads=THREADS))
    try:
        for rid in ("a", "b", "waiting"):
            eng.add(Request(rid, eng.tokenize(PROMPTS[0]), SamplingParams(max_tokens=200, **GREEDY)))
        eng.step()
        eng.step()
        eng.cancel("a")
        events = eng.step()
        done = [e for e in events if isinstance(e, Finished)]
        assert [(e.request_id, e.reason) for e in done] == [("a", "cancelled")]
        assert not any(isinstance(e, Token) and e.request_id == "a" for e in events)
        assert eng.scheduler.find("waiting").slot >= 0  # it took the freed slot in that same step
        eng.cancel("waiting")
        eng.cancel("b")
        eng.cancel("unknown")  # no-op
        events = eng.step()
        assert sorted(e.request_id for e in events if isinstance(e, Finished)) == ["b", "waiting"]
        assert not eng.has_work
    finally:
        eng.close()


def test_prompt_over_the_context(smollm2_path):
    eng = Engine(str(smollm2_path), EngineSettings(parallel=1, ctx_size=64, threads=THREADS))
    try:
        too_long = eng.tokenize("word " * 80)
        with pytest.raises(ContextOverflow, match=r"prompt is too long: \d+ tokens > 63 maximum \(the context holds 64"):
            eng.add(Request("x", too_long, SamplingParams()))
        assert not eng.has_work
        eng.add(Request("t", too_long, SamplingParams(max_tokens=8, **GREEDY), truncate=True))
        run = drain(eng, {})["t"]
        assert run.finished.timings.prompt_tokens == 63 - 8 and len(run.tokens) == 8
    finally:
        eng.close()


def test_filling_the_context_ends_with_length(smollm2_path):
    eng = Engine(str(smollm2_path), EngineSettings(parallel=1, ctx_size=48, threads=THREADS))
    try:
        prompt = eng.tokenize(PROMPTS[0])
        run = generate(eng, prompt, ignore_eos=True, **GREEDY)
        assert run.finished.reason == "length"
        assert len(prompt) + len(run.tokens) == 48
    finally:
        eng.close()


def test_end_of_generation_token_stops(engine):
    prompt = engine.render_chat([{"role": "user", "content": "Say hello."}])
    run = generate(engine, prompt, max_tokens=200, **GREEDY)
    assert run.finished.reason == "stop" and run.finished.stop_text is None
    assert "<|im_end|>" not in run.text and len(run.tokens) < 200


def test_logprobs_are_full_vocabulary_and_sorted(engine, smollm2_path):
    run = generate(engine, PROMPTS[1], max_tokens=6, logprobs=5, temperature=0.0)
    llm = llama_like(engine, smollm2_path, 512, logits_all=True)
    ref = llm.create_completion(engine.tokenize(PROMPTS[1]), max_tokens=6, temperature=0.0, logprobs=5)
    ref_lp = ref["choices"][0]["logprobs"]["token_logprobs"]
    for event, expected in zip(run.events, ref_lp):
        values = [lp for _, lp in event.top_logprobs]
        assert len(values) == 5 and values == sorted(values, reverse=True)
        assert event.logprob == pytest.approx(values[0], abs=1e-9)  # greedy takes the most likely token
        assert event.logprob == pytest.approx(expected, abs=1e-3)


def test_top_logprobs_unaffected_by_sampling_filters(engine):
    a = generate(engine, PROMPTS[3], "a", max_tokens=1, logprobs=20, temperature=0.0)
    b = generate(engine, PROMPTS[3], "b", max_tokens=1, logprobs=20, temperature=0.5, top_k=2, seed=1)
    top_a, top_b = a.events[0].top_logprobs, b.events[0].top_logprobs
    assert len(top_a) == 20 and [t for t, _ in top_a] == [t for t, _ in top_b]
    assert [lp for _, lp in top_a] == pytest.approx([lp for _, lp in top_b])
    assert sum(math.exp(lp) for _, lp in top_a) < 1.0


def test_gbnf_grammar(engine):
    run = generate(engine, "Is the sky blue? Answer:", max_tokens=8, grammar='root ::= " yes" | " no"', **GREEDY)
    assert run.text in (" yes", " no") and run.finished.reason == "stop"


def test_json_schema_grammar(engine):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    prompt = engine.render_chat([{"role": "user", "content": "Give a person as JSON with name and age."}])
    run = generate(engine, prompt, max_tokens=60, grammar=schema_to_grammar(schema), **GREEDY)
    data = json.loads(run.text)
    assert set(data) == {"name", "age"} and isinstance(data["age"], int)


def test_grammar_output_equals_llama_cpp_python_filtering_every_token(engine, smollm2_path):
    """The engine asks the grammar about the chosen token only, and filters the whole vocabulary only
    when it refuses; llama-cpp-python filters the whole vocabulary every token. Greedy must agree,
    also where the model's free choice is refused at almost every token (digits after a story opening)."""
    llm = llama_like(engine, smollm2_path, 1024)
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    cases = [(PROMPTS[0], 'root ::= [0-9]+ " apples and " [0-9]+ " pears"'),
             (engine.render_chat([{"role": "user", "content": "Describe a person as JSON."}]), schema_to_grammar(schema))]
    for i, (prompt, grammar) in enumerate(cases):
        tokens = engine.tokenize(prompt)
        ours = generate(engine, tokens, f"gr{i}", max_tokens=40, grammar=grammar, **GREEDY)
        ref = llm.create_completion(tokens, max_tokens=40, temperature=0.0,
                                    grammar=llama_cpp.LlamaGrammar.from_string(grammar, verbose=False))
        assert ours.text == ref["choices"][0]["text"], prompt


def test_sampling_under_a_grammar_is_seeded_and_always_allowed(engine):
    grammar = 'root ::= ("red" | "green" | "blue") (", " ("red" | "green" | "blue"))*'
    runs = [generate(engine, PROMPTS[3], f"gs{i}", max_tokens=12, grammar=grammar, temperature=1.5, seed=i % 4)
            for i in range(8)]
    words = {"red", "green", "blue"}
    for run in runs:
        assert run.text and all(w.strip() in words for w in run.text.split(",")[:-1]), run.text
    assert [r.text for r in runs[:4]] == [r.text for r in runs[4:]]


def test_bad_grammar_and_schema_are_invalid_requests(engine):
    with pytest.raises(InvalidRequest, match="grammar"):
        engine.add(Request("g", engine.tokenize("x"), SamplingParams(grammar="root ::= (")))
    with pytest.raises(InvalidRequest, match="unsupported JSON schema"):
        schema_to_grammar({"type": "no-such-type"})
    assert not engine.has_work


def test_logit_bias_bans_a_token(engine):
    full = generate(engine, PROMPTS[1], max_tokens=4, **GREEDY)
    banned = generate(engine, PROMPTS[1], max_tokens=4, logit_bias={full.tokens[0]: float("-inf")}, **GREEDY)
    assert banned.tokens[0] != full.tokens[0]


def test_forced_tokens_come_next_and_the_answer_goes_on_from_them(engine):
    """`force` is how a reasoning budget closes a thought: the forced tokens are the request's next
    tokens (not sampled), then sampling continues from them as if the model had written them."""
    free = generate(engine, PROMPTS[1], max_tokens=10, **GREEDY)
    forced = engine.tokenize(" Banana split.", add_special=False)
    engine.add(Request("forced", engine.tokenize(PROMPTS[1]), SamplingParams(max_tokens=10, **GREEDY)))
    runs = drain(engine, {}, on_step=lambda step: step == 1 and engine.force("forced", forced))  # after token 1
    run, cut = runs["forced"], 1 + len(forced)
    assert run.tokens[:1] == free.tokens[:1] and run.tokens[1:cut] == forced
    continued = generate(engine, engine.tokenize(PROMPTS[1]) + run.tokens[:cut], max_tokens=2, **GREEDY)
    assert run.tokens[cut:cut + 2] == continued.tokens


def test_penalties_change_greedy_output(engine):
    plain = generate(engine, PROMPTS[1], max_tokens=40, **GREEDY)
    penalised = generate(engine, PROMPTS[1], max_tokens=40, repeat_penalty=1.5, presence_penalty=0.5, **GREEDY)
    assert plain.tokens != penalised.tokens


def test_bad_requests(engine):
    with pytest.raises(InvalidRequest, match="empty"):
        engine.add(Request("e", [], SamplingParams()))
    with pytest.raises(InvalidRequest, match="vocabulary"):
        engine.add(Request("v", [10**7], SamplingParams()))
    engine.add(Request("dup", [1, 2], SamplingParams(max_tokens=1)))
    with pytest.raises(InvalidRequest, match="already in use"):
        engine.add(Request("dup", [1, 2], SamplingParams(max_tokens=1)))
    drain(engine, {})


def test_max_tokens_zero_only_prefills(engine):
    run = generate(engine, PROMPTS[2], max_tokens=0)
    assert run.tokens == [] and run.finished.reason == "length"
    assert run.finished.timings.prompt_tokens == len(engine.tokenize(PROMPTS[2]))


def test_timings(engine):
    run = generate(engine, PROMPTS[5], max_tokens=10, **GREEDY)
    t = run.finished.timings
    assert t.generated_tokens == 10 and t.prompt_ms > 0 and t.generation_ms > 0
    assert t.draft_tokens == t.draft_accepted == 0  # no speculative decoding unless asked


def test_tokenize_detokenize_and_chat(engine):
    tokens = engine.tokenize("<|im_start|>user\nhello<|im_end|>")
    assert tokens[0] == engine.tokenize("<|im_start|>", add_special=False)[0]
    assert engine.detokenize(tokens) == "<|im_start|>user\nhello<|im_end|>"
    assert len(engine.tokenize("<|im_start|>", parse_special=False)) > 1
    chat = engine.render_chat([{"role": "user", "content": "Hi"}])
    assert chat.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_embeddings_are_normalized_and_meaningful(engine):
    vectors, tokens = engine.embed(["The cat sat on the mat.", "A cat was sitting on a mat.", "Stock prices fell sharply."])
    assert len(vectors) == 3 and len(vectors[0]) == engine.info["n_embd"]
    assert tokens == sum(len(engine.tokenize(t)) for t in ["The cat sat on the mat.", "A cat was sitting on a mat.", "Stock prices fell sharply."])
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
    assert all(dot(v, v) == pytest.approx(1.0) for v in vectors)
    assert dot(vectors[0], vectors[1]) > dot(vectors[0], vectors[2])
    again, _ = engine.embed(["A cat was sitting on a mat."])
    assert again[0] == pytest.approx(vectors[1], abs=1e-4)  # batching does not change a vector


def test_info(engine):
    info = engine.info
    assert info["architecture"] == "llama" and info["n_vocab"] == 49152
    assert info["n_ctx"] == 8 * 1024 and info["parallel"] == 8 and info["threads"] == THREADS
    assert info["flash_attn"] == "prefix" and not info["kv_unified"]  # auto on a CPU, for a plain-attention model
    assert info["has_chat_template"] and info["eos_token"] == "<|im_end|>"


def test_auto_threads_start_at_the_physical_cores(smollm2_path):
    from localrun.engine.settings import physical_cores

    with Engine(str(smollm2_path), EngineSettings(parallel=1, ctx_size=256)) as eng:
        assert eng.info["threads"] == physical_cores() and eng.info["threads_mode"].startswith("auto")


def test_a_thread_trial_runs_on_decode_steps_only(smollm2_path):
    """A prompt arriving while the tuner tries another thread count is evaluated with its choice."""
    with Engine(str(smollm2_path), EngineSettings(parallel=2, ctx_size=512)) as eng:
        eng._tuner = tuner = ThreadTuner(2)
        for step in range(4):  # four decode steps at two threads: the first trial (one thread) begins
            tuner.record(2, 1, 0.01, step * 0.01)
        assert tuner.threads == 1 and tuner.current == 2
        eng.add(Request("p", eng.tokenize("A prompt evaluated during the trial."), SamplingParams(max_tokens=0)))
        eng.step()
        assert llama_cpp.llama_n_threads(eng.ctx) == 2 and eng.threads == 2
        generate(eng, "Then a decode step.", "d", max_tokens=2, **GREEDY)
        assert llama_cpp.llama_n_threads(eng.ctx) == 1  # the trial's own steps


def test_prompts_take_all_cores_while_no_other_program_holds_one(smollm2_path):
    """With the tuner at one thread for decoding, a prompt is evaluated on both cores while /proc shows
    the other programs idle (here a fixed reading, as the machine running the tests is not)."""
    with Engine(str(smollm2_path), EngineSettings(parallel=1, ctx_size=512)) as eng:
        eng._tuner = tuner = ThreadTuner(2)
        tuner.current = 1
        for others, threads in ((1.1, 1), (0.05, 2)):
            eng._cpu.sample = lambda now, others=others, **_: CpuUse(others=others, idle=0.0)
            eng.add(Request(f"p{others}", eng.tokenize("A prompt to evaluate."), SamplingParams(max_tokens=0)))
            eng.step()
            assert llama_cpp.llama_n_threads(eng.ctx) == threads and eng.threads == 1


def test_a_step_stopped_by_the_stall_watch_runs_again_on_fewer_threads_with_the_same_tokens(smollm2_path):
    """When another program stalls a decode step on all cores, the stall watch stops it; llama.cpp
    takes its tokens back out of the cache and the engine runs the same step on one thread fewer.
    Stopped here at once, in several steps of batched answers: every answer equals its answer
    unstopped."""
    settings = EngineSettings(parallel=2, ctx_size=512)
    with Engine(str(smollm2_path), settings) as eng:
        if eng._stall is None:
            pytest.skip("no stall watch here (one core, or no libc strlen or schedstat)")
        prompts = PROMPTS[:2]

        def answers(tag: str) -> list[list[int]]:
            for i, p in enumerate(prompts):
                eng.add(Request(f"{tag}{i}", eng.tokenize(p), SamplingParams(max_tokens=48, **GREEDY)))
            runs = drain(eng, {})
            return [runs[f"{tag}{i}"].tokens for i in range(len(prompts))]

        plain = answers("p")
        stopped: list[int] = []
        begin = eng._stall.begin

        def stop_at_once(limit: float) -> None:  # as the watch does when it sees the threads wait
            begin(limit)
            if len(stopped) < 4:
                stopped.append(eng.threads)
                eng._stall.stop()

        eng._stall.begin = stop_at_once
        assert answers("s") == plain
        assert stopped and all(threads == eng._tuner.max_threads for threads in stopped)
        assert eng._tuner.switches >= len(stopped)  # each stop dropped a thread


def test_model_load_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ModelLoadError, match="model failed to load"):
        Engine(str(bad), EngineSettings(parallel=1, ctx_size=256))


def test_second_architecture_gemma3(gemma_path):
    """Gemma 3 (sliding-window attention, 262k vocabulary): parity with llama-cpp-python, and prefix
    reuse over a window cache (which lets cells older than the window go, as llama-server's does): a
    prompt that continues a long cached one reuses it, one that shares only an early part whose window
    is gone is evaluated again, and both equal a cold run."""
    settings = EngineSettings(parallel=1, ctx_size=1024, batch_size=64, threads=THREADS)  # one slot: reuse it
    with Engine(str(gemma_path), settings) as eng, Engine(str(gemma_path), settings) as cold_eng:
        base = eng.tokenize("Gardens and their history. " * 60)[:300]
        long_first = base + eng.tokenize(" More about roses and tulips." * 120, add_special=False)[:650]
        more = long_first + eng.tokenize(" And what about lilies?", add_special=False)
        follow = base + eng.tokenize(" A question about something else entirely?", add_special=False)
        generate(eng, long_first, "a", max_tokens=4, **GREEDY)
        assert eng.scheduler.slots[0].first > 0  # the window cache let the oldest cells go
        warm_more = generate(eng, more, "m", max_tokens=16, **GREEDY)
        assert warm_more.finished.timings.cached_tokens == len(long_first)
        assert warm_more.tokens == generate(cold_eng, more, "mc", max_tokens=16, **GREEDY).tokens
        warm = generate(eng, follow, "b", max_tokens=16, **GREEDY)
        cold = generate(cold_eng, follow, "c", max_tokens=16, **GREEDY)
        assert warm.finished.timings.cached_tokens == 0  # the window before token 300 is gone
        assert warm.tokens == cold.tokens
        llm = llama_like(cold_eng, gemma_path, 1024)
        ref = llm.create_completion(follow, max_tokens=16, temperature=0.0)
        assert cold.text == ref["choices"][0]["text"]
        # this GGUF ships no chat template: llama.cpp's built-in Gemma format stands in
        assert not eng.info["has_chat_template"]
        assert eng.render_chat([{"role": "user", "content": "Hi"}]).endswith("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n")


def test_a_sequence_whose_sampling_fails_ends_alone_and_the_others_are_unchanged(engine, solo):
    """A failure while sampling one sequence (a grammar or sampler bug) ends it with reason "error";
    the sequence decoded beside it gives the tokens it gives alone."""
    alone = generate(solo, "The capital of France is", "alone", max_tokens=12, **GREEDY).tokens
    engine.add(Request("victim", engine.tokenize("The capital of France is"), SamplingParams(max_tokens=12, **GREEDY)))
    engine.add(Request("broken", engine.tokenize("Tell a story."), SamplingParams(max_tokens=12, **GREEDY)))

    class Breaks:
        """The broken request's own sampler, failing from its third token on."""

        def __init__(self, real) -> None:
            self.real, self.calls = real, 0

        def __getattr__(self, name):
            return getattr(self.real, name)

        def sample(self, ctx, index):
            self.calls += 1
            if self.calls > 2:
                raise RuntimeError("sampler state corrupted")
            return self.real.sample(ctx, index)

    state = engine.scheduler.find("broken").state
    state.sampler = Breaks(state.sampler)
    runs = drain(engine, {})
    assert runs["broken"].finished.reason == "error" and "sampler state corrupted" in runs["broken"].finished.error
    assert len(runs["broken"].tokens) == 2
    assert runs["victim"].tokens == alone and runs["victim"].finished.reason == "length"
