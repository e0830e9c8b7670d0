"""From a native request to what the engine runs: prompt tokens and a grammar.

Chat requests go through the model's chat template; completion prompts are used as written.
Templates usually write the BOS token themselves, so it is only added when the text lacks it.
Tools reach the template when it knows them, else as localrun's generic tool prompt (see
localrun.tools.prompt); a required or named tool_choice becomes a grammar that forces one call, written in the
family's own format, and under "auto" a call the model starts is held to the same grammar (a lazy one).
A conversation that ends with an assistant message is a prefill: the model continues that message
(Anthropic's prefill, Ollama's and llama-server's continuation) instead of starting a new turn.
The model's family (localrun.families) steers thinking through the template's own variables and puts
past thinking where its template reads it.
"""

from __future__ import annotations

from localrun.engine import Engine, schema_to_grammar
from localrun.errors import InvalidRequest
from localrun.families import GENERIC, Family
from localrun.native import GenerateRequest
from localrun.tools import active_tools, lazy_call_grammar, prepare_messages, tool_call_grammar
from localrun.tools.bounds import MAX_GRAMMAR_CHARS
from localrun.tools.schema import check_supported, normalized


def build_prompt(engine: Engine, request: GenerateRequest, family: Family = GENERIC) -> list[int]:
    return build_chat(engine, request, family)[1]


def build_chat(engine: Engine, request: GenerateRequest, family: Family) -> tuple[str, list[int]]:
    """(the prompt text, its tokens); the text tells the family's parser whether a thought is open."""
    if request.messages is None:
        text = request.prompt or ""
        return text, engine.tokenize(text, add_special=True, parse_special=True)
    tools = active_tools(request.tools, request.tool_choice)
    history = family.with_call_ids([family.with_history(m) if m.get("role") == "assistant" else m
                                    for m in request.messages])
    template = request.template or engine.model.chat_template()
    messages, template_tools = prepare_messages(history, tools, template)
    prefill = _prefill(messages)
    think = False if request.reasoning_budget == 0 or _constrained(request) else request.think
    text = engine.render_chat(messages, tools=template_tools, add_generation_prompt=prefill is None, template=template,
                              **family.template_vars(think, request.reasoning_effort))
    if prefill is not None:
        text = _continuing(text, prefill)
    bos = engine.info.get("bos_token") or ""
    return text, engine.tokenize(text, add_special=not (bos and text.startswith(bos)), parse_special=True)


def _constrained(request: GenerateRequest) -> bool:
    """A grammar shapes the output from its first token, so there is no room for a thought: thinking
    goes off (where the family can turn it off) for forced tool calls and structured output."""
    forced = request.tool_choice not in (None, "none", "auto") and bool(request.tools)
    return forced or request.json_schema is not None or request.json_mode


def _prefill(messages: list[dict]) -> str | None:
    """The text of a final assistant message the answer should continue, if the conversation ends on one."""
    last = messages[-1] if messages else {}
    content = last.get("content")
    if last.get("role") != "assistant" or last.get("tool_calls") or not isinstance(content, str) or not content.strip():
        return None
    return content


def _continuing(rendered: str, prefill: str) -> str:
    """The rendered conversation cut right after the prefill, so nothing closes the assistant's turn.

    As Hugging Face's `continue_final_message`: the template may strip the message's outer
    whitespace, so the stripped text is looked for when the exact one is missing.
    """
    for text in (prefill, prefill.strip()):
        at = rendered.rfind(text)
        if at >= 0:
            return rendered[:at + len(text)]
    raise InvalidRequest("the chat template does not write the final assistant message, so it cannot be continued")


def build_grammar(request: GenerateRequest, family: Family = GENERIC, prompt: str = "") -> tuple[str, list[str]] | None:
    """(the GBNF grammar that shapes the output, the patterns that wake it), or None for free text.

    A forced call (in the family's own format) or structured output holds the whole answer: no
    triggers, and one larger than MAX_GRAMMAR_CHARS is refused before llama.cpp parses it
    (tools/bounds.py says why). Offered tools under tool_choice auto get a lazy grammar that wakes
    when the model starts a call outside a thought (`prompt`, the rendered text, says whether one is
    open), unless the request brings a grammar of its own; one too large is left out, since the answer
    works without it."""
    grammar = _grammar(request, family)
    if grammar is not None:
        if len(grammar) > MAX_GRAMMAR_CHARS:
            raise InvalidRequest(f"JSON schema too costly to enforce: its grammar is {len(grammar)} characters; "
                                 f"at most {MAX_GRAMMAR_CHARS} are accepted")
        return grammar, []
    if request.sampling.grammar is not None or request.messages is None:
        return None
    lazy = lazy_call_grammar(active_tools(request.tools, request.tool_choice), request.tool_choice,
                             family.call_formats, family.call_starts, family.think, family.opens_thought(prompt),
                             several=request.parallel_tool_calls)
    return lazy if lazy is not None and len(lazy[0]) <= MAX_GRAMMAR_CHARS else None


def _grammar(request: GenerateRequest, family: Family) -> str | None:
    forced = tool_call_grammar(active_tools(request.tools, request.tool_choice), request.tool_choice,
                               family.call_format)
    if forced is not None:
        return forced
    if request.json_schema is not None:
        schema = normalized(request.json_schema)
        check_supported(schema)
        return schema_to_grammar(schema)
    if request.json_mode:
        return schema_to_grammar({"type": "object"})
    return None
