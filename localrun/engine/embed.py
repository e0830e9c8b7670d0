"""Embeddings: a second llama context with embeddings on, created when first needed.

Several inputs share one batch (one sequence id each); the model's pooling is used, or mean
pooling for generative models that have none. Vectors are L2-normalised.

An input longer than the context is refused (ContextOverflow), unless it comes as `Truncate(text)`:
then it is cut to the context, as Ollama's `truncate: true` does, keeping the closing token the
tokenizer appends (EOS/SEP), which pooling by the last or separator token depends on.
"""

from __future__ import annotations

import ctypes
import math

import llama_cpp as L

from localrun.engine.backend import Model
from localrun.engine.sidecontext import SideContext
from localrun.errors import ContextOverflow

MAX_SEQS = 16


class Truncate(str):
    """An input that is cut to fit the context instead of refused (a str, so any text API takes it)."""


class Embedder:
    """Owns the embeddings context; `embed` returns normalised vectors and the tokens evaluated."""

    def __init__(self, model: Model, ctx_size: int, threads: int) -> None:
        self.model, self.ctx_size = model, ctx_size
        self.n_embd = L.llama_model_n_embd(model.ptr)
        options = dict(n_ctx=ctx_size, n_batch=ctx_size, n_seq_max=MAX_SEQS, threads=threads, kv_unified=True,
                       embeddings=True)
        self.side = SideContext(model, "embedding", **options)
        if L.llama_pooling_type(self.side.ctx) == L.LLAMA_POOLING_TYPE_NONE:
            self.side.close()  # a generative model: pool by mean over the input's tokens
            self.side = SideContext(model, "embedding", **options, pooling=L.LLAMA_POOLING_TYPE_MEAN)

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        inputs = [self._tokens(i, text) for i, text in enumerate(texts)]
        vectors: list[list[float]] = []
        for group in self._groups(inputs):
            vectors.extend(self._run(group))
        return vectors, sum(map(len, inputs))

    def _tokens(self, index: int, text: str) -> list[int]:
        tokens = self.model.tokenize(text, True, True) or [L.llama_vocab_bos(self.model.vocab)]
        if len(tokens) <= self.ctx_size:
            return tokens
        if not isinstance(text, Truncate):
            raise ContextOverflow(f"input {index} is {len(tokens)} tokens; embeddings take at most {self.ctx_size} "
                                  f"(the input length exceeds the context length)")
        vocab = self.model.vocab
        closing = L.llama_vocab_get_add_eos(vocab) or L.llama_vocab_get_add_sep(vocab)
        return tokens[: self.ctx_size - 1] + tokens[-1:] if closing else tokens[: self.ctx_size]

    def _groups(self, inputs: list[list[int]]):
        """Consecutive inputs that fit one batch together."""
        group: list[list[int]] = []
        for tokens in inputs:
            if group and (len(group) == MAX_SEQS or sum(map(len, group)) + len(tokens) > self.ctx_size):
                yield group
                group = []
            group.append(tokens)
        if group:
            yield group

    def _run(self, group: list[list[int]]) -> list[list[float]]:
        batch = self.side.batch
        batch.clear()
        for seq_id, tokens in enumerate(group):
            for pos, token in enumerate(tokens):
                batch.add(token, pos, seq_id, True)
        self.side.clear()
        self.side.decode()
        return [self._vector(seq_id) for seq_id in range(len(group))]

    def _vector(self, seq_id: int) -> list[float]:
        ptr = L.llama_get_embeddings_seq(self.side.ctx, seq_id)
        values = ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float))[: self.n_embd]
        norm = math.sqrt(sum(v * v for v in values)) or 1.0
        return [v / norm for v in values]

    def close(self) -> None:
        self.side.close()


__all__ = ["Embedder", "Truncate"]
