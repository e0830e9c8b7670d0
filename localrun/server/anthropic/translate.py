"""Anthropic <-> native: a Messages request into one GenerateRequest, a Done back into a message.

Content blocks map onto the native (OpenAI-shaped) conversation: `text` is content, an assistant's
`tool_use` blocks are its tool calls, a user's `tool_result` blocks are `tool` messages (before the
user's own text, since they answer the previous turn), `thinking` is kept as `reasoning_content` for
templates that render it. `thinking: {type: enabled, budget_tokens}` turns thinking on with a budget;
the answer's thinking comes back as a `thinking` block before the text. Images and documents are
refused: no model here has vision.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from localrun.errors import InvalidRequest
from localrun.native import Done, GenerateRequest, Timings
from localrun.sampling import SamplingParams, given
from localrun.server.anthropic.protocol import CountTokensRequest, Message, MessagesRequest, ToolChoice

BILLING_HEADER = "x-anthropic-billing-header:"
_NATIVE_CHOICE = {"auto": "auto", "any": "required", "none": "none"}


def generate_request(body: MessagesRequest) -> GenerateRequest:
    params = SamplingParams(max_tokens=body.max_tokens, stop=list(body.stop_sequences or []),
                            speculative=body.speculative, **given(body))
    think, budget = thinking(body.thinking)
    return GenerateRequest(model=body.model, messages=conversation(body), tools=tools(body.tools),
                           tool_choice=tool_choice(body.tool_choice), json_schema=output_schema(body),
                           parallel_tool_calls=not (body.tool_choice and body.tool_choice.disable_parallel_tool_use),
                           sampling=params, num_ctx=body.num_ctx, keep_alive=body.keep_alive,
                           think=think, reasoning_budget=budget)


def thinking(config: dict[str, Any] | None) -> tuple[bool | None, int | None]:
    """(think, reasoning budget) from `thinking`: enabled with budget_tokens, disabled, or adaptive
    (thinking on, the model decides how long)."""
    if config is None:
        return None, None
    kind = config.get("type")
    if kind == "disabled":
        return False, None
    if kind == "adaptive":
        return True, None
    budget = config.get("budget_tokens")
    if kind != "enabled" or not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise InvalidRequest('thinking: expected {"type": "enabled", "budget_tokens": N >= 1}, '
                             '{"type": "adaptive"} or {"type": "disabled"}')
    return True, budget


def output_schema(body: MessagesRequest) -> dict[str, Any] | None:
    """Structured output: `output_config.format` (or the beta's `output_format`) as a JSON schema."""
    fmt = (body.output_config or {}).get("format") or body.output_format
    if not fmt:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise InvalidRequest("output_config.format: expected {\"type\": \"json_schema\", \"schema\": {...}}")
    return fmt["schema"]


def conversation(body: CountTokensRequest) -> list[dict[str, Any]]:
    """The native messages: the system prompt first, then each message's blocks translated.

    System-role messages (Claude Code sends its reminders so) join the system prompt while no other
    message came before them; later ones become user text, merged into a neighbouring user turn, since
    most chat templates allow a system message only first and a user turn only after an assistant's."""
    leading = 0
    while leading < len(body.messages) and body.messages[leading].role == "system":
        leading += 1
    system = "\n\n".join(filter(None, [system_text(body.system),
                                       *(_plain_text(m) for m in body.messages[:leading])]))
    messages = [{"role": "system", "content": system}] if system else []
    for message in body.messages[leading:]:
        if message.role == "system":
            messages.append({"role": "user", "content": _plain_text(message), _REMINDER: True})
        else:
            messages += _messages(message)
    return _merged_reminders(messages)


_REMINDER = "_system_reminder"


def _plain_text(message: Message) -> str:
    if isinstance(message.content, str):
        return message.content
    return "\n".join(_text_block(block, "messages") for block in message.content)


def _merged_reminders(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each former system message joined to a plain user turn next to it (the following one first)."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for message in messages:
        plain_user = message.get("role") == "user" and set(message) <= {"role", "content", _REMINDER}
        if message.get(_REMINDER):
            pending.append(message["content"])
            continue
        if pending and plain_user:
            message = {"role": "user", "content": "\n\n".join([*pending, message["content"]])}
        elif pending:
            out.append({"role": "user", "content": "\n\n".join(pending)})
        pending = []
        out.append(message)
    if pending:
        last = out[-1] if out else {}
        if last.get("role") == "user" and set(last) == {"role", "content"}:
            out[-1] = {"role": "user", "content": "\n\n".join([last["content"], *pending])}
        else:
            out.append({"role": "user", "content": "\n\n".join(pending)})
    return out


def system_text(system: str | list[dict[str, Any]] | None) -> str:
    """The system prompt as text (block cache_control ignored), without Claude Code's per-request
    billing-header line, which would change the prompt's first tokens and defeat prefix caching."""
    if isinstance(system, list):
        system = "\n".join(_text_block(block, "system") for block in system)
    text = system or ""
    if text.startswith(BILLING_HEADER):
        text = text.partition("\n")[2].lstrip("\n")
    return text


def _messages(message: Message) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    texts, calls, results, thoughts = [], [], [], []
    for block in message.content:
        kind = block.get("type")
        if kind == "text":
            texts.append(_text_block(block, "messages"))
        elif kind == "tool_use" and message.role == "assistant":
            if not isinstance(block.get("name"), str) or not isinstance(block.get("input", {}), dict):
                raise InvalidRequest("messages: a tool_use block needs a name and an input object")
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block.get("name"), "arguments": block.get("input") or {}}})
        elif kind == "tool_result" and message.role == "user":
            results.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": _result_text(block)})
        elif kind == "thinking":
            thoughts.append(str(block.get("thinking", "")))
        elif kind != "redacted_thinking":
            raise _unsupported(kind)
    own: dict[str, Any] = {"role": message.role, "content": "\n".join(texts)}
    if calls:
        own["tool_calls"] = calls
    if thoughts:
        own["reasoning_content"] = "\n".join(thoughts)
    return results + ([own] if texts or calls or not results else [])


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        content = "\n".join(_text_block(part, "tool_result") for part in content)
    text = str(content or "")
    return f"Error: {text}" if block.get("is_error") else text


def _text_block(block: dict[str, Any], where: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text":
        raise _unsupported(block.get("type") if isinstance(block, dict) else type(block).__name__, where)
    return str(block.get("text", ""))


def _unsupported(kind: Any, where: str = "messages") -> InvalidRequest:
    if kind in ("image", "document"):
        return InvalidRequest(f"{where}: {kind} content is not supported: this model has no vision")
    return InvalidRequest(f"{where}: content block of type {kind!r} is not supported")


def tools(specs: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Client tools in native form. Anthropic's server tools (web search, code execution: a `type`
    and no `input_schema`) run on Anthropic's side, so they are left out; so are tools with
    `defer_loading: true`, which Anthropic keeps out of the model's context until its tool search
    finds them (Claude Code sends a placeholder of that kind with every request)."""
    native = []
    for spec in specs or []:
        server_tool = "input_schema" not in spec and spec.get("type") not in (None, "custom")
        if server_tool or spec.get("defer_loading") is True:
            continue
        if not spec.get("name") or not isinstance(spec.get("input_schema"), dict):
            raise InvalidRequest("tools: each tool needs a name and an input_schema object")
        native.append({"name": spec["name"], "description": spec.get("description", ""),
                       "parameters": spec["input_schema"]})
    return native or None


def tool_choice(choice: ToolChoice | None) -> str | dict[str, Any] | None:
    if choice is None:
        return None
    if choice.type == "tool":
        if not choice.name:
            raise InvalidRequest("tool_choice: type \"tool\" needs a name")
        return {"name": choice.name}
    return _NATIVE_CHOICE[choice.type]


# --- responses -------------------------------------------------------------------------------------

def new_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def message(done: Done, model: str) -> dict[str, Any]:
    thought = [thinking_block(done.reasoning)] if done.reasoning else []
    text = [text_block(done.text)] if done.text else []
    content = thought + text + [tool_use(call) for call in done.tool_calls]
    return {"id": new_id(), "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason(done), "stop_sequence": stop_sequence(done), "usage": usage(done.timings),
            "container": None}


def thinking_block(text: str) -> dict[str, Any]:
    """A thinking block; its signature is empty, since a local model's thinking is not signed."""
    return {"type": "thinking", "thinking": text, "signature": ""}


def tool_use(call: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}


def stop_reason(done: Done) -> str:
    if done.tool_calls:
        return "tool_use"
    if done.finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if stop_sequence(done) else "end_turn"


def stop_sequence(done: Done) -> str | None:
    return done.stop_sequence if done.finish_reason == "stop" and not done.tool_calls else None


def usage(t: Timings) -> dict[str, Any]:
    """Anthropic counts cached prompt tokens apart: input_tokens are the ones evaluated anew. Every
    member the official reference requires is there: no cache writes are billed here, no server tools run."""
    return {"input_tokens": t.prompt_tokens - t.cached_tokens, "output_tokens": t.generated_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": t.cached_tokens,
            "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
            "server_tool_use": None, "service_tier": "standard"}


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "citations": None}


# --- models ---------------------------------------------------------------------------------------

def model_info(name: str, created: datetime | None, context: int = 0) -> dict[str, Any]:
    """A model in Anthropic's ModelInfo shape. `created_at` is when it entered the store (the epoch
    for a model another server answers for, as Anthropic does for an unknown release date);
    `max_input_tokens` is the model's trained context (null when unknown). `capabilities` and
    `max_tokens` are required but nullable, and null here: Anthropic's capability table names its own
    features (batch, citations, code execution, ...), which say nothing true about a local model."""
    when = (created or datetime.fromtimestamp(0, timezone.utc)).astimezone(timezone.utc)
    return {"type": "model", "id": name, "display_name": name, "created_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "lifecycle": "active", "max_input_tokens": context or None, "max_tokens": None, "capabilities": None}


def model_page(infos: list[dict[str, Any]], after_id: str | None, before_id: str | None,
               limit: int) -> dict[str, Any]:
    """One page of Anthropic's model list: `limit` models after `after_id`, or the last `limit` before
    `before_id`, or the first `limit`; `has_more` says whether more lie beyond, in that direction."""
    ids = [info["id"] for info in infos]
    for key, cursor in (("after_id", after_id), ("before_id", before_id)):
        if cursor is not None and cursor not in ids:
            raise InvalidRequest(f"{key}: no model {cursor!r}"[:300], key)
    if before_id is not None:
        end = ids.index(before_id)
        start = max(0, end - limit)
        more = start > 0
    else:
        start = ids.index(after_id) + 1 if after_id is not None else 0
        end = start + limit
        more = end < len(ids)
    page = infos[start:end]
    return {"data": page, "has_more": more, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None}
