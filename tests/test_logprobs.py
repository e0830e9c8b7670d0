"""The one log-softmax and top-n every engine path uses (sampling, scoring, perplexity, the row probe)."""

from __future__ import annotations

import numpy as np

from localrun.engine.logprobs import log_softmax, top_n
from localrun.engine.perplexity import token_nll
from localrun.sampling import MAX_TOP_LOGPROBS


def test_a_row_alone_and_in_a_block_get_the_same_bits():
    """A token's log-probability must not depend on whether it was computed for one row (a generated
    token's logprobs) or among many (scoring, prompt logprobs, perplexity)."""
    logits = np.random.default_rng(0).normal(0, 4, size=(5, 1000)).astype(np.float32)
    block = log_softmax(logits)
    for row, expected in zip(logits, block):
        assert np.array_equal(log_softmax(row), expected)
    assert np.allclose(np.exp(block).sum(axis=1), 1.0)
    naive = logits.astype(np.float64) - np.log(np.exp(logits.astype(np.float64)).sum(axis=1, keepdims=True))
    assert np.allclose(block, naive)


def test_perplexity_scores_with_the_same_log_softmax():
    logits = np.random.default_rng(1).normal(0, 4, size=(7, 300)).astype(np.float32)
    targets = np.arange(7) * 11
    assert np.array_equal(token_nll(logits, targets, block=3), -log_softmax(logits)[np.arange(7), targets])


def test_top_n_is_most_likely_first_and_capped():
    row = np.log(np.array([0.1, 0.4, 0.2, 0.3]))
    assert [t for t, _ in top_n(row, 3)] == [1, 3, 2]
    assert top_n(row, 0) == [] and len(top_n(row, 10)) == 4
    assert len(top_n(np.zeros(100), 50)) == MAX_TOP_LOGPROBS
