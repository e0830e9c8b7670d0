"""Incremental detokenization that never emits half a UTF-8 character.

A token's bytes can end in the middle of a multi-byte character (emoji and CJK often span two or
three byte-level tokens). The detokenizer keeps the incomplete tail until the next token completes
it; bytes that can never form a character become U+FFFD instead of being dropped. A character still
unfinished when generation ends was never produced, so it is dropped rather than shown as U+FFFD.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable


class Detokenizer:
    """Turns a stream of token ids into a stream of complete text pieces."""

    __slots__ = ("_piece", "_decoder")

    def __init__(self, piece: Callable[[int], bytes]) -> None:
        self._piece = piece
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        """The new complete text this token makes visible (may be "" while a character is split)."""
        return self._decoder.decode(self._piece(token))



__all__ = ["Detokenizer"]
