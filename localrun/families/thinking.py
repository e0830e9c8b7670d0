"""Thinking between two markers (`<think>…</think>`, Magistral's `[THINK]…[/THINK]`), split out as it streams.

A thought counts only at the start of the output (models open it first), or when the prompt itself
ends inside an open thought (DeepSeek R1's template writes `<think>\\n` after the assistant header).
Text that might still become a marker (`<thi`) waits for the next piece; the blank lines models
put right after a marker are dropped, so neither the thinking nor the answer starts with them.
"""

from __future__ import annotations

from localrun.families.holdback import partial_marker
from localrun.families.pieces import CONTENT, REASONING, Piece


class ThinkSplitter:
    def __init__(self, open_marker: str, close_marker: str, inside: bool) -> None:
        self.markers = (open_marker, close_marker)
        self.thinking = inside
        self._may_open = not inside  # an opening marker is still possible
        self._pending = ""
        self._trim = inside  # drop whitespace before the next visible text

    def push(self, text: str) -> list[Piece]:
        self._pending += text
        out: list[Piece] = []
        while self._pending and self._advance(out):
            pass
        return [p for p in out if p.text]

    def finish(self) -> list[Piece]:
        rest, self._pending = self._pending, ""
        text = rest.lstrip() if self._trim else rest
        text = text.rstrip() if self.thinking else text
        return [Piece(REASONING if self.thinking else CONTENT, text)] if text else []

    def _advance(self, out: list[Piece]) -> bool:
        """Consume what can be decided now; False when the rest must wait for more text."""
        open_marker, close_marker = self.markers
        if self._trim:
            self._pending = self._pending.lstrip()
            if not self._pending:
                return False
            self._trim = False
        if self.thinking:
            at = self._pending.find(close_marker)
            if at < 0:
                keep = len(self._pending) - partial_marker(self._pending, (close_marker,))
                keep = len(self._pending[:keep].rstrip())  # blank lines before the marker wait
                out.append(Piece(REASONING, self._pending[:keep]))
                self._pending = self._pending[keep:]
                return False
            out.append(Piece(REASONING, self._pending[:at].rstrip()))
            self._pending = self._pending[at + len(close_marker):]
            self.thinking, self._trim = False, True
            return True
        if self._may_open:
            head = self._pending.lstrip()
            if head.startswith(open_marker):
                self._pending = head[len(open_marker):]
                self.thinking = self._trim = True
                self._may_open = False
                return True
            if open_marker.startswith(head):
                return False
            self._may_open = False
        out.append(Piece(CONTENT, self._pending))
        self._pending = ""
        return False


__all__ = ["ThinkSplitter"]
