"""What a JSON schema may cost as a grammar, checked before any runner sees it.

The schema converter writes a bound of N (maxLength, maxItems ...) as N nested optional copies of
a rule reference, about 8 characters each, which llama.cpp then parses in the runner that serves
every request of the model. Unchecked, `{"type": "string", "maxLength": 100000000}` grew a runner to
2.3 GB and ended in SIGSEGV, and `{"type": "array", "minItems": 1000000}` held the model for 17 s.
Measured on SmolLM2's vocabulary: a bound of 1000 makes 8-21 KB of grammar that llama.cpp parses
in about 1 ms, and from about 2000 nested copies llama.cpp refuses the grammar anyway ("exceeds
sane defaults"). Each subschema is a rule of its own, so bounds add up rather than multiply,
except inside one regex `pattern`, where a repeated group repeats its content. So these are capped,
each refusal naming the bound:

    MAX_REPEAT        any one of minItems, maxItems, minLength, maxLength, min/maxProperties, and a
                      pattern's repetition count (nested repetitions multiply)
    MAX_REPEAT_TOTAL  the sum of them over the whole schema
    MAX_NODES         subschemas (OpenAI allows 5000 object properties in all)
    MAX_DEPTH         nesting of subschemas

The grammar text itself is capped where it is made (runner/prompt.py, MAX_GRAMMAR_CHARS).
"""

from __future__ import annotations

import re
from typing import Any

from localrun.errors import InvalidRequest

MAX_REPEAT = 1000
MAX_REPEAT_TOTAL = 16384
MAX_NODES = 5000
MAX_DEPTH = 32
MAX_GRAMMAR_CHARS = 1 << 20

BOUND_KEYS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")
_QUANTIFIER = re.compile(r"\{(\d*)(?:,(\d*))?\}")


def check_cost(schema: Any, where: str = "schema") -> None:
    """Raise InvalidRequest (400) naming the bound when the schema would make too costly a grammar."""
    walk = _Walk(where)
    walk.visit(schema, where, 0)


class _Walk:
    def __init__(self, where: str) -> None:
        self.root, self.nodes, self.total = where, 0, 0

    def visit(self, node: Any, where: str, depth: int) -> None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                self.visit(item, f"{where}[{i}]", depth)
            return
        if not isinstance(node, dict):
            return
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _refused(f"{self.root} has more than {MAX_NODES} subschemas")
        if depth > MAX_DEPTH:
            raise _refused(f"{where} is nested more than {MAX_DEPTH} levels deep")
        for key in BOUND_KEYS:
            if isinstance(node.get(key), int) and not isinstance(node[key], bool):
                self.add(node[key], f"{where}.{key}")
        if isinstance(node.get("pattern"), str):
            self.add_total(pattern_cost(node["pattern"], f"{where}.pattern"), f"{where}.pattern")
        for key, value in node.items():
            if key not in ("enum", "const", "default", "examples", "required"):
                self.visit(value, f"{where}.{key}", depth + 1)

    def add(self, bound: int, where: str) -> None:
        if bound > MAX_REPEAT:
            raise _refused(f"{where} is {bound}; at most {MAX_REPEAT} is accepted")
        self.add_total(bound, where)

    def add_total(self, bound: int, where: str) -> None:
        self.total += bound
        if self.total > MAX_REPEAT_TOTAL:
            raise _refused(f"the repetition bounds of {self.root} add up to more than {MAX_REPEAT_TOTAL} "
                           f"(at {where})")


def pattern_cost(pattern: str, where: str = "pattern") -> int:
    """The repetitions a regex's grammar expands to: bounded quantifiers summed along a sequence and
    multiplied through the groups they repeat (`(a{10}){10}` costs 100). Unbounded ones (`*`, `+`,
    `{n,}` past n) are loops in the grammar and cost nothing extra."""
    stack = [0]  # the cost of each open group so far
    last = 0  # the cost of the last atom, which a quantifier right after it multiplies
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i, last = i + 2, 1
            stack[-1] += 1
            continue
        if char == "[":
            i, last = _class_end(pattern, i), 1
            stack[-1] += 1
            continue
        if char == "(":
            stack.append(0)
        elif char == ")" and len(stack) > 1:
            last = max(stack.pop(), 1)
            stack[-1] += last
        elif char == "{" and (quantifier := _QUANTIFIER.match(pattern, i)):
            low, high = quantifier.group(1), quantifier.group(2)
            count = max(int(low or 0), int(high) if high else 0)
            if count > MAX_REPEAT:
                raise _refused(f"{where} repeats {count} times; at most {MAX_REPEAT} is accepted")
            stack[-1] += last * max(count - 1, 0)
            last = last * max(count, 1)
            i = quantifier.end()
            continue
        elif char not in "|*+?^$":
            last = 1
            stack[-1] += 1
        if stack[-1] > MAX_REPEAT_TOTAL:
            raise _refused(f"{where} expands to more than {MAX_REPEAT_TOTAL} repetitions")
        i += 1
    return sum(stack)


def _class_end(pattern: str, start: int) -> int:
    """The index after a character class `[...]` that starts at `start`."""
    i = start + 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i + 1


def _refused(message: str) -> InvalidRequest:
    return InvalidRequest(f"JSON schema too costly to enforce: {message}")


__all__ = ["BOUND_KEYS", "MAX_DEPTH", "MAX_GRAMMAR_CHARS", "MAX_NODES", "MAX_REPEAT", "MAX_REPEAT_TOTAL",
           "check_cost", "pattern_cost"]
