"""The KV cache estimate: sliding-window layers (Gemma 3) counted at llama.cpp's SWA cache size (the
engine's slots keep only the window; side contexts such as scoring keep every cell), the scoring
and embeddings contexts counted too; from plain data, then against what llama.cpp allocates for the real Gemma 3 270M
(its own log of the buffers it made)."""

from __future__ import annotations

import logging
import re

import pytest

from localrun.config import EngineSettings
from localrun.memory import KvShape, cache_bytes, default_context, load_cache_bytes
from localrun.store.ggufinfo import kv_facts
from tests.test_engine import THREADS

KIB, MIB = 1024, 2**20
# Gemma 3 270M's metadata: 18 layers, one KV head of 256, a 512-token window on 5 layers of every 6.
GEMMA3 = {"block_count": 18, "embedding_length": 640, "attention.head_count": 4, "attention.head_count_kv": 1,
          "attention.key_length": 256, "attention.value_length": 256, "attention.sliding_window": 512}
GEMMA_SHAPE = KvShape(18 * KIB, 15 * KIB, 512)


@pytest.mark.parametrize("arch, extra, expected", [
    ("gemma3", {}, (18 * KIB, 15 * KIB, 512)),  # layers 5, 11 and 17 are full
    ("gemma3", {"attention.sliding_window_pattern": [True, False] * 9}, (18 * KIB, 9 * KIB, 512)),
    ("gemma3", {"attention.sliding_window_pattern": 3}, (18 * KIB, 12 * KIB, 512)),
    ("gemma3", {"attention.sliding_window": 0}, (18 * KIB, 0, 0)),
    ("llama", {}, (18 * KIB, 0, 0)),  # a window llama.cpp does not apply to this architecture
])
def test_the_sliding_window_layers_are_read_from_the_metadata(arch, extra, expected):
    meta = {**GEMMA3, **extra}
    facts = kv_facts(arch, lambda key, default: meta.get(key, default))
    assert (facts["kv_bytes_per_token"], facts["kv_swa_bytes_per_token"], facts["sliding_window"]) == expected


@pytest.mark.parametrize("ctx, sequences, unified, swa_full, expected", [
    (32768, 1, False, False, 3 * KIB * 32768 + 15 * KIB * 1024),  # window 512 + a batch of 512
    (32768, 1, False, True, 18 * KIB * 32768),
    (8192, 4, False, False, 3 * KIB * 8192 * 4 + 15 * KIB * 1024 * 4),  # a window per slot's stream
    (8192, 4, True, False, 3 * KIB * 8192 * 4 + 15 * KIB * 2560),  # one stream: 4 windows + a batch
    (256, 2, False, False, 18 * KIB * 256 * 2),  # a context shorter than the window
    (700, 1, False, False, 3 * KIB * 700 + 15 * KIB * 768),  # min(700, 1024), padded to 256
])
def test_sliding_window_layers_hold_only_llama_cpps_window(ctx, sequences, unified, swa_full, expected):
    assert cache_bytes(GEMMA_SHAPE, "f16", ctx, sequences, 512, unified, swa_full) == expected


def test_a_load_counts_its_slots_and_the_scoring_and_embeddings_contexts():
    options = EngineSettings(parallel=2, ctx_size=4096, embed_ctx_size=1024)
    slots = cache_bytes(GEMMA_SHAPE, "f16", 4096, 2, 512)
    sides = 18 * KIB * (4096 + 1024)  # both keep every cell
    assert load_cache_bytes(GEMMA_SHAPE, options, 4096) == slots + sides
    plain = KvShape(30 * KIB)  # and its slots' and scoring's first 256 cells in prefix mode, `auto` on CPUs
    assert load_cache_bytes(plain, options, 4096) == 30 * KIB * (4096 * 3 + 1024 + 3 * 256)


def test_gemma3s_automatic_context_is_its_trained_length_where_the_window_leaves_room():
    options, budget, weights = EngineSettings(parallel=4), 2 * 2**30, 253 * MIB
    assert default_context(32768, GEMMA_SHAPE, weights, options, budget) == (32768, "its trained length")
    every_cell = KvShape(18 * KIB)  # the estimate before: every layer at full length
    ctx, why = default_context(32768, every_cell, weights, options, budget)
    assert ctx < 24576 and "memory budget" in why


_SIZE = re.compile(r"llama_kv_cache: size = +([\d.]+) MiB")


@pytest.mark.parametrize("sequences, unified, swa_full", [(2, False, False), (3, True, False), (2, False, True)])
def test_the_estimate_is_what_llama_cpp_allocates_for_gemma3(gemma_path, caplog, sequences, unified, swa_full):
    import llama_cpp as L

    from localrun.engine.backend import Model, new_context
    from localrun.store.ggufinfo import read_info

    shape = KvShape.of(read_info(gemma_path).facts)
    assert shape == GEMMA_SHAPE
    model = Model(str(gemma_path), None)
    try:
        with caplog.at_level(logging.DEBUG, logger="localrun.llama"):
            ctx = new_context(model, n_ctx=4096 * sequences, n_batch=512, n_seq_max=sequences, threads=THREADS,
                              kv_unified=unified, swa_full=swa_full)
            L.llama_free(ctx)
    finally:
        model.free()
    made = sum(float(size) for size in _SIZE.findall(caplog.text))  # the full layers' cache, then the SWA one
    assert made * MIB == pytest.approx(cache_bytes(shape, "f16", 4096, sequences, 512, unified, swa_full), abs=0.02 * MIB)


def test_the_embeddings_context_is_counted_as_llama_cpp_allocates_it(smollm2_path, caplog):
    from localrun.engine.backend import Model
    from localrun.engine.embed import Embedder
    from localrun.store.ggufinfo import read_info

    shape = KvShape.of(read_info(smollm2_path).facts)
    model = Model(str(smollm2_path), None)
    try:
        with caplog.at_level(logging.DEBUG, logger="localrun.llama"):
            Embedder(model, 1024, THREADS).side.close()
    finally:
        model.free()
    made = [float(size) * MIB for size in _SIZE.findall(caplog.text)]  # twice when made again to pool by mean
    more, less = EngineSettings(embed_ctx_size=2048), EngineSettings(embed_ctx_size=1024)
    counted = load_cache_bytes(shape, more, 256) - load_cache_bytes(shape, less, 256)  # for 1024 tokens
    assert made and made == pytest.approx([counted] * len(made), abs=0.02 * MIB)
