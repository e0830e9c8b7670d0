"""The store without a network: local imports, --link, list/show/rm/cp, garbage collection, errors."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys

import pytest

from localrun.cli import main
from localrun.errors import InvalidName, ModelNotFound, NotGGUF, StoreError, UsageError
from localrun.store import Model, ModelInfo, Store
from localrun.store.layout import Layout
from localrun.store.scratch import scratch_file, sweep
from tests.test_pull import assert_blobs_verified, assert_nothing_stored
from tests.tiny_gguf import write_tiny_gguf


@pytest.fixture
def store(localrun_home):
    return Store()


@pytest.fixture
def tiny(tmp_path):
    return write_tiny_gguf(tmp_path / "src" / "Tiny.gguf", floats=8192, name="tiny-one", template="{{ bos }}")


def test_default_root_follows_localrun_home(store, localrun_home):
    assert store.layout.root == localrun_home / "models"


def test_public_surface():
    import localrun.store as api

    assert {"Store", "Model", "ModelInfo", "PullProgress", "Policy", "parse_reference"} <= set(api.__all__)
    assert all(hasattr(api, name) for name in api.__all__)


def test_local_file_is_copied_into_the_store(store, tiny):
    model = store.pull(str(tiny))
    assert model.name == "tiny:latest" and not model.linked and model.source == f"file:{tiny}"
    assert model.path.parent == store.layout.blobs and model.path.read_bytes() == tiny.read_bytes()
    tiny.unlink()
    assert store.resolve("tiny").path.is_file()  # the store's copy does not depend on the source


def test_model_to_dict_is_json_ready(store, tiny):
    import json

    data = json.loads(json.dumps(store.pull(str(tiny)).to_dict()))
    assert data["name"] == "tiny:latest" and data["digest"].startswith("sha256:") and data["architecture"] == "llama"


def test_show_reads_the_gguf_facts(store, tiny):
    store.pull(str(tiny))
    info = store.show("tiny")
    assert isinstance(info, ModelInfo)
    assert (info.architecture, info.context_length, info.embedding_length) == ("llama", 256, 8)
    assert (info.chat_template, info.license, info.quantization) == ("{{ bos }}", "apache-2.0", "F32")
    assert info.special_tokens == {"bos": "<s>", "eos": "</s>"}
    assert info.metadata["general.name"] == "tiny-one" and info.to_dict()["parameters"] == 8192


def test_link_uses_the_file_in_place_and_detects_changes(store, tiny):
    model = store.pull(str(tiny), link=True)
    assert model.linked and model.path == tiny and not list(store.layout.blob_digests())
    assert store.resolve("tiny").path == tiny
    os.utime(tiny, ns=(1, 1))  # same bytes, different mtime: re-check fails
    with pytest.raises(StoreError, match="changed since it was pulled"):
        store.resolve("tiny")
    store.pull(str(tiny), link=True)  # re-link accepts it again
    with open(tiny, "ab") as f:
        f.write(b"\0" * 32)
    with pytest.raises(StoreError, match="changed since it was pulled"):
        store.resolve("tiny")
    store.remove("tiny")
    assert tiny.exists()  # removing a linked model never deletes the user's file


def test_link_needs_a_local_file(store):
    with pytest.raises(UsageError, match="--link"):
        store.pull("smollm2", link=True)


def test_a_non_gguf_local_file_is_refused(store, tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_text("<html>not a model</html>" * 10)
    with pytest.raises(NotGGUF):
        store.pull(str(fake))
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(write_tiny_gguf(tmp_path / "whole.gguf").read_bytes()[:200])
    with pytest.raises(NotGGUF):
        store.pull(str(truncated))
    assert_nothing_stored(store)


@pytest.mark.parametrize("keep, message", [
    (30, r"cut.gguf is a truncated GGUF file: it ends after 30 bytes, inside its metadata$"),
    (300, r"cut.gguf is a truncated GGUF file: it ends after 300 bytes, inside its metadata$"),
    (-1, r"cut.gguf is a truncated GGUF file: 33375 of 33376 bytes$"),
])
def test_a_truncated_file_is_named_in_words(store, tmp_path, keep, message):
    whole = write_tiny_gguf(tmp_path / "whole.gguf", floats=8192).read_bytes()
    (tmp_path / "cut.gguf").write_bytes(whole[:keep])
    with pytest.raises(NotGGUF, match=message):
        store.pull(str(tmp_path / "cut.gguf"))


def test_a_real_model_cut_short_says_how_much_is_missing(store, tmp_path, smollm2_path):
    with open(smollm2_path, "rb") as f:
        (tmp_path / "head.gguf").write_bytes(f.read(5_000_000))
    size = smollm2_path.stat().st_size
    with pytest.raises(NotGGUF, match=rf"head.gguf is a truncated GGUF file: 5000000 of {size} bytes$"):
        store.pull(str(tmp_path / "head.gguf"))


def test_show_reads_the_facts_a_pull_cached_for_its_file(store, tiny):
    model = store.pull(str(tiny))
    cache = store.layout.info(model.digest)
    assert cache.is_file() and store.show("tiny") == store.show("tiny:latest")
    cache.write_text(cache.read_text().replace('"apache-2.0"', '"from-the-cache"'))
    assert store.show("tiny").license == "from-the-cache"  # read back, not parsed again
    cache.write_text("{broken")
    assert store.show("tiny").license == "apache-2.0" and '"apache-2.0"' in cache.read_text()  # parsed, rewritten
    store.remove("tiny")
    assert not cache.exists()


def test_lock_files_do_not_pile_up_and_a_waiter_locks_the_current_file(store, tmp_path):
    import threading

    from localrun.store import locks

    for seed in range(3):
        store.pull(str(write_tiny_gguf(tmp_path / f"m{seed}.gguf", seed=seed)))
    store.copy("m0", "other")
    store.remove("m1")
    assert list(store.layout.partial.iterdir()) == []  # no `*.lock` left from any of that

    path, order, waited = store.layout.partial / "k.lock", [], threading.Event()
    with locks.hold(path):
        waiter = threading.Thread(target=lambda: _hold(locks, path, order, waited))
        waiter.start()
        assert waited.wait(10)  # it found the lock taken
        order.append("first")
    waiter.join(10)
    assert order == ["first", "second"] and not path.exists()


def _hold(locks, path, order, waited) -> None:
    with locks.hold(path, on_wait=waited.set):
        order.append("second")


def test_missing_local_file(store, tmp_path):
    with pytest.raises(ModelNotFound, match="no such file"):
        store.pull(str(tmp_path / "nope.gguf"))


def test_rm_collects_unreferenced_blobs_only(store, tmp_path):
    a = store.pull(str(write_tiny_gguf(tmp_path / "a.gguf", seed=1)))
    b = store.pull(str(write_tiny_gguf(tmp_path / "b.gguf", seed=2)))
    c = store.copy("a", "c:v2")
    assert c.digest == a.digest and c.path == a.path and c.name == "c:v2"
    assert [m.name for m in store.list()] == ["a:latest", "b:latest", "c:v2"]
    store.remove("a")
    assert a.path.exists()  # still referenced by c:v2
    store.remove("c:v2")
    assert not a.path.exists() and b.path.exists()
    assert [m.name for m in store.list()] == ["b:latest"]
    assert not (store.layout.manifests / "c").exists()  # empty manifest directories are pruned
    assert_blobs_verified(store)


def test_a_name_pulled_again_from_another_file_frees_the_old_blob(store, tmp_path):
    first = store.pull(str(write_tiny_gguf(tmp_path / "v1" / "m.gguf", seed=1)))
    second = store.pull(str(write_tiny_gguf(tmp_path / "v2" / "m.gguf", seed=2)))
    assert first.name == second.name and first.digest != second.digest
    assert not first.path.exists() and second.path.exists()
    store.copy("m", "keep:1")
    store.pull(str(write_tiny_gguf(tmp_path / "v3" / "m.gguf", seed=3)))
    assert second.path.exists()  # still used by keep:1
    assert_blobs_verified(store)


def test_unknown_names_get_suggestions(store, tiny):
    store.pull(str(tiny))
    with pytest.raises(ModelNotFound, match=r"^model 'tyni' is not pulled; did you mean tiny\?$"):
        store.resolve("tyni")  # a typo: the close names, never `localrun pull tyni`
    with pytest.raises(ModelNotFound, match=r"^model 'smolm2' is not pulled; did you mean smollm2"):
        store.show("smolm2")
    with pytest.raises(ModelNotFound, match=r"^model 'smollm2:360m' is not pulled: run `localrun pull smollm2:360m`"):
        store.resolve("smollm2:360m")  # in the catalogue: pulling it is the answer
    with pytest.raises(ModelNotFound, match="not in the catalogue; did you mean.*smollm2"):
        store.pull("smollm3")
    with pytest.raises(ModelNotFound, match=r"^model 'qqqq' is not pulled \(`localrun list`"):
        store.remove("qqqq")
    with pytest.raises(ModelNotFound, match=r"^model 'tiy' is not pulled; did you mean tiny\?$"):
        store.remove("tiy")  # rm suggests only names that are here
    with pytest.raises(InvalidName):
        store.copy("tiny", "../escape")


def test_cp_never_replaces_another_model_unless_forced(store, tmp_path):
    a = store.pull(str(write_tiny_gguf(tmp_path / "a.gguf", seed=1)))
    b = store.pull(str(write_tiny_gguf(tmp_path / "b.gguf", seed=2)))
    store.copy("b", "good")
    with pytest.raises(UsageError, match=r"^b:latest already names another model \(.*give --force to replace it$"):
        store.copy("a", "b")
    assert store.resolve("b").digest == b.digest
    store.copy("a", "a:latest")  # the same file again: nothing to refuse
    store.copy("a", "b", force=True)
    assert store.resolve("b").digest == a.digest and b.path.exists()  # good:latest still uses it
    assert store.remove("good") == []  # the last name of b's file: nothing else keeps it
    assert not b.path.exists() and a.path.exists()
    assert store.remove("a") == ["b:latest"]  # b now names a's file, which stays
    assert a.path.exists()
    assert_blobs_verified(store)


def test_collection_keeps_the_blob_of_a_manifest_it_cannot_parse(store, tmp_path):
    a = store.pull(str(write_tiny_gguf(tmp_path / "a.gguf", seed=1)))
    store.pull(str(write_tiny_gguf(tmp_path / "b.gguf", seed=2)))
    manifest = store.layout.manifests / "a" / "latest"
    manifest.write_text(manifest.read_text().replace('"schema"', '"sch'))  # no longer JSON, digest still in it
    store.remove("b")
    assert a.path.exists()


def test_a_linked_model_is_present_for_every_command_by_name(store, tiny):
    linked = store.pull(str(tiny), link=True)
    for name in ("tiny", "tiny:latest"):
        assert store.pull(name).path == tiny == linked.path  # what run, batch, score and /load call
    os.utime(tiny, ns=(1, 1))
    with pytest.raises(StoreError, match="changed since it was pulled"):
        store.pull("tiny")


def test_pull_of_a_directory_says_so(store, tmp_path):
    (tmp_path / "models.gguf").mkdir()
    with pytest.raises(UsageError, match=r"models.gguf is a directory; pull takes one .gguf file"):
        store.pull(str(tmp_path / "models.gguf"))
    with pytest.raises(UsageError, match="is a directory"):
        store.pull(str(tmp_path) + "/")


def test_list_ignores_temp_files_and_a_missing_blob_is_reported(store, tiny):
    model = store.pull(str(tiny))
    (store.layout.manifests / "tiny" / ".latest.12345.tmp").write_text("{half a manifest")
    assert [m.name for m in store.list()] == ["tiny:latest"]
    model.path.unlink()
    with pytest.raises(StoreError, match="is missing"):
        store.resolve("tiny")
    assert store.pull(str(tiny)).path.is_file()  # pulling again repairs it


def test_corrupt_manifest_is_one_line(store, tiny):
    store.pull(str(tiny))
    (store.layout.manifests / "tiny" / "latest").write_text("not json")
    with pytest.raises(StoreError, match="corrupt manifest"):
        store.resolve("tiny")


@contextlib.contextmanager
def unwritable(path):
    """A directory nobody may write to: chmod for users; root ignores modes, so `chattr +i` for root."""
    path.mkdir(mode=0o500)
    as_root = os.geteuid() == 0
    if as_root and subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root without chattr: cannot make a directory unwritable")
    try:
        yield path
    finally:
        if as_root:
            subprocess.run(["chattr", "-i", str(path)], check=True)


def test_permission_denied_is_one_line(capsys, monkeypatch, tmp_path, tiny):
    with unwritable(tmp_path / "ro") as root:
        with pytest.raises(StoreError, match="permission denied: .*ro/"):
            Store(root).pull(str(tiny))
        monkeypatch.setenv("LOCALRUN_HOME", str(root))  # the store is created in <home>/models
        monkeypatch.setattr(sys, "argv", ["localrun", "pull", str(tiny)])
        with pytest.raises(SystemExit) as exit_info:
            main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err.startswith("error: permission denied: ") and err.count("\n") == 1


def test_an_unwritable_root_is_a_store_error(tmp_path, tiny):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the store should be")
    with pytest.raises(StoreError):
        Store(blocker / "models").pull(str(tiny))


def test_model_fields(store, tiny):
    model = store.pull(str(tiny))
    assert isinstance(model, Model)
    assert model.digest == "sha256:" + hashlib.sha256(tiny.read_bytes()).hexdigest()
    assert model.short_id == model.digest[7:19] and model.modified.tzinfo is not None


def test_a_sweep_deletes_the_scratch_files_nobody_writes_and_keeps_the_rest(tmp_path):
    """A quantization's or an upload's file whose writer was killed is garbage; one being written, and a
    download's partial file (resumed by the next pull), are not."""
    layout = Layout(tmp_path / "models")
    with scratch_file(layout, "upload") as held:
        held.write_bytes(b"being written")
        stale = layout.partial_file("quantize-0123")
        stale.write_bytes(b"its writer was killed")
        download = layout.partial_file("sha256-" + "ab" * 32)
        download.write_bytes(b"resumable")
        sweep(layout)
        assert held.exists() and download.exists() and not stale.exists()
    assert not held.exists() and sorted(p.name for p in layout.partial.iterdir()) == [download.name]
