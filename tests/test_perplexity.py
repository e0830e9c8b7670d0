"""Perplexity: the engine's batched computation equals a reference computed directly with
llama-cpp-python's high-level `Llama` (one chunk at a time, same scoring rule), on the real model;
the same number comes back through `localrun perplexity` and the daemon's /api/perplexity."""

from __future__ import annotations

import contextlib

import json
import os
import re
import threading
import time
from pathlib import Path

import httpx
import llama_cpp
import numpy as np
import pytest

from localrun.engine.backend import Model
from localrun.engine.perplexity import first_scored, perplexity, split_chunks, token_nll
from localrun.errors import InvalidRequest
from tests.cli import run_cli
from tests.daemon import start_daemon
from tests.test_engine import THREADS

CTX = 128

# Public domain: Lewis Carroll, Alice's Adventures in Wonderland (1865), chapter I.
TEXT = """Alice was beginning to get very tired of sitting by her sister on the bank, and of having nothing to do:
once or twice she had peeped into the book her sister was reading, but it had no pictures or conversations in it,
'and what is the use of a book,' thought Alice 'without pictures or conversations?'

So she was considering in her own mind (as well as she could, for the hot day made her feel very sleepy and
stupid), whether the pleasure of making a daisy-chain would be worth the trouble of getting up and picking the
daisies, when suddenly a White Rabbit with pink eyes ran close by her.

There was nothing so very remarkable in that; nor did Alice think it so very much out of the way to hear the
Rabbit say to itself, 'Oh dear! Oh dear! I shall be late!' (when she thought it over afterwards, it occurred to
her that she ought to have wondered at this, but at the time it all seemed quite natural); but when the Rabbit
actually took a watch out of its waistcoat-pocket, and looked at it, and then hurried on, Alice started to her
feet, for it flashed across her mind that she had never before seen a rabbit with either a waistcoat-pocket, or a
watch to take out of it, and burning with curiosity, she ran across the field after it, and fortunately was just
in time to see it pop down a large rabbit-hole under the hedge.

In another moment down went Alice after it, never once considering how in the world she was to get out again.

The rabbit-hole went straight on like a tunnel for some way, and then dipped suddenly down, so suddenly that
Alice had not a moment to think about stopping herself before she found herself falling down a very deep well.

Either the well was very deep, or she fell very slowly, for she had plenty of time as she went down to look about
her and to wonder what was going to happen next. First, she tried to look down and make out what she was coming
to, but it was too dark to see anything; then she looked at the sides of the well, and noticed that they were
filled with cupboards and book-shelves; here and there she saw maps and pictures hung upon pegs. She took down a
jar from one of the shelves as she passed; it was labelled 'ORANGE MARMALADE', but to her great disappointment it
was empty: she did not like to drop the jar for fear of killing somebody underneath, so managed to put it into one
of the cupboards as she fell past it.
"""


def reference_perplexity(path, text: str = TEXT) -> float:
    """llama-perplexity's rule applied by hand to llama-cpp-python's own logits, one chunk per eval."""
    llm = llama_cpp.Llama(str(path), n_ctx=CTX, n_batch=CTX, logits_all=True, verbose=False, n_threads=THREADS,
                          n_threads_batch=THREADS)
    tokens = llm.tokenize(text.encode(), add_bos=True, special=False)
    bos = llm.token_bos() if llm._model.add_bos_token() else None
    first, nll = first_scored(CTX), []
    for chunk in split_chunks(tokens, CTX, bos):
        llm.reset()
        llm.eval(chunk)
        for j in range(first, CTX - 1):
            row = np.asarray(llm.scores[j], dtype=np.float64)
            peak = row.max()
            nll.append(np.log(np.exp(row - peak).sum()) + peak - row[chunk[j + 1]])
    llm.close()
    assert len(nll) >= 2 * (CTX - 1 - first)  # at least two chunks: batching is exercised
    return float(np.exp(np.mean(nll)))


@pytest.fixture(scope="module")
def reference(smollm2_path) -> float:
    return reference_perplexity(smollm2_path)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """A daemon of our own: one small slot."""
    d = start_daemon(tmp_path_factory.mktemp("ppl-home"), {"LOCALRUN_THREADS": str(THREADS), "LOCALRUN_PARALLEL": "1",
                                                            "LOCALRUN_CTX_SIZE": "512"})
    yield d
    d.stop()


@pytest.fixture(scope="module")
def model(smollm2_path):
    m = Model(str(smollm2_path), None)
    yield m
    m.free()


def test_engine_equals_the_llama_cpp_python_reference(model, reference):
    batched = perplexity(model, TEXT, ctx=CTX, batch=2 * CTX, threads=THREADS)  # two chunks per llama_decode
    assert batched.chunks >= 4 and batched.scored == batched.chunks * (CTX - 1 - first_scored(CTX))
    assert batched.perplexity == pytest.approx(reference, rel=1e-3)
    single = perplexity(model, TEXT, ctx=CTX, batch=CTX, threads=THREADS)
    assert single.perplexity == pytest.approx(batched.perplexity, rel=1e-6)
    assert 1.0 < batched.perplexity < 1000.0


def test_a_model_that_adds_bos_equals_its_reference(gemma_path):
    gemma = Model(str(gemma_path), None)  # Gemma 3 adds BOS: every chunk starts with it
    text = TEXT[:1400]  # two chunks
    try:
        result = perplexity(gemma, text, ctx=CTX, batch=4 * CTX, threads=THREADS)
    finally:
        gemma.free()
    assert result.chunks == 2
    assert result.perplexity == pytest.approx(reference_perplexity(gemma_path, text), rel=1e-3)


def test_a_text_shorter_than_one_chunk_is_refused(model):
    with pytest.raises(InvalidRequest, match=r"the text is \d+ tokens; perplexity needs at least one chunk of 128"):
        perplexity(model, "Too short.", ctx=CTX)


def test_ctx_beyond_the_training_context_is_refused(model):
    with pytest.raises(InvalidRequest, match="training context 8192, got 9000"):
        perplexity(model, TEXT, ctx=9000)


def test_chunks_drop_the_tail_and_start_with_bos_when_the_model_adds_one():
    assert split_chunks(list(range(10)), 4, None) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert split_chunks(list(range(10)), 4, 99) == [[99, 1, 2, 3], [99, 5, 6, 7]]
    assert split_chunks([1, 2, 3], 4, None) == []


def test_token_nll_is_minus_log_softmax_in_blocks():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(10, 50)).astype(np.float32) * 5
    targets = rng.integers(0, 50, size=10)
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    expected = -(shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True)))[np.arange(10), targets]
    assert np.allclose(token_nll(logits, targets, block=3), expected, rtol=1e-6)


def test_cli_and_daemon_give_the_reference_number(daemon, reference, tmp_path):
    text_file = tmp_path / "alice.txt"
    text_file.write_text(TEXT, encoding="utf-8")
    done = run_cli("perplexity", "smollm2", str(text_file), "--ctx", str(CTX), "--json", env=daemon.env())
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["perplexity"] == pytest.approx(reference, rel=1e-3)
    assert result["chunks"] >= 4 and result["ctx"] == CTX and result["seconds"] > 0


def test_cli_prints_one_plain_line(daemon):
    plain = run_cli("perplexity", "smollm2", "-", "--ctx", "32", input=TEXT[:400], env=daemon.env())
    assert plain.returncode == 0, plain.stderr
    assert re.fullmatch(r"perplexity \d+\.\d{4}  \(\d+ of \d+ tokens scored in \d+ chunks of 32, \d+\.\d s\)\n", plain.stdout)


def test_route_refuses_a_short_text_and_a_tiny_ctx(daemon, tmp_path):
    short = httpx.post(f"{daemon.url}/api/perplexity", json={"model": "smollm2", "text": "Hi.", "ctx": 64}, timeout=60)
    assert short.status_code == 400 and "perplexity needs at least one chunk of 64" in short.json()["error"]
    tiny = httpx.post(f"{daemon.url}/api/perplexity", json={"model": "smollm2", "text": TEXT, "ctx": 2}, timeout=60)
    assert tiny.status_code == 400
    (tmp_path / "short.txt").write_text("Hi.", encoding="utf-8")
    done = run_cli("perplexity", "smollm2", str(tmp_path / "short.txt"), "--ctx", "64", env=daemon.env())
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("error: the text is ")


def test_missing_file_is_a_usage_error(daemon, tmp_path):
    done = run_cli("perplexity", "smollm2", str(tmp_path / "nope.txt"), env=daemon.env())
    assert done.returncode == 2 and done.stderr == f"error: cannot read {tmp_path / 'nope.txt'}: No such file or directory\n"


def test_a_client_that_hangs_up_stops_the_job(daemon):
    """The job would take ~200 decodes (half a minute); once its client is gone the runner must stop using the CPU."""
    from tests.test_model_lifecycle import runner_pids

    def runners_cpu_seconds() -> float:
        ticks = 0
        for pid in runner_pids(daemon):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")

    def busy_for(seconds: float) -> float:
        before = runners_cpu_seconds()
        time.sleep(seconds)
        return runners_cpu_seconds() - before

    body = {"model": "smollm2", "text": TEXT * 12, "ctx": 32, "batch": 32}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{daemon.url}/api/perplexity", json=body, timeout=1.0)
    time.sleep(0.6)  # the daemon looks every 0.25 s; the runner stops after the decode in hand
    assert busy_for(1.0) < 0.2
    job = threading.Thread(target=hang_up_after, args=(f"{daemon.url}/api/perplexity", body, 2.5))
    job.start()  # the same job with its client waiting does keep the cores busy
    time.sleep(0.5)
    assert busy_for(1.0) > 0.4
    job.join()
    time.sleep(0.6)
    assert busy_for(1.0) < 0.2


def hang_up_after(url: str, body: dict, seconds: float) -> None:
    with contextlib.suppress(httpx.ReadTimeout):
        httpx.post(url, json=body, timeout=seconds)
