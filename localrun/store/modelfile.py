"""Modelfiles: Ollama's recipe for a model, parsed (pure, table-tested) and written back.

    modelfile   := (line "\\n")*
    line        := "" | "#" comment | COMMAND " " argument
    COMMAND     := FROM | PARAMETER | SYSTEM | TEMPLATE | MESSAGE | LICENSE   (any case)
    argument    := '"""' text spanning lines '"""' | '"' text '"' | text to the end of the line
    PARAMETER   := name " " value        MESSAGE := role " " content      (role: system, user, assistant)

Commands may repeat: PARAMETER stop and MESSAGE accumulate, LICENSE concatenates, and the others keep
their last value. FROM names a model in the store or a GGUF file (a path relative to the Modelfile's
folder). TEMPLATE is a Jinja chat template, as in a GGUF's `tokenizer.chat_template`, not one of
Ollama's Go templates: this is where localrun's Modelfiles differ from Ollama's. ADAPTER (LoRA) and
REQUIRES are refused with a reason, and so is any unknown command or parameter, so that a typo never
passes as a setting silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from localrun.errors import InvalidRequest

COMMANDS = ("FROM", "PARAMETER", "SYSTEM", "TEMPLATE", "MESSAGE", "LICENSE")
ROLES = ("system", "user", "assistant")


def _count(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise ValueError(f"must be at least {low}")
        return value
    return parse


def _number(low: float, high: float | None = None) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if value != value or value < low or (high is not None and value > high):
            raise ValueError(f"must be from {low} to {high}" if high is not None else f"must be at least {low}")
        return value
    return parse


# Every parameter a Modelfile (or /api/create's `parameters`) may set, and how its value is read. The
# keys are Ollama's names; server/defaults.py applies them (num_predict fills max_tokens, and so on).
PARAMETERS: dict[str, Callable[[str], Any]] = {
    "num_ctx": _count(16),
    "num_predict": _count(-2),  # -1: until the end, -2: fill the context
    "temperature": _number(0),
    "top_k": _count(0),
    "top_p": _number(0, 1),
    "min_p": _number(0, 1),
    "typical_p": _number(0, 1),
    "repeat_penalty": _number(0),
    "repeat_last_n": _count(-1),  # -1: the whole context
    "presence_penalty": _number(-2, 2),
    "frequency_penalty": _number(-2, 2),
    "seed": int,
    "stop": str,
    "speculative": _count(0),  # localrun: most tokens drafted per step; 0 = off
}


@dataclass(frozen=True, slots=True)
class Modelfile:
    """A parsed Modelfile. None means the command was absent (the base model's value is kept)."""

    base: str = ""  # FROM
    parameters: dict[str, Any] = field(default_factory=dict)
    system: str | None = None
    template: str | None = None
    messages: tuple[dict[str, str], ...] = ()
    license: str | None = None


def parse_modelfile(text: str) -> Modelfile:
    """Parse a Modelfile's text; a mistake raises InvalidRequest naming its line."""
    values: dict[str, Any] = {"parameters": {}, "messages": []}
    for number, command, argument in _commands(text):
        try:
            _apply(values, command, argument)
        except (ValueError, InvalidRequest) as e:
            raise InvalidRequest(f"Modelfile line {number}: {e}") from None
    if "base" not in values:
        raise InvalidRequest("Modelfile: no FROM line (FROM names the model or GGUF file to start from)")
    values["messages"] = tuple(values["messages"])
    return Modelfile(**values)


def parameter(name: str, value: Any) -> Any:
    """One PARAMETER's value, typed and checked (a value from JSON is read as its text)."""
    if name not in PARAMETERS:
        raise InvalidRequest(f"unknown parameter {name!r} (localrun knows {', '.join(PARAMETERS)})")
    text = str(value).lower() if isinstance(value, bool) else str(value)
    try:
        return PARAMETERS[name](text)
    except ValueError as e:
        why = str(e) if str(e).startswith("must") else "is not a valid value"
        raise InvalidRequest(f"parameter {name}: {text!r} {why}") from None


def parameters(given: dict[str, Any]) -> dict[str, Any]:
    """A whole set of parameters (/api/create's `parameters`): each checked; `stop` is a list."""
    out: dict[str, Any] = {}
    for name, value in given.items():
        values = value if isinstance(value, list) else [value]
        if name == "stop":
            out["stop"] = [parameter(name, v) for v in values]
        elif isinstance(value, list):
            raise InvalidRequest(f"parameter {name}: takes one value, not a list")
        else:
            out[name] = parameter(name, value)
    return out


def message(role: str, content: str) -> dict[str, str]:
    if role not in ROLES:
        raise InvalidRequest(f"MESSAGE role must be one of {', '.join(ROLES)}, not {role!r}")
    return {"role": role, "content": content}


def check_template(source: str) -> None:
    """Refuse a TEMPLATE that is not Jinja (an Ollama Go template, `{{ .Prompt }}`, is the usual case)."""
    import jinja2

    if re.search(r"\{\{-?\s*\.", source):
        raise InvalidRequest("TEMPLATE looks like an Ollama Go template ({{ .Prompt }}); localrun's TEMPLATE is a "
                             "Jinja chat template as in Hugging Face's tokenizer_config.json")
    try:
        jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(source)
    except jinja2.TemplateSyntaxError as e:
        raise InvalidRequest(f"TEMPLATE is not a valid Jinja template: {e.message} (line {e.lineno})") from None


def _apply(values: dict[str, Any], command: str, argument: str) -> None:
    if command == "FROM":
        values["base"] = _required(argument, "FROM needs a model name or a GGUF file")
    elif command == "PARAMETER":
        name, _, value = argument.partition(" ")
        value = _unquoted(value.strip())
        if not name or not value:
            raise InvalidRequest("PARAMETER needs a name and a value")
        if name.lower() == "stop":
            values["parameters"].setdefault("stop", []).append(parameter("stop", value))
        else:
            values["parameters"][name.lower()] = parameter(name.lower(), value)
    elif command == "MESSAGE":
        role, _, content = argument.partition(" ")
        values["messages"].append(message(role.lower(), _unquoted(content.strip())))
    elif command == "TEMPLATE":
        check_template(argument)
        values["template"] = argument
    elif command == "SYSTEM":
        values["system"] = argument
    else:  # LICENSE
        values["license"] = argument if values.get("license") is None else f"{values['license']}\n\n{argument}"


def _commands(text: str):
    """(line number, COMMAND, argument) for each command; triple-quoted arguments span lines."""
    lines = text.replace("\r\n", "\n").split("\n")
    number = 0
    while number < len(lines):
        line, start = lines[number].strip(), number + 1
        number += 1
        if not line or line.startswith("#"):
            continue
        command, _, argument = line.partition(" ")
        command, argument = command.upper(), argument.strip()
        if command in ("ADAPTER", "REQUIRES"):
            raise InvalidRequest(f"Modelfile line {start}: {command} is not supported by localrun")
        if command not in COMMANDS:
            raise InvalidRequest(f"Modelfile line {start}: unknown command {command!r} "
                                 f"(a Modelfile has {', '.join(COMMANDS)})")
        if '"""' in argument:
            head, _, rest = argument.partition('"""')
            body = [rest]
            while '"""' not in body[-1]:
                if number >= len(lines):
                    raise InvalidRequest(f'Modelfile line {start}: {command}\'s """ is never closed')
                body.append(lines[number])
                number += 1
            text_, _, tail = "\n".join(body).partition('"""')
            if tail.strip():
                raise InvalidRequest(f'Modelfile line {start}: text after the closing """')
            # PARAMETER's value and MESSAGE's content are unquoted after their name: quoted again, they
            # keep the whitespace that triple quotes hold (a stop string that is a newline, as in Ollama)
            argument = f'{head}"{text_}"' if command in ("PARAMETER", "MESSAGE") else f"{head}{text_}"
        elif command not in ("PARAMETER", "MESSAGE"):
            argument = _unquoted(argument)
        yield start, command, argument


def _unquoted(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def _required(text: str, why: str) -> str:
    if not text:
        raise InvalidRequest(why)
    return text


def render_modelfile(base: str, parameters: dict[str, Any], system: str = "", template: str = "",
                     messages: list[dict[str, str]] | tuple = (), license: str = "") -> str:
    """A Modelfile that `parse_modelfile` reads back to the same model (`show --modelfile`, /api/show)."""
    lines = [f"FROM {base}"]
    if template:
        lines.append(f'TEMPLATE {_quoted(template)}')
    if system:
        lines.append(f"SYSTEM {_quoted(system)}")
    for name, value in parameters.items():
        for one in value if isinstance(value, list) else [value]:
            lines.append(f"PARAMETER {name} {_quoted(one) if isinstance(one, str) else one}")
    lines += [f"MESSAGE {m['role']} {_quoted(m['content'])}" for m in messages]
    if license:
        lines.append(f"LICENSE {_quoted(license)}")
    return "\n".join(lines) + "\n"


def modelfile_of(model: Any, info: Any) -> str:
    """The Modelfile of a stored model (`show --modelfile`, /api/show): FROM its file, and what its own
    Modelfile set before what the GGUF carries (chat template, license)."""
    return render_modelfile(str(model.path), model.defaults, model.system, model.template or info.chat_template,
                            model.messages, model.modelfile_license or info.license)


def _quoted(text: str) -> str:
    """Quoted so that parsing gives `text` back: inner quotes need no escape on one line."""
    return f'"""{text}"""' if "\n" in text or text != text.strip() else f'"{text}"'


__all__ = ["COMMANDS", "Modelfile", "PARAMETERS", "check_template", "message", "modelfile_of", "parameter",
           "parameters", "parse_modelfile", "render_modelfile"]
