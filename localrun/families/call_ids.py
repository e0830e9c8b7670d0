"""Tool-call ids in the shape a template insists on.

Mistral's v3 templates (Mistral Nemo, Mistral 7B v0.3, Mistral Small 2409) refuse any id that is not
exactly 9 letters and digits, while OpenAI clients send back ids such as `call_3f2a...` and Ollama's
carry none. So each id is mapped to one of that shape, the same for a call and for its result, and a
result without an id takes the id of the call it answers (in order, as Ollama's clients send them).
"""

from __future__ import annotations

import hashlib
import re
import string
from typing import Any

_ALPHABET = string.ascii_letters + string.digits


def shaped_ids(messages: list[dict[str, Any]], length: int) -> list[dict[str, Any]]:
    """`messages` with every tool-call id (calls and results) made `length` letters and digits."""
    fits = re.compile(f"[A-Za-z0-9]{{{length}}}")
    mapped: dict[str, str] = {}
    unanswered: list[str] = []

    def shaped(old: str) -> str:
        if old not in mapped:
            mapped[old] = old if fits.fullmatch(old) else _derived(old, length)
        return mapped[old]

    out = []
    for i, message in enumerate(messages):
        if message.get("role") == "assistant" and message.get("tool_calls"):
            calls = [{**call, "id": shaped(call.get("id") or f"call {i} {j}")}
                     for j, call in enumerate(message["tool_calls"])]
            unanswered = [call["id"] for call in calls]
            message = {**message, "tool_calls": calls}
        elif message.get("role") == "tool":
            old = message.get("tool_call_id")
            new = shaped(old) if old else (unanswered[0] if unanswered else _derived(f"result {i}", length))
            unanswered = [call for call in unanswered if call != new]
            message = {**message, "tool_call_id": new}
        out.append(message)
    return out


def _derived(text: str, length: int) -> str:
    number = int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")
    chars = []
    for _ in range(length):
        number, digit = divmod(number, len(_ALPHABET))
        chars.append(_ALPHABET[digit])
    return "".join(chars)


__all__ = ["shaped_ids"]
