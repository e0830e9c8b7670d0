"""Tiny but valid GGUF files for store tests, written with gguf.GGUFWriter (a few KB to a few MB)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np


def write_tiny_gguf(path: Path, *, floats: int = 4096, seed: int = 0, name: str = "tiny",
                    license: str = "apache-2.0", template: str = "{{ messages }}") -> Path:
    """A one-tensor llama-architecture GGUF of about 4 * `floats` bytes; `seed` varies the bytes."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_license(license)
    writer.add_context_length(256)
    writer.add_embedding_length(8)
    writer.add_block_count(1)
    writer.add_file_type(0)
    writer.add_chat_template(template)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["<s>", "</s>", "a", "b"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_tensor("weight", np.random.default_rng(seed).standard_normal(floats, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def with_chat_template(source: Path, target: Path, template: str) -> Path:
    """A copy of the GGUF `source` whose chat template is `template`: a real model under another
    family's template (the weights and tokenizer are untouched)."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    reader = gguf.GGUFReader(str(source))
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(target), arch=arch, endianess=reader.endianess)
    alignment = reader.fields.get(gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = alignment.contents()
    template_value = MetadataDetails(gguf.GGUFValueType.STRING, template)
    copy_with_new_metadata(reader, writer, {gguf.Keys.Tokenizer.CHAT_TEMPLATE: template_value}, [])
    return target
