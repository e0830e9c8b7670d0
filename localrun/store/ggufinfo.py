"""GGUF facts, read with the `gguf` package without loading weights, and the early header check.

`check_header` needs only the first 24 bytes, so a download can refuse an HTML error page or
garbage as soon as it starts; `read_info` parses the whole key/value and tensor-info section
(memory-mapped, weights untouched) and is what validates a file before it enters the store.
"""

from __future__ import annotations

import functools
import struct
import sys
from pathlib import Path
from typing import Any, Callable

from localrun.errors import NotGGUF
from localrun.memory import kv_bytes_per_token
from localrun.store.model import Facts, ModelInfo

HEADER_SIZE = 24  # magic, version (u32), tensor count (u64), key/value count (u64)
MAX_TENSORS = 1 << 20
MAX_KV = 1 << 16
MAX_DIMS = 4  # GGML_MAX_DIMS
_ARRAY_SHOWN = 16
_SPECIAL = ("bos", "eos", "eot", "eom", "unknown", "padding", "sep", "cls", "mask")


def check_header(head: bytes, label: str = "the file") -> None:
    """Refuse anything that does not start like a GGUF file (raises NotGGUF with a one-line why)."""
    import gguf

    if len(head) < HEADER_SIZE:
        raise NotGGUF(f"{label} is not a GGUF file: only {len(head)} bytes")
    if head[:4] != struct.pack("<I", gguf.GGUF_MAGIC):
        raise NotGGUF(f"{label} is not a GGUF file (it starts with {_preview(head)})")
    for order in "<>":
        version, tensors, kvs = struct.unpack(order + "IQQ", head[4:HEADER_SIZE])
        if 1 <= version <= gguf.GGUF_VERSION:
            break
    else:
        version = struct.unpack("<I", head[4:8])[0]
        raise NotGGUF(f"{label}: unsupported GGUF version {version} (this build reads 1 to {gguf.GGUF_VERSION})")
    if tensors > MAX_TENSORS or kvs > MAX_KV:
        raise NotGGUF(f"{label}: implausible GGUF header ({tensors} tensors, {kvs} keys)")


def read_info(path: Path, label: str = "") -> ModelInfo:
    """Parse a GGUF file's metadata; a truncated or corrupt file raises NotGGUF."""
    label = label or str(path)
    with open(path, "rb") as f:
        check_header(f.read(HEADER_SIZE), label)
    try:
        reader = _reader_class()(path)
        _check_tensors(reader, label)
        return _info(reader)
    except NotGGUF:
        raise
    except _Truncated as cut:
        raise NotGGUF(f"{label} is a truncated GGUF file: {cut}") from None
    except Exception as e:  # gguf raises ValueError, IndexError, struct errors ... on bad files
        raise NotGGUF(f"{label} is not a valid GGUF file: {e}") from None


class _Truncated(Exception):
    """The file ends before what its header describes (a download or copy cut short)."""


def _size_needed(data_offset: int, tensor_fields: list[Any]) -> int:
    """Where the last tensor's bytes end, from the tensor infos (as gguf's reader lays them out)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    end = data_offset
    for field in tensor_fields:
        _, _, _, dims, raw_type, offset = field.parts
        block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(int(raw_type[0]))]
        elements = 1
        for dim in dims.tolist():
            elements *= int(dim)
        end = max(end, data_offset + int(offset[0]) + elements * type_size // block_size)
    return end


@functools.cache
def _reader_class() -> type:
    """gguf.GGUFReader over a plain ndarray view of its memory map, reading arrays in one pass.

    The reader slices its `data` once or twice per array element (every token of a 150k-token
    vocabulary), and numpy.memmap runs Python hooks on every slice: three quarters of the parse,
    seconds per real model, paid on every pull. A plain view of the same mapping has no hooks and
    still loads no weights; the reader's own parsing and checks are unchanged but for arrays of
    strings and numbers, whose items it makes the same parts of, more cheaply."""
    import gguf
    import numpy as np

    class Reader(gguf.GGUFReader):
        @property
        def data(self) -> Any:
            return self._plain

        @data.setter
        def data(self, mapped: Any) -> None:
            self._plain = mapped.view(np.ndarray)

        def _get(self, offset: int, dtype: Any, count: int = 1, override_order: Any = None) -> Any:
            """A read past the end means a cut file: said in words (numpy would say "index 0 is out of
            bounds" or "When changing to a larger dtype, its size must be a divisor ...")."""
            try:
                got = super()._get(offset, dtype, count, override_order)
            except ValueError:
                got = None  # a cut view numpy could not reinterpret
            if got is None or len(got) < int(count):  # checked after the read: this runs per vocabulary entry
                if offset + np.dtype(dtype).itemsize * int(count) > len(self._plain):
                    raise _Truncated(f"it ends after {len(self._plain)} bytes, inside its metadata")
                return super()._get(offset, dtype, count, override_order)
            return got

        def _build_tensors(self, start_offs: int, fields: list[Any]) -> None:
            try:
                needed = _size_needed(start_offs, fields)
            except (KeyError, ValueError):  # an unknown tensor type: the reader's own check says so
                needed = 0
            if needed > len(self._plain):
                raise _Truncated(f"{len(self._plain)} of {needed} bytes")
            super()._build_tensors(start_offs, fields)

        def _get_field_parts(self, orig_offs: int, raw_type: int) -> tuple[int, list[Any], list[int], list[Any]]:
            """An array of strings or numbers in one pass, its parts laid out as the reader lays them
            out: a slice of the map per item where the reader makes a few numpy views per item (most
            of what was left of the parse: SmolLM2's 49k tokens and 49k merges, about a second)."""
            value_type = gguf.GGUFValueType
            if raw_type != value_type.ARRAY:
                return super()._get_field_parts(orig_offs, raw_type)
            raw_itype, alen = self._get(orig_offs, np.uint32), self._get(orig_offs + 4, np.uint64)
            itype, count, start = int(raw_itype[0]), int(alen[0]), orig_offs + 12
            if itype == value_type.STRING:
                items, end = self._string_parts(start, count)
            elif value_type(itype) in self.gguf_scalar_to_np:
                values = self._get(start, self.gguf_scalar_to_np[value_type(itype)], count)
                items, end = [values[i:i + 1] for i in range(count)], start + int(values.nbytes)
            else:  # arrays of arrays: the reader's own way
                return super()._get_field_parts(orig_offs, raw_type)
            step = 2 if itype == value_type.STRING else 1
            types = [value_type.ARRAY, value_type(itype)] if count else [value_type.ARRAY]
            return end - orig_offs, [raw_itype, alen, *items], list(range(1 + step, 2 + step * count, step)), types

        def _string_parts(self, offs: int, count: int) -> tuple[list[Any], int]:
            """Each string's length and bytes as slices of the map (the reader's parts), and where they end."""
            plain, size = self._plain, len(self._plain)
            if count > (size - offs) // 8:  # every string takes 8 bytes at least: a lying count ends here
                raise _Truncated(f"it ends after {size} bytes, inside its metadata")
            swapped = "<" if sys.byteorder == "big" else ">"
            unpack, fmt, parts = struct.unpack_from, ("=" if self.byte_order == "I" else swapped) + "Q", []
            for _ in range(count):
                if offs + 8 > size:
                    raise _Truncated(f"it ends after {size} bytes, inside its metadata")
                (length,) = unpack(fmt, plain, offs)
                parts += (plain[offs:offs + 8], plain[offs + 8:offs + 8 + length])
                offs += 8 + length
            if offs > size:
                raise _Truncated(f"it ends after {size} bytes, inside its metadata")
            return parts, offs

    return Reader


def _check_tensors(reader: Any, label: str) -> None:
    """What the gguf package accepts but ggml cannot hold: more than GGML_MAX_DIMS dimensions."""
    for tensor in reader.tensors:
        if len(tensor.shape) > MAX_DIMS:
            raise NotGGUF(f"{label} is not a valid GGUF file: tensor {tensor.name!r} has {len(tensor.shape)} "
                          f"dimensions (at most {MAX_DIMS})")


def _info(reader: Any) -> ModelInfo:
    arch = _scalar(reader, "general.architecture", "")
    params = int(sum(int(t.n_elements) for t in reader.tensors))
    facts = Facts(
        architecture=arch,
        parameters=params,
        parameter_size=_scalar(reader, "general.size_label", "") or human_count(params),
        quantization=_quantization(reader),
        context_length=int(_scalar(reader, f"{arch}.context_length", 0)),
        embedding_length=int(_scalar(reader, f"{arch}.embedding_length", 0)),
        license=_scalar(reader, "general.license", ""),
        **kv_facts(arch, lambda key, default: _scalar(reader, f"{arch}.{key}", default)),
    )
    return ModelInfo(facts, _scalar(reader, "tokenizer.chat_template", ""), _special_tokens(reader), _metadata(reader))


# llama.cpp's sliding-window pattern per architecture when the GGUF has none: of every N layers the
# last one is full and the others slide (llama_hparams::set_swa_pattern, src/models/<arch>.cpp).
SWA_PATTERNS = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "gemma-embedding": 6, "cohere2": 4, "gpt-oss": 2,
                "exaone4": 4, "olmo2": 4}


def kv_facts(arch: str, get: Callable[[str, Any], Any]) -> dict[str, int]:
    """The Facts fields that size the KV cache: all layers' bytes per token, the sliding-window
    layers' share of them, and their window."""
    per_token = kv_bytes_per_token(get)
    layers = int(get("block_count", 0) or 0)
    window = int(get("attention.sliding_window", 0) or 0)
    sliding = _sliding_layers(arch, layers, get("attention.sliding_window_pattern", None)) if window else 0
    swa = per_token * sliding // layers if layers else 0
    return {"kv_bytes_per_token": per_token, "kv_swa_bytes_per_token": swa, "sliding_window": window if swa else 0}


def _sliding_layers(arch: str, layers: int, pattern: Any) -> int:
    """How many layers slide: the GGUF's per-layer flags, else its period, else the architecture's."""
    if isinstance(pattern, list):
        return sum(1 for flag in pattern[:layers] if flag)
    period = int(pattern or SWA_PATTERNS.get(arch, 0))
    return sum(1 for layer in range(layers) if layer % period < period - 1) if period else 0


def human_count(n: int) -> str:
    """135_000_000 -> "135M", 1_540_000_000 -> "1.5B"."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f}".rstrip("0").rstrip(".") + unit if value < 10 else f"{value:.0f}{unit}"
    return str(n)


def _scalar(reader: Any, key: str, default: Any) -> Any:
    field = reader.fields.get(key)
    return field.contents() if field is not None and field.types else default


def _quantization(reader: Any) -> str:
    import gguf

    file_type = _scalar(reader, "general.file_type", None)
    try:
        return gguf.LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        pass
    counts: dict[str, int] = {}
    for t in reader.tensors:  # no file_type key: the most common tensor type by element count
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + int(t.n_elements)
    return max(counts, key=counts.__getitem__) if counts else ""


def _special_tokens(reader: Any) -> dict[str, str]:
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    found = {}
    for kind in _SPECIAL:
        token_id = _scalar(reader, f"tokenizer.ggml.{kind}_token_id", None)
        if token_id is not None and tokens is not None and 0 <= int(token_id) < len(tokens.data):
            found[kind] = tokens.contents(int(token_id))
    return found


def _metadata(reader: Any) -> dict[str, Any]:
    """Every key/value; long arrays (vocabularies, merges) are summarised, not copied."""
    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or not field.types:
            continue
        if field.types[0].name == "ARRAY" and len(field.data) > _ARRAY_SHOWN:
            out[key] = f"[{len(field.data)} × {field.types[-1].name.lower()}]"
        else:
            out[key] = field.contents()
    return out


def _preview(head: bytes) -> str:
    text = head[:16].decode("latin-1")
    return repr("".join(c if c.isprintable() else "." for c in text))


__all__ = ["HEADER_SIZE", "check_header", "human_count", "read_info"]
