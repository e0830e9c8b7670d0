"""The CLI with `--host` (or LOCALRUN_HOST alone) naming another server that has a store of its own: a
second real daemon on loopback with a different home. Pulls are asked of that server (Ollama's /api/pull,
progress streamed back), `run` of a model it lacks pulls it there first, `list`, `show`, `cp` and `rm`
show and change that server's models, and this home's store stays empty."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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


def pull_on(server, files: FileServer, name: str, tmp_path) -> str:
    """Have the server pull a tiny GGUF served from loopback; its name there."""
    gguf = write_tiny_gguf(tmp_path / f"{name}.gguf", floats=8192, name=name)
    url = files.add(f"/models/{name}.gguf", gguf)
    httpx.post(f"{server.url}/api/pull", json={"model": url, "stream": False}, timeout=60).raise_for_status()
    return f"{name}:latest"


def server_tag(server, name: str) -> dict:
    return next(m for m in httpx.get(f"{server.url}/api/tags").json()["models"] if m["name"] == name)


def test_localrun_host_alone_sends_pull_and_rm_to_that_server(server, tmp_path):
    """LOCALRUN_HOST sets the same address as --host for every command: the model commands too."""
    on_server = {"LOCALRUN_HOST": server.url}
    gguf = write_tiny_gguf(tmp_path / "env-tiny.gguf", floats=8192)
    with FileServer() as files:
        url = files.add("/models/env-tiny.gguf", gguf)
        pulled = run_cli("pull", url, env=on_server)
    assert pulled.returncode == 0, pulled.stderr
    assert pulled.stdout == f"pulled {url} on {server.url}\n"
    assert "env-tiny:latest" in server_models(server)
    assert "env-tiny" not in local_models()
    removed = run_cli("rm", "env-tiny", env=on_server)
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout == "deleted env-tiny\n"
    assert "env-tiny:latest" not in server_models(server)


def test_list_and_show_with_host_print_the_servers_models_as_for_this_homes_store(server, tmp_path):
    with FileServer() as files:
        name = pull_on(server, files, "listed-tiny", tmp_path)
    tag = server_tag(server, name)
    assert "listed-tiny" not in local_models()

    listed = run_cli("list", "--host", server.url)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["NAME", "ID", "SIZE", "QUANT", "PARAMS", "MODIFIED"]
    row = next(r for r in rows if r.startswith(name + " "))
    assert row.split() == [name, tag["digest"][:12], "33", "KB", "F32", "8.2K", "just", "now"]
    assert run_cli("list", env={"LOCALRUN_HOST": server.url}).stdout == listed.stdout  # LOCALRUN_HOST alone
    as_json = json.loads(run_cli("list", "--host", server.url, "--json").stdout)
    entry = next(m for m in as_json if m["name"] == name)
    assert entry["digest"] == "sha256:" + tag["digest"] and entry["size"] == tag["size"]
    assert (entry["quantization"], entry["parameter_size"], entry["architecture"]) == ("F32", "8.2K", "llama")

    shown = run_cli("show", "listed-tiny", "--host", server.url)
    assert shown.returncode == 0, shown.stderr
    assert f"name              {name}\n" in shown.stdout and "architecture      llama\n" in shown.stdout
    assert "context length    256\n" in shown.stdout and "license           apache-2.0\n" in shown.stdout
    assert f"digest            sha256:{tag['digest']}\n" in shown.stdout and "size              33 KB" in shown.stdout
    assert f"server            {server.url}\n" in shown.stdout
    assert run_cli("show", "listed-tiny", "--template", env={"LOCALRUN_HOST": server.url}).stdout == "{{ messages }}\n"
    assert run_cli("show", "listed-tiny", "--license", "--host", server.url).stdout == "apache-2.0\n"
    assert "general.name = 'listed-tiny'" in run_cli("show", "listed-tiny", "--metadata", "--host", server.url).stdout

    # The same file in this home's store: the same table row and the same facts, key for key.
    local_file = tmp_path / "local" / "listed-tiny.gguf"
    local_file.parent.mkdir()
    local_file.write_bytes((tmp_path / "listed-tiny.gguf").read_bytes())
    assert run_cli("pull", str(local_file), "--quiet").returncode == 0
    local_row = next(r for r in local_models().splitlines() if r.startswith(name + " "))
    assert local_row.split()[:6] == row.split()[:6]
    local_show = run_cli("show", "listed-tiny").stdout
    for fact in ("architecture", "parameters", "quantization", "context length", "embedding length", "license",
                 "size", "digest"):
        line = next(x for x in local_show.splitlines() if x.strip().startswith(fact + " "))
        assert line + "\n" in shown.stdout, fact
    local_json = json.loads(run_cli("show", "listed-tiny", "--json").stdout)
    remote_json = json.loads(run_cli("show", "listed-tiny", "--json", "--host", server.url).stdout)
    for key in ("name", "digest", "size", "architecture", "parameters", "parameter_size", "quantization",
                "context_length", "embedding_length", "license", "chat_template"):
        assert remote_json[key] == local_json[key], key
    assert remote_json["metadata"]["general.name"] == "listed-tiny" and remote_json["host"] == server.url

    missing = run_cli("show", "no-such-model", "--host", server.url)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("error: model 'no-such-model'") and len(missing.stderr.splitlines()) == 1


def test_cp_with_host_names_the_model_again_on_that_server(server, tmp_path):
    with FileServer() as files:
        name = pull_on(server, files, "copied-tiny", tmp_path)
    result = run_cli("cp", "copied-tiny", "second-name:v1", "--host", server.url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "copied copied-tiny to second-name:v1\n"
    assert {name, "second-name:v1"} <= server_models(server)
    assert server_tag(server, "second-name:v1")["digest"] == server_tag(server, name)["digest"]
    assert "second-name" not in local_models()
    missing = run_cli("cp", "no-such-model", "x", "--host", server.url)
    assert missing.returncode == 1 and missing.stderr.startswith("error: ") and len(missing.stderr.splitlines()) == 1


@pytest.mark.parametrize("args", [["list"], ["list", "--json"], ["show", "smollm2"], ["show", "smollm2", "--template"],
                                  ["cp", "smollm2", "x"], ["rm", "smollm2"], ["pull", "smollm2"]])
def test_model_commands_on_a_server_without_the_ollama_api_fail_in_one_line(args):
    with FileServer() as other:
        result = run_cli(*args, "--host", other.base_url)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (f"error: {other.base_url} does not speak the Ollama API (no /api/version): "
                             f"`localrun {args[0]}` on a server needs one with a store of its own (Ollama or "
                             f"localrun)\n")


def test_list_on_a_server_without_the_ollama_api_names_the_models_of_its_v1_models():
    """vLLM and llama-server have no store to describe, but they list what they serve: `list` shows those
    names (llama-server's answer, as its /v1/models writes it), and nothing it cannot know."""
    listing = {"object": "list", "data": [{"id": "qwen2.5-7b-instruct-q4_k_m.gguf", "object": "model",
                                           "created": 1764720000, "owned_by": "llamacpp"}]}
    with FileServer() as other:
        other.add("/v1/models", json.dumps(listing).encode())
        table = run_cli("list", "--host", other.base_url)
        as_json = run_cli("list", "--json", "--host", other.base_url)
    assert table.returncode == 0 and table.stderr == ""
    header, row = table.stdout.splitlines()
    assert header.split() == ["NAME", "ID", "SIZE", "QUANT", "PARAMS", "MODIFIED"]
    assert row.split() == ["qwen2.5-7b-instruct-q4_k_m.gguf", "-", "-", "-", "-", "-"]
    assert json.loads(as_json.stdout) == [{"name": "qwen2.5-7b-instruct-q4_k_m.gguf", "host": other.base_url}]


def test_localrun_host_on_a_loopback_port_taken_by_another_program_still_means_this_homes_store(tmp_path):
    """Without --host, a loopback address where something that is not localrun listens stays this home's
    (`run` then says the port is taken): the model commands keep using this home's store there."""
    assert run_cli("pull", str(write_tiny_gguf(tmp_path / "home-tiny.gguf")), "--quiet").returncode == 0
    with FileServer() as other:
        env = {"LOCALRUN_HOST": other.base_url}
        listed = run_cli("list", env=env)
        shown = run_cli("show", "home-tiny", "--license", env=env)
        copied = run_cli("cp", "home-tiny", "home-copy", env=env)
        removed = run_cli("rm", "home-copy", env=env)
    assert listed.returncode == 0 and "home-tiny:latest" in listed.stdout, listed.stderr
    assert (shown.returncode, shown.stdout) == (0, "apache-2.0\n")
    assert (copied.returncode, removed.returncode) == (0, 0) and "home-copy" not in local_models()


class _OllamaLike(BaseHTTPRequestHandler):
    """Answers as an Ollama server does for a model whose /api/show has no template and no license:
    RFC 3339 times with nanoseconds, digests of manifests, a model_info with the vocabulary left out."""

    TAGS = {"models": [{"name": "llama3.2:latest", "model": "llama3.2:latest",
                        "modified_at": "2025-01-10T09:12:33.123456789-08:00", "size": 2019393189,
                        "digest": "a80c4f17acd55265feec403c7aef86be0c25983ab279d83f3bcd3abbcb5b8b72",
                        "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                                    "parameter_size": "3.2B", "quantization_level": "Q4_K_M"}}]}
    SHOW = {"modelfile": "FROM /root/.ollama/models/blobs/sha256-" + "d" * 64 + "\n", "parameters": "",
            "details": TAGS["models"][0]["details"], "modified_at": "2025-01-10T09:12:33.123456789-08:00",
            "model_info": {"general.architecture": "llama", "general.parameter_count": 3212749888,
                           "llama.context_length": 131072, "llama.embedding_length": 3072,
                           "tokenizer.ggml.tokens": None}}

    def log_message(self, *args) -> None:
        pass

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        routes = {"/api/tags": self.TAGS, "/api/version": {"version": "0.5.4"}}
        self._answer(200, routes[self.path]) if self.path in routes else self._answer(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/api/show" and body.get("model") in ("llama3.2", "llama3.2:latest"):
            return self._answer(200, self.SHOW)
        self._answer(404, {"error": f"model '{body.get('model')}' not found"})


@pytest.fixture
def ollama_like():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _OllamaLike)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_an_ollama_servers_answers_fill_the_same_table_and_missing_fields_are_named(ollama_like):
    listed = run_cli("list", "--host", ollama_like)
    assert listed.returncode == 0, listed.stderr
    row = listed.stdout.splitlines()[1].split()
    assert row[:7] == ["llama3.2:latest", "a80c4f17acd5", "2.0", "GB", "Q4_K_M", "3.2B"][:6] + [row[6]]
    assert row[7:] == ["days", "ago"] and int(row[6]) > 300
    shown = run_cli("show", "llama3.2", "--host", ollama_like)
    assert shown.returncode == 0, shown.stderr
    for line in ("name              llama3.2:latest", "context length    131072", "license           -",
                 "size              2.0 GB", "digest            sha256:a80c4f17acd5"):
        assert line in shown.stdout
    assert "Chat template" not in shown.stdout
    assert "llama.context_length = 131072\n" in run_cli("show", "llama3.2", "--metadata", "--host", ollama_like).stdout
    for flag, what, key in (("--template", "chat template", "template"), ("--license", "license", "license")):
        result = run_cli("show", "llama3.2", flag, "--host", ollama_like)
        assert result.returncode == 1 and result.stdout == ""
        assert result.stderr == (f"error: {ollama_like} does not tell the {what} of llama3.2: its /api/show has no "
                                 f"'{key}'\n")
    missing = run_cli("show", "qwen", "--host", ollama_like)
    assert (missing.returncode, missing.stderr) == (1, "error: model 'qwen' not found\n")
