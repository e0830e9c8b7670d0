"""Ollama routes: thin handlers over translate.py, the store, the model manager and the one
generation path. Streams are NDJSON; an error after the first line arrives as a final
{"error": ...} line, which the official clients raise as ResponseError."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Any, AsyncIterator, Awaitable, Callable

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from localrun import __version__
from localrun.api_types import RunningModel
from localrun.durations import parse_duration
from localrun.errors import DiskFull, DownloadError, InvalidRequest, LocalrunError, SourceRefused
from localrun.native import Delta, Done, GenerateRequest as NativeRequest
from localrun.ops import Embeddings, Health
from localrun.server import generation, operations
from localrun.server.hangup import unless_hung_up
from localrun.server.jsonbody import JSONBodyRoute
from localrun.server.manager import Loaded, ModelManager
from localrun.server.ollama import translate as t
from localrun.server.ollama.protocol import (
    ChatRequest, CopyRequest, CreateRequest, EmbeddingsRequest, EmbedRequest, GenerateRequest, ModelRequest,
    PullRequest, ShowRequest,
)
from localrun.server.streaming import ndjson, ndjson_stream
from localrun.server.vectors import shortened
from localrun.store import PullProgress, parse_reference

router = APIRouter(tags=["ollama"], route_class=JSONBodyRoute)
log = logging.getLogger("localrun.server")

FOREVER = datetime(2318, 1, 1, tzinfo=timezone.utc)  # what Ollama shows for keep_alive < 0
PROGRESS_EVERY_S = 0.1

Body = GenerateRequest | ChatRequest
Piece = Callable[[str, str, str], dict[str, Any]]
Final = Callable[[str, Done, int, str, str], dict[str, Any]]


def _stream_error(e: LocalrunError) -> str:
    return ndjson({"error": e.message})


RUNNING = "localrun is running"  # Ollama's "Ollama is running": what clients probe the root URL for


@router.api_route("/", methods=["GET", "HEAD"], response_class=PlainTextResponse)
async def root() -> str:
    return RUNNING


@router.get("/api/version")
async def version() -> dict[str, str]:
    return {"version": __version__}


# --- models ------------------------------------------------------------------------------------

@router.get("/api/tags")
async def tags(request: Request) -> dict[str, Any]:
    models = await asyncio.to_thread(request.app.state.store.list)
    upstreams = request.app.state.manager.upstreams
    remote = [t.upstream_tag(m) for m in upstreams.models()] if upstreams else []
    return {"models": [listed.to_dict() for listed in [*map(t.tag, models), *remote]]}


@router.post("/api/show")
async def show(body: ShowRequest, request: Request) -> dict[str, Any]:
    route = await request.app.state.manager.upstream(body.model)
    if route is not None:
        return t.upstream_show(route.model).to_dict()
    store = request.app.state.store
    model = await asyncio.to_thread(store.resolve, body.model)
    return t.show(model, await asyncio.to_thread(store.show, body.model)).to_dict()


@router.post("/api/pull")
async def pull(body: PullRequest, request: Request) -> Any:
    store = request.app.state.store
    if parse_reference(body.model).kind == "path":  # malformed names fail here too, before any line streams
        # An HTTP client must not make the daemon read arbitrary files from its disk into the store.
        raise InvalidRequest("pull over HTTP takes a model name, hf.co/... reference or URL, not a local path; "
                             "use `localrun pull PATH` on the daemon's machine")
    if not body.stream:
        await asyncio.to_thread(_pull, store, body.model)
        return {"status": "success"}
    return ndjson_stream(_progress(lambda emit: _pull(store, body.model, emit)), _stream_error)


def _pull(store: Any, ref: str, progress: Callable[[PullProgress], None] | None = None) -> None:
    """Pull for an HTTP client. A URL's failure is one generic message whatever the cause, so that
    /api/pull cannot tell a prober a closed port from a web server or a file that is not GGUF."""
    try:
        store.pull(ref, progress=progress)
    except (SourceRefused, DiskFull):
        raise
    except LocalrunError as e:
        if parse_reference(ref).kind != "url":
            raise
        log.info("pull of %s failed: %s", ref, e.message)
        raise DownloadError(f"cannot download a GGUF model from {ref} (not found, unreachable, or not a GGUF "
                            "file)") from None


async def _progress(work: Callable[[Callable[[PullProgress], None]], Any]) -> AsyncIterator[str]:
    """Run a (synchronous) store change, `work(emit)`, in a worker thread and forward its progress as
    NDJSON lines.

    If the client goes away, the work carries on to its end in the thread (a blocking download
    cannot be interrupted from here), so the model is there for the next request anyway."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[PullProgress | None] = asyncio.Queue()
    sent = [0.0]

    def emit(event: PullProgress) -> None:  # byte counts at most every PROGRESS_EVERY_S, steps always
        now = time.monotonic()
        if 0 < event.completed < event.total and now - sent[0] < PROGRESS_EVERY_S:
            return
        sent[0] = now
        loop.call_soon_threadsafe(queue.put_nowait, event)

    def finished(future: asyncio.Future[Any]) -> None:  # runs after every emit already queued
        future.exception()  # seen, even when the client left before it could be told
        queue.put_nowait(None)

    task = asyncio.ensure_future(asyncio.to_thread(work, emit))
    task.add_done_callback(finished)
    while (event := await queue.get()) is not None:
        yield ndjson(event.to_dict())
    task.result()  # the work's error, if any, becomes the final {"error": ...} line


@router.delete("/api/delete")
async def delete(body: ModelRequest, request: Request) -> Response:
    """Remove the model and unload its runner: at once when idle, else when its requests in flight
    finish (Ollama's expiry; nothing is cut off). Its blob may stay open until then, which is fine."""
    store = request.app.state.store
    try:
        digest = (await asyncio.to_thread(store.resolve, body.model)).digest
    except LocalrunError:  # not present (remove says so) or a linked file gone (so never loaded)
        digest = None
    still_used_by = await asyncio.to_thread(store.remove, body.model)
    if digest is not None and not still_used_by:  # another name for the same file keeps its runner
        await request.app.state.manager.expire(digest)
    return Response(status_code=200)


@router.post("/api/create")
async def create(body: CreateRequest, request: Request) -> Any:
    """Ollama's /api/create: a new model from a model in the store or a GGUF file uploaded to /api/blobs,
    and Modelfile settings; it shares that file, or has the file quantized (`quantize`)."""
    store = request.app.state.store
    recipe, upload = t.create_modelfile(body), t.uploaded_file(body)  # a bad body fails here, before any line

    def create(emit: Any = None) -> Any:
        return store.create(body.model, recipe, upload=upload, quantize=body.quantize, progress=emit)

    if not body.stream:
        await asyncio.to_thread(create)
        return {"status": "success"}
    return ndjson_stream(_progress(create), _stream_error)


@router.post("/api/copy")
async def copy(body: CopyRequest, request: Request) -> Response:
    await asyncio.to_thread(request.app.state.store.copy, body.source, body.destination)
    return Response(status_code=200)


@router.get("/api/ps")
async def ps(request: Request) -> dict[str, Any]:
    loaded = request.app.state.manager.running()
    health = await asyncio.gather(*(m.runner.health() for m in loaded))
    return {"models": [_running(m, h).to_dict() for m, h in zip(loaded, health)]}


def _running(loaded: Loaded, health: Health | None) -> RunningModel:
    """One loaded model; `health` is its runner's live state (threads change while it decodes)."""
    model, info, options = loaded.model, loaded.runner.info, loaded.options
    return RunningModel(
        name=model.name, model=model.name, size=loaded.size, digest=t.digest_hex(model.digest),
        details=t.details(model), expires_at=_expires_at(loaded).isoformat(),
        size_vram=loaded.size if info.get("gpu_layers") else 0, context_length=options.ctx_size,
        parallel=options.parallel, kv_cache_type=options.kv_cache_type, flash_attn=info.get("flash_attn", ""),
        threads=health.threads if health else info.get("threads"), active_requests=loaded.pending,
        speculative=info.get("speculative", 0), speculative_exact=info.get("speculative_exact"),
        safe_mode=options.safe_mode, extra_buffer_types=info.get("extra_buffer_types", []), cpu=info.get("cpu", []),
        stream_interval_ms=health.stream_interval_ms if health else None,
    )


def _expires_at(loaded: Loaded) -> datetime:
    now = datetime.now(timezone.utc)
    if loaded.keep_alive < 0:
        return FOREVER
    if loaded.expires_at is None:  # busy: the clock starts when the last request ends
        return now + timedelta(seconds=loaded.keep_alive)
    return now + timedelta(seconds=max(0.0, loaded.expires_at - time.monotonic()))


# --- generation --------------------------------------------------------------------------------

@router.post("/api/generate")
async def generate(body: GenerateRequest, request: Request) -> Any:
    return await _answer(request, body, t.generate_request, t.generate_piece, t.generate_final)


@router.post("/api/chat")
async def chat(body: ChatRequest, request: Request) -> Any:
    return await _answer(request, body, t.chat_request, t.chat_piece, t.chat_final)


async def _answer(request: Request, body: Body, translate: Callable[[Any], NativeRequest],
                  piece: Piece, final: Final) -> Any:
    """Load/unload-only requests, streamed NDJSON, or one JSON object: the same for generate and chat."""
    started = time.perf_counter_ns()
    manager: ModelManager = request.app.state.manager
    if t.is_load_only(body):
        reason = await _load(manager, body)
        return t.load_answer(body, reason, time.perf_counter_ns() - started)
    native = translate(body)
    if body.stream:
        gen = await generation.start(manager, native, t.OLLAMA_DEFAULTS)
        return ndjson_stream(_lines(gen, body.model, piece, final, started), _stream_error)
    done = (await unless_hung_up(request, generation.collect(manager, native, t.OLLAMA_DEFAULTS))).choices[0]
    return final(body.model, done, time.perf_counter_ns() - started, done.text, done.reasoning)


async def _lines(gen: generation.Generation, model: str, piece: Piece, final: Final,
                 started: int) -> AsyncIterator[str]:
    async for event in gen:
        if isinstance(event, Delta):
            if event.text or event.reasoning:
                yield ndjson(piece(model, event.text, event.reasoning))
        else:
            yield ndjson(final(model, event, time.perf_counter_ns() - started, ""))


async def _load(manager: ModelManager, body: Body) -> str:
    """Ollama's empty request: load the model (and set its keep-alive), or unload it with keep_alive 0."""
    if body.keep_alive is not None and parse_duration(body.keep_alive) == 0:
        await manager.unload_name(body.model)
        return "unload"
    async with manager.lease(body.model, body.options.num_ctx if body.options else None, body.keep_alive):
        pass
    return "load"


# --- embeddings --------------------------------------------------------------------------------

@router.post("/api/embed")
async def embed(body: EmbedRequest, request: Request) -> dict[str, Any]:
    started = time.perf_counter_ns()
    inputs = [body.input] if isinstance(body.input, str) else body.input
    answer = await _embed(request.app.state.manager, body, [text for text in inputs if text])
    return {"model": body.model, "embeddings": shortened(answer.embeddings, body.dimensions),
            "total_duration": time.perf_counter_ns() - started, "load_duration": int(answer.load_ms * 1e6),
            "prompt_eval_count": answer.prompt_tokens}


@router.post("/api/embeddings")
async def embeddings(body: EmbeddingsRequest, request: Request) -> dict[str, Any]:
    answer = await _embed(request.app.state.manager, body, [body.prompt] if body.prompt else [])
    return {"embedding": answer.embeddings[0] if answer.embeddings else []}


def _embed(manager: ModelManager, body: EmbedRequest | EmbeddingsRequest, inputs: list[str]) -> Awaitable[Embeddings]:
    """The vectors for `inputs` (none: Ollama only loads the model), with the body's num_ctx and keep_alive."""
    return operations.embed(manager, body.model, inputs, body.truncate, body.options.num_ctx if body.options else None,
                            body.keep_alive)
