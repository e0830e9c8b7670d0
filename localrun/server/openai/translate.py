"""OpenAI <-> native: requests into one GenerateRequest, events back into OpenAI's JSON shapes."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from localrun.errors import InvalidRequest
from localrun.native import Done, GenerateRequest, TokenLogprob, Usage, thinking
from localrun.sampling import SamplingParams, given
from localrun.server.messages import normalize_messages, tool_definition
from localrun.server.openai.protocol import ChatCompletionRequest, CompletionRequest, SamplingFields


def sampling(body: SamplingFields, max_tokens: int | None, logprobs: int | None) -> SamplingParams:
    """The request's values; what it leaves unset stays None for the precedence (server/defaults.py)."""
    params = SamplingParams(max_tokens=max_tokens, logprobs=logprobs, seed=body.seed, ignore_eos=body.ignore_eos,
                            speculative=body.speculative, **given(body))
    params.stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    params.logit_bias = _logit_bias(body.logit_bias)
    return params


def _logit_bias(bias: dict[str, float] | None) -> dict[int, float]:
    try:
        return {int(token): float(value) for token, value in (bias or {}).items()}
    except ValueError:
        raise InvalidRequest("logit_bias keys must be token ids") from None


def chat_request(body: ChatCompletionRequest) -> GenerateRequest:
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    request = GenerateRequest(
        model=body.model, messages=normalize_messages(body.messages),
        sampling=sampling(body, max_tokens, (body.top_logprobs or 0) if body.logprobs else None),
        n=body.n, num_ctx=body.num_ctx, keep_alive=body.keep_alive,
        tools=[tool_definition(t) for t in body.tools] if body.tools else None, tool_choice=_tool_choice(body.tool_choice),
        parallel_tool_calls=body.parallel_tool_calls, reasoning_budget=body.reasoning_budget,
    )
    request.think, request.reasoning_effort = _thinking(body)
    fmt = body.response_format
    if fmt is not None and fmt.type == "json_object":
        request.json_mode = True
    elif fmt is not None and fmt.type == "json_schema":
        schema = (fmt.json_schema or {}).get("schema")
        if not isinstance(schema, dict):
            raise InvalidRequest("response_format.json_schema.schema must be a JSON schema object")
        request.json_schema = schema
    return request


def _thinking(body: ChatCompletionRequest) -> tuple[bool | None, str | None]:
    """reasoning_effort, or llama-server's chat_template_kwargs (enable_thinking, reasoning_effort)."""
    kwargs = body.chat_template_kwargs or {}
    effort = body.reasoning_effort or kwargs.get("reasoning_effort")
    think, effort = thinking(effort, "reasoning_effort")
    switch = kwargs.get("enable_thinking")
    return (switch if isinstance(switch, bool) else think), effort


def completion_request(body: CompletionRequest) -> GenerateRequest:
    if body.suffix:  # as vLLM: refused, never dropped (an editor would get text written for no suffix)
        raise InvalidRequest("suffix: fill-in-the-middle is not supported", param="suffix")
    if isinstance(body.prompt, list):
        if len(body.prompt) != 1:
            raise InvalidRequest("prompt: send one prompt per request (arrays of several prompts are not supported)")
        prompt = body.prompt[0]
    else:
        prompt = body.prompt
    return GenerateRequest(
        model=body.model, prompt=prompt, sampling=sampling(body, body.max_tokens, body.logprobs),
        n=body.n, echo=body.echo, num_ctx=body.num_ctx, keep_alive=body.keep_alive,
    )


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise InvalidRequest("tool_choice: expected {\"type\": \"function\", \"function\": {\"name\": ...}}")
        return {"name": name}
    return choice


# --- responses -------------------------------------------------------------------------------------

def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def usage(u: Usage) -> dict[str, Any]:
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens, "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens}}


def tool_calls(done: Done) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in done.tool_calls]


def tool_call_deltas(done: Done) -> list[dict[str, Any]]:
    """A stream's tool calls as OpenAI sends them: each call opens with its own index, id and name,
    then its arguments follow as a delta (clients concatenate them per index)."""
    out = []
    for index, call in enumerate(tool_calls(done)):
        function = call["function"]
        out.append({"index": index, "id": call["id"], "type": "function",
                    "function": {"name": function["name"], "arguments": ""}})
        out.append({"index": index, "function": {"arguments": function["arguments"]}})
    return out


def chat_logprobs(items: list[TokenLogprob]) -> dict[str, Any]:
    def entry(token: str, logprob: float, raw: list[int] | None = None) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode()) if raw is None else raw}

    return {"content": [{**entry(i.token, i.logprob, i.raw), "top_logprobs": [entry(*alt) for alt in i.top]}
                        for i in items], "refusal": None}


def completion_logprobs(items: list[TokenLogprob], offset: int = 0) -> dict[str, Any]:
    offsets, position = [], offset
    for item in items:
        offsets.append(position)
        position += len(item.token)
    return {"tokens": [i.token for i in items], "token_logprobs": [i.logprob for i in items],
            "top_logprobs": [{alt[0]: alt[1] for alt in i.top} if i.logprob is not None else None for i in items],
            "text_offset": offsets}


def finish_reason(done: Done) -> str:
    return "tool_calls" if done.tool_calls else ("length" if done.finish_reason == "length" else "stop")


def model(m: Any) -> dict[str, Any]:
    """A model of the store in OpenAI's Model shape."""
    return {"id": m.name, "object": "model", "created": int(m.modified.timestamp()), "owned_by": "localrun"}


def upstream_model(m: Any) -> dict[str, Any]:
    """A model another server answers for: `owned_by` and `backend` say which backend(s) of backends.toml."""
    return {"id": m.name, "object": "model", "created": 0, "owned_by": f"backend:{','.join(m.backends)}",
            "backend": ",".join(m.backends)}
