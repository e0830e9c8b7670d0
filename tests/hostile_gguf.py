"""A corpus of hostile model files: broken GGUFs that `pull` must refuse with one clear line, and
well-formed ones that llama.cpp cannot load (the runner must fail, never the daemon).

The files are written by hand with `struct` (not gguf.GGUFWriter), so that every header field,
count, length, type and offset can be made to lie. Layout of GGUF v3 (little-endian):

    magic "GGUF" | version u32 | tensor count u64 | key/value count u64
    key/values:   key (u64 length + bytes) | value type u32 | value
    tensor infos: name (string) | n_dims u32 | dims u64 x n | ggml type u32 | data offset u64
    padding to `general.alignment` (32) | tensor data
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

ALIGN = 32
U32, I32, F32, STRING, ARRAY = 4, 5, 6, 8, 9  # GGUF value types
F32_TENSOR = 0  # ggml type


def string(text: str | bytes, length: int | None = None) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data) if length is None else length) + data


def kv(key: str, vtype: int, value: bytes) -> bytes:
    return string(key) + struct.pack("<I", vtype) + value


@dataclass
class Tensor:
    name: str
    dims: tuple[int, ...]
    ggml_type: int = F32_TENSOR
    offset: int = 0

    def info(self) -> bytes:
        dims = b"".join(struct.pack("<Q", d) for d in self.dims)
        return string(self.name) + struct.pack("<I", len(self.dims)) + dims + struct.pack("<IQ", self.ggml_type, self.offset)


@dataclass
class Spec:
    """Every part of a GGUF file, each of which a hostile variant may override."""

    magic: bytes = b"GGUF"
    version: int = 3
    tensor_count: int | None = None  # None: the real count
    kv_count: int | None = None
    kvs: list[bytes] = field(default_factory=lambda: [
        kv("general.architecture", STRING, string("llama")),
        kv("general.name", STRING, string("hostile")),
        kv("llama.context_length", U32, struct.pack("<I", 256)),
        kv("llama.embedding_length", U32, struct.pack("<I", 8)),
        kv("llama.block_count", U32, struct.pack("<I", 1)),
    ])
    tensors: list[Tensor] = field(default_factory=lambda: [Tensor("token_embd.weight", (8, 4))])
    data: bytes | None = None  # None: zeros of the tensors' real size

    def build(self) -> bytes:
        head = self.magic + struct.pack("<IQQ", self.version,
                                        len(self.tensors) if self.tensor_count is None else self.tensor_count,
                                        len(self.kvs) if self.kv_count is None else self.kv_count)
        body = head + b"".join(self.kvs) + b"".join(t.info() for t in self.tensors)
        body += b"\0" * (-len(body) % ALIGN)
        size = sum(4 * _product(t.dims) for t in self.tensors if t.ggml_type == F32_TENSOR and _product(t.dims) < 1 << 20)
        return body + (self.data if self.data is not None else b"\0" * size)


def _product(dims: tuple[int, ...]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def _truncated(fraction: float) -> bytes:
    valid = Spec().build()
    return valid[: int(len(valid) * fraction)]


# name -> file bytes. Each must be refused by `localrun pull` before it reaches the store.
def refused_corpus() -> dict[str, bytes]:
    valid = Spec().build()
    return {
        "empty.gguf": b"",
        "short-header.gguf": valid[:13],
        "wrong-magic.gguf": b"GGML" + valid[4:],
        "version-0.gguf": Spec(version=0).build(),
        "version-99.gguf": Spec(version=99).build(),
        "big-endian-confusion.gguf": b"GGUF" + struct.pack(">IQQ", 3, 1, 5) + valid[24:],
        "absurd-tensor-count.gguf": Spec(tensor_count=1 << 62).build(),
        "absurd-kv-count.gguf": Spec(kv_count=1 << 40).build(),
        "kv-count-lies.gguf": Spec(kv_count=500).build(),
        "tensor-count-lies.gguf": Spec(tensor_count=5000).build(),
        "huge-string-length.gguf": Spec(kvs=[kv("general.name", STRING, string("x", length=1 << 60))]).build(),
        "huge-key-length.gguf": Spec(kvs=[string("k", length=1 << 62) + struct.pack("<I", U32) + b"\0" * 4]).build(),
        "huge-array.gguf": Spec(kvs=[kv("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQ", STRING, 1 << 61))]).build(),
        "unknown-value-type.gguf": Spec(kvs=[kv("general.name", 99, b"\0" * 8)]).build(),
        "tensor-offset-past-end.gguf": Spec(tensors=[Tensor("token_embd.weight", (8, 4), offset=1 << 40)]).build(),
        "tensor-dims-overflow.gguf": Spec(tensors=[Tensor("token_embd.weight", (1 << 40, 1 << 40))]).build(),
        "tensor-too-many-dims.gguf": Spec(tensors=[Tensor("token_embd.weight", (2,) * 9)]).build(),
        "unknown-tensor-type.gguf": Spec(tensors=[Tensor("token_embd.weight", (8, 4), ggml_type=999)]).build(),
        "truncated-metadata.gguf": _truncated(0.4),
        "truncated-data.gguf": _truncated(0.8),
        "html-page.gguf": b"<!DOCTYPE html><html><body>404 Not Found</body></html>\n" * 4,
        "zip-archive.gguf": b"PK\x03\x04" + b"\x14\x00" * 40,
    }


# Well-formed GGUFs that the store accepts but llama.cpp cannot load: the request must get
# "model failed to load: ..." and the daemon must live on.
def unloadable_corpus(scratch: Path) -> dict[str, bytes]:
    return {
        "missing-tensors.gguf": Spec().build(),
        "unknown-architecture.gguf": Spec(kvs=[kv("general.architecture", STRING, string("nonesuch"))]).build(),
        "duplicate-tokens.gguf": duplicate_tokens(scratch / "duplicate-tokens.gguf").read_bytes(),
    }


def duplicate_tokens(path: Path) -> Path:
    """A llama model whose vocabulary repeats a token: llama.cpp aborts on GGML_ASSERT while loading
    it (SIGABRT, not an exception), so only a separate runner process can survive it."""
    import gguf
    import numpy as np

    tokens = ["a", "a", "b", "c"]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(256)
    writer.add_embedding_length(8)
    writer.add_block_count(1)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * len(tokens))
    writer.add_token_merges(["a b"])
    writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_corpus(directory: Path, corpus: dict[str, bytes]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in corpus.items():
        path = directory / name
        path.write_bytes(data)
        paths.append(path)
    return paths


__all__ = ["Spec", "Tensor", "duplicate_tokens", "kv", "refused_corpus", "string", "unloadable_corpus", "write_corpus"]
