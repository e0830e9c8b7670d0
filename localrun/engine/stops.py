"""Stop strings that never leak, also when they span several tokens.

Text that could still grow into a stop string is held back; it is released as soon as it cannot,
and dropped together with the stop string when one completes.
"""

from __future__ import annotations


class StopMatcher:
    """Filters a text stream, cutting it at the first stop string."""

    __slots__ = ("_stops", "_held", "matched")

    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.matched: str | None = None

    def push(self, text: str) -> str:
        """Feed new text; return what is now safe to show. After a match, `matched` is set."""
        if self.matched is not None:
            return ""
        if not self._stops:
            return text
        pending = self._held + text
        cut, stop = self._first_match(pending)
        if stop is not None:
            self.matched, self._held = stop, ""
            return pending[:cut]
        keep = self._partial_suffix(pending)
        self._held = pending[len(pending) - keep:] if keep else ""
        return pending[: len(pending) - keep]

    def flush(self) -> str:
        """Release held-back text at the end of generation (when no stop string completed)."""
        held, self._held = self._held, ""
        return "" if self.matched is not None else held

    def _first_match(self, text: str) -> tuple[int, str | None]:
        best, found = len(text) + 1, None
        for stop in self._stops:
            at = text.find(stop)
            if at != -1 and at < best:
                best, found = at, stop
        return best, found

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
        longest = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:n]):
                    longest = n
                    break
        return longest


__all__ = ["StopMatcher"]
