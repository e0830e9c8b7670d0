"""What a family's splitter makes of generated text: pieces of thinking, answer, or a raw tool call."""

from __future__ import annotations

from dataclasses import dataclass

REASONING, CONTENT, CALL = "reasoning", "content", "call"


@dataclass(frozen=True, slots=True)
class Piece:
    kind: str  # REASONING | CONTENT | CALL (a call's raw arguments; `name` says which tool)
    text: str
    name: str = ""


__all__ = ["CALL", "CONTENT", "Piece", "REASONING"]
