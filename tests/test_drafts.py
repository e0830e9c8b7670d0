"""Prompt-lookup drafting from plain token lists: what is proposed, and how the drafter backs off."""

from __future__ import annotations

from localrun.engine.drafts import FIRST_DRAFT, MAX_PAUSE, MIN_DRAFT, NGRAM, Drafter, guess_next

KEY = list(range(1, NGRAM + 1))  # an n-gram that occurs twice below


def test_proposes_what_followed_the_latest_earlier_occurrence():
    d = Drafter(8)
    tokens = [*KEY, 50, 51, 52, 53, 54, 55, 90, *KEY, 60, 61, 62, 63, 64, 65, 91, *KEY]
    assert d.propose(tokens, room=8) == [60, 61, 62, 63][:FIRST_DRAFT]  # the later occurrence wins
    assert d.proposed == FIRST_DRAFT


def test_the_sequence_tail_never_matches_itself():
    assert Drafter(8).propose([0, *KEY], room=8) == []
    assert Drafter(8).propose([*KEY, 7, 8, 9, 10], room=8) == []


def test_a_close_occurrence_continues_its_repeating_pattern():
    d = Drafter(8)
    d.length = 8
    tokens = [0, *KEY, *KEY]  # the match ends one period before the end
    assert d.propose(tokens, room=8) == (KEY * 3)[:8]


def test_room_and_minimum_length_limit_drafts():
    tokens = [*KEY, 50, 51, 52, 53, 54, 55, *KEY]
    assert Drafter(8).propose(tokens, room=MIN_DRAFT - 1) == []
    assert Drafter(8).propose(tokens, room=MIN_DRAFT) == [50, 51, 52, 53][:MIN_DRAFT]
    assert Drafter(MIN_DRAFT - 1).propose(tokens, room=8) == []  # a maximum below MIN_DRAFT never drafts


def test_full_acceptance_doubles_the_length_up_to_the_maximum_and_refusal_shrinks_it():
    d = Drafter(16)
    assert d.length == FIRST_DRAFT == 4
    d.adapt(4, 4)
    assert d.length == 8
    d.adapt(8, 8)
    d.adapt(16, 16)
    assert d.length == 16
    d.adapt(16, 5)
    assert (d.length, d.pause) == (5, 0)


def test_refused_drafts_pause_drafting_longer_each_time_and_ask_for_more_context():
    d = Drafter(16)
    tokens = [*KEY, 50, 51, 52, 53, 54, 55, 90, *KEY]  # NGRAM tokens of context match, no more
    pauses = []
    for _ in range(8):
        d.adapt(4, 0)
        pauses.append(d.pause)
    assert pauses == [2, 4, 8, 16, 32, 64, MAX_PAUSE, MAX_PAUSE]
    for _ in range(d.pause):
        assert d.propose(tokens, room=8) == []
    assert d.propose(tokens, room=8) == []  # not paused now, but NGRAM + misses tokens must match
    d.adapt(4, MIN_DRAFT)  # a draft that was worth it: the pause and the stricter match end
    assert (d.misses, d.pause) == (0, 0)
    assert d.propose(tokens, room=8) == [50, 51, 52, 53][:MIN_DRAFT]


def test_many_refusals_still_leave_long_copies_drafted():
    d = Drafter(8)
    for _ in range(40):
        d.adapt(4, 0)
    d.pause = 0
    source = list(range(100, 120))
    assert d.propose([*source, 7, *source[:16]], room=8) == source[16:19][:d.length]



def test_a_guess_is_what_followed_the_last_token_before_else_the_token_again():
    assert guess_next([1, 2, 3, 2]) == 3
    assert guess_next([4, 9, 4, 8, 4]) == 8  # the latest occurrence
    assert guess_next([1, 2, 3]) == 3
    assert guess_next([5]) == 5
