"""Streaming with tools: text that may be a tool call is held back instead of streamed as content.

Once one of the family's call markers (`<tool_call>`, `[TOOL_CALLS]`, ...) appears, or the output starts with `{` or `[`
(bare JSON calls), everything from there on is held until the end, when the runner parses it: the
calls become structured tool calls and whatever is not a call is released as one last piece of text.
A possible marker split across tokens (`<tool`) waits for the next token. So streamed text plus the
released rest is always exactly the final text, and a call's raw text never reaches a client.
"""

from __future__ import annotations

from localrun.families.json_calls import MARKERS


class CallHoldback:
    def __init__(self, markers: tuple[str, ...] = MARKERS) -> None:
        self.markers = markers
        self._pending = ""
        self._holding = False
        self._started = False  # visible (non-blank) text has been released

    def push(self, text: str) -> str:
        """The part of the text seen so far that is safe to stream now."""
        self._pending += text
        if self._holding:
            return ""
        head = self._pending.lstrip()
        if not self._started and (not head or head[0] in "{["):
            self._holding = bool(head)
            return ""
        found = [i for i in (self._pending.find(m) for m in self.markers) if i >= 0]
        cut = min(found) if found else len(self._pending) - partial_marker(self._pending, self.markers)
        self._holding = bool(found)
        out, self._pending = self._pending[:cut], self._pending[cut:]
        self._started = self._started or bool(out.strip())
        return out

    def finish(self) -> str:
        """Everything held back: the text a tool call may be in."""
        rest, self._pending = self._pending, ""
        return rest


def partial_marker(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest end of `text` that is the beginning of a marker."""
    for size in range(min(len(text), max(map(len, markers)) - 1), 0, -1):
        if any(m.startswith(text[-size:]) for m in markers):
            return size
    return 0


__all__ = ["CallHoldback", "partial_marker"]
