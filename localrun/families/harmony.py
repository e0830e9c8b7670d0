"""gpt-oss's harmony format: the output is a series of messages on channels.

    <|channel|>analysis<|message|>THINKING<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{...}<|call|>
    <|start|>assistant<|channel|>final<|message|>ANSWER<|return|>

The header before `<|message|>` says what the body is: `to=functions.NAME` a tool call (its body the
JSON arguments; the recipient may also come before the channel), the analysis channel thinking,
anything else (final, a commentary preamble) answer.
These are control tokens, so the family asks the engine for special-token text. A model that writes no
header at all is answering.
"""

from __future__ import annotations

import re

from localrun.families.holdback import partial_marker
from localrun.families.pieces import CALL, CONTENT, REASONING, Piece

MESSAGE = "<|message|>"
HEADER_STARTS = ("<|", "to=")  # a header, or the recipient written right after the prompt's <|start|>assistant
ENDS = ("<|end|>", "<|call|>", "<|return|>", "<|start|>")
CLOSE_THOUGHT = "<|end|><|start|>assistant<|channel|>final<|message|>"  # what a reasoning budget forces
_RECIPIENT = re.compile(r"to=functions\.([^\s<]+)")


class HarmonySplitter:
    def __init__(self, inside: bool = False) -> None:
        self._pending = ""
        self._body: Piece | None = Piece(REASONING, "") if inside else None  # the message being read

    @property
    def thinking(self) -> bool:
        return self._body is not None and self._body.kind == REASONING

    def push(self, text: str) -> list[Piece]:
        self._pending += text
        out: list[Piece] = []
        while self._pending and self._advance(out):
            pass
        return _merged(out)

    def finish(self) -> list[Piece]:
        out = []
        if self._body is not None:
            out.append(Piece(self._body.kind, self._pending, self._body.name))
        elif self._pending:
            out.append(Piece(CONTENT, self._pending))
        self._pending, self._body = "", None
        return _merged(out)

    def _advance(self, out: list[Piece]) -> bool:
        if self._body is None:
            return self._header()
        ends = [i for i in (self._pending.find(e) for e in ENDS) if i >= 0]
        if not ends:
            if self._body.kind != CALL:  # a call's arguments come whole, at its end
                keep = len(self._pending) - partial_marker(self._pending, ENDS)
                out.append(Piece(self._body.kind, self._pending[:keep], self._body.name))
                self._pending = self._pending[keep:]
            return False
        at = min(ends)
        out.append(Piece(self._body.kind, self._pending[:at], self._body.name))
        end = next(e for e in ENDS if self._pending.startswith(e, at))
        self._pending = self._pending[at + (0 if end == "<|start|>" else len(end)):]
        self._body = None
        return True

    def _header(self) -> bool:
        head = self._pending.lstrip()
        if not any(head.startswith(s) or s.startswith(head) for s in HEADER_STARTS):
            self._body = Piece(CONTENT, "")  # no harmony header: plain answer
            return True
        at = self._pending.find(MESSAGE)
        if at < 0:
            return False
        header, self._pending = self._pending[:at], self._pending[at + len(MESSAGE):]
        if recipient := _RECIPIENT.search(header):
            self._body = Piece(CALL, "", recipient.group(1))
        else:
            self._body = Piece(REASONING if "analysis" in header else CONTENT, "")
        return True


def _merged(pieces: list[Piece]) -> list[Piece]:
    """Calls kept whole even when empty; empty thinking and answer pieces dropped."""
    return [p for p in pieces if p.text or p.kind == CALL]


__all__ = ["CLOSE_THOUGHT", "HarmonySplitter"]
