"""Embedding vectors as the dialects hand them out: shortened to `dimensions`, or packed as base64."""

from __future__ import annotations

import base64
import math

import numpy as np

from localrun.errors import InvalidRequest


def shortened(vectors: list[list[float]], dimensions: int | None) -> list[list[float]]:
    """Each vector cut to `dimensions` and re-normalised (OpenAI's and Ollama's `dimensions`); more
    dimensions than the model makes is a 400, not a silent full-length answer."""
    if dimensions is None or not vectors:
        return vectors
    size = len(vectors[0])
    if dimensions > size:
        raise InvalidRequest(f"dimensions: this model's embeddings have {size} dimensions; ask for at most that",
                             param="dimensions")
    return [_cut(vector, dimensions) for vector in vectors] if dimensions < size else vectors


def _cut(vector: list[float], dimensions: int) -> list[float]:
    cut = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in cut)) or 1.0
    return [x / norm for x in cut]


def as_base64(vector: list[float]) -> str:
    """OpenAI's `encoding_format: "base64"`: the little-endian float32 bytes, base64-encoded."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


__all__ = ["as_base64", "shortened"]
