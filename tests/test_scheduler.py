"""The scheduler decides from plain data: slots, prefix reuse, chunked prefill, budgets."""

from __future__ import annotations

import pytest

import random

from localrun.engine.drafts import Drafter
from localrun.engine.flashrows import RowRules
from localrun.engine.promptpace import PromptBudget, least_for
from localrun.engine.scheduler import (Copy, Plan, Scheduler, Trim, cached_keep, common_prefix, copy_min, least_piece,
                                       prefill_size, stairs)
from localrun.engine.sequence import Sequence, Status


def seq(name: str, prompt: list[int], max_tokens: int | None = None) -> Sequence:
    return Sequence(name, list(prompt), len(prompt), max_tokens)


def run_step(s: Scheduler, sample: int = 7, budget: PromptBudget | None = None):
    """Plan, commit, and append a sampled token to every chunk that produced logits."""
    plan = s.schedule(budget)
    s.commit(plan.chunks)
    for c in plan.chunks:
        if c.n_logits:
            c.seq.tokens.append(sample)
    return plan


def layout(plan) -> list[tuple[str, int, int, int]]:
    return [(c.seq.id, c.start, c.n, c.n_logits) for c in plan.chunks]


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0


def test_prefill_then_decode():
    s = Scheduler(n_slots=2, batch_size=16)
    a = seq("a", [1, 2, 3])
    s.add(a)
    assert layout(run_step(s)) == [("a", 0, 3, 1)]
    assert a.status is Status.RUNNING and a.n_evaluated == 3 and a.tokens == [1, 2, 3, 7]
    assert layout(run_step(s)) == [("a", 3, 1, 1)]
    assert s.slots[a.slot].tokens == [1, 2, 3, 7]


def test_long_prompt_is_chunked_while_others_keep_decoding():
    s = Scheduler(n_slots=3, batch_size=8)
    a, b = seq("a", [1, 2]), seq("b", [3, 4])
    s.add(a)
    s.add(b)
    run_step(s)
    long = seq("long", list(range(100, 120)))  # 20 tokens, budget 8 minus 2 decode tokens
    s.add(long)
    assert layout(run_step(s)) == [("a", 2, 1, 1), ("b", 2, 1, 1), ("long", 0, 6, 0)]
    assert layout(run_step(s)) == [("a", 3, 1, 1), ("b", 3, 1, 1), ("long", 6, 6, 0)]
    assert layout(run_step(s)) == [("a", 4, 1, 1), ("b", 4, 1, 1), ("long", 12, 6, 0)]
    assert layout(run_step(s)) == [("a", 5, 1, 1), ("b", 5, 1, 1), ("long", 18, 2, 1)]
    assert layout(run_step(s)) == [("a", 6, 1, 1), ("b", 6, 1, 1), ("long", 20, 1, 1)]


def test_waits_for_a_free_slot_and_joins_between_steps():
    s = Scheduler(n_slots=1, batch_size=16)
    a, b = seq("a", [1]), seq("b", [2])
    s.add(a)
    s.add(b)
    assert layout(run_step(s)) == [("a", 0, 1, 1)]
    assert b.status is Status.WAITING
    s.finish(a)
    plan = run_step(s)
    assert layout(plan) == [("b", 0, 1, 1)]
    assert plan.edits == [Trim(0, 0)]  # nothing shared: the slot's old tokens are removed


def test_prefix_reuse_picks_the_slot_with_the_longest_common_prefix():
    s = Scheduler(n_slots=3, batch_size=64)
    for name, prompt in (("x", [1, 2, 3, 4]), ("y", [1, 2, 9, 9]), ("z", [5, 5])):
        s.add(seq(name, prompt))
    run_step(s)
    for q in list(s.running):
        s.finish(q)
    follow = seq("f", [1, 2, 3, 4, 7, 8, 9])  # x's prompt + its sampled (never evaluated) 7 + more
    s.add(follow)
    plan = run_step(s)
    assert follow.slot == 0 and follow.n_cached == 4
    assert plan.edits == []
    assert layout(plan) == [("f", 4, 3, 1)]


def test_always_reevaluates_the_last_two_prompt_tokens():
    s = Scheduler(n_slots=1, batch_size=64)
    first = seq("a", [1, 2, 3])
    s.add(first)
    run_step(s)
    run_step(s)  # slot holds [1, 2, 3, 7]
    s.finish(first)
    again = seq("b", [1, 2, 3])
    s.add(again)
    plan = run_step(s)
    assert again.n_cached == 1
    assert plan.edits == [Trim(0, 1)]
    assert layout(plan) == [("b", 1, 2, 1)]  # never a lone prompt token: see MIN_PREFILL


@pytest.mark.parametrize("remaining, budget, n", [
    (1, 8, 1), (2, 8, 2), (5, 8, 5), (9, 8, 7), (10, 8, 8), (3, 2, 0), (2, 1, 0), (40, 1, 0), (40, 2, 2),
])
def test_prefill_chunks_are_never_a_lone_token(remaining, budget, n):
    assert prefill_size(remaining, budget) == n


def test_ties_go_to_the_least_recently_used_slot():
    s = Scheduler(n_slots=2, batch_size=64)
    a = seq("a", [1])
    s.add(a)
    run_step(s)
    s.finish(a)
    b = seq("b", [9])
    s.add(b)
    run_step(s)
    assert b.slot == 1  # slot 0 holds a's cache; the unused slot is taken first


def test_decode_tokens_come_before_prefill_within_the_budget():
    s = Scheduler(n_slots=4, batch_size=5)
    for name in "abc":
        s.add(seq(name, [1, 2, 3]))
    assert layout(run_step(s)) == [("a", 0, 3, 1)]  # b would have to leave a lone token behind: it waits
    assert layout(run_step(s)) == [("a", 3, 1, 1), ("b", 0, 3, 1)]
    assert layout(run_step(s)) == [("a", 4, 1, 1), ("b", 3, 1, 1), ("c", 0, 3, 1)]


def test_an_otherwise_empty_batch_takes_a_lone_prompt_token_rather_than_stall():
    s = Scheduler(n_slots=1, batch_size=2)
    s.add(seq("a", [1, 2, 3]))
    assert layout(run_step(s)) == [("a", 0, 2, 0)]
    assert layout(run_step(s)) == [("a", 2, 1, 1)]


def test_finish_frees_the_slot_and_keeps_its_cache():
    s = Scheduler(n_slots=1, batch_size=8)
    a = seq("a", [1, 2])
    s.add(a)
    run_step(s)
    s.finish(a)
    assert a.status is Status.FINISHED and not s.has_work
    assert s.slots[0].seq is None and s.slots[0].tokens == [1, 2]


def test_finish_a_waiting_sequence():
    s = Scheduler(n_slots=1, batch_size=8)
    a, b = seq("a", [1]), seq("b", [2])
    s.add(a)
    s.add(b)
    s.finish(b)
    assert s.find("b") is None and s.find("a") is a


def test_a_cache_that_cannot_be_cut_starts_over():
    s = Scheduler(n_slots=1, batch_size=64, can_cut=False)
    first = seq("a", [1, 2, 3, 4])
    s.add(first)
    run_step(s)
    s.finish(first)
    again = seq("b", [1, 2, 3, 9])
    s.add(again)
    plan = run_step(s)
    assert plan.edits == [Trim(0, 0)] and again.n_cached == 0
    assert layout(plan) == [("b", 0, 4, 1)]


def test_a_short_shared_prefix_does_not_evict_a_long_cached_prompt():
    s = Scheduler(n_slots=2, batch_size=64)
    long = seq("long", [1, 2] + list(range(100, 140)))
    s.add(long)
    run_step(s)
    s.finish(long)  # slot 0 caches 42 tokens
    side = seq("side", [1, 2, 9, 9, 9])  # shares only the first two (a template's opening)
    s.add(side)
    run_step(s)
    assert side.slot == 1 and s.slots[0].tokens[:42] == long.tokens[:42]
    s.finish(side)
    follow_up = seq("again", long.tokens[:42] + [7, 7])
    s.add(follow_up)
    run_step(s)
    assert follow_up.slot == 0 and follow_up.n_cached == 42


def test_decode_tokens_go_in_slot_order_whatever_the_admission_order():
    s = Scheduler(n_slots=3, batch_size=64)
    for name, prompt in (("x", [1, 2]), ("y", [3, 4]), ("z", [5, 6])):
        s.add(seq(name, prompt))
    run_step(s)
    for q in list(s.running):
        s.finish(q)
    for name, prompt in (("c", [5, 6, 9]), ("a", [1, 2, 9]), ("b", [3, 4, 9])):  # each takes its old slot
        s.add(seq(name, prompt))
    run_step(s)
    assert [q.id for q in s.running] == ["c", "a", "b"]
    assert layout(run_step(s)) == [("a", 3, 1, 1), ("b", 3, 1, 1), ("c", 3, 1, 1)]


def test_a_step_decodes_every_generated_token_together_and_prompt_chunks_apart():
    """llama.cpp would split a mixed batch so that a prompt chunk's first token is a lone row."""
    s = Scheduler(n_slots=3, batch_size=64)
    a, b = seq("a", [1, 2, 3]), seq("b", [4, 5, 6, 7])
    s.add(a), s.add(b)
    run_step(s)  # both prompts
    c, d = seq("c", [8, 9, 10, 11, 12]), seq("d", [13])
    s.add(c)
    plan = run_step(s)
    assert [[(ch.seq.id, ch.n) for ch in batch] for batch in plan.batches()] == [[("a", 1), ("b", 1)], [("c", 5)]]
    s.finish(a)
    s.add(d)  # a one-token prompt is still a prompt chunk
    assert [[ch.seq.id for ch in batch] for batch in run_step(s).batches()] == [["b", "c"], ["d"]]


def test_a_prompt_being_evaluated_elsewhere_is_waited_for_and_copied():
    s = Scheduler(n_slots=3, batch_size=40, share=True)
    long = list(range(100, 170))  # 70 tokens: two steps of prefill at a budget of 40
    a, b, c = seq("a", long), seq("b", long), seq("c", [1, 2, 3])
    for q in (a, b, c):
        s.add(q)
    assert layout(run_step(s)) == [("a", 0, 40, 0)]
    assert b.status is Status.WAITING and c.status is Status.WAITING  # FIFO: c waits behind b
    plan = run_step(s)
    assert layout(plan) == [("a", 40, 30, 1)] and plan.edits == []
    plan = run_step(s)  # a's prompt is in its slot: b gets a copy and evaluates its last two tokens
    assert plan.edits == [Copy(a.slot, b.slot), Trim(b.slot, 68)] and b.n_cached == 68  # copied, then cut
    assert layout(plan) == [("a", 70, 1, 1), ("b", 68, 2, 1), ("c", 0, 3, 1)]


def test_a_new_conversation_copies_a_shared_template_into_an_empty_slot_and_keeps_the_old_one():
    """A prompt sharing only a chat template's start with a longer conversation takes an empty slot,
    leaving the conversation cached, and gets the shared start copied there instead of evaluated."""
    template = list(range(100, 126))  # 26 tokens
    s = Scheduler(n_slots=2, batch_size=256, share=True, copy_min=copy_min(2048))
    a = seq("a", template + list(range(200, 260)))
    s.add(a)
    run_step(s)
    s.finish(a)
    b = seq("b", template + list(range(300, 328)))
    s.add(b)
    plan = s.schedule()
    assert b.slot != a.slot and plan.edits == [Copy(a.slot, b.slot), Trim(b.slot, 26)]
    assert layout(plan) == [("b", 26, 28, 1)] and b.n_cached == 26
    assert s.slots[a.slot].tokens == a.tokens[:a.n_evaluated]  # the conversation, kept for its next turn


def test_a_copy_must_save_more_tokens_the_larger_the_stream_it_moves():
    assert copy_min(0) == copy_min(1024) == 4  # a unified buffer's copy shares cells; a floor all the same
    assert copy_min(2048) == 4 and copy_min(8192) == 16 and copy_min(32768) == 64
    s = Scheduler(n_slots=2, batch_size=256, share=True, copy_min=copy_min(32768))
    a = seq("a", list(range(100, 200)))
    s.add(a)
    run_step(s)
    s.finish(a)
    b = seq("b", list(range(100, 140)) + [7, 7])  # 40 shared tokens: a copy of 32k cells costs more
    s.add(b)
    assert s.schedule().edits == [] and b.slot != a.slot and b.n_cached == 0


def test_a_copy_must_save_tokens_beyond_what_the_chosen_slot_holds_already():
    s = Scheduler(n_slots=3, batch_size=256, share=True, copy_min=copy_min(2048))
    shared = list(range(100, 142))
    s.slots[0].tokens, s.slots[1].tokens = shared[:40] + [1, 2], shared + [3]
    s.slots[1].seq = seq("busy", shared + [3])  # decoding: it cannot take the prompt, only lend its cache
    s.slots[2].seq = seq("other", [7, 7])
    late = seq("late", shared + [5, 5])
    s.add(late)
    plan = s.schedule()
    assert late.slot == 0 and plan.edits == [Trim(0, 40)] and late.n_cached == 40  # 2 more were not worth a copy
    s = Scheduler(n_slots=3, batch_size=256, share=True, copy_min=copy_min(2048))
    s.slots[0].tokens, s.slots[1].tokens = shared[:36] + [1, 2], shared + [3]
    s.slots[1].seq, s.slots[2].seq = seq("busy", shared + [3]), seq("other", [7, 7])
    late = seq("late", shared + [5, 5])
    s.add(late)
    assert s.schedule().edits == [Copy(1, 0), Trim(0, 42)] and late.n_cached == 42  # 6 more were


def test_short_prompts_are_neither_held_back_nor_copied():
    s = Scheduler(n_slots=2, batch_size=64, share=True)
    short = list(range(10))
    a, b = seq("a", short), seq("b", short)
    s.add(a), s.add(b)
    plan = run_step(s)
    assert layout(plan) == [("a", 0, 10, 1), ("b", 0, 10, 1)] and plan.edits == []


# -- speculative decoding ---------------------------------------------------------------------------

def drafting(name: str, prompt: list[int], max_tokens: int | None = None, n_max: int = 8) -> Sequence:
    from localrun.engine.drafts import Drafter

    s = seq(name, prompt, max_tokens)
    s.drafter = Drafter(n_max)
    s.drafter.length = n_max
    return s


COPY = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3]  # after sampling 4, "1 2 3 4" continues with 5 6 7...


def test_a_drafting_sequence_decodes_its_token_and_the_draft_in_one_chunk():
    s = Scheduler(n_slots=2, batch_size=64)
    a = drafting("a", COPY)
    s.add(a)
    run_step(s, sample=4)  # prefill; the first sampled token completes the n-gram "1 2 3 4"
    plan = s.schedule()
    (chunk,) = plan.chunks
    assert (chunk.start, chunk.n, chunk.n_logits, chunk.draft) == (15, 9, 9, [5, 6, 7, 8, 9, 10, 11, 12])
    s.commit(plan.chunks)
    assert s.slots[a.slot].tokens == COPY + [4, 5, 6, 7, 8, 9, 10, 11, 12]
    a.tokens += [5, 6, 99]  # the model confirmed 5 and 6, then sampled 99 instead of 7
    assert s.settle(chunk, 2) == Trim(a.slot, 18)
    assert a.n_evaluated == 18 and a.pending == 1
    assert s.slots[a.slot].tokens == COPY + [4, 5, 6]


def test_drafts_leave_room_for_every_other_decode_token_and_stop_at_max_tokens_and_the_context():
    s = Scheduler(n_slots=3, batch_size=64, ctx_size=40)
    a, b = drafting("a", COPY), seq("b", [50, 51])
    s.add(a)
    s.add(b)
    run_step(s, sample=4)
    s.batch_size = 8
    plan = s.schedule()
    assert [(c.seq.id, c.n, len(c.draft)) for c in plan.chunks] == [("a", 7, 6), ("b", 1, 0)]

    short = drafting("short", COPY, max_tokens=5)
    s = Scheduler(n_slots=1, batch_size=64)
    s.add(short)
    run_step(s, sample=4)
    assert s.schedule().chunks[0].draft == [5, 6, 7]  # 4 more tokens: three drafted, one sampled after them
    near_end = drafting("end", COPY)
    s = Scheduler(n_slots=1, batch_size=64, ctx_size=len(COPY) + 5)
    s.add(near_end)
    run_step(s, sample=4)
    assert s.schedule().chunks[0].draft == [5, 6, 7, 8]  # positions up to ctx_size - 1


def test_drafts_of_one_length_share_a_decode_call_apart_from_plain_decode_tokens():
    s = Scheduler(n_slots=4, batch_size=64)
    a, b, c = drafting("a", COPY), drafting("b", COPY), seq("c", [70, 71])
    for x in (a, b, c):
        s.add(x)
    run_step(s, sample=4)
    late = seq("late", [80, 81, 82])
    s.add(late)
    batches = s.schedule().batches()
    assert [[(ch.seq.id, ch.n) for ch in batch] for batch in batches] == [
        [("c", 1)], [("a", 9), ("b", 9)], [("late", 3)]]


def test_planning_needs_no_model_and_edits_no_cache():
    """Importing the scheduler loads no llama.cpp; a plan only lists the cache edits, in their order."""
    import subprocess
    import sys

    code = "import sys, localrun.engine.scheduler; print('llama_cpp' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
    s = Scheduler(n_slots=2, batch_size=64, share=True)
    long = list(range(100, 140))
    a = seq("a", long)
    s.add(a)
    run_step(s)
    s.finish(a)
    b = seq("b", [1, 2, 3])
    s.add(b)
    run_step(s)  # b takes the empty slot 1; slot 0 keeps a's prompt
    s.finish(b)
    c, d = seq("c", long[:35] + [5, 5]), seq("d", [1, 2, 9])
    s.add(c), s.add(d)
    plan = s.schedule()
    # c reuses slot 0 (35 shared tokens, the rest cut); d takes slot 1, keeping b's first token
    assert plan.edits == [Trim(0, 35), Trim(1, 1)]
    assert s.slots[0].tokens == long[:35] and s.slots[1].tokens == [1]


@pytest.mark.parametrize("sizes, calls", [
    ([30, 30, 30], [[(0, 30), (1, 30), (2, 30)]]),
    ([5, 7, 9], [[(0, 5), (1, 5), (2, 5)], [(1, 2), (2, 2)], [(2, 2)]]),
    ([3, 4], [[(0, 3)], [(1, 4)]]),  # 4 - 3 would leave a lone token: the 4 goes whole, next
    ([1, 5], [[(0, 1)], [(1, 5)]]),  # a one-token prompt never drags another chunk into a lone row
    ([28, 30, 31, 33], [[(0, 28), (1, 28), (2, 28), (3, 28)], [(1, 2), (3, 2)], [(2, 3), (3, 3)]]),
])
def test_stairs_give_every_chunk_in_a_call_equally_many_tokens(sizes, calls):
    assert stairs(sizes) == calls


def test_stairs_never_cut_a_lone_token_and_cover_every_chunk():
    rng = random.Random(5)
    for _ in range(500):
        sizes = [rng.choice([1, 2, 3, rng.randint(2, 600)]) for _ in range(rng.randint(1, 8))]
        pieces: dict[int, list[int]] = {}
        for call in stairs(sizes):
            assert len({n for _, n in call}) == 1 and len({i for i, _ in call}) == len(call)
            for i, n in call:
                pieces.setdefault(i, []).append(n)
        for i, size in enumerate(sizes):
            assert sum(pieces[i]) == size
            assert all(n >= 2 for n in pieces[i]) or pieces[i] == [1]


def test_prompts_arriving_together_are_evaluated_in_equal_pieces_with_logits_at_each_end():
    s = Scheduler(n_slots=3, batch_size=64)
    for name, n in (("a", 5), ("b", 7), ("c", 9)):
        s.add(seq(name, list(range(1, n + 1))))
    plan = s.schedule()
    assert [[(ch.seq.id, ch.start, ch.n, ch.n_logits) for ch in call] for call in plan.batches()] == [
        [("a", 0, 5, 1), ("b", 0, 5, 0), ("c", 0, 5, 0)], [("b", 5, 2, 1), ("c", 5, 2, 0)], [("c", 7, 2, 1)]]


def test_a_new_sequence_takes_a_free_slot_beside_a_running_one():
    """llama.cpp puts consecutive sequence ids in one micro-batch: scattered slots cost a pass each."""
    s = Scheduler(n_slots=6, batch_size=64)
    for name, prompt in (("x", [1] * 3), ("y", [2] * 9), ("z", [3] * 9), ("w", [4] * 9), ("u", [5] * 9), ("v", [6] * 9)):
        s.add(seq(name, prompt))
    run_step(s)
    for name in "xyzwuv":
        s.finish(s.find(name))
    a, b = seq("a", [5] * 9 + [7]), seq("b", [8] * 5)
    s.add(a)
    run_step(s)
    assert a.slot == 4  # its prefix is cached there
    s.add(b)
    run_step(s)
    assert b.slot == 3  # beside a, though slot 0 would throw away fewer cached tokens


def test_a_window_cache_serves_a_prefix_only_while_it_holds_the_window_before_its_end():
    """A sliding-window model's cache lets cells older than the window go; reusing a prefix whose
    window is gone would attend to nothing there (llama-server re-evaluates such prompts too)."""
    s = Scheduler(n_slots=1, batch_size=64, window=8)
    old = seq("old", list(range(40)))
    s.add(old)
    while old.prefilling:
        run_step(s)
    s.finish(old)
    s.slots[0].first = 20  # what the engine read back from llama.cpp after the decode
    near = seq("near", list(range(36)) + [99, 98])  # the window before token 36 (28..35) is held
    s.add(near)
    run_step(s)
    assert near.n_cached == 36
    s.finish(near)
    s.slots[0].first = 20
    far = seq("far", list(range(24)) + [97, 96])  # the window before token 24 (16..23) is partly gone
    s.add(far)
    plan = run_step(s)
    assert far.n_cached == 0 and plan.edits == [Trim(0, 0)] and s.slots[0].first == 0


FLASH = RowRules(least_rows=64, lone_from=256)


@pytest.mark.parametrize("sizes, least, calls", [
    ([100, 300], [64, 64], [[(0, 100), (1, 100)], [(1, 200)]]),
    ([30, 300], [2, 64], [[(0, 30)], [(1, 300)]]),  # 30 rows would take another kernel for the long prompt
    ([100, 130], [64, 64], [[(0, 100)], [(1, 130)]]),  # 130 - 100 would leave 30 rows behind
    ([40, 45, 50], [2, 2, 2], [[(0, 40), (1, 40), (2, 40)], [(1, 5), (2, 5)], [(2, 5)]]),  # short: any piece
])
def test_stairs_keep_a_long_prompts_pieces_at_its_least_rows(sizes, least, calls):
    assert stairs(sizes, least) == calls


@pytest.mark.parametrize("n_prompt, least", [(63, 2), (64, 64), (900, 64), (1, 2)])
def test_the_least_piece_is_the_tiles_rows_for_a_prompt_that_long(n_prompt, least):
    assert least_piece(n_prompt, 64) == least and least_piece(n_prompt, 0) == 2


@pytest.mark.parametrize("remaining, budget, n", [(600, 512, 512), (560, 512, 496), (100, 50, 0), (30, 20, 0), (64, 64, 64)])
def test_prefill_leaves_no_piece_under_the_least_rows(remaining, budget, n):
    assert prefill_size(remaining, budget, 64) == n


def test_a_cached_prefix_leaves_a_long_prompt_the_least_rows_to_evaluate():
    s = Scheduler(n_slots=1, batch_size=512, rows=FLASH)
    first = seq("a", list(range(1, 201)), max_tokens=1)
    s.add(first)
    run_step(s)
    s.finish(first)
    again = seq("b", list(range(1, 211)))  # 200 cached, 10 new: 64 rows are evaluated, as cold
    s.add(again)
    assert layout(run_step(s)) == [("b", 146, 64, 1)]


def test_a_lone_decode_token_over_a_long_cache_gets_a_filler_row_and_a_neighbour_none():
    s = Scheduler(n_slots=3, batch_size=512, rows=FLASH)
    long, short = seq("long", [5, 6, 7] * 100), seq("short", [1, 2])
    s.add(long), s.add(short)
    run_step(s, sample=6)  # long: ... 5 6 7 | 6
    plan = s.schedule()  # side by side in slots 0 and 1: one micro-batch, no filler
    assert [(c.seq.id, c.n, c.filler) for c in plan.chunks] == [("long", 1, False), ("short", 1, False)]
    s.finish(short)
    [chunk] = s.schedule().chunks  # alone at position 300: a filler, what followed the last 6 before
    assert (chunk.start, chunk.n, chunk.draft, chunk.filler, chunk.decodes) == (300, 2, [7], True, True)
    assert plan.batches() == [plan.chunks] and Plan([chunk]).batches() == [[chunk]]
    assert s.settle(chunk, 0) == Trim(0, 301) and long.drafter is None  # refused: it leaves the cache


def test_a_filler_row_is_neither_for_a_short_cache_nor_past_the_context():
    s = Scheduler(n_slots=1, batch_size=512, ctx_size=302, rows=FLASH)
    near = seq("a", list(range(1, 201)))
    s.add(near)
    run_step(s)
    assert not s.schedule().chunks[0].filler  # position 200: under 256 cells
    s.commit([])
    full = Scheduler(n_slots=1, batch_size=512, ctx_size=301, rows=FLASH)
    last = seq("b", list(range(1, 301)))
    full.add(last)
    run_step(full)
    assert not full.schedule().chunks[0].filler  # position 300 is the context's last cell


def test_beside_decoding_streams_prompts_take_the_prompt_budget_shortest_first():
    s = Scheduler(n_slots=4, batch_size=64)
    a = seq("a", [1, 2])
    s.add(a)
    run_step(s)
    first, second = seq("first", list(range(100, 150))), seq("second", list(range(200, 210)))
    s.add(first)
    s.add(second)
    assert layout(s.schedule(PromptBudget(beside=32, each=64))) == [
        ("a", 2, 1, 1), ("second", 0, 10, 1), ("first", 0, 22, 0)]


def test_a_short_prompt_arriving_while_a_long_one_loads_is_evaluated_in_the_next_step():
    s = Scheduler(n_slots=2, batch_size=16)
    s.add(seq("long", list(range(100, 164))))
    assert layout(run_step(s)) == [("long", 0, 16, 0)]
    s.add(seq("chat", [1, 2, 3, 4]))
    assert layout(run_step(s)) == [("chat", 0, 4, 1), ("long", 16, 12, 0)]
    assert layout(run_step(s)) == [("chat", 4, 1, 1), ("long", 28, 15, 0)]


def test_without_streams_each_prompt_in_line_takes_its_own_share():
    """Prompts arriving together are evaluated together; a lone long prompt takes its share a step, so
    a chat arriving meanwhile waits for a short step, not a whole batch; in the step the chats join,
    which they finish, the long prompt takes what it would beside their streams."""
    budget = PromptBudget(beside=4, each=20)
    s = Scheduler(n_slots=4, batch_size=64)
    s.add(seq("long", list(range(100, 150))))
    assert layout(run_step(s, budget=budget)) == [("long", 0, 20, 0)]
    for name in ("x", "y", "z"):
        s.add(seq(name, list(range(200, 215))))
    assert layout(run_step(s, budget=budget)) == [("x", 0, 15, 1), ("y", 0, 15, 1), ("z", 0, 15, 1), ("long", 20, 4, 0)]
    assert layout(s.schedule(budget)) == [("x", 15, 1, 1), ("y", 15, 1, 1), ("z", 15, 1, 1), ("long", 24, 4, 0)]


@pytest.mark.parametrize("least", [2, 64])
def test_the_prompt_paces_fewest_tokens_always_move_the_first_prompt_in_line_on(least):
    budget = least_for(least)
    for n_prompt in range(least, 4 * least):
        for done in range(0, n_prompt - least + 1):
            n = prefill_size(n_prompt - done, budget, least)
            assert n > 0 and n <= max(budget, n_prompt - done) and (n == n_prompt - done or n_prompt - done - n >= least)


PREFIX = RowRules(least_rows=64, prefix=256)


def test_a_prompt_stops_at_the_flash_prefix_end_and_goes_on_in_the_other_context():
    """Prefix mode: no chunk crosses position 256, the piece before it keeps the tile's 64 rows, and
    the flash context's chunks come in calls of their own, first."""
    s = Scheduler(n_slots=2, batch_size=512, rows=PREFIX)
    long, short = seq("long", list(range(1, 301))), seq("short", [1, 2, 3])
    s.add(long), s.add(short)
    plan = run_step(s)
    assert layout(plan) == [("short", 0, 3, 1), ("long", 0, 256, 0)]
    assert [[c.seq.id for c in call] for call in plan.batches()] == [["short"], ["long"]]
    plan = run_step(s)  # the short one decodes in the flash context, the long one's rest goes to the other
    assert layout(plan) == [("short", 3, 1, 1), ("long", 256, 44, 1)]
    assert [[c.seq.id for c in call] for call in plan.batches()] == [["short"], ["long"]]
    assert [PREFIX.flash(c.start) for c in plan.chunks] == [True, False]


def test_prompts_in_line_ask_a_bounded_step_for_two_tiles_only_before_the_prefix_end():
    """`prompt_tile`: the tile a prompt in line must take next, which sizes a bounded step's least
    (`promptpace.least_for`): 64 while a long prompt is before position 256, none after it, none for
    prompts under a tile, none when nothing waits."""
    s = Scheduler(n_slots=2, batch_size=512, rows=PREFIX)
    assert s.prompt_tile() == 0
    s.add(seq("short", list(range(1, 31))))
    assert s.prompt_tile() == 0
    s.add(seq("long", list(range(1, 301))))
    assert s.prompt_tile() == 64
    run_step(s)  # the long one's first 256 tokens
    assert s.prompt_tile() == 0


@pytest.mark.parametrize("shared, n_prompt, keep", [
    (250, 300, 192),  # the prefix's part left to evaluate keeps a tile: 64 rows before 256
    (280, 300, 280),  # past the prefix: only the lone-row rule (2 tokens)
    (299, 300, 298),
    (100, 120, 56),   # a prompt inside the prefix: as without prefix mode
    (40, 50, 40),     # under a tile: any piece of 2+
])
def test_a_cached_prefix_leaves_each_side_of_the_flash_prefix_its_least_rows(shared, n_prompt, keep):
    assert cached_keep(shared, n_prompt, PREFIX) == keep
    assert cached_keep(shared, n_prompt, FLASH) == min(shared, n_prompt - least_piece(n_prompt, 64))


class Eager(Drafter):
    """Drafts as many tokens as it is let."""

    def propose(self, tokens: list[int], room: int) -> list[int]:
        return [9] * room


def test_a_draft_stays_on_its_side_of_the_flash_prefix():
    s = Scheduler(n_slots=1, batch_size=512, rows=PREFIX)
    a = Sequence("a", list(range(1, 251)), 250, None, drafter=Eager(8))
    s.add(a)
    run_step(s)
    [chunk] = s.schedule().chunks  # position 250: 5 drafted tokens reach 255, the prefix's last cell
    assert (chunk.start, chunk.n) == (250, 6) and PREFIX.flash(chunk.start)
