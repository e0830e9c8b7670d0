"""Tool calls held to their schemas by a GBNF grammar: from the first token for tool_choice "required"
or a named tool, from the moment the model starts a call for "auto" (a lazy grammar).

The call is written in the model family's own format (`families.call_format`: Hermes' `<tool_call>`,
Qwen3-Coder's XML, gpt-oss's harmony header, DeepSeek's and Kimi's tool tokens, Mistral's
`[TOOL_CALLS]` ...), so a forced call is what the model itself would write and its family's parser
reads it. The arguments are the grammar of the tool's parameters schema: one JSON object, or, for
the XML formats, one tag group per property (required ones in order, then the optional ones, each
optional), a string's value bare and any other value as JSON. So even a tiny model answers with a
call that parses and whose arguments match the schema. One call per turn: a grammar that allowed
"another call?" after each one lets small models repeat the call until max_tokens.

Special tokens need nothing special: llama.cpp matches a grammar's literal against a token's text,
and a control token's text is its marker (`[TOOL_CALLS]`, `<｜tool▁sep｜>`).
"""

from __future__ import annotations

import re
from typing import Any

from localrun.engine.grammar import schema_to_grammar
from localrun.errors import InvalidRequest
from localrun.families.call_format import HERMES, CallFormat

_REGEX_SPECIAL = re.compile(r"[.^$|()*+?\[\]{}\\]")
_GBNF_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|[A-Za-z][A-Za-z0-9-]*')
_BARE_STRING_KEYS = {"enum", "const", "pattern", "format", "minLength", "maxLength"}


def forced_tools(tools: list[dict[str, Any]] | None, choice: Any) -> list[dict[str, Any]] | None:
    """The tools one of which must be called, or None when the model may answer freely."""
    if not tools or choice in (None, "none", "auto"):
        return None
    if choice in ("required", "any"):
        return tools
    name = choice.get("name") if isinstance(choice, dict) else None
    if not name:
        raise InvalidRequest(f"tool_choice: expected none, auto, required or a tool name, got {choice!r}")
    named = [tool for tool in tools if tool["name"] == name]
    if not named:
        raise InvalidRequest(f"tool_choice names {name!r}, which is not among the tools")
    return named


def tool_call_grammar(tools: list[dict[str, Any]] | None, choice: Any, form: CallFormat = HERMES) -> str | None:
    """GBNF for one forced call written in `form`, or None when tool_choice leaves the answer free."""
    forced = forced_tools(tools, choice)
    return None if forced is None else _calls((form,), forced)


def lazy_call_grammar(tools: list[dict[str, Any]] | None, choice: Any, forms: tuple[CallFormat, ...],
                      markers: tuple[str, ...], think: tuple[str, str] | None = None,
                      in_thought: bool = False, several: bool = True) -> tuple[str, list[str]] | None:
    """For tool_choice auto: (GBNF for valid calls in any of `forms`, the regex patterns that wake it),
    a grammar llama.cpp keeps asleep until the text matches a pattern, as llama-server does. The model
    answers freely; once it starts a call, its calls are held to the tools' schemas, so a small model's
    call closes instead of repeating a key until max_tokens; no text may follow the calls, and no second
    call unless `several` (a request that turned parallel calls off ends after one). A form is
    woken by the call marker it starts with, else by its whole opening, and only outside a thought
    (`think`: the family's markers; `in_thought`: the prompt leaves one open), so a call a model drafts
    while thinking does not wake it. A bare JSON object (Llama 3's) is left free, since its opening
    `{"name": "` would wake the grammar in any JSON answer. None when no form is left or the tools
    cannot be a grammar: the answer stays free."""
    if not tools or choice not in (None, "auto"):
        return None
    forms = tuple(dict.fromkeys(form for form in forms if form.before and not form.before.startswith("{")))
    if not forms:
        return None
    triggers = dict.fromkeys(next((m for m in markers if form.before.startswith(m)), form.before) for form in forms)
    try:
        grammar = _calls(forms, tools, several)
    except InvalidRequest:
        return None
    return grammar, [_wake_pattern(trigger, think, in_thought) for trigger in triggers]


def _wake_pattern(trigger: str, think: tuple[str, str] | None, in_thought: bool) -> str:
    """The ECMAScript regex that finds `trigger` outside a thought; llama.cpp starts the grammar at the
    first capture group that matched. With a thought open from the start the trigger must follow its
    close; otherwise it may come before any thought opens, or after one closes."""
    wanted = _regex_escape(trigger)
    if think is None:
        return wanted
    opening, closing = map(_regex_escape, think)
    after_thought = f"{closing}[\\s\\S]*?({wanted})"
    return after_thought if in_thought else f"^(?:(?!{opening})[\\s\\S])*?({wanted})|{after_thought}"


def _regex_escape(text: str) -> str:
    """`text` as a literal in a regex, as llama.cpp's regex_escape writes it."""
    return _REGEX_SPECIAL.sub(r"\\\g<0>", text)


def _calls(forms: tuple[CallFormat, ...], tools: list[dict[str, Any]], several: bool = False) -> str:
    """GBNF whose root is one call of one of `tools` written in one of `forms` (or, `several`, calls in
    a row, apart by spaces or newlines); nothing after them."""
    roots, rules = [], []
    for f, form in enumerate(forms):
        calls = " | ".join(f"call{f}-{i}" for i in range(len(tools)))
        roots.append(_sequence(_literal(form.before), f"({calls})", _literal(form.after)))
        for i, tool in enumerate(tools):
            prefix = f"tool{f}-{i}-"
            rules.append(f"call{f}-{i} ::= {_sequence(_literal(form.name_text(tool['name']) + form.middle), prefix + 'args')}")
            rules += _arguments(tool.get("parameters") or {"type": "object"}, prefix, form, f"xml-text{f}")
        if form.argument is not None:
            rules.append(f"xml-text{f} ::= {_until(form.argument[2])}")
    one = roots[0] if len(roots) == 1 else " | ".join(f"({r})" for r in roots)
    head = [f"root ::= {one}"] if not several else ["root ::= one ([ \\n]* one)*", f"one ::= {one}"]
    return "\n".join([*head, *rules]) + "\n"


def _arguments(parameters: dict[str, Any], prefix: str, form: CallFormat, text_rule: str) -> list[str]:
    """The rules of one tool's arguments, all named `prefix`..., the first one `prefix`args; a bare XML
    value is `text_rule`."""
    if form.argument is None:
        return [f"{prefix}args ::= {prefix}root", _prefixed(schema_to_grammar(parameters), prefix)]
    open_key, between, close = form.argument
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    order = [key for key in properties if key in required] + [key for key in properties if key not in required]
    defs = {key: parameters[key] for key in ("$defs", "definitions") if key in parameters}
    rules, parts = [], []
    for j, key in enumerate(order):
        value, value_rules = _xml_value(properties[key], defs, f"{prefix}{j}-", text_rule)
        rules += value_rules
        part = _sequence(_literal(f"{open_key}{key}{between}"), value, _literal(close))
        parts.append(part if key in required else f"({part})?")
    return [f"{prefix}args ::= {_sequence(*parts) or chr(34) * 2}", *rules]


def _xml_value(schema: Any, defs: dict[str, Any], prefix: str, text_rule: str) -> tuple[str, list[str]]:
    """(the expression of one XML argument's value, the rules it needs): strings bare, the rest JSON."""
    if isinstance(schema, dict) and schema.get("type") == "string" and not schema.keys() & _BARE_STRING_KEYS:
        return text_rule, []
    if isinstance(schema, dict) and schema.get("enum") and all(isinstance(v, str) for v in schema["enum"]):
        return "(" + " | ".join(_literal(v) for v in schema["enum"]) + ")", []
    if isinstance(schema, dict) and isinstance(schema.get("const"), str):
        return _literal(schema["const"]), []
    whole = {**schema, **defs} if isinstance(schema, dict) else schema
    return f"{prefix}root", [_prefixed(schema_to_grammar(whole), prefix)]


def _until(end: str) -> str:
    """Text up to `end`: llama.cpp's `until` (any character but end's first, or a prefix of end that
    goes on differently), so a bare value may hold code with tags, only not the closing tag itself."""
    steps = [f"{_literal(end[:i])} [^{_in_class(end[i])}]".strip() for i in range(len(end))]
    return "(" + " | ".join(steps) + ")*"


def _in_class(char: str) -> str:
    return {"\n": "\\n", "]": "\\]", "^": "\\^", "\\": "\\\\", "-": "\\-"}.get(char, char)


def _prefixed(gbnf: str, prefix: str) -> str:
    """The grammar with every rule name prefixed (string literals and char classes untouched)."""
    return _GBNF_TOKEN.sub(lambda m: m.group() if m.group()[0] in '"[' else prefix + m.group(), gbnf)


def _sequence(*parts: str) -> str:
    return " ".join(part for part in parts if part)


def _literal(text: str) -> str:
    """A GBNF string literal; empty for empty text (a format may have nothing before or after)."""
    if not text:
        return ""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


__all__ = ["forced_tools", "lazy_call_grammar", "tool_call_grammar"]
