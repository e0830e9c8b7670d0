"""Ollama-style durations ("5m", "1h30m", "90s", "300", 300, -1) as seconds. Pure; a leaf module."""

from __future__ import annotations

import re

from localrun.errors import InvalidRequest

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(value: str | int | float) -> float:
    """Seconds; negative means forever. Raises InvalidRequest for anything else."""
    if isinstance(value, bool):
        raise InvalidRequest(f"invalid duration {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    text = value.strip().lower()
    try:
        return float(text)
    except ValueError:
        pass
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    parts = _PART.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        raise InvalidRequest(f"invalid duration {value!r} (use e.g. 5m, 1h30m, 90s, 300 or -1)")
    return sign * sum(float(n) * _UNITS[u] for n, u in parts)
