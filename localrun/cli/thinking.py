"""A thinking model's thinking, shown apart from its answer as `ollama run` shows it.

On a terminal the thinking streams dimmed between "Thinking..." and "...done thinking.", then the
answer follows; `--hidethinking` keeps it off the screen (the model still thinks). Piped output gets
only the answer, so scripts read what they asked for, unless `--think` was given: then the thinking
comes framed the same way, undimmed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

from localrun.client.client import THINKING

DIM, RESET = "\x1b[2m", "\x1b[0m"
OPEN, CLOSE = "Thinking...\n", "\n...done thinking.\n\n"


def shows_thinking(think: bool | None, hide: bool, terminal: bool) -> bool:
    """Whether the thinking is written out: on a terminal unless hidden; on a pipe only when asked."""
    return not hide and (terminal or think is True)


class ThinkingView:
    def __init__(self, show: bool, dim: bool) -> None:
        self.show = show
        self.dim = dim

    def answer(self, pieces: Iterable[tuple[str, str]]) -> Iterator[str]:
        """The answer's deltas; the thinking before them is written to stdout as it comes (when shown)."""
        open_thought = False
        try:
            for kind, text in pieces:
                if kind != THINKING:
                    if open_thought:
                        open_thought = self._close()
                    yield text
                elif self.show:
                    if not open_thought:
                        self._write((DIM if self.dim else "") + OPEN)
                    open_thought = True
                    self._write(text)
        finally:
            if open_thought:
                self._close()

    def _close(self) -> bool:
        self._write(CLOSE + (RESET if self.dim else ""))
        return False

    @staticmethod
    def _write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()


__all__ = ["ThinkingView", "shows_thinking"]
