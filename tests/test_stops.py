"""The stop matcher: stop strings never leak, also across chunk boundaries; nothing else is lost."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localrun.engine.stops import StopMatcher


def feed(stops: list[str], chunks: list[str]) -> tuple[str, str | None]:
    m = StopMatcher(stops)
    out = "".join(m.push(c) for c in chunks)
    return out + m.flush(), m.matched


@pytest.mark.parametrize(
    ("stops", "chunks", "text", "matched"),
    [
        ([], ["a", "b"], "ab", None),
        (["END"], ["hello ", "EN", "D more"], "hello ", "END"),
        (["END"], ["hello E", "N", "D"], "hello ", "END"),
        (["END"], ["E", "N", "X"], "ENX", None),  # a false start is released
        (["END"], ["abc", "EN"], "abcEN", None),  # held at the end, released by flush
        (["\n\n"], ["one\n", "\ntwo"], "one", "\n\n"),
        (["a", "abc"], ["xab", "c"], "x", "a"),  # the earliest match wins
        (["bc", "abcd"], ["abc"], "a", "bc"),
        (["Y", "XYX"], ["XY", "X"], "X", "Y"),  # a stop complete ends it: no waiting for a longer one
        (["</s>"], ["x</", "s", ">y"], "x", "</s>"),
        (["🙂"], ["ok ", "🙂", " more"], "ok ", "🙂"),
        ([""], ["a"], "a", None),  # empty stop strings are ignored
    ],
)
def test_table(stops, chunks, text, matched):
    assert feed(stops, chunks) == (text, matched)


def test_holds_back_only_possible_prefixes():
    m = StopMatcher(["STOP"])
    assert m.push("abc S") == "abc "
    assert m.push("T") == ""
    assert m.push("x") == "STx"


def test_nothing_after_a_match():
    m = StopMatcher(["!"])
    assert m.push("hi! there") == "hi"
    assert m.push("more") == ""
    assert m.flush() == ""


@given(st.lists(st.text(alphabet="abcXY!", max_size=6), max_size=8), st.lists(st.text(alphabet="abXY!", min_size=1, max_size=3), max_size=3))
def test_equals_cutting_the_whole_text(chunks, stops):
    """However the text is split, the output is the text cut at the earliest stop string found once a
    chunk completes one: generation ends there, so a longer stop string starting earlier but needing
    later chunks (stops "Y" and "XYX", chunks "XY" and "X") never gets them."""
    whole, hits, seen = "".join(chunks), [], ""
    for chunk in chunks:
        seen += chunk
        hits = [(seen.find(s), s) for s in stops if s in seen]
        if hits:
            break
    expected = whole[: min(hits)[0]] if hits else whole
    text, matched = feed(stops, chunks)
    assert text == expected
    assert (matched is None) == (not hits)
