"""The one precedence for what a request leaves unset: the request's own value, then the model's
defaults (its Modelfile: PARAMETER, SYSTEM, MESSAGE, TEMPLATE, kept in its manifest and listed by
`localrun show --modelfile` and /api/show), then the dialect's documented defaults (only Ollama's
differ from llama.cpp's), then the server's settings (LOCALRUN_*), then llama.cpp's (the defaults of
`sampling.LLAMA_CPP` and EngineSettings).

The dialects translate only what a request sets (a knob it leaves out stays None); `for_model` then
takes the steps up to the dialect's defaults for every generation (server/generation.py), and
`context_size` for every lease of a model (server/manager.py). What is still unset after that is the
server's to decide where it decides something: the context size when the manager loads a runner (a
request that names none takes a loaded runner as it is), keep-alive when a lease ends, the seed and
the draft length in the engine (EngineSettings), and every knob nobody set from llama.cpp's defaults.

Model defaults are keyed by Ollama's PARAMETER names (num_predict, not max_tokens).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from localrun.native import GenerateRequest

# Model default -> the SamplingParams field it fills when the request left it unset (None or empty).
_SAMPLING = {"num_predict": "max_tokens", "stop": "stop", "seed": "seed", "speculative": "speculative"}


def context_size(requested: int | None, defaults: Mapping[str, Any]) -> int | None:
    """The request's context size per slot, else the model's default; None leaves it to the server."""
    return requested if requested is not None else defaults.get("num_ctx")


def for_model(request: GenerateRequest, model: Any, api_defaults: Mapping[str, Any] | None = None) -> GenerateRequest:
    """`request` with what it left unset taken from the model (`model.defaults`, `.system`,
    `.messages`, `.template`), then from the dialect's `api_defaults`."""
    return with_model_prompt(with_model_defaults(request, model.defaults, api_defaults), model)


def with_model_defaults(request: GenerateRequest, defaults: Mapping[str, Any],
                        api_defaults: Mapping[str, Any] | None = None) -> GenerateRequest:
    """`request` with its unset parameters taken from the model's defaults, then the dialect's."""
    sampling = request.sampling
    filled = {field: _value(field, defaults[key]) for key, field in _SAMPLING.items()
              if key in defaults and getattr(sampling, field) in (None, [])}
    knobs = sampling.filled(defaults, api_defaults or {})
    return replace(request, sampling=replace(knobs, **filled), num_ctx=context_size(request.num_ctx, defaults))


def with_model_prompt(request: GenerateRequest, model: Any) -> GenerateRequest:
    """A chat with the model's SYSTEM prompt when it brings none of its own, its MESSAGE turns first,
    and its TEMPLATE when it has one. Prompts sent as is (completions, raw) are left alone."""
    system, messages, template = model.system, model.messages, model.template
    if request.messages is None or not (system or messages or template):
        return request
    own = request.messages
    lead = next((i for i, m in enumerate(own) if m.get("role") != "system"), len(own))  # its own system messages
    head = own[:lead] or ([{"role": "system", "content": system}] if system else [])
    return replace(request, messages=[*head, *(dict(m) for m in messages), *own[lead:]],
                   template=request.template or template or None)


def how_to_raise(model: Any, ctx: int) -> str:
    """What a prompt over `model`'s context of `ctx` tokens per request is told: each step of the
    precedence that can give it more, or that this already is all it was trained for."""
    trained = model.facts.context_length
    if trained and ctx >= trained:
        return f"{model.name} holds {ctx} tokens per request, all it was trained for: shorten the prompt"
    limit = f" (up to {trained}, its trained length)" if trained else ""
    return (f"{model.name} holds {ctx} tokens per request{limit}; raise it with num_ctx in the request "
            f"(options.num_ctx on the Ollama API), PARAMETER num_ctx in a Modelfile (`localrun create`), "
            f"or the server's LOCALRUN_CTX_SIZE")


def _value(field: str, value: Any) -> Any:
    if field == "stop":
        return [value] if isinstance(value, str) else list(value)
    if field == "max_tokens" and value < 0:  # Ollama's num_predict -1: no limit
        return None
    return value


__all__ = ["context_size", "for_model", "how_to_raise", "with_model_defaults", "with_model_prompt"]
