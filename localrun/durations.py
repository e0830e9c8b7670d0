"""Ollama-style durations ("5m", "1h30m", "90s", "300", 300, -1) as seconds. Pure; a leaf module.

A duration longer than `FOREVER_S` (ten years) means forever, as a negative one does: a keep-alive
of 1e12 s or "99999999h" made the model's expiry date unrepresentable, and /api/ps answered 500 until
another request changed it. NaN and infinity are refused.
"""

from __future__ import annotations

import math
import re

from localrun.errors import InvalidRequest

FOREVER_S = 10 * 365 * 86400.0
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_duration(value: str | int | float) -> float:
    """Seconds; negative means forever. Raises InvalidRequest for anything else."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InvalidRequest(f"invalid duration {value!r}"[:200])
    return _bounded(value, _seconds(value))


def _seconds(value: str | int | float) -> float:
    if isinstance(value, int):
        return float(max(min(value, 2**63), -2**63))  # float() of a 400-digit int overflows
    if isinstance(value, float):
        return value
    text = value.strip().lower()
    try:
        return float(text)
    except ValueError:
        pass
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    parts = _PART.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        raise InvalidRequest(f"invalid duration {value!r} (use e.g. 5m, 1h30m, 90s, 300 or -1)"[:200])
    return sign * sum(float(n) * _UNITS[u] for n, u in parts)


def _bounded(value: str | int | float, seconds: float) -> float:
    if not math.isfinite(seconds):
        raise InvalidRequest(f"invalid duration {value!r}: it must be a finite number of seconds (-1 = forever)"[:200])
    return -1.0 if seconds > FOREVER_S else seconds
