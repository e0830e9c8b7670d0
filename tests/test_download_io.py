"""The pull's fast paths: batched background hashing, write-behind, wide socket reads, a pull large
enough to use all three (the other pull tests use files smaller than one batch), and the GGUF
parse without numpy.memmap's per-slice hooks."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from pathlib import Path

import gguf
import httpx
import numpy as np
import pytest
from tests.fileserver import FileServer
from tests.tiny_gguf import write_tiny_gguf

from localrun.store import Policy, Store
from localrun.store import writeback
from localrun.store.digests import BATCH, BackgroundHash
from localrun.store import ggufinfo
from localrun.store.reads import READ_SIZE, widen_reads
from localrun.store.writeback import WriteBehind

KIB = 1 << 10
WRITE, WAIT = 2, 1 | 2 | 4  # SYNC_FILE_RANGE_WRITE; WAIT_BEFORE | WRITE | WAIT_AFTER
linux_only = pytest.mark.skipif(writeback._sync_file_range is None, reason="sync_file_range is Linux-only")


@pytest.mark.parametrize("sizes", [[], [1], [64 * KIB] * 200, [BATCH + 1, 3, BATCH - 3, BATCH], [7 * KIB] * 1500])
def test_background_hash_matches_hashlib_across_batch_boundaries(sizes):
    data = os.urandom(sum(sizes))
    h, offset = BackgroundHash(), 0
    for n in sizes:
        h.update(data[offset:offset + n])
        offset += n
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()  # asking twice is fine


@pytest.fixture
def recorded(monkeypatch):
    """The real sync_file_range, with every call and its result recorded."""
    calls = []
    real = writeback._sync_file_range

    def record(fd, offset, length, flags):
        result = real(fd, offset, length, flags) if real else -1
        calls.append((offset, length, flags, result))
        return result

    monkeypatch.setattr(writeback, "_sync_file_range", record)
    return calls


@linux_only
def test_write_behind_starts_each_window_and_waits_for_the_one_before(tmp_path, recorded):
    data = os.urandom(4 * 64 * KIB + 10 * KIB)
    with open(tmp_path / "f", "wb") as out:
        behind = WriteBehind(out.fileno(), 0, window=64 * KIB)
        for i in range(0, len(data), 16 * KIB):
            out.write(data[i:i + 16 * KIB])
            behind.written(out.tell())
        behind.close()
    w = 64 * KIB
    assert recorded == [(0, w, WRITE, 0),
                        (w, w, WRITE, 0), (0, w, WAIT, 0),
                        (2 * w, w, WRITE, 0), (w, w, WAIT, 0),
                        (3 * w, w, WRITE, 0), (2 * w, w, WAIT, 0)]  # the tail is left to the final fsync
    assert (tmp_path / "f").read_bytes() == data


@linux_only
def test_write_behind_of_a_resumed_file_starts_at_its_offset(tmp_path, recorded):
    with open(tmp_path / "f", "ab") as out:
        behind = WriteBehind(out.fileno(), 1000, window=64 * KIB)
        behind.written(1000 + 64 * KIB - 1)  # not a whole window yet
        behind.written(1000 + 64 * KIB)
        behind.close()
    assert recorded == [(1000, 64 * KIB, WRITE, 0)]


@linux_only
def test_write_behind_gives_up_quietly_where_the_call_is_refused(recorded):
    read_end, write_end = os.pipe()  # sync_file_range on a pipe fails (ESPIPE)
    try:
        behind = WriteBehind(write_end, 0, window=4)
        for end in (4, 8, 12):
            behind.written(end)
        behind.close()
    finally:
        os.close(read_end)
        os.close(write_end)
    assert recorded == [(0, 4, WRITE, -1)]  # one refusal, then nothing more is asked


def test_write_behind_does_nothing_where_the_call_does_not_exist(tmp_path, monkeypatch):
    monkeypatch.setattr(writeback, "_sync_file_range", None)
    with open(tmp_path / "f", "wb") as out:
        behind = WriteBehind(out.fileno(), 0, window=4)
        out.write(b"12345678")
        behind.written(8)
        behind.close()
    assert (tmp_path / "f").read_bytes() == b"12345678"


def test_plain_http_reads_are_widened_beyond_httpcore_s_64_kib(tmp_path):
    data = os.urandom(8 << 20)
    with FileServer() as server, httpx.Client() as client:
        url = server.add("/big.bin", data)
        with client.stream("GET", url) as response:
            widen_reads(response)
            widen_reads(response)  # a reused connection is widened once, not wrapped again
            chunks = list(response.iter_raw())
    assert b"".join(chunks) == data
    assert 64 * KIB < max(map(len, chunks)) <= READ_SIZE


_CHURN = """
import collections, resource, sys
from localrun.store import reads
if sys.argv[1] == "tuned":
    assert reads._keep_buffers()
def faults():
    before, window = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, collections.deque(maxlen=6)
    for i in range(300):  # 1 MiB buffers, a few alive at once, as a download makes them
        window.append(bytes(bytearray(1 << 20)))
        if i % 50 == 49:
            window.clear()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults()
print(faults())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="needs glibc's mallopt")
def test_wide_read_buffers_are_reused_instead_of_faulted_in_afresh():
    def faults(mode: str) -> int:  # in a fresh process: the setting is process-wide
        done = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    assert faults("default") > 5000 and faults("tuned") < 500  # 4 KiB pages: 300 MiB would be 77k


@pytest.fixture(scope="module")
def big_model(tmp_path_factory):
    """A 40 MB GGUF: several hash batches and write-behind windows."""
    path = write_tiny_gguf(tmp_path_factory.mktemp("big") / "Big-F32.gguf", floats=10 << 20, name="big")
    return path, "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("drop_after", [-1, 20_000_000])
def test_a_large_pull_is_verified_and_stored_whole(localrun_home, big_model, drop_after):
    path, digest = big_model
    with FileServer() as server:
        url = server.add("/Big-F32.gguf", path)
        if drop_after > 0:  # the resumed attempt's write-behind starts mid-file
            server.fault("/Big-F32.gguf", drop_after=drop_after)
        store = Store(localrun_home / "models", policy=Policy(retries=3, backoff=0.01))
        model = store.pull(url)
        assert [r.range_start for r in server.body_requests("/Big-F32.gguf")] == [-1] + [drop_after] * (drop_after > 0)
    assert model.digest == digest and model.size == path.stat().st_size
    assert "sha256:" + hashlib.sha256(model.path.read_bytes()).hexdigest() == digest
    assert not list(store.layout.partial.glob("*.partial"))


def fields_as_gguf_reads_them(path: Path, reader: gguf.GGUFReader) -> None:
    """Every key of the file, its contents, types and item indices, as gguf's own reader has them."""
    ours, theirs = ggufinfo._reader_class()(path), reader
    assert type(ours.data) is np.ndarray  # the hook took: no memmap slices
    assert list(ours.fields) == list(theirs.fields)
    for key, field in theirs.fields.items():
        mine = ours.fields[key]
        assert (mine.contents(), mine.types, mine.data) == (field.contents(), field.types, field.data), key
    assert ggufinfo.read_info(path) == ggufinfo._info(theirs)


@pytest.mark.parametrize("endianess", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_the_fast_gguf_reader_reads_what_gguf_s_own_reader_reads(tmp_path, endianess):
    path = tmp_path / "vocab.gguf"
    writer = gguf.GGUFWriter(str(path), "llama", endianess=endianess)
    writer.add_context_length(512)
    writer.add_token_list([f"tok{i}" for i in range(20_000)] + ["é", "日本", ""])
    writer.add_token_scores([float(i) / 3 for i in range(20_003)])
    writer.add_eos_token_id(19_999)
    writer.add_array("test.nested", [[1, 2], [3, 4, 5]])
    writer.add_array("test.flags", [True, False, True])
    writer.add_array("test.empty", [])
    writer.add_tensor("a", np.ones((4, 8), dtype=np.float32))
    writer.add_tensor("b", np.zeros(16, dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    fields_as_gguf_reads_them(path, gguf.GGUFReader(path))
    assert ggufinfo.read_info(path).special_tokens == {"eos": "tok19999"}


def test_the_real_model_reads_as_gguf_reads_it(smollm2_path):
    fields_as_gguf_reads_them(smollm2_path, gguf.GGUFReader(smollm2_path))
