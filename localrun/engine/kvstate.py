"""One sequence's saved KV cache (`llama_state_seq_get_data`), re-laid for a context that stores its
values the other way round.

Without flash attention llama.cpp keeps each layer's values transposed (a row per embedding
dimension, a column per cell), so that the attention's V product reads them as a matrix; with it,
a row per cell, like the keys. A context of one kind refuses the other's saved state ("incompatible
V transposition"), although the numbers are the same: this module rewrites the values' layout in
the saved bytes, which the vendored llama.cpp writes as (`llama_kv_cache::state_write`):

    magic u32, seq_id i32, n_stream u32, then per stream: cell_count u32, and if any cells:
      per cell: pos i32, n_seq_id u32, n_seq_id x seq_id i32
      v_trans u32, n_layer u32
      per layer, keys:   type i32, row_bytes u64, cell_count rows
      per layer, values: type i32, row_bytes u64, cell_count rows                (v_trans 0)
                     or  type i32, el_bytes u32, n_embd u32, n_embd x cell_count  (v_trans 1)

Models whose cells carry more (M-RoPE positions, per-layer n-gram hashes) write another meta
layout; `relaid` then finds the bytes do not add up and raises, rather than guessing.
"""

from __future__ import annotations

import struct

import numpy as np


class StateLayoutError(ValueError):
    """The saved state is not laid out as this module reads it."""


class _Reader:
    """Walks the saved bytes, copying what it reads into `out` unless told to skip it."""

    def __init__(self, blob: bytes) -> None:
        self.data, self.at, self.out = memoryview(blob), 0, bytearray()

    def take(self, fmt: str, copy: bool = True) -> tuple:
        size = struct.calcsize(fmt)
        values = struct.unpack_from(fmt, self.data, self.at)
        if copy:
            self.out += self.data[self.at:self.at + size]
        self.at += size
        return values

    def raw(self, size: int, copy: bool = True) -> memoryview:
        if self.at + size > len(self.data):
            raise StateLayoutError("the saved state ends early")
        chunk = self.data[self.at:self.at + size]
        if copy:
            self.out += chunk
        self.at += size
        return chunk


def relaid(blob: bytes, transposed: bool) -> bytes:
    """The same saved sequence with its values laid out as a context with `v_trans == transposed`
    reads them (a context without flash attention: True). Unchanged when they already are."""
    r = _Reader(blob)
    try:
        r.take("<Ii")  # magic, seq_id
        (n_stream,) = r.take("<I")
        for _ in range(n_stream):
            (cells,) = r.take("<I")
            if cells:
                _stream(r, cells, transposed)
    except struct.error as error:
        raise StateLayoutError(f"the saved state ends early: {error}") from None
    if r.at != len(blob):
        raise StateLayoutError(f"{len(blob) - r.at} bytes of the saved state were not understood")
    return bytes(r.out)


def _stream(r: _Reader, cells: int, transposed: bool) -> None:
    for _ in range(cells):
        _pos, n_seq = r.take("<iI")
        r.raw(4 * n_seq)
    v_trans, n_layer = r.take("<II", copy=False)
    r.out += struct.pack("<II", int(transposed), n_layer)
    for _ in range(n_layer):  # keys: a row per cell either way
        _type, row = r.take("<iQ")
        r.raw(cells * row)
    for _ in range(n_layer):
        if v_trans:
            kind, el, n_embd = r.take("<iII", copy=False)
            values = np.frombuffer(r.raw(n_embd * cells * el, copy=False), dtype=f"V{el}").reshape(n_embd, cells).T
        else:
            kind, row = r.take("<iQ", copy=False)
            el = _element_bytes(kind)
            n_embd = row // el
            values = np.frombuffer(r.raw(cells * row, copy=False), dtype=f"V{el}").reshape(cells, n_embd)
        if transposed:  # values is (cells, n_embd) here
            r.out += struct.pack("<iII", kind, el, n_embd) + np.ascontiguousarray(values.T).tobytes()
        else:
            r.out += struct.pack("<iQ", kind, n_embd * el) + np.ascontiguousarray(values).tobytes()


_ELEMENT_BYTES = {0: 4, 1: 2, 30: 2}  # GGML_TYPE_F32, F16, BF16: the cache types a transposed V allows


def _element_bytes(kind: int) -> int:
    try:
        return _ELEMENT_BYTES[kind]
    except KeyError:
        raise StateLayoutError(f"values of ggml type {kind} cannot be laid out transposed") from None


__all__ = ["StateLayoutError", "relaid"]
