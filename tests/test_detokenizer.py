"""Incremental detokenization: split UTF-8 characters are held back, never emitted half."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from localrun.engine.detokenizer import Detokenizer


def stream(pieces: list[bytes]) -> list[str]:
    d = Detokenizer(lambda t: pieces[t])
    return [d.push(i) for i in range(len(pieces))]


def test_emoji_split_over_tokens():
    data = "hi 🙂".encode()
    pieces = [data[:4], data[4:5], data[5:6], data[6:]]
    assert stream(pieces) == ["hi ", "", "", "🙂"]


def test_cjk_split():
    data = "日本".encode()  # 3 bytes each
    assert stream([data[:2], data[2:4], data[4:]]) == ["", "日", "本"]


def test_invalid_bytes_become_replacement_not_lost():
    assert "".join(stream([b"a\xff", b"b"])) == "a\ufffdb"


def test_unfinished_character_at_the_end_is_never_shown():
    assert stream([b"x\xe6\x97"]) == ["x"]


@given(st.text(), st.lists(st.integers(min_value=0, max_value=64), max_size=12))
def test_any_split_reassembles_and_every_piece_is_whole(text, cuts):
    """Every prefix of pieces yields whole characters only, and all of them together the text."""
    data = text.encode()
    bounds = sorted({0, len(data), *(min(c, len(data)) for c in cuts)})
    pieces = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    out = stream(pieces)
    assert "".join(out) == text
    assert "\ufffd" not in "".join(out) or "\ufffd" in text
