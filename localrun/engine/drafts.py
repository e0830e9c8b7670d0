"""Prompt-lookup drafting for speculative decoding, decided from plain token lists.

A sequence that copies from its own context (rewriting, extracting, quoting code) keeps producing
runs of tokens that already occur earlier in it. `Drafter.propose` finds the latest earlier
occurrence of the sequence's last `NGRAM` tokens and proposes the tokens that followed it (copying
on into the draft itself when the occurrence is close, so a repeating pattern continues); the
engine evaluates them beside the sequence's next token in one step and keeps the longest prefix
the model confirms (see `Engine._verify`).

Verifying a draft costs more than decoding one token (on a CPU two rows cost about two steps,
each further row less), so the drafter adapts: a fully accepted draft doubles the next one's
length up to the request's maximum, a partly accepted one shrinks it to what was accepted, and a
draft refused outright suspends drafting for exponentially more steps and asks one more token of
matching context from the next lookup. Free text, where lookups rarely match and matches are
rarely right, then costs almost nothing.
"""

from __future__ import annotations

NGRAM = 4  # tokens that must match before a continuation is proposed
MIN_DRAFT = 3  # shorter drafts cost more to verify than they save (measured on a CPU)
FIRST_DRAFT = 4  # the length of a sequence's first draft (at most its maximum)
MAX_CONTEXT = 16  # matching context is measured up to this many tokens
MAX_PAUSE = 64  # steps without drafting after repeated refusals, at most
GUESS_WINDOW = 256  # tokens `guess_next` looks back over


class Drafter:
    """One sequence's n-gram index over its tokens, its draft length and its acceptance counts."""

    __slots__ = ("n_max", "length", "pause", "misses", "proposed", "accepted", "_index", "_indexed")

    def __init__(self, n_max: int) -> None:
        self.n_max = n_max
        self.length = min(n_max, FIRST_DRAFT)
        self.pause = 0  # steps left without drafting
        self.misses = 0  # drafts refused in a row
        self.proposed = 0
        self.accepted = 0
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> index of the token after its latest occurrence
        self._indexed = 0  # n-grams starting before this index are in _index

    def propose(self, tokens: list[int], room: int) -> list[int]:
        """`min(length, room)` tokens that followed the latest earlier occurrence of the last NGRAM
        tokens; none while paused, after too short a match, or when fewer than MIN_DRAFT fit."""
        if self.pause:
            self.pause -= 1
            return []
        n = min(self.length, room)
        if n < MIN_DRAFT:
            return []
        self._extend(tokens)
        at = self._index.get(tuple(tokens[-NGRAM:]))
        if at is None or _context(tokens, at) < min(NGRAM + self.misses, MAX_CONTEXT):
            return []
        draft = tokens[at:at + n]
        while len(draft) < n:  # the occurrence ends where the sequence does: its pattern repeats
            draft.append(draft[len(draft) - (len(tokens) - at)])
        self.proposed += n
        return draft

    def adapt(self, proposed: int, accepted: int) -> None:
        """Set the next draft's length (and any pause) from how this one fared."""
        if accepted == proposed:
            self.length = min(self.n_max, 2 * self.length)
        else:
            self.length = max(MIN_DRAFT, accepted)
        if accepted < MIN_DRAFT:
            self.misses += 1
            self.pause = min(MAX_PAUSE, 2 ** self.misses)
        else:
            self.misses = 0

    def _extend(self, tokens: list[int]) -> None:
        """Index every n-gram that has a token after it (so the sequence's tail never matches itself)."""
        index = self._index
        for i in range(self._indexed, len(tokens) - NGRAM):
            index[tuple(tokens[i:i + NGRAM])] = i + NGRAM
        self._indexed = max(self._indexed, len(tokens) - NGRAM)


def guess_next(tokens: list[int]) -> int:
    """A one-token guess at what follows: the token after the latest earlier occurrence of the last
    one (within GUESS_WINDOW tokens), else the last token again. A filler row's draft
    (`flashrows`): any token keeps the row's kernel, a right guess is a token for free."""
    last = tokens[-1]
    for i in range(len(tokens) - 2, max(-1, len(tokens) - 2 - GUESS_WINDOW), -1):
        if tokens[i] == last:
            return tokens[i + 1]
    return last


def _context(tokens: list[int], at: int) -> int:
    """How many tokens before index `at` equal the sequence's last tokens (up to MAX_CONTEXT)."""
    end, n = len(tokens), 0
    while n < MAX_CONTEXT and n < at and tokens[at - 1 - n] == tokens[end - 1 - n]:
        n += 1
    return n


__all__ = ["Drafter", "MIN_DRAFT", "NGRAM", "guess_next"]
