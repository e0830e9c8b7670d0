"""The runner's operations besides generation, as the dialects use them: one function each, with a
typed answer (localrun.ops). generation.py is the same for generation; between them, no route names
a runner operation or reads a runner's dict.

Each function leases the model (loading it when needed, counting as a request for keep-alive and
the queue), asks its runner (`localrun.ops.ask`), and returns the decoded answer.
"""

from __future__ import annotations

import time
from typing import Any

from localrun.memory import KvShape, cache_bytes
from localrun.native import GenerateRequest, TokenLogprob
from localrun.ops import (
    Detokenize, Embed, Embeddings, Perplexity, PerplexityResult, PromptLogprobs, Render, Score, Scores, Text,
    Tokenize, Tokens, ask,
)
from localrun.server.defaults import with_model_prompt
from localrun.server.manager import ModelManager, check_context
from localrun.upstream.pool import UpstreamLease


async def tokenize(manager: ModelManager, model: str, text: str, special: bool) -> Tokens:
    async with manager.lease(model) as loaded:
        return await ask(loaded.runner, Tokenize(text, special))


async def detokenize(manager: ModelManager, model: str, tokens: list[int]) -> Text:
    async with manager.lease(model) as loaded:
        return await ask(loaded.runner, Detokenize(tokens))


async def count_tokens(manager: ModelManager, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]] | None, tool_choice: str | dict[str, Any] | None) -> int:
    """The real count: the conversation, with the model's Modelfile prompt, through its chat template
    and tokenizer, as a generation would see it."""
    async with manager.lease(model) as loaded:
        native = with_model_prompt(GenerateRequest(model=model, messages=messages), loaded.model)
        assert native.messages is not None
        rendered: Tokens = await ask(loaded.runner, Render(native.messages, tools, tool_choice, native.template))
    return len(rendered.tokens)


async def embed(manager: ModelManager, model: str, inputs: list[str], truncate: bool,
                num_ctx: int | None = None, keep_alive: Any = None) -> Embeddings:
    """The vectors for `inputs`; no inputs only loads the model (Ollama's way). `load_ms` is how long
    the model took to come (0 when it was loaded)."""
    started = time.perf_counter()
    async with manager.lease(model, num_ctx, keep_alive) as loaded:
        load_ms = (time.perf_counter() - started) * 1000.0
        answer = await ask(loaded.runner, Embed(inputs, truncate)) if inputs else Embeddings([], 0)
    answer.load_ms = load_ms
    return answer


async def score(manager: ModelManager, model: str, options: list[str], prompt: str | None,
                messages: list[dict[str, Any]] | None) -> Scores:
    async with manager.lease(model) as loaded:
        return await ask(loaded.runner, Score(options, prompt, messages))


async def prompt_logprobs(manager: ModelManager, model: str, prompt: str, top: int,
                          num_ctx: int | None = None, keep_alive: Any = None) -> list[TokenLogprob]:
    """The prompt's own tokens with their log-probabilities (OpenAI's echo with logprobs)."""
    async with manager.lease(model, num_ctx, keep_alive) as loaded:
        return (await ask(loaded.runner, PromptLogprobs(prompt, top))).tokens


async def perplexity(manager: ModelManager, model: str, text: str, ctx: int, batch: int) -> PerplexityResult:
    """The job's own context counts against the memory budget while it runs: `batch // ctx` chunks
    of `ctx` cells at most. Cancelling the awaiting task stops the job between two decodes."""
    async with manager.lease(model) as loaded:
        if isinstance(loaded, UpstreamLease):
            raise loaded.runner.unsupported(Perplexity.OP)
        check_context(loaded.model, ctx, "ctx")
        chunks = max(1, batch // ctx)  # its side context keeps every cell, as it cuts back anywhere
        extra = cache_bytes(KvShape.of(loaded.model.facts), loaded.options.kv_cache_type, ctx, chunks, batch,
                            swa_full=True)
        with manager.reserve(loaded, extra):
            return await ask(loaded.runner, Perplexity(text, ctx, batch))


__all__ = ["count_tokens", "detokenize", "embed", "perplexity", "prompt_logprobs", "score", "tokenize"]
