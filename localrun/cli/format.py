"""Human-readable sizes, durations and tables for CLI output (pure functions), and the one JSON line printer."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from typing import Any


def human_size(n: int) -> str:
    """Decimal units as Ollama prints them (its `format.HumanBytes`): whole units from ten up (101 MB,
    the fraction dropped), one decimal below ten unless whole (4.7 GB, 1 GB, 33 KB)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f} {unit}" if value < 10 and value != int(value) else f"{int(value)} {unit}"
    return f"{n} B"


def first_line(text: str, width: int = 60) -> str:
    """A long text (a license, a system prompt) as one short line."""
    line = text.strip().split("\n", 1)[0].strip()
    return line if len(line) <= width and line == text.strip() else line[:width].rstrip() + " …"


def until(expires_at: str, now: datetime | None = None) -> str:
    """`/api/ps`'s expires_at as Ollama's UNTIL column: "4 minutes from now", "Forever", "Stopping..."."""
    if not expires_at:
        return ""
    try:
        moment = datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
    except ValueError:
        return expires_at
    now = now or datetime.now(timezone.utc)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    seconds = (moment - now).total_seconds()
    if seconds > 100 * 365 * 86400:
        return "Forever"
    if seconds <= 0:
        return "Stopping..."
    return f"{_span(seconds)} from now"


def _span(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = int(seconds / size + 0.5)  # a fresh "10m" keep-alive reads 10 minutes, not 9
            return f"{count} {unit}{'s' if count != 1 else ''}"
    count = max(1, int(seconds))
    return f"{count} second{'s' if count != 1 else ''}"


def processor(size: int, size_vram: int) -> str:
    """Where the model's memory lives: "100% CPU", "100% GPU" or a split like "48%/52% CPU/GPU"."""
    if size <= 0 or size_vram <= 0:
        return "100% CPU"
    gpu = round(100 * min(size_vram, size) / size)
    return "100% GPU" if gpu >= 100 else f"{100 - gpu}%/{gpu}% CPU/GPU"


def table(header: list[str], rows: list[list[str]]) -> str:
    """Plain columns separated by three spaces (pipe- and grep-friendly, no box drawing)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["   ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    return "\n".join(lines)


class WordWrap:
    """Streamed text broken into lines at word boundaries, as Ollama's plain output does: the terminal
    would break words at its edge. A word is held until it ends (a space or newline), then written on
    the line if it fits, else on the next; a word longer than a line is cut at the width."""

    def __init__(self, width: int) -> None:
        self.width = max(1, width)
        self.column = 0
        self.word = ""

    def feed(self, text: str) -> str:
        """The text to write now for `text` arriving."""
        out: list[str] = []
        for char in text:
            if char == "\n":
                out += [self._word(), "\n"]
                self.column = 0
            elif char in " \t":
                out.append(self._word())
                if self.column >= self.width:  # a space at the edge becomes the line break
                    out.append("\n")
                    self.column = 0
                else:
                    out.append(char)
                    self.column += 1
            else:
                self.word += char
        return "".join(out)

    def finish(self) -> str:
        """The last word, at the end of the text."""
        return self._word()

    def _word(self) -> str:
        word, self.word = self.word, ""
        out = ""
        if word and self.column and self.column + len(word) > self.width:
            out, self.column = "\n", 0
        while len(word) > self.width - self.column:  # longer than a line: cut
            cut = self.width - self.column
            out += word[:cut] + "\n"
            word, self.column = word[cut:], 0
        self.column += len(word)
        return out + word


def print_json(data: Any) -> None:
    """One JSON value on one stdout line (flushed: scripts read progress events as they come)."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
    sys.stdout.flush()


__all__ = ["human_size", "first_line", "until", "processor", "table", "print_json", "WordWrap"]
