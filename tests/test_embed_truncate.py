"""Embedding inputs longer than the context: Ollama's routes cut them by default (`truncate: true`) and
answer 400 with `truncate: false`; OpenAI's route answers 400 as OpenAI does, unless the request
asks for Ollama's `truncate`. First the engine on a tiny embeddings context, then the real daemon."""

from __future__ import annotations

import math

import ollama
import openai
import pytest

from localrun.engine import Engine, EngineSettings
from localrun.engine.embed import Truncate
from localrun.errors import ContextOverflow
from tests.daemon import EMBED_CTX

MODEL = "smollm2"
LONG = "The quick brown fox jumps over the lazy dog. " * 60  # about 600 tokens, over the daemon's EMBED_CTX


def cosine(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b))  # both are unit vectors


@pytest.fixture(scope="module")
def engine(smollm2_path):
    with Engine(str(smollm2_path), EngineSettings(parallel=1, ctx_size=256, embed_ctx_size=64)) as e:
        yield e


def test_engine_refuses_a_long_input_and_cuts_one_marked_truncate_to_its_prefix(engine):
    text = "one two three four five six seven eight nine ten " * 20
    with pytest.raises(ContextOverflow, match="exceeds the context length"):
        engine.embed([text])
    tokens = engine.tokenize(text, add_special=True, parse_special=True)
    assert len(tokens) > 64
    prefix = engine.detokenize(tokens[:64])
    (cut, whole), n = engine.embed([Truncate(text), prefix])
    assert n == 64 + len(engine.tokenize(prefix, add_special=True, parse_special=True))
    assert cosine(cut, whole) > 0.9999  # the first 64 tokens, nothing else
    _, m = engine.embed([Truncate("a short text")])
    assert m == len(engine.tokenize("a short text", add_special=True, parse_special=True))


@pytest.fixture(scope="module")
def ollama_cut(daemon):
    """The long input through Ollama's client, cut by default (each long embedding costs seconds)."""
    return ollama.Client(host=daemon.url, timeout=120).embed(model=MODEL, input=LONG)


def test_ollama_embed_truncates_by_default_and_refuses_with_truncate_false(daemon, ollama_cut):
    client = ollama.Client(host=daemon.url, timeout=120)
    r = ollama_cut
    assert r.prompt_eval_count == EMBED_CTX and len(r.embeddings) == 1
    with pytest.raises(ollama.ResponseError) as e:
        client.embed(model=MODEL, input=[LONG], truncate=False)
    assert e.value.status_code == 400 and "context length" in e.value.error
    legacy = client.embeddings(model=MODEL, prompt=LONG).embedding
    assert cosine(legacy, r.embeddings[0]) > 0.9999


def test_openai_embeddings_refuse_a_long_input_unless_asked_to_truncate(daemon, ollama_cut):
    client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused")
    with pytest.raises(openai.BadRequestError, match="context length"):
        client.embeddings.create(model=MODEL, input=LONG)
    cut = client.embeddings.create(model=MODEL, input=LONG, extra_body={"truncate": True})
    assert cut.usage.prompt_tokens == EMBED_CTX
    assert cosine(cut.data[0].embedding, ollama_cut.embeddings[0]) > 0.9999
