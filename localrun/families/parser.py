"""One choice's generated text, as it streams, into native events: thinking, answer, tool calls.

The family's splitter separates thinking from the answer; the answer goes through the call holdback
(when tools are offered) so that a call's raw text never streams as content; at the end the held text
is parsed with the family's call format (which is also what the grammar of a forced tool_choice
writes, `call_format.py`), or else the generic `<tool_call>` format of localrun's generic tool prompt,
which small models imitate whatever their template. A call that does not parse is given back as
text: a malformed call never fails the request.
"""

from __future__ import annotations

import json
from typing import Collection

from localrun.families.family import Family
from localrun.families.holdback import CallHoldback
from localrun.families.json_calls import HERMES_OPEN, new_call_id, parse_tool_calls, unfinished_call_cut
from localrun.families.pieces import CALL, REASONING, Piece
from localrun.native import ToolCall


class OutputParser:
    def __init__(self, family: Family, prompt: str, tool_names: Collection[str] | None) -> None:
        self.family = family
        self.names = tool_names
        self._splitter = family.splitter(prompt)
        self._holdback = CallHoldback(family.call_starts) if tool_names is not None else None
        self._calls: list[ToolCall] = []

    @property
    def thinking(self) -> bool:
        """Whether the model is inside a thought right now (what a reasoning budget counts)."""
        return self._splitter.thinking

    def push(self, text: str) -> tuple[str, str]:
        """(new thinking, new answer text) that can be shown now."""
        return self._route(self._splitter.push(text))

    def finish(self, cut_off: bool = False) -> tuple[str, str, list[ToolCall]]:
        """(the last thinking, the last answer text, every tool call of the choice). An answer `cut_off`
        (by max_tokens, a stop string) loses what follows a call marker that did not parse: a call cut
        short, whose markup must not reach a client; a complete answer keeps a malformed call as text."""
        reasoning, content = self._route(self._splitter.finish())
        held = self._holdback.finish() if self._holdback else ""
        rest, calls = self.family.parse_calls(held, self.names) if held else ("", [])
        if held and not calls:  # the generic format, as the generic tool prompt asks
            rest, calls = parse_tool_calls(held, self.names, (HERMES_OPEN,))
        if cut_off and self._holdback:
            rest = unfinished_call_cut(rest, self._holdback.markers)
        return reasoning, content + rest, self._calls + calls

    def _route(self, pieces: list[Piece]) -> tuple[str, str]:
        reasoning, content = [], []
        for piece in pieces:
            if piece.kind == REASONING:
                reasoning.append(piece.text)
                continue
            text = piece.text if piece.kind != CALL else self._call(piece)
            content.append(self._holdback.push(text) if self._holdback and text else text)
        return "".join(reasoning), "".join(content)

    def _call(self, piece: Piece) -> str:
        """A call whose arguments came whole (harmony): kept as a call, or its raw text when malformed."""
        try:
            arguments = json.loads(piece.text.strip() or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            return piece.text
        self._calls.append(ToolCall(new_call_id(), piece.name, arguments))
        return ""


__all__ = ["OutputParser"]
