"""The store's public value types: a stored Model, the GGUF facts of ModelInfo, and PullProgress."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from localrun.api_types import PullProgress


@dataclass(frozen=True, slots=True)
class Facts:
    """What the GGUF header says about a model; kept in the manifest so `list` reads no model file."""

    architecture: str = ""
    parameters: int = 0  # tensor elements, summed
    parameter_size: str = ""  # "135M", "1.5B"
    quantization: str = ""  # "Q4_K_M"
    context_length: int = 0
    embedding_length: int = 0
    license: str = ""
    kv_bytes_per_token: int = 0  # f16 K and V of one token across all layers: sizes the KV cache
    kv_swa_bytes_per_token: int = 0  # the part of it in sliding-window layers, which hold only a window
    sliding_window: int = 0  # that window, in tokens (0: no sliding-window layers)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Facts:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """Everything `show` prints: the facts plus the chat template, special tokens and raw metadata."""

    facts: Facts
    chat_template: str = ""
    special_tokens: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:  # info.architecture etc. read through to the facts
        return getattr(object.__getattribute__(self, "facts"), name)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self.facts), "chat_template": self.chat_template,
                "special_tokens": dict(self.special_tokens), "metadata": dict(self.metadata)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelInfo:
        return cls(Facts.from_dict(data), data.get("chat_template", ""), dict(data.get("special_tokens", {})),
                   dict(data.get("metadata", {})))


@dataclass(frozen=True, slots=True)
class Model:
    """A model present in the store: its name, its blob, and the file to hand to llama.cpp."""

    name: str  # canonical "name:tag"
    digest: str  # "sha256:<hex>"
    path: Path  # the blob, or the linked file
    size: int
    modified: datetime
    source: str
    facts: Facts
    linked: bool = False
    defaults: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, Any] = field(default_factory=dict)  # what it was made from (quantize), else {}
    system: str = ""  # the rest is what a Modelfile set (see store/manifests.py)
    template: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)
    modelfile_license: str = ""  # LICENSE (`license` reads through to the GGUF's)

    def __getattr__(self, name: str) -> Any:  # model.architecture etc. read through to the facts
        return getattr(object.__getattribute__(self, "facts"), name)

    @property
    def short_id(self) -> str:
        return self.digest.removeprefix("sha256:")[:12]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "digest": self.digest, "path": str(self.path), "size": self.size,
                "modified": self.modified.isoformat(), "source": self.source, "linked": self.linked,
                **asdict(self.facts), "defaults": dict(self.defaults),
                "origin": dict(self.origin), "system": self.system, "template": self.template,
                "messages": list(self.messages), "modelfile_license": self.modelfile_license}


__all__ = ["Facts", "Model", "ModelInfo", "PullProgress"]
