"""The HTTP API's answers that the client reads typed: the Ollama API's about models (listed, shown,
pulled, loaded) and localrun's `/v1/score`. Shared by the server, which writes them, and the client,
which reads them (as Ollama's api/types.go is shared by its server and its CLI).

A leaf module of plain dataclasses (no pydantic: the CLI stays light); the store may import it too.
`to_dict` is the JSON the server sends; `from_dict` reads it back, and reads any Ollama server's
too: a member it lacks or sends with another type takes its empty value (None where "not told" must
differ from "empty").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _told(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _without_none(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if value is not None}


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 time as Ollama writes it (nanoseconds, `Z`), readable by Python 3.10's fromisoformat."""
    text = re.sub(r"(\.\d{6})\d+", r"\1", text.strip()).replace("Z", "+00:00")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


@dataclass(slots=True)
class ModelDetails:
    """Ollama's `details` of a model: its format, family and size class, its quantization."""

    parent_model: str = ""
    format: str = ""
    family: str = ""
    families: list[str] | None = None
    parameter_size: str = ""
    quantization_level: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"parent_model": self.parent_model, "format": self.format, "family": self.family,
                "families": self.families, "parameter_size": self.parameter_size,
                "quantization_level": self.quantization_level}

    @classmethod
    def from_dict(cls, data: Any) -> ModelDetails:
        data = _object(data)
        families = data.get("families")
        return cls(_str(data.get("parent_model")), _str(data.get("format")), _str(data.get("family")),
                   [str(f) for f in families] if isinstance(families, list) else None,
                   _str(data.get("parameter_size")), _str(data.get("quantization_level")))


@dataclass(slots=True)
class ListedModel:
    """One model of `/api/tags` (Ollama's ListModelResponse). `digest` is hex, without "sha256:";
    a model another server answers for has no digest and says where it lives (`remote_host`)."""

    name: str
    model: str = ""
    modified_at: str = ""
    size: int = 0
    digest: str = ""
    details: ModelDetails = field(default_factory=ModelDetails)
    remote_model: str | None = None
    remote_host: str | None = None

    @property
    def modified(self) -> datetime | None:
        return parse_time(self.modified_at) if self.modified_at else None

    def to_dict(self) -> dict[str, Any]:
        return _without_none({"name": self.name, "model": self.model, "modified_at": self.modified_at,
                              "size": self.size, "digest": self.digest, "details": self.details.to_dict(),
                              "remote_model": self.remote_model, "remote_host": self.remote_host})

    @classmethod
    def from_dict(cls, data: Any) -> ListedModel:
        data = _object(data)
        name = _str(data.get("name")) or _str(data.get("model"))
        return cls(name, _str(data.get("model")) or name, _str(data.get("modified_at")), _int(data.get("size")),
                   _str(data.get("digest")).removeprefix("sha256:"), ModelDetails.from_dict(data.get("details")),
                   _told(data.get("remote_model")), _told(data.get("remote_host")))


@dataclass(slots=True)
class ShowResponse:
    """`/api/show`: what a model is and carries. A text member is None when the server did not tell
    it (an Ollama model without a template or a license), "" when it told that it is empty."""

    license: str | None = None
    modelfile: str | None = None
    parameters: str | None = None
    template: str | None = None
    details: ModelDetails = field(default_factory=ModelDetails)
    model_info: dict[str, Any] | None = None  # GGUF metadata; None when not told
    capabilities: list[str] = field(default_factory=list)
    modified_at: str = ""
    system: str | None = None
    messages: list[dict[str, Any]] | None = None
    remote_model: str | None = None
    remote_host: str | None = None

    @property
    def architecture(self) -> str:
        return _str((self.model_info or {}).get("general.architecture")) or self.details.family

    def _info(self, key: str) -> int:
        return _int((self.model_info or {}).get(f"{self.architecture}.{key}"))

    @property
    def context_length(self) -> int:
        """The context the model was trained for; 0 when not told."""
        return self._info("context_length")

    @property
    def embedding_length(self) -> int:
        return self._info("embedding_length")

    @property
    def parameter_count(self) -> int:
        return _int((self.model_info or {}).get("general.parameter_count"))

    def to_dict(self) -> dict[str, Any]:
        return _without_none({
            "license": self.license, "modelfile": self.modelfile, "parameters": self.parameters,
            "template": self.template, "details": self.details.to_dict(), "model_info": self.model_info,
            "capabilities": self.capabilities, "modified_at": self.modified_at, "system": self.system,
            "messages": self.messages, "remote_model": self.remote_model, "remote_host": self.remote_host,
        })

    @classmethod
    def from_dict(cls, data: Any) -> ShowResponse:
        data = _object(data)
        info, capabilities, messages = data.get("model_info"), data.get("capabilities"), data.get("messages")
        return cls(_told(data.get("license")), _told(data.get("modelfile")), _told(data.get("parameters")),
                   _told(data.get("template")), ModelDetails.from_dict(data.get("details")),
                   info if isinstance(info, dict) else None,
                   [str(c) for c in capabilities] if isinstance(capabilities, list) else [],
                   _str(data.get("modified_at")), _told(data.get("system")),
                   messages if isinstance(messages, list) else None,
                   _told(data.get("remote_model")), _told(data.get("remote_host")))


@dataclass(slots=True)
class RunningModel:
    """One loaded model of `/api/ps` (Ollama's ProcessModelResponse, and what localrun adds: how it
    was loaded and how it runs now). `expires_at` is RFC 3339, far in the future for "forever". An
    Ollama server sends only the first eight members; the rest then take their empty values."""

    name: str
    model: str = ""
    size: int = 0
    digest: str = ""
    details: ModelDetails = field(default_factory=ModelDetails)
    expires_at: str = ""
    size_vram: int = 0
    context_length: int = 0
    parallel: int = 0
    kv_cache_type: str = ""  # f16, q8_0, q4_0
    flash_attn: str = ""  # as the model runs: on, off, prefix (a sequence's first 256 cells), auto (llama.cpp's choice)
    threads: int | None = None  # the CPU threads it decodes with now; None when not told
    active_requests: int = 0
    speculative: int = 0  # draft tokens per step; 0 when off
    speculative_exact: bool | None = None  # whether this build verifies drafts exactly; None when off
    safe_mode: bool = False
    extra_buffer_types: list[str] = field(default_factory=list)
    cpu: list[str] = field(default_factory=list)  # the CPU features llama.cpp uses, one line each
    stream_interval_ms: int | None = None  # how long a stream's tokens are held now (0: not); None when not told

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "size": self.size, "digest": self.digest,
                "details": self.details.to_dict(), "expires_at": self.expires_at, "size_vram": self.size_vram,
                "context_length": self.context_length, "parallel": self.parallel,
                "kv_cache_type": self.kv_cache_type, "flash_attn": self.flash_attn, "threads": self.threads,
                "active_requests": self.active_requests, "speculative": self.speculative,
                "speculative_exact": self.speculative_exact, "safe_mode": self.safe_mode,
                "extra_buffer_types": self.extra_buffer_types, "cpu": self.cpu,
                "stream_interval_ms": self.stream_interval_ms}

    @classmethod
    def from_dict(cls, data: Any) -> RunningModel:
        data = _object(data)
        name = _str(data.get("name")) or _str(data.get("model"))
        exact, interval = data.get("speculative_exact"), data.get("stream_interval_ms")
        return cls(name, _str(data.get("model")) or name, _int(data.get("size")), _str(data.get("digest")),
                   ModelDetails.from_dict(data.get("details")), _str(data.get("expires_at")),
                   _int(data.get("size_vram")), _int(data.get("context_length")), _int(data.get("parallel")),
                   _str(data.get("kv_cache_type")), _str(data.get("flash_attn")), _int(data.get("threads")) or None,
                   _int(data.get("active_requests")), _int(data.get("speculative")),
                   exact if isinstance(exact, bool) else None, data.get("safe_mode") is True,
                   _strings(data.get("extra_buffer_types")), _strings(data.get("cpu")),
                   interval if type(interval) is int else None)


@dataclass(frozen=True, slots=True)
class PullProgress:
    """One line of a pull's progress (Ollama's ProgressResponse), in Ollama's words: pulling manifest,
    pulling <digest>, verifying sha256 digest, writing manifest, success. `total`/`completed` are bytes
    while pulling, else 0. The store reports its pulls in it; /api/pull streams it; the client reads it."""

    status: str
    digest: str = ""
    total: int = 0
    completed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, **{k: v for k, v in (("digest", self.digest), ("total", self.total),
                                                              ("completed", self.completed)) if v}}

    @classmethod
    def from_dict(cls, data: Any) -> PullProgress:
        data = _object(data)
        return cls(_str(data.get("status")), _str(data.get("digest")), _int(data.get("total")),
                   _int(data.get("completed")))


@dataclass(slots=True)
class ScoredOption:
    """One option of `/v1/score`: its log-probability after the prompt (the sum over its `tokens`),
    the `score` it is ranked by (that sum, or its mean per token), and its softmax `prob` among the options."""

    index: int
    option: str
    logprob: float
    tokens: int
    score: float
    prob: float

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "option": self.option, "logprob": self.logprob, "tokens": self.tokens,
                "score": self.score, "prob": self.prob}

    @classmethod
    def from_dict(cls, data: Any) -> ScoredOption:
        data = _object(data)
        return cls(_int(data.get("index")), _str(data.get("option")), _float(data.get("logprob")),
                   _int(data.get("tokens")), _float(data.get("score")), _float(data.get("prob")))


@dataclass(slots=True)
class ScoreResponse:
    """`/v1/score`'s answer (a localrun extension): the options in the order asked, what the prompt and
    the options cost in tokens (`usage` on the wire) and how long scoring took (`timings.score_ms`)."""

    model: str
    choices: list[ScoredOption] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the scorer reused from its cache
    option_tokens: int = 0
    score_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"object": "score", "model": self.model, "choices": [c.to_dict() for c in self.choices],
                "usage": {"prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                          "option_tokens": self.option_tokens},
                "timings": {"score_ms": self.score_ms}}

    @classmethod
    def from_dict(cls, data: Any) -> ScoreResponse:
        data = _object(data)
        usage, choices = _object(data.get("usage")), data.get("choices")
        return cls(_str(data.get("model")),
                   [ScoredOption.from_dict(c) for c in choices] if isinstance(choices, list) else [],
                   _int(usage.get("prompt_tokens")), _int(usage.get("cached_tokens")),
                   _int(usage.get("option_tokens")), _float(_object(data.get("timings")).get("score_ms")))


__all__ = ["ListedModel", "ModelDetails", "PullProgress", "RunningModel", "ScoredOption", "ScoreResponse",
           "ShowResponse", "parse_time"]
