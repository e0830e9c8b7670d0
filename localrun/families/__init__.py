"""Model families: what a model's output means, chosen from its chat template.

    family.py       `Family` (thinking markers and switch, call format, special-token text) and `family_for`
    parser.py       `OutputParser`: one choice's streamed text -> thinking, answer text, tool calls
    call_format.py  how the family writes one call: what a forced tool_choice's grammar writes
    call_ids.py     tool-call ids in the shape a template insists on (Mistral v3: 9 letters and digits)
    pieces.py       what the splitters produce
    thinking.py     thinking between markers: <think>…</think>, [THINK]…[/THINK], <|START_THINKING|>
    harmony.py      gpt-oss's channels: analysis (thinking), final (answer), to=functions.NAME (calls)
    json_calls.py   JSON calls: Hermes/Qwen/SmolLM3, Mistral, Granite, Llama 3, Command R, bare JSON
    xml_calls.py    argument-per-tag calls: Qwen3-Coder, GLM 4.x
    token_calls.py  calls framed by special tokens: DeepSeek, Kimi K2
    holdback.py     streamed text that may be a call is held back until it can be parsed

The runner owns one `OutputParser` per choice and sends native `Delta`s (text, reasoning) and a
`Done` with the calls; dialects map those to their wire shapes. Pure: no engine, no server.
"""

from localrun.families.family import GENERIC, Family, family_for
from localrun.families.holdback import CallHoldback
from localrun.families.json_calls import parse_tool_calls
from localrun.families.parser import OutputParser

__all__ = ["GENERIC", "CallHoldback", "Family", "OutputParser", "family_for", "parse_tool_calls"]
