"""How many prompt tokens a step takes, beside decoding streams and without them, from measured prompt calls (plain data)."""

from __future__ import annotations

from localrun.engine.promptpace import ALONE, PromptBudget, PromptPace, least_for


def test_until_a_prompt_call_was_measured_the_least_beside_streams_and_the_batch_without():
    assert PromptPace(0.25, 512).budget(32) == PromptBudget(beside=32, each=512)


def test_what_fits_in_the_slice_at_the_measured_rate():
    pace = PromptPace(0.25, 512)
    pace.record(160, 1.0)  # 160 tokens a second
    assert pace.budget(32) == PromptBudget(beside=40, each=40 * ALONE)


def test_never_under_the_least_nor_over_the_batch():
    slow, fast = PromptPace(0.25, 512), PromptPace(0.25, 512)
    slow.record(40, 40.0)
    fast.record(5000, 0.5)
    assert slow.budget(32) == PromptBudget(32, 32) and fast.budget(32) == PromptBudget(512, 512)
    assert slow.budget(128) == PromptBudget(128, 128)  # a prompt in line evaluated in tiles


def test_the_rate_follows_the_latest_calls():
    pace = PromptPace(0.25, 512)
    pace.record(100, 0.5)
    for _ in range(12):
        pace.record(100, 1.0)  # the cache filled: each token costs twice as much
    assert 25 <= pace.budget(8).beside <= 26


def test_the_dearest_contexts_rate_sizes_the_steps():
    """Prefix mode: the flash-attention prefix's calls cost less a token than the main context's."""
    pace = PromptPace(0.25, 512)
    pace.record(100, 0.25, "prefix")
    assert pace.budget(32).beside == 100
    pace.record(100, 0.5, "main")
    assert pace.budget(32).beside == 50
    pace.record(100, 0.2, "prefix")
    assert pace.budget(32).beside == 50


def test_no_slice_is_no_bound_and_empty_or_short_calls_teach_nothing():
    assert PromptPace(0, 512).budget(32) == PromptBudget(512, 512)
    pace = PromptPace(0.25, 512)
    pace.record(0, 1.0)
    pace.record(100, 0.0)
    pace.record(1, 0.014)  # SmolLM2's 1-token prompt: its time is mostly the call's own
    assert pace.per_token is None


def test_a_bounded_step_takes_two_of_a_prompts_least_pieces():
    assert least_for(0) == least_for(2) == 32 and least_for(64) == 128


def test_beside_streams_all_prompts_share_the_budget_without_them_each_brings_its_own():
    budget = PromptBudget(beside=40, each=160)
    assert budget.tokens(decoding=True, rests=[300, 900, 30]) == 40
    assert budget.tokens(decoding=False, rests=[300, 900, 1000]) == 480
    assert budget.tokens(decoding=False, rests=[20, 30, 160]) == 480  # a burst of short prompts: together
    assert budget.tokens(decoding=False, rests=[]) == 160


def test_a_chat_sent_while_a_long_prompt_loads_leaves_it_a_slice_beside_its_stream():
    """The chat finishes in the step and decodes from the next: the long prompt gets the slice it
    would get beside a stream, not `each`, so the chat's second token does not wait for it."""
    budget = PromptBudget(beside=40, each=160)
    assert budget.tokens(decoding=False, rests=[30, 1400]) == 30 + 40
    assert budget.tokens(decoding=False, rests=[30, 20, 1400]) == 50 + 40
