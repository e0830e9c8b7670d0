"""The native request as an upstream's OpenAI API body, and the upstream's stream back as native events.

Pure: no I/O, so both directions are table-tested from plain data. Every dialect reaches an upstream
through here, so Anthropic Messages or Ollama clients can drive a server that speaks only OpenAI chat.
The request always streams (`stream_options.include_usage`): a non-streamed answer is collected by the
one generation path like a local one. Knobs OpenAI lacks but vLLM and llama-server read (top_k, min_p,
repeat_penalty) are sent too; servers that do not know them ignore extra fields.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from localrun.native import Delta, Done, Event, GenerateRequest, Timings, TokenLogprob, ToolCall

FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "function_call": "tool_calls"}


def request_body(request: GenerateRequest, model: str) -> tuple[str, dict[str, Any]]:
    """(path under the base URL, JSON body) for `request` sent to `model` upstream."""
    s = request.sampling
    body: dict[str, Any] = {"model": model, "stream": True, "stream_options": {"include_usage": True},
                            "temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k, "min_p": s.min_p,
                            "presence_penalty": s.presence_penalty, "frequency_penalty": s.frequency_penalty}
    optional = {"seed": s.seed, "max_tokens": s.max_tokens, "stop": s.stop or None,
                "n": request.n if request.n > 1 else None,
                "typical_p": s.typical_p if s.typical_p != 1.0 else None,
                "repeat_penalty": s.repeat_penalty if s.repeat_penalty != 1.0 else None,
                "repetition_penalty": s.repeat_penalty if s.repeat_penalty != 1.0 else None}
    body.update({k: v for k, v in optional.items() if v is not None})
    if request.messages is None:
        body.update(prompt=request.prompt or "", echo=request.echo or None)
        if s.logprobs is not None:
            body["logprobs"] = s.logprobs
        return "/completions", {k: v for k, v in body.items() if v is not None}
    body["messages"] = [_message(m) for m in request.messages]
    body.update(_thinking(request))
    if request.tools:
        body["tools"] = [{"type": "function", "function": tool} for tool in request.tools]
        body["tool_choice"] = _tool_choice(request.tool_choice)
        if not request.parallel_tool_calls:
            body["parallel_tool_calls"] = False
    if request.json_schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": request.json_schema}}
    elif request.json_mode:
        body["response_format"] = {"type": "json_object"}
    if s.logprobs is not None:
        body.update(logprobs=True, top_logprobs=s.logprobs)
    return "/chat/completions", {k: v for k, v in body.items() if v is not None}


def _thinking(request: GenerateRequest) -> dict[str, Any]:
    """The thinking switch, effort and budget as vLLM, llama-server and localrun read them: the chat
    template's `enable_thinking`, OpenAI's `reasoning_effort`, llama-server's `reasoning_budget`."""
    fields: dict[str, Any] = {"reasoning_effort": request.reasoning_effort,
                              "reasoning_budget": request.reasoning_budget}
    if request.think is not None:
        fields["chat_template_kwargs"] = {"enable_thinking": request.think}
    return {k: v for k, v in fields.items() if v is not None}


def _message(message: dict[str, Any]) -> dict[str, Any]:
    """A native (template-ready) message in OpenAI's shape: tool-call arguments as a JSON string."""
    out = {k: v for k, v in message.items() if k != "reasoning_content"}
    if message.get("tool_calls"):
        out["tool_calls"] = [_call(call) for call in message["tool_calls"]]
    return out


def _call(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    if not isinstance(function.get("arguments"), str):
        function["arguments"] = json.dumps(function.get("arguments") or {})
    return {"id": call.get("id"), "type": "function", "function": function}


def _tool_choice(choice: str | dict[str, Any] | None) -> Any:
    if isinstance(choice, dict):
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice or "auto"


def sse_data(line: str) -> dict[str, Any] | None:
    """The JSON object of one SSE `data:` line; None for other lines and for the final [DONE]."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if not data or data == "[DONE]":
        return None
    value = json.loads(data)
    return value if isinstance(value, dict) else None


@dataclass(slots=True)
class _Choice:
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish_reason: str | None = None
    stop_sequence: str | None = None
    chunks: int = 0
    thought_chunks: int = 0  # chunks that carried thinking: its token count when usage gives none for it


@dataclass(slots=True)
class StreamReader:
    """Turns an upstream's stream chunks into native events. `feed` returns the text deltas at once
    (nothing is buffered); `finish` returns one Done per choice once the stream ended and its usage
    (which comes last) is known. `first_ms` and `last_ms` are measured by the caller, used when the
    upstream sends no llama-server `timings`."""

    choices: dict[int, _Choice] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):
            self.timings = chunk["timings"]
        events: list[Event] = []
        for item in chunk.get("choices") or []:
            index = int(item.get("index") or 0)
            choice = self.choices.setdefault(index, _Choice())
            delta = item.get("delta") if isinstance(item.get("delta"), dict) else {}
            text = delta.get("content") if "delta" in item else item.get("text")
            thought = delta.get("reasoning_content") or delta.get("reasoning")  # vLLM's newer name
            thought = thought if isinstance(thought, str) else ""
            for call in delta.get("tool_calls") or []:
                _merge_call(choice.calls, call)
            logprobs = _logprobs(item.get("logprobs"))
            if text or thought or logprobs:
                choice.text.append(text or "")
                choice.reasoning.append(thought)
                choice.chunks += 1
                choice.thought_chunks += bool(thought)
                events.append(Delta(index, text or "", logprobs, thought))
            if item.get("finish_reason"):
                choice.finish_reason = item["finish_reason"]
                stop = item.get("stop_reason")
                choice.stop_sequence = stop if isinstance(stop, str) else None
        return events

    def finish(self, first_ms: float, last_ms: float) -> list[Done]:
        done = []
        for index in sorted(self.choices) or [0]:
            choice = self.choices.get(index, _Choice())
            calls = [ToolCall(c["id"] or f"call_{index}_{i}", c["name"], _arguments(c["arguments"]))
                     for i, c in sorted(choice.calls.items())]
            reason = "tool_calls" if calls else FINISH.get(choice.finish_reason or "stop", "stop")
            done.append(Done(index, reason, self._timings(choice, first_ms, last_ms), "".join(choice.text), calls,
                             choice.stop_sequence, reasoning="".join(choice.reasoning)))
        return done

    def _timings(self, choice: _Choice, first_ms: float, last_ms: float) -> Timings:
        u, t = self.usage, self.timings
        details = u.get("prompt_tokens_details") if isinstance(u.get("prompt_tokens_details"), dict) else {}
        answer = u.get("completion_tokens_details") if isinstance(u.get("completion_tokens_details"), dict) else {}
        single = len(self.choices) <= 1  # usage counts all choices together: with several, each its chunks
        thought = answer.get("reasoning_tokens")
        return Timings(
            prompt_tokens=int(u.get("prompt_tokens") or 0),
            cached_tokens=int(details.get("cached_tokens") or t.get("cache_n") or 0),
            prompt_ms=float(t.get("prompt_ms") or first_ms),
            generated_tokens=int(u.get("completion_tokens") or 0) if single and u else choice.chunks,
            generation_ms=float(t.get("predicted_ms") or max(0.0, last_ms - first_ms)),
            reasoning_tokens=thought if single and isinstance(thought, int) else choice.thought_chunks,
        )


def _merge_call(calls: dict[int, dict[str, str]], part: dict[str, Any]) -> None:
    """Streamed tool calls come in pieces: the id and name first, the arguments as string fragments."""
    call = calls.setdefault(int(part.get("index") or 0), {"id": "", "name": "", "arguments": ""})
    function = part.get("function") or {}
    call["id"] = call["id"] or str(part.get("id") or "")
    call["name"] += str(function.get("name") or "")
    arguments = function.get("arguments")
    call["arguments"] += arguments if isinstance(arguments, str) else json.dumps(arguments) if arguments else ""


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _logprobs(data: Any) -> list[TokenLogprob]:
    """Chat logprobs ({"content": [{token, logprob, top_logprobs}]}) or completions logprobs
    ({"tokens", "token_logprobs", "top_logprobs": [{token: logprob}]}) as native ones."""
    if not isinstance(data, dict):
        return []
    if isinstance(data.get("content"), list):
        return [TokenLogprob(e["token"], e.get("logprob"), [(a["token"], a["logprob"]) for a in e.get("top_logprobs") or []])
                for e in data["content"]]
    tops = data.get("top_logprobs") or []
    return [TokenLogprob(token, logprob, list((tops[i] or {}).items()) if i < len(tops) else [])
            for i, (token, logprob) in enumerate(zip(data.get("tokens") or [], data.get("token_logprobs") or []))]


__all__ = ["StreamReader", "request_body", "sse_data"]
