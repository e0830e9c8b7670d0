"""A model family: how its output is split (thinking, answer, tool calls) and how thinking is steered.

`family_for` chooses one from the chat template (and the architecture), because the template is what
writes the markers the model learned: the first rule whose markers the template mentions wins, so
more specific formats come first. Everything else in localrun asks the family, never the model name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection

from localrun.families import call_format, json_calls, token_calls, xml_calls
from localrun.families.call_format import CallFormat
from localrun.families.call_ids import shaped_ids
from localrun.families.harmony import CLOSE_THOUGHT, HarmonySplitter
from localrun.families.pieces import CONTENT, Piece
from localrun.families.thinking import ThinkSplitter
from localrun.native import ToolCall

ParseCalls = Callable[[str, Collection[str] | None], tuple[str, list[ToolCall]]]
THINK_TAGS = ("<think>", "</think>")


def _json(*markers: str) -> ParseCalls:
    return lambda text, names: json_calls.parse_tool_calls(text, names, markers)


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    think: tuple[str, str] | None = None  # the markers around a thought; None: the family does not think
    harmony: bool = False  # gpt-oss: channels instead of think markers
    think_switch: str | None = None  # the template variable that turns thinking on/off (e.g. enable_thinking)
    thinks_by_default: bool = True  # what the switch is set to when a request does not say (Granite: off)
    effort: bool = False  # the template takes reasoning_effort (low/medium/high)
    call_markers: tuple[str, ...] = json_calls.MARKERS  # where a tool call may start (held back while streaming)
    parse_calls: ParseCalls = field(default=_json(*json_calls.MARKERS))
    call_format: CallFormat = call_format.HERMES  # how a forced tool_choice writes its one call
    special_text: bool = False  # its markers are control tokens: the engine must show them as text
    history: str = "reasoning_content"  # how past thinking reaches the template: a message key, or "blocks"
    call_id_length: int = 0  # the length of letters and digits the template insists a tool-call id has (0: any)

    @property
    def thinks(self) -> bool:
        return self.think is not None or self.harmony

    @property
    def call_starts(self) -> tuple[str, ...]:
        """Where a call may start in this family's output: its own markers, and the generic `<tool_call>`
        of localrun's tool prompt, which small models imitate whatever their template."""
        return tuple(dict.fromkeys((*self.call_markers, json_calls.HERMES_OPEN)))

    @property
    def call_formats(self) -> tuple[CallFormat, ...]:
        """The formats a call of this family may come in: its own, and the generic one."""
        return tuple(dict.fromkeys((self.call_format, call_format.HERMES)))

    @property
    def can_stop_thinking(self) -> bool:
        """Whether `think: false` is honoured; gpt-oss, Magistral and QwQ think whatever they are told."""
        return not self.thinks or self.think_switch is not None

    @property
    def close_thought(self) -> str:
        """The text a reasoning budget forces to end a thought, so that the answer follows."""
        if self.harmony:
            return CLOSE_THOUGHT
        return f"\n{self.think[1]}\n\n" if self.think else ""

    def template_vars(self, think: bool | None, effort: str | None) -> dict[str, Any]:
        """What the chat template gets to steer thinking."""
        out: dict[str, Any] = {}
        if self.think_switch:  # set either way: some templates think only when told (DeepSeek R1 as llama.cpp ships it)
            out[self.think_switch] = self.thinks_by_default if think is None else think
        if self.effort and effort:
            out["reasoning_effort"] = effort
        return out

    def splitter(self, prompt: str) -> HarmonySplitter | ThinkSplitter | Plain:
        """A fresh splitter for one choice whose prompt text is `prompt`."""
        if self.harmony:
            return HarmonySplitter()
        if self.think:
            return ThinkSplitter(*self.think, self.opens_thought(prompt))
        return Plain()

    def opens_thought(self, prompt: str) -> bool:
        """Whether `prompt` leaves a thought open, so that the answer begins inside it."""
        return self.think is not None and prompt.rfind(self.think[0]) > prompt.rfind(self.think[1])

    def with_history(self, message: dict[str, Any]) -> dict[str, Any]:
        """A past assistant message with its `reasoning_content` where this family's template reads it."""
        reasoning = message.get("reasoning_content")
        if not reasoning or self.history == "reasoning_content":
            return message
        rest = {k: v for k, v in message.items() if k != "reasoning_content"}
        if self.history == "blocks":  # Magistral: content blocks of type "thinking" and "text"
            return rest | {"content": [{"type": "thinking", "thinking": reasoning},
                                       {"type": "text", "text": message.get("content") or ""}]}
        return rest | {self.history: reasoning}


    def with_call_ids(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The conversation with tool-call ids in the shape the template insists on (Mistral v3: 9 letters
        and digits), the same for a call and its result."""
        return shaped_ids(messages, self.call_id_length) if self.call_id_length else messages


class Plain:
    """The splitter of a family that does not think: everything is answer."""

    thinking = False

    def push(self, text: str) -> list[Piece]:
        return [Piece(CONTENT, text)] if text else []

    def finish(self) -> list[Piece]:
        return []


GENERIC = Family("generic")
_HERMES_CALLS = dict(call_markers=(json_calls.HERMES_OPEN,), parse_calls=_json(json_calls.HERMES_OPEN))
_COMMAND_R = (json_calls.COMMAND_R_OPEN, json_calls.COMMAND_R7B_OPEN)


def _mistral(template: str) -> dict[str, Any]:
    """Mistral's calls; v11+ templates (Devstral, Magistral) write `[TOOL_CALLS]name[ARGS]{...}`, v3 ones
    (Nemo) a JSON list and insist on 9-character call ids."""
    form = call_format.MISTRAL_ARGS if json_calls.MISTRAL_ARGS in template else call_format.MISTRAL_LIST
    return dict(call_markers=(json_calls.MISTRAL_OPEN,), parse_calls=_json(json_calls.MISTRAL_OPEN),
                special_text=True, call_format=form, call_id_length=9 if "length != 9" in template else 0)


# (markers the template must all mention, the family); the first match wins.
RULES: list[tuple[tuple[str, ...], Callable[[str], Family]]] = [
    (("<|channel|>",), lambda t: Family("gpt-oss", harmony=True, effort=True, history="thinking", special_text=True,
                                        call_markers=(), parse_calls=lambda text, names: (text, []),
                                        call_format=call_format.HARMONY)),
    (("[THINK]",), lambda t: Family("magistral", think=("[THINK]", "[/THINK]"), history="blocks", **_mistral(t))),
    (("[TOOL_CALLS]",), lambda t: Family("mistral", **_mistral(t))),
    (("<function=", "<parameter="), lambda t: Family(
        "qwen3-coder", call_markers=xml_calls.QWEN3_CODER_MARKERS, parse_calls=xml_calls.parse_qwen3_coder,
        call_format=call_format.QWEN3_CODER, **_thinking(t))),
    (("<arg_key>",), lambda t: Family("glm", call_markers=xml_calls.GLM_MARKERS, parse_calls=xml_calls.parse_glm,
                                      call_format=call_format.GLM, **_thinking(t))),
    (("tool▁calls▁begin",), lambda t: Family(
        "deepseek", call_markers=token_calls.DEEPSEEK_MARKERS, parse_calls=token_calls.parse_deepseek,
        special_text=True, call_format=call_format.DEEPSEEK_R1 if "```json" in t else call_format.DEEPSEEK_V3,
        **_thinking(t))),
    (("tool_calls_section_begin",), lambda t: Family("kimi-k2", call_markers=token_calls.KIMI_MARKERS,
                                                      parse_calls=token_calls.parse_kimi, special_text=True,
                                                      call_format=call_format.KIMI, **_thinking(t))),
    (("<|tool_call|>",), lambda t: Family("granite", call_markers=(json_calls.GRANITE_OPEN,),
                                          parse_calls=_json(json_calls.GRANITE_OPEN), special_text=True,
                                          call_format=call_format.GRANITE, thinks_by_default=False,
                                          **_thinking(t, switch="thinking"))),
    (("<|START_THINKING|>",), lambda t: Family(
        "command-r", think=("<|START_THINKING|>", "<|END_THINKING|>"), think_switch="enable_thinking",
        call_markers=_COMMAND_R, parse_calls=_json(*_COMMAND_R), special_text=True,
        call_format=call_format.COMMAND_R7B)),
    (("Action:",), lambda t: Family("command-r", call_markers=_COMMAND_R, parse_calls=_json(*_COMMAND_R),
                                    call_format=call_format.COMMAND_R)),
    (("<|python_tag|>",), lambda t: Family("llama3", call_markers=(json_calls.PYTHON_TAG,),
                                           parse_calls=_json(json_calls.PYTHON_TAG), special_text=True,
                                           call_format=call_format.LLAMA3)),
    (("<think>",), lambda t: Family("think", **_HERMES_CALLS, **_thinking(t))),
    (("<tool_call>",), lambda t: Family("hermes", **_HERMES_CALLS)),
]

def _thinking(template: str, switch: str = "enable_thinking") -> dict[str, Any]:
    """`<think>` markers when the template writes them, and its switch when it reads one."""
    if "<think>" not in template:
        return {}
    return {"think": THINK_TAGS, "think_switch": switch if switch in template else None}


def family_for(template: str | None) -> Family:
    """The family whose format this chat template writes (GENERIC when none matches)."""
    text = template or ""
    for markers, make in RULES:
        if all(marker in text for marker in markers):
            return make(text)
    return GENERIC


__all__ = ["GENERIC", "Family", "Plain", "RULES", "THINK_TAGS", "family_for"]
