"""Making a model on a server from a GGUF file on the client's machine, as `ollama create` does: the file
goes to `POST /api/blobs/<digest>` (checked with `HEAD` first), then `/api/create` names it in `files`.
Through the official ollama client, raw HTTP for what a client can get wrong, and `localrun create
--host` with `FROM ./model.gguf`.

One daemon with an empty store, an API key, and a body limit far below a model file's size (uploads
stream to disk; every other body is still bounded)."""

from __future__ import annotations

import hashlib
import socket
import struct
import time
from pathlib import Path

import httpx
import ollama
import pytest

from localrun.errors import DiskFull
from localrun.store import Store
from tests.cli import run_cli
from tests.tiny_gguf import sha256_of, write_tiny_gguf

KEY = "blob-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_BODY = 1 << 20
HEADER = b"GGUF" + struct.pack("<IQQ", 3, 0, 0)  # a GGUF header (version 3, no tensors, no keys)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from tests.daemon import start_daemon

    d = start_daemon(tmp_path_factory.mktemp("blobs-home"), {
        "LOCALRUN_API_KEY": KEY, "LOCALRUN_MAX_BODY": str(MAX_BODY), "LOCALRUN_PARALLEL": "1",
        "LOCALRUN_CTX_SIZE": "1024"}, pull=False)
    yield d
    d.stop()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A valid GGUF of about 4 MB: four times the daemon's body limit."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf", floats=1 << 20, seed=7)


def _blob(url: str, digest: str, method: str = "HEAD", **kwargs) -> httpx.Response:
    return httpx.request(method, f"{url}/api/blobs/{digest}", headers=AUTH, timeout=60, **kwargs)


def _leftovers(home: Path) -> list[str]:
    partial = home / "models" / "partial"
    return sorted(p.name for p in partial.glob("upload-*")) if partial.is_dir() else []


def test_the_ollama_client_uploads_a_model_file_and_the_model_made_from_it_answers(served, smollm2_path):
    client = ollama.Client(host=served.url, headers=AUTH)
    digest = f"sha256:{sha256_of(smollm2_path)}"
    assert _blob(served.url, digest).status_code == 404
    assert client.create_blob(smollm2_path) == digest
    assert _blob(served.url, digest).status_code == 200
    made = client.create(model="uploaded", files={"SmolLM2.gguf": digest}, system="Answer in French.",
                         parameters={"temperature": 0, "num_predict": 8})
    assert made.status == "success"
    shown = client.show("uploaded")
    assert 'SYSTEM "Answer in French."' in shown.modelfile and shown.details.family == "llama"
    assert {m.model: m.digest for m in client.list().models}["uploaded:latest"] == digest.removeprefix("sha256:")
    answer = client.chat(model="uploaded", messages=[{"role": "user", "content": "Say hello."}])
    same = client.chat(model="uploaded", messages=[{"role": "system", "content": "Answer in French."},
                                                    {"role": "user", "content": "Say hello."}],
                       options={"temperature": 0, "num_predict": 8})
    assert answer.eval_count == 8 and answer.message.content == same.message.content
    again = _blob(served.url, digest, "POST", content=smollm2_path.read_bytes())  # the server has it: dropped
    assert again.status_code == 200 and _leftovers(served.home) == []


def test_an_uploaded_file_is_quantized_on_create_and_a_failed_create_changes_nothing(served, smollm2_path,
                                                                                    tmp_path):
    """`ollama create -q q8_0` with FROM ./model.gguf: the upload, then /api/create with files and quantize.
    A create that fails leaves its name as it was: absent, or naming the model it named, file and all."""
    client = ollama.Client(host=served.url, headers=AUTH)
    digest = client.create_blob(smollm2_path)
    kept = client.create_blob(write_tiny_gguf(tmp_path / "kept.gguf", seed=21))
    client.create(model="kept", files={"kept.gguf": kept})
    for name in ("uploaded-bad", "kept"):
        with pytest.raises(ollama.ResponseError, match="unknown quantization type 'Q9_9'"):
            client.create(model=name, files={"m.gguf": digest}, quantize="Q9_9")
    models = {m.model: m.digest for m in client.list().models}
    assert "uploaded-bad:latest" not in models  # not even with the unquantized file
    assert models["kept:latest"] == kept.removeprefix("sha256:") and _blob(served.url, kept).status_code == 200
    assert _blob(served.url, digest).status_code == 200  # the upload is kept for the next try
    client.create(model="uploaded-q8", files={"m.gguf": digest}, quantize="q8_0", system="Be brief.")
    shown = client.show("uploaded-q8")
    assert shown.details.quantization_level == "Q8_0" and 'SYSTEM "Be brief."' in shown.modelfile
    answer = client.generate(model="uploaded-q8", prompt="Name a colour.", options={"num_predict": 4})
    assert answer.response and 1 <= answer.eval_count <= 4  # sampled: "Be brief." may end it sooner


def test_an_upload_far_over_the_body_limit_streams_to_disk_while_json_bodies_stay_bounded(served, tiny):
    digest = f"sha256:{sha256_of(tiny)}"
    assert tiny.stat().st_size > 4 * MAX_BODY
    created = _blob(served.url, digest, "POST", content=tiny.read_bytes())
    assert created.status_code == 201, created.text
    assert (served.home / "models" / "blobs" / digest.replace(":", "-")).read_bytes() == tiny.read_bytes()
    big_json = httpx.post(f"{served.url}/api/create", headers=AUTH, timeout=30,
                          json={"model": "x", "from": "y", "system": "z" * MAX_BODY})
    assert big_json.status_code == 413


@pytest.mark.parametrize("body, digest_of, status, words", [
    (HEADER, "other", 400, "digest mismatch"),
    (b"<html><body>Not found</body></html>" * 4, "body", 400, "not a GGUF file"),
    (b"GGUF", "body", 400, "not a GGUF file: only 4 bytes"),
    (b"", "body", 400, "not a GGUF file: only 0 bytes"),
])
def test_a_wrong_upload_is_refused_and_leaves_nothing(served, body, digest_of, status, words):
    digest = "sha256:" + hashlib.sha256(body if digest_of == "body" else b"something else").hexdigest()
    refused = _blob(served.url, digest, "POST", content=body)
    assert refused.status_code == status and words in refused.json()["error"], refused.text
    assert _blob(served.url, digest).status_code == 404 and _leftovers(served.home) == []


def test_a_truncated_model_file_is_refused_after_its_digest_checks_out(served, tiny):
    cut = tiny.read_bytes()[: tiny.stat().st_size // 2]
    digest = "sha256:" + hashlib.sha256(cut).hexdigest()
    refused = _blob(served.url, digest, "POST", content=cut)
    assert refused.status_code == 400 and "truncated GGUF" in refused.json()["error"], refused.text
    assert _blob(served.url, digest).status_code == 404 and _leftovers(served.home) == []


@pytest.mark.parametrize("digest", ["sha256:xyz", "md5:" + "0" * 32, "sha256:" + "A" * 64, "sha256:" + "0" * 65])
def test_a_malformed_digest_is_refused(served, digest):
    assert _blob(served.url, digest).status_code == 400
    refused = _blob(served.url, digest, "POST", content=b"GGUF")
    assert refused.status_code == 400 and "invalid digest format" in refused.json()["error"]


def test_uploads_need_the_api_key(served, tiny):
    digest = f"sha256:{sha256_of(tiny)}"
    assert httpx.head(f"{served.url}/api/blobs/{digest}", timeout=10).status_code == 401
    refused = httpx.post(f"{served.url}/api/blobs/{digest}", content=b"GGUF", timeout=10)
    assert refused.status_code == 401


def test_a_client_that_hangs_up_mid_upload_leaves_no_partial_file(served):
    digest = "sha256:" + "ab" * 32
    with socket.create_connection(("127.0.0.1", served.port)) as s:
        s.sendall(f"POST /api/blobs/{digest} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
                  f"Content-Length: {64 << 20}\r\n\r\n".encode() + HEADER + bytes(8 << 20))
        deadline = time.monotonic() + 10
        while not _leftovers(served.home) and time.monotonic() < deadline:  # the upload is being written
            time.sleep(0.05)
        assert _leftovers(served.home), "the upload never reached the disk"
    deadline = time.monotonic() + 10
    while _leftovers(served.home) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _leftovers(served.home) == [] and _blob(served.url, digest).status_code == 404


def test_a_full_disk_refuses_an_upload_and_leaves_nothing(small_disk, tiny):
    """On a real 2 MiB filesystem: refused up front from the size a client declares, else at the write."""
    store = Store(small_disk / "models")
    digest = f"sha256:{sha256_of(tiny)}"
    with pytest.raises(DiskFull, match="not enough disk space for the uploaded file: needs 4 MB"):
        store.receive_blob(digest, tiny.stat().st_size)
    upload = store.receive_blob(digest)  # no size said: the write itself fails
    with pytest.raises(DiskFull, match="disk full while writing"):
        for start in range(0, tiny.stat().st_size, 1 << 20):
            upload.write(tiny.read_bytes()[start:start + (1 << 20)])
    upload.discard()
    assert list((small_disk / "models" / "partial").glob("upload-*")) == [] and not store.has_blob(digest)


def test_create_refuses_files_it_cannot_use(served, tiny):
    digest = f"sha256:{sha256_of(tiny)}"
    missing = "sha256:" + "cd" * 32
    for files, words in [({"model.gguf": missing}, "is not on the server; upload it first"),
                         ({"a.gguf": digest, "b.gguf": digest}, "one GGUF file, not 2"),
                         ({"model.gguf": "sha256:short"}, "invalid digest format")]:
        refused = httpx.post(f"{served.url}/api/create", headers=AUTH, timeout=30,
                             json={"model": "x", "files": files, "stream": False})
        assert refused.status_code == 400 and words in refused.json()["error"], (files, refused.text)


def test_localrun_create_with_host_uploads_a_local_file_once(served, tmp_path):
    """FROM is read beside the Modelfile; the file is sent only when the server lacks it."""
    env = {**served.env(), "LOCALRUN_HOME": str(tmp_path / "client-home"), "LOCALRUN_API_KEY": KEY}
    model = write_tiny_gguf(tmp_path / "models" / "model.gguf", seed=11)
    (tmp_path / "models" / "Modelfile").write_text("FROM ./model.gguf\nPARAMETER num_ctx 256\n")

    def uploads() -> int:  # the access log's lines for files received
        return served.log.read_text().count("POST /api/blobs/{digest} 201")

    def create(name: str) -> None:
        made = run_cli("create", name, "-f", str(tmp_path / "models" / "Modelfile"), "--host", served.url, env=env)
        assert made.returncode == 0 and made.stdout == f"created {name} on {served.url}\n", made.stderr
        shown = run_cli("show", name, "--modelfile", "--host", served.url, env=env).stdout
        assert "PARAMETER num_ctx 256" in shown and sha256_of(model) in shown

    before = uploads()
    create("sent-once")
    create("sent-again")  # the server has the file now
    assert uploads() == before + 1
    (tmp_path / "Gone").write_text("FROM ./gone.gguf\n")
    gone = run_cli("create", "x", "-f", str(tmp_path / "Gone"), "--host", served.url, env=env)
    assert gone.returncode == 1 and gone.stderr.startswith("error: FROM ") and "no such file" in gone.stderr


def test_localrun_pull_of_a_file_with_host_uploads_it_to_the_server(served, tmp_path):
    env = {**served.env(), "LOCALRUN_HOME": str(tmp_path / "client-home"), "LOCALRUN_API_KEY": KEY}
    model = write_tiny_gguf(tmp_path / "Pulled-Tiny.gguf", seed=13)
    pulled = run_cli("pull", str(model), "--host", served.url, env=env)
    assert pulled.returncode == 0 and pulled.stdout == f"pulled pulled-tiny:latest on {served.url}\n", pulled.stderr
    listed = run_cli("list", "--host", served.url, env=env).stdout
    assert f"pulled-tiny:latest  {sha256_of(model)[:12]}" in listed, listed
    linked = run_cli("pull", str(model), "--link", "--host", served.url, env=env)
    assert linked.returncode == 2 and "--link works with this home's store only" in linked.stderr
