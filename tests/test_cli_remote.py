"""The CLI with `--host` naming another server that has a store of its own: a second real daemon on
loopback with a different home. Pulls are asked of that server (Ollama's /api/pull, progress
streamed back), `run` of a model it lacks pulls it there first, and this home's store stays empty."""

from __future__ import annotations

import json

import httpx
import pytest

from localrun.cli import daemon as lifecycle
from localrun.client import parse_address
from tests.cli import run_cli
from tests.daemon import start_daemon
from tests.fileserver import FileServer
from tests.tiny_gguf import write_tiny_gguf


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A daemon with an empty store of its own, in another home than the tests' CLI."""
    d = start_daemon(tmp_path_factory.mktemp("server-home"), pull=False)
    yield d
    d.stop()


def server_models(server) -> set[str]:
    return {m["name"] for m in httpx.get(f"{server.url}/api/tags").json()["models"]}


def local_models() -> str:
    return run_cli("list").stdout


def test_pull_with_host_asks_that_server_and_streams_its_progress(server, tmp_path):
    gguf = write_tiny_gguf(tmp_path / "remote-tiny.gguf", floats=500_000)
    with FileServer() as files:
        url = files.add("/models/remote-tiny.gguf", gguf)
        result = run_cli("pull", url, "--host", server.url, "--json")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[0]["status"] == "pulling manifest"
    assert any(e.get("total") == e.get("completed") == gguf.stat().st_size for e in lines)
    assert lines[-1] == {"status": "success", "model": {"name": url, "host": server.url}}
    assert "remote-tiny:latest" in server_models(server)
    assert "remote-tiny" not in local_models()  # the CLI's own home got nothing


def test_pull_errors_from_the_server_are_one_line(server):
    result = run_cli("pull", "no-such-model-anywhere", "--host", server.url)
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
    result = run_cli("pull", "smollm2", "--link", "--host", server.url)
    assert result.returncode != 0 and "--link" in result.stderr


def test_run_of_a_model_the_server_lacks_pulls_it_there_first(server):
    httpx.request("DELETE", f"{server.url}/api/delete", json={"model": "smollm2"})  # absent, whatever ran before
    result = run_cli("run", "smollm2", "Say hi", "--max-tokens", "3", "--temperature", "0", "--host", server.url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert "success" not in result.stdout and "pulling" in result.stderr  # progress on stderr, answer on stdout
    assert "smollm2:135m" in server_models(server)
    assert "smollm2" not in local_models()
    assert lifecycle.read_pid(parse_address(server.url).port) is None  # no daemon of this home was started
    again = run_cli("run", "smollm2", "Say hi", "--max-tokens", "3", "--temperature", "0", "--host", server.url)
    assert again.returncode == 0 and again.stderr == ""  # present now: no pull, nothing on stderr


def test_rm_with_host_removes_the_model_on_that_server(server):
    assert run_cli("pull", "smollm2", "--host", server.url, "--quiet").returncode == 0
    result = run_cli("rm", "smollm2", "--host", server.url)
    assert result.returncode == 0 and result.stdout.strip() == "deleted smollm2"
    assert "smollm2:135m" not in server_models(server)
    missing = run_cli("rm", "smollm2", "--host", server.url)
    assert missing.returncode == 1 and missing.stderr.startswith("error: ")


def test_a_named_server_without_the_ollama_api_is_used_as_it_is():
    """A loopback HTTP server that is not localrun, named by --host: no pull is tried, nothing is started,
    and its own answer to the chat request is the error (not 'the port is taken')."""
    with FileServer() as other:
        result = run_cli("run", "smollm2", "hi", "--host", other.base_url)
    assert result.returncode == 1 and result.stderr.startswith("error: HTTP 501 from ")
    assert len(result.stderr.splitlines()) == 1
    assert "pulling" not in result.stderr and "not a localrun daemon" not in result.stderr
    assert lifecycle.read_pid(parse_address(other.base_url).port) is None
