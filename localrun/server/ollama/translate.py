"""Ollama <-> native: request bodies into one GenerateRequest, events and models into Ollama's JSON.

Sampling: the request's `options`; what they leave unset is filled by the one precedence
(server/defaults.py), where Ollama's own defaults (`OLLAMA_DEFAULTS`, which differ from llama.cpp's:
top_p 0.9, min_p 0, repeat_penalty 1.1) come after the model's, so a client sees what it would see
against Ollama. Durations go out in nanoseconds, as Ollama reports them; the engine measures milliseconds.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from localrun.api_types import ListedModel, ModelDetails, ShowResponse
from localrun.durations import parse_duration
from localrun.errors import InvalidRequest
from localrun.families import family_for
from localrun.native import Done, GenerateRequest as NativeRequest, Timings, thinking
from localrun.sampling import SamplingParams, given
from localrun.server.ollama.protocol import ChatRequest, CreateRequest, GenerateRequest, Message, Options
from localrun.store import Modelfile, blob_digest, modelfile_of, parse_modelfile, parse_reference
from localrun.store.modelfile import check_template, message as mf_message, parameters as mf_parameters
from localrun.server.messages import tool_definition  # Ollama's tools are OpenAI's

OLLAMA_DEFAULTS: dict[str, float] = {
    "temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.0, "typical_p": 1.0,
    "repeat_penalty": 1.1, "repeat_last_n": 64, "presence_penalty": 0.0, "frequency_penalty": 0.0,
}
NO_VISION = "images are not supported: the models localrun serves are text-only"


# --- requests ----------------------------------------------------------------------------------

def sampling(options: Options | None) -> SamplingParams:
    """Ollama options -> SamplingParams (repeat_last_n -1, the whole context, is resolved by the engine)."""
    o = options or Options()
    params = SamplingParams(**given(o))
    params.seed = o.seed if o.seed is not None and o.seed >= 0 else None  # Ollama: -1 = random
    params.max_tokens = o.num_predict if o.num_predict is not None and o.num_predict >= 0 else None
    params.stop = list(o.stop or [])
    params.speculative = o.speculative
    return params


def generate_request(body: GenerateRequest) -> NativeRequest:
    """/api/generate: the prompt through the chat template (with `system`), or as is when `raw`."""
    if body.images:
        raise InvalidRequest(NO_VISION)
    if body.template:
        raise InvalidRequest("template: overriding the prompt template is not supported; "
                             "send raw: true with a fully formatted prompt instead")
    if body.suffix:
        raise InvalidRequest("suffix: fill-in-the-middle is not supported")
    request = _native(body)
    request.return_context = True
    if body.raw:
        request.prompt = body.prompt
    else:
        system = [{"role": "system", "content": body.system}] if body.system else []
        request.messages = [*system, {"role": "user", "content": body.prompt}]
    return request


def chat_request(body: ChatRequest) -> NativeRequest:
    request = _native(body)
    request.messages = [_message(m, i) for i, m in enumerate(body.messages)]
    request.tools = [tool_definition(t) for t in body.tools] if body.tools else None
    return request


def _native(body: GenerateRequest | ChatRequest) -> NativeRequest:
    keep_alive = parse_duration(body.keep_alive) if body.keep_alive is not None else None
    think, effort = thinking(body.think, "think")
    request = NativeRequest(model=body.model, sampling=sampling(body.options),
                            num_ctx=body.options.num_ctx if body.options else None, keep_alive=keep_alive,
                            think=think, reasoning_effort=effort,
                            reasoning_budget=body.options.reasoning_budget if body.options else None)
    if isinstance(body.format, dict):
        request.json_schema = body.format
    elif body.format == "json":
        request.json_mode = True
    elif body.format:
        raise InvalidRequest(f'format: expected "json" or a JSON schema object, got {body.format!r}')
    return request


def _message(message: Message, index: int) -> dict[str, Any]:
    """Ollama message -> template-ready (OpenAI-shaped) message; tool arguments stay objects."""
    if message.images:
        raise InvalidRequest(f"messages[{index}]: {NO_VISION}")
    out: dict[str, Any] = {"role": message.role, "content": message.content or ""}
    if message.tool_calls:
        out["tool_calls"] = [_template_call(call, f"call_{index}_{i}") for i, call in enumerate(message.tool_calls)]
    if message.tool_name:
        out["name"] = message.tool_name
    if message.thinking:
        out["reasoning_content"] = message.thinking
    return out


def _template_call(call: dict[str, Any], fallback_id: str) -> dict[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict) or not function.get("name"):
        raise InvalidRequest("tool_calls: each call must be {\"function\": {\"name\", \"arguments\": {...}}}")
    arguments = function.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise InvalidRequest("tool_calls: function.arguments must be a JSON object")
    return {"id": call.get("id") or fallback_id, "type": "function",
            "function": {"name": function["name"], "arguments": arguments}}


def is_load_only(body: GenerateRequest | ChatRequest) -> bool:
    """Ollama's convention: no prompt (or no messages) only loads, or with keep_alive 0 unloads."""
    if isinstance(body, ChatRequest):
        return not body.messages
    return not body.prompt and not body.images


# --- answers -----------------------------------------------------------------------------------

def created_at() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def ns(ms: float) -> int:
    return int(ms * 1_000_000)


def generate_piece(model: str, text: str, thinking: str = "") -> dict[str, Any]:
    piece = {"model": model, "created_at": created_at(), "response": text, "done": False}
    return piece | {"thinking": thinking} if thinking else piece


def chat_piece(model: str, text: str, thinking: str = "") -> dict[str, Any]:
    message = {"role": "assistant", "content": text} | ({"thinking": thinking} if thinking else {})
    return {"model": model, "created_at": created_at(), "message": message, "done": False}


def generate_final(model: str, done: Done, total_ns: int, text: str, thinking: str = "") -> dict[str, Any]:
    """The last object of /api/generate, with `context` (the conversation's token ids) as Ollama sends it."""
    context = {"context": done.context} if done.context is not None else {}
    return {**generate_piece(model, text, thinking), **final_fields(done, total_ns), **context}


def chat_final(model: str, done: Done, total_ns: int, text: str, thinking: str = "") -> dict[str, Any]:
    answer = chat_piece(model, text, thinking)
    if done.tool_calls:
        answer["message"]["tool_calls"] = [
            {"id": c.id, "function": {"index": i, "name": c.name, "arguments": c.arguments}}
            for i, c in enumerate(done.tool_calls)
        ]
    return {**answer, **final_fields(done, total_ns)}


def final_fields(done: Done, total_ns: int) -> dict[str, Any]:
    """What the last object of a generation carries: why it ended and what it cost, in nanoseconds."""
    return {"done": True, "done_reason": "length" if done.finish_reason == "length" else "stop",
            **durations(done.timings, total_ns)}


def durations(t: Timings, total_ns: int) -> dict[str, int]:
    return {"total_duration": total_ns, "load_duration": ns(t.load_ms),
            "prompt_eval_count": t.prompt_tokens, "prompt_eval_duration": ns(t.prompt_ms),
            "eval_count": t.generated_tokens, "eval_duration": ns(t.generation_ms)}


def load_answer(body: GenerateRequest | ChatRequest, reason: str, total_ns: int) -> dict[str, Any]:
    """The single object that answers a load-only (reason "load") or unload ("unload") request."""
    piece = chat_piece if isinstance(body, ChatRequest) else generate_piece
    return {**piece(body.model, ""), "done": True, "done_reason": reason, "total_duration": total_ns,
            "load_duration": total_ns if reason == "load" else 0}


# --- models ------------------------------------------------------------------------------------

def digest_hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def details(model: Any) -> ModelDetails:
    """Ollama's `details` object, from a store Model or ModelInfo (both read through to the GGUF facts)."""
    return ModelDetails("", "gguf", model.architecture, [model.architecture] if model.architecture else None,
                        model.parameter_size, model.quantization)


def tag(model: Any) -> ListedModel:
    """One entry of /api/tags."""
    return ListedModel(model.name, model.name, model.modified.isoformat(), model.size, digest_hex(model.digest),
                       details(model))


UNKNOWN_TIME = "1970-01-01T00:00:00Z"


def upstream_tag(model: Any) -> ListedModel:
    """One /api/tags entry for a model another server answers for, marked as Ollama marks its cloud
    models (`remote_model`, `remote_host`); `remote_host` names the backend of backends.toml."""
    return ListedModel(model.name, model.name, UNKNOWN_TIME, remote_model=model.upstream_id,
                       remote_host=_remote_host(model))


def upstream_show(model: Any) -> ShowResponse:
    """/api/show for an upstream model: where it lives; its weights and template are the upstream's."""
    return ShowResponse("", f"# {model.name} is served by backend {', '.join(model.backends)}\n", "", "",
                        model_info={}, capabilities=["completion", "tools"], modified_at=UNKNOWN_TIME,
                        remote_model=model.upstream_id, remote_host=_remote_host(model))


def _remote_host(model: Any) -> str:
    return f"backend:{','.join(model.backends)}"


def show(model: Any, info: Any) -> ShowResponse:
    """/api/show: the model's license, template, parameters, a Modelfile, GGUF metadata, capabilities.
    What a Modelfile set (`localrun create`) comes before what the GGUF carries."""
    parameters = "\n".join(f"{key:<15} {one}" for key, value in model.defaults.items()
                           for one in (value if isinstance(value, list) else [value]))
    return ShowResponse(
        model.modelfile_license or info.license, modelfile(model, info), parameters,
        model.template or info.chat_template, details(model), {"general.parameter_count": info.parameters, **info.metadata},
        capabilities(info, model.template), model.modified.isoformat(), model.system or None,
        list(model.messages) if model.messages else None)


def modelfile(model: Any, info: Any) -> str:
    """A Modelfile that `localrun create` turns back into this model."""
    return f"# Modelfile generated by localrun for {model.name}\n" + modelfile_of(model, info)


def create_modelfile(body: CreateRequest) -> Modelfile:
    """/api/create's body as a Modelfile: its `modelfile` text (older clients), then its fields over it.
    Its base is `from`, or none when the model is made from an uploaded file (`uploaded_file`)."""
    if getattr(body, "adapters", None):
        raise InvalidRequest("adapters: LoRA adapters are not supported by /api/create here")
    parsed = parse_modelfile(body.modelfile) if body.modelfile else None
    base = body.from_ or (parsed.base if parsed else "")
    if body.files and base:
        raise InvalidRequest("from and files: give one, the model to start from or the uploaded file")
    if not base and not body.files:
        raise InvalidRequest("from: name the model to create this one from (or give `files`, an uploaded GGUF)")
    if base and parse_reference(base).kind == "path":  # as /api/pull: no HTTP client makes the daemon read its disk
        raise InvalidRequest("from: over HTTP, create from a model name; a GGUF file on the daemon's machine "
                             "is for `localrun create` there")
    if body.template is not None:
        check_template(body.template)
    license = "\n\n".join(body.license) if isinstance(body.license, list) else body.license
    messages = tuple(mf_message(str(m.get("role", "")), str(m.get("content") or "")) for m in body.messages or [])
    parsed = parsed or Modelfile()
    return Modelfile(base=base, parameters={**parsed.parameters, **mf_parameters(body.parameters or {})},
                     system=_first(body.system, parsed.system), template=_first(body.template, parsed.template),
                     messages=messages or parsed.messages, license=_first(license, parsed.license))


def uploaded_file(body: CreateRequest) -> tuple[str, str] | None:
    """The (file name, digest) /api/create's `files` names: one GGUF file uploaded to /api/blobs."""
    if not body.files:
        return None
    if len(body.files) != 1:
        raise InvalidRequest(f"files: one GGUF file, not {len(body.files)} (a model split into several files, "
                             f"or with a projector or adapter, is not supported here)", param="files")
    ((filename, digest),) = body.files.items()
    return filename, blob_digest(digest)


def _first(*values: str | None) -> str | None:
    return next((v for v in values if v is not None), None)


def capabilities(info: Any, template: str | None = None) -> list[str]:
    """What works with the model here: a model with a pooling type only embeds; any other completes,
    calls tools (through its template, else localrun's generic tool prompt) and embeds (/api/embed
    works with every model). Clients such as Ollama's own refuse tools to a model without "tools".
    "thinking" when its family thinks, and "thinking_always" (localrun's) when no switch turns the
    thinking off (gpt-oss, Magistral, QwQ: `think: false` cannot stop them). A Modelfile's `template`
    decides the family before the GGUF's."""
    if f"{info.architecture}.pooling_type" in info.metadata:
        return ["embedding"]
    family = family_for(template or info.chat_template)
    return ["completion", "tools", "embedding", *(["thinking"] if family.thinks else []),
            *(["thinking_always"] if not family.can_stop_thinking else [])]
