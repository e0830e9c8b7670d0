"""How a family writes one tool call, so that a forced tool_choice makes the model write its own format.

Every format is one shape:  BEFORE name MIDDLE arguments AFTER
where the arguments are one JSON object, or (`argument` set) one tag group per argument whose value is
written bare when it is a string and as JSON otherwise, as the XML templates write them:

    Hermes/Qwen   <tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>
    Qwen3-Coder   <tool_call>\\n<function=f>\\n<parameter=city>\\nParis\\n</parameter>\\n</function>\\n</tool_call>
    gpt-oss       <|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}
    DeepSeek V3.1 <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>

The formats copy what each family's chat template writes for a past call (tests/test_families.py checks
them against the real templates), except gpt-oss, whose format is what its model card shows the model
writing, and which leaves out the final `<|call|>`, an end-of-generation token that a grammar cannot
ask for: the call ends where the model stops. `tools/grammar.py` turns a format into the GBNF that
forces one call; `write` is the same call as text (the tool history of templates that know no tools).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class CallFormat:
    before: str
    middle: str
    after: str
    argument: tuple[str, str, str] | None = None  # per argument: before the key, between key and value, after value
    json_name: bool = False  # the name sits inside a JSON string, so it is written escaped

    def name_text(self, name: str) -> str:
        return json.dumps(name, ensure_ascii=False)[1:-1] if self.json_name else name

    def write(self, name: str, arguments: Any) -> str:
        """One call as the model writes it."""
        if self.argument is None or not isinstance(arguments, dict):
            body = json.dumps(arguments, ensure_ascii=False)
        else:
            open_key, between, close = self.argument
            body = "".join(f"{open_key}{key}{between}{bare_value(value)}{close}" for key, value in arguments.items())
        return f"{self.before}{self.name_text(name)}{self.middle}{body}{self.after}"


def bare_value(value: Any) -> str:
    """An XML argument's value: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _in_json(before: str, after: str, name_key: str = "name", arguments_key: str = "arguments") -> CallFormat:
    """A format whose call is a JSON object holding the name and the arguments."""
    return CallFormat(f'{before}{{"{name_key}": "', f'", "{arguments_key}": ', f"}}{after}", json_name=True)


HERMES = _in_json("<tool_call>\n", "\n</tool_call>")
MISTRAL_LIST = _in_json("[TOOL_CALLS][", "]")  # Mistral Nemo, v3 tokenizers
MISTRAL_ARGS = CallFormat("[TOOL_CALLS]", "[ARGS]", "")  # Devstral, Magistral, v11+ tokenizers
GRANITE = _in_json("<|tool_call|>[", "]")
LLAMA3 = _in_json("", "", arguments_key="parameters")
COMMAND_R7B = CallFormat('<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "', '", "parameters": ',
                         "}\n]<|END_ACTION|>", json_name=True)
COMMAND_R = _in_json("Action: ```json\n[", "]\n```", "tool_name", "parameters")
DEEPSEEK_V3 = CallFormat("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                         "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
DEEPSEEK_R1 = CallFormat("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>", "\n```json\n",
                         "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
KIMI = CallFormat("<|tool_calls_section_begin|><|tool_call_begin|>functions.", ":0<|tool_call_argument_begin|>",
                  "<|tool_call_end|><|tool_calls_section_end|>")
HARMONY = CallFormat("<|channel|>commentary to=functions.", " <|constrain|>json<|message|>", "")
QWEN3_CODER = CallFormat("<tool_call>\n<function=", ">\n", "</function>\n</tool_call>",
                         argument=("<parameter=", ">\n", "\n</parameter>\n"))
GLM = CallFormat("<tool_call>", "\n", "</tool_call>",
                 argument=("<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n"))

__all__ = ["COMMAND_R", "COMMAND_R7B", "DEEPSEEK_R1", "DEEPSEEK_V3", "GLM", "GRANITE", "HARMONY", "HERMES", "KIMI",
           "LLAMA3", "MISTRAL_ARGS", "MISTRAL_LIST", "QWEN3_CODER", "CallFormat", "bare_value"]
