"""Re-laying a saved sequence's values between contexts with and without flash attention (`kvstate`),
from bytes built here in llama.cpp's layout; the engine tests move real caches."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from localrun.engine.kvstate import StateLayoutError, relaid

F16 = 1


def saved(cells: int, layers: int, n_embd: int, transposed: bool, seed: int = 0) -> tuple[bytes, list[np.ndarray]]:
    """A one-stream saved sequence, and each layer's values as (cells, n_embd) float16."""
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal((cells, n_embd)).astype(np.float16) for _ in range(layers)]
    out = struct.pack("<Ii", 0x67676C61, 3) + struct.pack("<I", 2) + struct.pack("<I", 0)  # stream 0: empty
    out += struct.pack("<I", cells) + b"".join(struct.pack("<iIi", pos, 1, 3) for pos in range(cells))
    out += struct.pack("<II", int(transposed), layers)
    for layer in range(layers):  # keys: any bytes, a row per cell
        out += struct.pack("<iQ", F16, 2 * n_embd) + bytes([layer]) * (2 * n_embd * cells)
    for v in values:
        if transposed:
            out += struct.pack("<iII", F16, 2, n_embd) + np.ascontiguousarray(v.T).tobytes()
        else:
            out += struct.pack("<iQ", F16, 2 * n_embd) + v.tobytes()
    return out, values


def test_values_are_transposed_and_back_and_nothing_else_changes():
    rows, values = saved(cells=5, layers=3, n_embd=8, transposed=False)
    columns, _ = saved(cells=5, layers=3, n_embd=8, transposed=True)
    assert relaid(rows, transposed=True) == columns
    assert relaid(columns, transposed=False) == rows
    assert relaid(rows, transposed=False) == rows and relaid(columns, transposed=True) == columns


def test_a_state_that_does_not_add_up_is_refused():
    rows, _ = saved(cells=4, layers=2, n_embd=8, transposed=False)
    with pytest.raises(StateLayoutError):
        relaid(rows[:-3], transposed=True)
    with pytest.raises(StateLayoutError):
        relaid(rows + b"\0\0\0\0", transposed=True)
    q8 = rows.replace(struct.pack("<iQ", F16, 16), struct.pack("<iQ", 8, 16))  # GGML_TYPE_Q8_0 values
    with pytest.raises(StateLayoutError):
        relaid(q8, transposed=True)
