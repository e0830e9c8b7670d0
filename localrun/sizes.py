"""Sizes in bytes ("8GiB", "512MB", "1500") as integers. Pure; a leaf module, like durations.py."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNIT = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 2**10, "m": 1e6, "mb": 1e6, "mib": 2**20,
         "g": 1e9, "gb": 1e9, "gib": 2**30, "t": 1e12, "tb": 1e12, "tib": 2**40}


def parse_size(text: str) -> int:
    """Bytes; raises ValueError for anything that is not a number with an optional unit."""
    match = _SIZE.match(text)
    if not match or (match.group(2) or "").lower() not in _UNIT:
        raise ValueError(f"invalid size {text!r} (use bytes or e.g. 8GiB, 512MB)")
    return int(float(match.group(1)) * _UNIT[(match.group(2) or "").lower()])
