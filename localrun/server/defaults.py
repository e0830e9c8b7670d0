"""The one precedence for what a request leaves unset: the request's own value, then the model's
defaults (its manifest's parameters, which `localrun show` and /api/show list), then the server's
settings (LOCALRUN_*), then llama.cpp's (the defaults of SamplingParams and EngineSettings).

The first two steps are taken here, after a dialect translated its request into the native one:
`context_size` for every lease of a model (server/manager.py), `with_model_defaults` for every
generation (server/generation.py). What is still unset then travels on as None and the server's
setting fills it where it decides something: the context size when the manager loads a runner (a
request that names none takes a loaded runner as it is), keep-alive when a lease ends, the draft
length in the engine (EngineSettings.speculative). llama.cpp's defaults are SamplingParams' own.

Model defaults are keyed by Ollama's PARAMETER names. Sampling knobs the dialects fill with their
API's documented defaults (temperature, top_p, ...) are not unset by the time they get here.
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


def with_model_defaults(request: GenerateRequest, defaults: Mapping[str, Any]) -> GenerateRequest:
    """`request` with what it left unset taken from the model's defaults."""
    sampling = request.sampling
    filled = {field: _value(field, defaults[key]) for key, field in _SAMPLING.items()
              if key in defaults and getattr(sampling, field) in (None, [])}
    num_ctx = context_size(request.num_ctx, defaults)
    if not filled and num_ctx == request.num_ctx:
        return request
    return replace(request, sampling=replace(sampling, **filled), num_ctx=num_ctx)


def _value(field: str, value: Any) -> Any:
    if field == "stop":
        return [value] if isinstance(value, str) else list(value)
    if field == "max_tokens" and value < 0:  # Ollama's num_predict -1: no limit
        return None
    return value


__all__ = ["context_size", "with_model_defaults"]
