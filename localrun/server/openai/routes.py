"""OpenAI routes: thin handlers over translate.py and the one generation path."""

from __future__ import annotations

from typing import Any, AsyncIterator, Callable

from fastapi import APIRouter, Request

from localrun.errors import InvalidRequest, LocalrunError
from localrun.native import Delta, Done, TokenLogprob, Usage
from localrun.server import generation, operations
from localrun.server.errors import error_body
from localrun.server.hangup import unless_hung_up
from localrun.server.jsonbody import JSONBodyRoute
from localrun.server.openai import translate as t
from localrun.server.openai.protocol import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from localrun.server.streaming import HOLE, Template, event_stream, sse
from localrun.server.vectors import as_base64, shortened

router = APIRouter(tags=["openai"], route_class=JSONBodyRoute)


def _stream_error(e: LocalrunError) -> str:
    return sse(error_body("openai", e.status, e.message))


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    native = t.chat_request(body)
    manager = request.app.state.manager
    if body.stream:
        gen = await generation.start(manager, native)
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return event_stream(_chat_chunks(gen, body.model, include_usage), _stream_error)
    result = await unless_hung_up(request, generation.collect(manager, native))
    return {
        "id": t.new_id("chatcmpl"), "object": "chat.completion", "created": t.now(), "model": body.model,
        "choices": [_chat_choice(done, result.logprobs.get(done.index), body.logprobs) for done in result.choices],
        "usage": t.usage(result.usage), "timings": result.timings.to_llama_server(),
        "system_fingerprint": "localrun",
    }


def _chat_choice(done: Done, logprobs: Any, wanted: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": done.text or (None if done.tool_calls else ""),
                               "refusal": None, "annotations": []}
    if done.reasoning:
        message["reasoning_content"] = done.reasoning
    if done.tool_calls:
        message["tool_calls"] = t.tool_calls(done)
    return {"index": done.index, "message": message,
            "logprobs": t.chat_logprobs(logprobs or []) if wanted else None, "finish_reason": t.finish_reason(done)}


def _usage_fields(done: list[Done]) -> dict[str, Any]:
    """What the final chunk of a stream with include_usage carries: usage, plus llama-server timings."""
    return {"usage": t.usage(Usage.of(done)), "timings": done[-1].timings.to_llama_server()}


async def _chat_chunks(gen: generation.Generation, model: str, include_usage: bool) -> AsyncIterator[str]:
    cid, created = t.new_id("chatcmpl"), t.now()

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        return sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "system_fingerprint": "localrun", "choices": choices, **extra})

    text_chunk = _text_chunks(chunk, lambda index, text: {"index": index, "delta": {"content": text},
                                                          "logprobs": None, "finish_reason": None})
    started: set[int] = set()
    done: list[Done] = []
    async for event in gen:
        if isinstance(event, Delta) and not event.logprobs and not event.reasoning and event.index in started:
            yield text_chunk(event.index, event.text)  # the common case, rendered cheaply
            continue
        delta: dict[str, Any] = {} if event.index in started else {"role": "assistant", "content": ""}
        started.add(event.index)
        if isinstance(event, Delta):
            if event.reasoning:
                delta["reasoning_content"] = event.reasoning
            if event.text or not event.reasoning:
                delta["content"] = event.text
            logprobs = t.chat_logprobs(event.logprobs) if event.logprobs else None
            yield chunk([{"index": event.index, "delta": delta, "logprobs": logprobs, "finish_reason": None}])
            continue
        for piece in t.tool_call_deltas(event):
            yield chunk([{"index": event.index, "delta": delta | {"tool_calls": [piece]}, "logprobs": None,
                          "finish_reason": None}])
            delta = {}
        done.append(event)
        yield chunk([{"index": event.index, "delta": delta, "logprobs": None, "finish_reason": t.finish_reason(event)}])
    if include_usage and done:
        yield chunk([], **_usage_fields(done))
    yield sse("[DONE]")


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Any:
    native = t.completion_request(body)
    manager = request.app.state.manager
    echoed = (await operations.prompt_logprobs(manager, body.model, native.prompt, body.logprobs, body.num_ctx,
                                               body.keep_alive)
              if body.echo and body.logprobs is not None else [])
    if body.stream:
        gen = await generation.start(manager, native)
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        echo = native.prompt if body.echo else None
        return event_stream(_completion_chunks(gen, body, include_usage, echo, echoed), _stream_error)
    if echoed and body.max_tokens == 0:  # only the prompt's log-likelihood, as evaluation harnesses ask
        return _completion(body, [{"text": native.prompt, "index": 0, "finish_reason": "length",
                                   "logprobs": t.completion_logprobs(echoed)}], Usage(prompt_tokens=len(echoed)))
    result = await unless_hung_up(request, generation.collect(manager, native))
    prefix = native.prompt if body.echo else ""
    choices = [{
        "text": prefix + done.text, "index": done.index, "finish_reason": t.finish_reason(done),
        "logprobs": (t.completion_logprobs(echoed + result.logprobs.get(done.index, []))
                     if body.logprobs is not None else None),
    } for done in result.choices]
    return _completion(body, choices, result.usage, timings=result.timings.to_llama_server())


def _completion(body: CompletionRequest, choices: list[dict[str, Any]], usage: Usage, **extra: Any) -> dict[str, Any]:
    return {"id": t.new_id("cmpl"), "object": "text_completion", "created": t.now(), "model": body.model,
            "choices": choices, "usage": t.usage(usage), **extra}


async def _completion_chunks(gen: generation.Generation, body: CompletionRequest, include_usage: bool,
                             echo: str | None, echoed: list[TokenLogprob]) -> AsyncIterator[str]:
    """Text chunks as they come; with `echo`, each choice starts with the prompt (and, when logprobs
    are asked for, the prompt tokens' log-probabilities), as OpenAI streams an echoed completion."""
    cid, created = t.new_id("cmpl"), t.now()

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        return sse({"id": cid, "object": "text_completion", "created": created, "model": body.model,
                    "choices": choices, **extra})

    if echo is not None:
        logprobs = t.completion_logprobs(echoed) if body.logprobs is not None else None
        for index in range(body.n):
            yield chunk([{"text": echo, "index": index, "logprobs": logprobs, "finish_reason": None}])

    text_chunk = _text_chunks(chunk, lambda index, text: {"text": text, "index": index, "logprobs": None,
                                                          "finish_reason": None})
    done: list[Done] = []
    async for event in gen:
        if isinstance(event, Delta) and body.logprobs is None:
            yield text_chunk(event.index, event.text)  # the common case, rendered cheaply
            continue
        if isinstance(event, Delta):
            logprobs = t.completion_logprobs(event.logprobs)
            yield chunk([{"text": event.text, "index": event.index, "logprobs": logprobs, "finish_reason": None}])
            continue
        done.append(event)
        yield chunk([{"text": "", "index": event.index, "logprobs": None, "finish_reason": t.finish_reason(event)}])
    if include_usage and done:
        yield chunk([], **_usage_fields(done))
    yield sse("[DONE]")


def _text_chunks(chunk: Callable[..., str], choice: Callable[[int, str], dict[str, Any]]) -> Callable[[int, str], str]:
    """`chunk([choice(index, text)])` for a plain text delta, with the chunk rendered once per choice
    index (a Template): a streamed token costs one string escape, not a whole chunk's dump."""
    templates: dict[int, Template] = {}

    def render(index: int, text: str) -> str:
        template = templates.get(index)
        if template is None:
            template = templates[index] = Template(chunk([choice(index, HOLE)]))
        return template(text)

    return render


@router.post("/v1/embeddings")
async def embeddings(body: EmbeddingRequest, request: Request) -> Any:
    inputs = [body.input] if isinstance(body.input, str) else body.input
    if not inputs or not all(isinstance(i, str) for i in inputs):
        raise InvalidRequest("input: send a string or a non-empty list of strings (token arrays are not supported)")
    answer = await operations.embed(request.app.state.manager, body.model, inputs, body.truncate)
    vectors = shortened(answer.embeddings, body.dimensions)
    encode = as_base64 if body.encoding_format == "base64" else (lambda vector: vector)
    return {"object": "list", "model": body.model,
            "data": [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": answer.prompt_tokens, "total_tokens": answer.prompt_tokens}}
