"""How many prompt tokens a step takes beside decoding streams, from measured prompt calls (plain data)."""

from __future__ import annotations

from localrun.engine.promptpace import PromptPace, least_for


def test_the_batch_size_until_a_prompt_call_was_measured():
    assert PromptPace(0.25, 32, 512).budget() == 512


def test_what_fits_in_the_slice_at_the_measured_rate():
    pace = PromptPace(0.25, 32, 512)
    pace.record(160, 1.0)  # 160 tokens a second
    assert pace.budget() == 40


def test_never_under_the_least_nor_over_the_batch():
    slow, fast = PromptPace(0.25, 32, 512), PromptPace(0.25, 32, 512)
    slow.record(10, 10.0)
    fast.record(5000, 0.5)
    assert slow.budget() == 32 and fast.budget() == 512


def test_the_rate_follows_the_latest_calls():
    pace = PromptPace(0.25, 8, 512)
    pace.record(100, 0.5)
    for _ in range(12):
        pace.record(100, 1.0)  # the cache filled: each token costs twice as much
    assert 25 <= pace.budget() <= 26


def test_no_slice_is_no_bound_and_empty_calls_teach_nothing():
    pace = PromptPace(0, 32, 512)
    pace.record(160, 1.0)
    assert pace.budget() == 512
    pace = PromptPace(0.25, 32, 512)
    pace.record(0, 1.0)
    pace.record(10, 0.0)
    assert pace.per_token is None


def test_a_bounded_step_takes_two_of_a_prompts_least_pieces():
    assert least_for(0) == least_for(2) == 32 and least_for(64) == 128
