"""The plain-greedy shortcut (`sampler.greedy_choice`) against llama.cpp's own chain of logit bias and
greedy, applied to the same logits; and the shortcut in use on the real model."""

from __future__ import annotations

import ctypes
import math

import llama_cpp as L
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from localrun.engine.sampler import Sampler, _logit_bias, greedy_choice
from localrun.sampling import SamplingParams

VOCAB = 8
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


def chain_choice(logits: np.ndarray, bias: dict[int, float]) -> int:
    """What llama.cpp's chain (logit bias, then greedy) selects from `logits`."""
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    if bias:
        L.llama_sampler_chain_add(chain, _logit_bias(len(logits), bias))
    L.llama_sampler_chain_add(chain, L.llama_sampler_init_greedy())
    data = np.zeros(len(logits), dtype=TOKEN_DATA)
    data["id"], data["logit"] = np.arange(len(logits)), logits
    array = L.llama_token_data_array(ctypes.cast(data.ctypes.data, ctypes.POINTER(L.llama_token_data)), len(logits),
                                     -1, False)
    L.llama_sampler_apply(chain, ctypes.byref(array))
    L.llama_sampler_free(chain)
    return int(data[array.selected]["id"])


# Few distinct values, so that ties (first index wins) and biases landing on the maximum are common.
values = st.sampled_from([-2.0, 0.0, 0.5, 1.0, 1.5, 3.0])
logit_arrays = st.lists(values, min_size=VOCAB, max_size=VOCAB).map(lambda xs: np.array(xs, dtype=np.float32))
biases = st.dictionaries(st.integers(0, VOCAB - 1), st.sampled_from([-math.inf, -1.0, -0.5, 0.5, 1.0, 2.5]), max_size=3)


@settings(max_examples=400, deadline=None)
@given(logit_arrays, biases)
def test_the_shortcut_selects_what_llama_cpp_selects_or_leaves_it_to_the_chain(logits, bias):
    choice = greedy_choice(logits, {t: np.float32(b) for t, b in bias.items()})
    if choice is None:  # only where the raw favourite is biased
        assert int(logits.argmax()) in bias
    else:
        assert choice == chain_choice(logits, bias)


def test_a_nan_is_left_to_the_chain_which_skips_it():
    logits = np.array([0.0, np.nan, 1.0, 0.5], dtype=np.float32)
    assert greedy_choice(logits, {}) is None
    assert chain_choice(logits, {}) == 2


def test_the_real_models_greedy_tokens_are_the_chains(smollm2_path):
    """SmolLM2's logits after a prompt: the shortcut and the chain agree, ignore_eos's bans included."""
    from localrun.engine.backend import Batch, Model, new_context
    from localrun.engine.logprobs import logits_at

    model = Model(str(smollm2_path), None)
    ctx = new_context(model, n_ctx=256, n_batch=64, n_seq_max=1, threads=2)
    batch = Batch(64)
    for pos, token in enumerate(model.tokenize("The capital of France is", add_special=True, parse_special=False)):
        batch.add(token, pos, 0, True)
    assert batch.decode(ctx) == 0
    greedy = SamplingParams(temperature=0.0).filled()
    favourite = int(logits_at(ctx, batch.n - 1, model.n_vocab).argmax())
    for banned in ([], model.eog_tokens(), [favourite]):
        sampler = Sampler(model.vocab, model.n_vocab, greedy, seed=1, banned=banned)
        for index in range(batch.n):
            expected = chain_choice(logits_at(ctx, index, model.n_vocab).copy(), dict.fromkeys(banned, -math.inf))
            assert sampler.sample(ctx, index) == expected
        assert (sampler.sample(ctx, batch.n - 1) == favourite) == (favourite not in banned)
        sampler.free()
    batch.free()
    L.llama_free(ctx)
    model.free()
