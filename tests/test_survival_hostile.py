"""Hostile model files (tests/hostile_gguf.py): `localrun pull` refuses every broken GGUF with one
clear line and stores nothing; well-formed files that llama.cpp cannot load, or that make it abort,
fail only their runner, and the request gets "model failed to load: ..."."""

from __future__ import annotations

import httpx
import pytest

from tests.cli import run_cli
from tests.daemon import start_daemon
from tests.hostile_gguf import refused_corpus, unloadable_corpus, write_corpus

REFUSED = refused_corpus()


def test_the_corpus_is_big_enough():
    assert len(REFUSED) >= 10


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_pull_refuses_a_broken_gguf_with_one_line(tmp_path, localrun_home, name):
    path = write_corpus(tmp_path / "files", {name: REFUSED[name]})[0]
    result = run_cli("pull", str(path), timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert str(path) in lines[0] and "GGUF" in lines[0]
    models = localrun_home / "models"
    assert not list(models.rglob("manifests/**/*.json")) and not list(models.rglob("manifests/*/*"))
    assert not list(models.glob("blobs/*"))
    assert not [p for p in models.glob("partial/*") if p.suffix != ".lock"]


@pytest.fixture(scope="module")
def daemon_with_bad_models(tmp_path_factory):
    d = start_daemon(tmp_path_factory.mktemp("hostile-home"), {"LOCALRUN_PARALLEL": "1"})
    files = write_corpus(tmp_path_factory.mktemp("unloadable"), unloadable_corpus(tmp_path_factory.mktemp("scratch")))
    for path in files:
        result = run_cli("pull", str(path), env=d.env(), timeout=60)
        assert result.returncode == 0, result.stderr
    yield d, [p.stem for p in files]
    d.stop()


def test_unloadable_models_fail_their_request_and_the_daemon_lives_on(daemon_with_bad_models):
    d, names = daemon_with_bad_models
    assert "duplicate-tokens" in names
    for name in names:
        for path, body in [("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True}),
                           ("/api/generate", {"prompt": "hi"})]:
            response = httpx.post(f"{d.url}{path}", json={"model": name, **body}, timeout=120)
            assert response.status_code == 500, (name, path, response.text)
            error = response.json()["error"]
            message = error["message"] if isinstance(error, dict) else error
            assert message.startswith("model failed to load: "), message
            assert "\n" not in message
            assert httpx.get(f"{d.url}/health", timeout=10).json()["status"] == "ok"
    assert httpx.get(f"{d.url}/api/ps", timeout=10).json()["models"] == []
    ok = httpx.post(f"{d.url}/v1/chat/completions", timeout=120,
                    json={"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert ok.status_code == 200, ok.text


def test_an_abort_inside_llama_cpp_is_named_in_the_error(daemon_with_bad_models):
    d, _ = daemon_with_bad_models
    response = httpx.post(f"{d.url}/v1/completions", json={"model": "duplicate-tokens", "prompt": "hi"}, timeout=120)
    message = response.json()["error"]["message"]
    assert "SIGABRT" in message and "GGML_ASSERT" in message, message
