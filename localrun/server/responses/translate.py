"""Responses <-> native: input items into one GenerateRequest, a Done back into output items.

Input items become OpenAI chat messages, which `server/messages.normalize_message` then checks
and turns into the native conversation (one home for content and tool-call rules):

    message (user/system/developer/assistant)   its text parts joined; images and files refused
    function_call                               a tool call of the assistant message it follows
    function_call_output                        a `tool` message (named after the call it answers)
    reasoning                                   `reasoning_content` of the next assistant message (its
                                                summary and reasoning_text joined), which the model
                                                family puts where its template reads past thinking

`instructions` is the system message in front; a previous response's instructions are not carried
over, as OpenAI documents. Tools of any type but `function` (web_search, local_shell, namespaces,
custom tools: Codex sends them) run on OpenAI's side or need a grammar of their own, so they are
left out, as llama-server and Ollama do.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from localrun.errors import InvalidRequest
from localrun.native import SWITCHES, Done, GenerateRequest, Timings
from localrun.sampling import SamplingParams, given
from localrun.server.messages import normalize_message
from localrun.server.responses.protocol import Reasoning, ResponsesRequest

_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def input_items(body: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's input as a list of items (a string is one user message)."""
    if isinstance(body.input, str):
        return [{"type": "message", "role": "user", "content": body.input}]
    return body.input


def generate_request(body: ResponsesRequest, items: list[dict[str, Any]]) -> GenerateRequest:
    """The native request for `items`, the whole conversation (earlier responses' items included)."""
    params = SamplingParams(max_tokens=body.max_output_tokens, seed=body.seed, speculative=body.speculative,
                            **given(body))
    functions = tools(body.tools)
    request = GenerateRequest(model=body.model, messages=conversation(body.instructions, items), tools=functions,
                              tool_choice=tool_choice(body.tool_choice) if functions else None,
                              parallel_tool_calls=body.parallel_tool_calls,
                              sampling=params, num_ctx=body.num_ctx, keep_alive=body.keep_alive,
                              reasoning_budget=body.reasoning_budget)
    request.think, request.reasoning_effort = effort_switch(body.reasoning)
    fmt = body.text.format if body.text else None
    if fmt is not None and fmt.type == "json_object":
        request.json_mode = True
    elif fmt is not None and fmt.type == "json_schema":
        if not isinstance(fmt.schema_, dict):
            raise InvalidRequest("text.format.schema must be a JSON schema object", "text.format.schema")
        request.json_schema = fmt.schema_
    return request


def effort_switch(reasoning: Reasoning | None) -> tuple[bool | None, str | None]:
    """`reasoning.effort` on the family's switch, as chat's `reasoning_effort` (native.SWITCHES). An
    effort name this server does not know yet leaves thinking to the model: Codex sends whatever its
    model catalogue says, and a refused name would fail every turn."""
    effort = reasoning.effort if reasoning else None
    return SWITCHES.get(effort, (None, None)) if effort else (None, None)


def conversation(instructions: str | None, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    chat: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    names: dict[str, str] = {}  # call_id -> function name, for the tool message that answers it
    reasoning: list[str] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"{where} must be an object", where)
        kind = item.get("type", "message")
        if kind == "message":
            chat.append({"role": item.get("role"), "content": _text(item.get("content"), where)})
        elif kind == "function_call":
            names[str(item.get("call_id"))] = str(item.get("name"))
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"}}
            if not chat or chat[-1]["role"] != "assistant":
                chat.append({"role": "assistant", "content": ""})
            chat[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            call_id = str(item.get("call_id"))
            chat.append({"role": "tool", "tool_call_id": call_id, "name": names.get(call_id),
                         "content": _text(item.get("output"), where)})
        elif kind == "reasoning":
            reasoning += [_text(item.get(key) or [], where) for key in ("summary", "content")]
            continue
        else:
            raise InvalidRequest(f"{where}: input items of type {kind!r} are not supported"[:300], where)
        if reasoning and chat[-1]["role"] == "assistant":
            chat[-1]["reasoning_content"] = "\n".join(r for r in reasoning if r)
            reasoning = []
    return [_normalized(message) for message in chat]


def _normalized(message: dict[str, Any]) -> dict[str, Any]:
    out = normalize_message(message)
    if message.get("reasoning_content"):
        out["reasoning_content"] = message["reasoning_content"]
    return out


def _text(content: Any, where: str) -> str:
    """A message's (or a call output's) text: a string, or text parts joined."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}.content must be a string or a list of parts", f"{where}.content")
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "refusal":
            texts.append(str(part.get("refusal", "")))
        elif kind in _TEXT_PARTS and isinstance(part.get("text", ""), str):
            texts.append(part.get("text", ""))
        elif kind in ("input_image", "input_file", "input_audio"):
            raise InvalidRequest(f"{where}.content: {kind} is not supported: this model reads text only", f"{where}.content")
        else:
            raise InvalidRequest(f"{where}.content: a part of type {kind!r} is not supported"[:300], f"{where}.content")
    return "".join(texts)


def tools(specs: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    native = []
    for i, spec in enumerate(specs or []):
        if not isinstance(spec, dict) or spec.get("type") != "function":
            continue  # hosted and custom tools: see the module docstring
        if not isinstance(spec.get("name"), str) or not spec["name"]:
            raise InvalidRequest(f"tools[{i}]: a function tool needs a name", f"tools[{i}].name")
        native.append({"name": spec["name"], "description": spec.get("description") or "",
                       "parameters": spec.get("parameters") or {"type": "object", "properties": {}}})
    return native or None


def tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """none/auto/required as they are; a named function; allowed_tools by its mode. A hosted tool
    (which is left out) chosen by type leaves the choice to the model."""
    if not isinstance(choice, dict):
        return choice
    if choice.get("type") == "function":
        if not isinstance(choice.get("name"), str) or not choice["name"]:
            raise InvalidRequest('tool_choice: expected {"type": "function", "name": ...}')
        return {"name": choice["name"]}
    if choice.get("type") == "allowed_tools" and choice.get("mode") in ("auto", "required"):
        return choice["mode"]
    return "auto"


# --- responses -------------------------------------------------------------------------------------

def now() -> int:
    return int(time.time())


def message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant",
            "content": [output_text(text)] if status != "in_progress" else []}


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    """The thought as it was generated (reasoning_text), as OpenAI's open-weight models report it;
    there is no summary, and nothing is encrypted."""
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [], "encrypted_content": None,
            "content": [reasoning_text(text)] if status != "in_progress" else []}


def reasoning_text(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}


def call_item(item_id: str, call: Any, status: str) -> dict[str, Any]:
    arguments = json.dumps(call.arguments) if status != "in_progress" else ""
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call.id, "name": call.name,
            "arguments": arguments}


def output(done: Done) -> list[dict[str, Any]]:
    """The reasoning, the message, the calls, in the order they were generated. The last item is
    incomplete when the answer was cut; an answer with nothing at all is an empty message."""
    found = done.tool_calls
    items = []
    if done.reasoning:
        last = not (done.text or found)
        items.append(reasoning_item(new_id("rs"), done.reasoning, item_status(done) if last else "completed"))
    if done.text or not (found or done.reasoning):
        items.append(message_item(new_id("msg"), done.text, item_status(done)))
    return items + [call_item(new_id("fc"), call, "completed") for call in found]


def item_status(done: Done) -> str:
    return "incomplete" if status(done) == "incomplete" else "completed"


def status(done: Done) -> str:
    return "incomplete" if done.finish_reason == "length" and not done.tool_calls else "completed"


def usage(t: Timings) -> dict[str, Any]:
    """OpenAI counts cached tokens inside input_tokens (Anthropic counts them apart)."""
    return {"input_tokens": t.prompt_tokens,
            "input_tokens_details": {"cached_tokens": t.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": t.generated_tokens, "output_tokens_details": {"reasoning_tokens": t.reasoning_tokens},
            "total_tokens": t.prompt_tokens + t.generated_tokens}


def response(body: ResponsesRequest, native: GenerateRequest, response_id: str, created: int) -> dict[str, Any]:
    """The response object before anything is generated (status in_progress); `finish` completes it."""
    fmt = body.text.format if body.text and body.text.format else None
    text_format: dict[str, Any] = {"type": "text"}
    if fmt is not None:
        text_format = fmt.model_dump(by_alias=True, exclude_none=True, include={"type", "name", "schema_", "strict"})
    return {
        "id": response_id, "object": "response", "created_at": created, "status": "in_progress",
        "completed_at": None, "error": None, "incomplete_details": None, "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens, "model": body.model, "output": [],
        "parallel_tool_calls": body.parallel_tool_calls, "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None,
                      "summary": body.reasoning.summary if body.reasoning else None},
        "store": body.store, "temperature": native.sampling.temperature, "top_p": native.sampling.top_p,
        "text": {"format": text_format}, "tool_choice": _echo_choice(native.tool_choice),
        "tools": [_echo_tool(tool) for tool in native.tools or []], "truncation": body.truncation or "disabled",
        "metadata": body.metadata or {}, "background": False, "service_tier": "default",
    } | ({"user": body.user} if body.user is not None else {})


def finish(resp: dict[str, Any], output_items: list[dict[str, Any]], done: Done) -> dict[str, Any]:
    state = status(done)
    resp.update(status=state, output=output_items, usage=usage(done.timings),
                completed_at=now() if state == "completed" else None,
                incomplete_details={"reason": "max_output_tokens"} if state == "incomplete" else None)
    return resp


def fail(resp: dict[str, Any], status_code: int, message: str) -> dict[str, Any]:
    resp.update(status="failed", error={"code": error_code(status_code), "message": message})
    return resp


def error_code(status_code: int) -> str:
    """A ResponseErrorCode for an HTTP status (the Responses API's codes are few)."""
    return {400: "invalid_prompt", 429: "rate_limit_exceeded", 503: "rate_limit_exceeded"}.get(status_code,
                                                                                               "server_error")


def _echo_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any]:
    if isinstance(choice, dict):
        return {"type": "function", "name": choice["name"]}
    return choice or "auto"


def _echo_tool(tool: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "name": tool["name"], "description": tool["description"],
            "parameters": tool["parameters"], "strict": False}
