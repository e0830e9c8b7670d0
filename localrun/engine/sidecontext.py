"""A llama context of its own beside the engine's, for one job: embeddings, perplexity
or the row probe. Each needs the same lifecycle: a context and one batch over the shared model, a
decode that raises on failure, and both freed exactly once.
"""

from __future__ import annotations

from typing import Any

import llama_cpp as L

from localrun.engine.backend import Batch, Model, new_context
from localrun.errors import LocalrunError


class SideContext:
    """`new_context(model, **options)` and a batch of `options["n_batch"]` tokens; `what` names the job
    in a decode's error ("scoring failed: llama_decode returned 1"). Close it, or use it with `with`."""

    def __init__(self, model: Model, what: str, **options: Any) -> None:
        self.what = what
        self.ctx = new_context(model, **options)
        self.memory = L.llama_get_memory(self.ctx)
        self.batch = Batch(options["n_batch"])

    def decode(self) -> None:
        """Decode the batch as filled."""
        status = self.batch.decode(self.ctx)
        if status != 0:
            raise LocalrunError(f"{self.what} failed: llama_decode returned {status}")

    def clear(self) -> None:
        """Empty the KV cache of every sequence."""
        L.llama_memory_clear(self.memory, True)

    def close(self) -> None:
        """Free the batch and the context; safe to call twice."""
        self.batch.free()
        if self.ctx:
            L.llama_free(self.ctx)
            self.ctx = None

    def __enter__(self) -> SideContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["SideContext"]
