"""llama.cpp RPC: `localrun worker` and `serve --rpc`.

With a llama-cpp-python built without RPC (the default wheel), both say how to rebuild. With one built
with `-DGGML_RPC=on`, two workers on loopback ports serve the bundled model split across them with
the same greedy tokens as a local load, and a worker killed mid-answer gives a clear error while the
daemon survives."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.cli import run_cli
from tests.daemon import free_port, start_daemon

PROMPT = {"model": "smollm2", "prompt": "The three primary colours are", "max_tokens": 24, "temperature": 0}


@pytest.fixture(scope="module")
def has_rpc() -> bool:
    done = subprocess.run([sys.executable, "-m", "localrun.runner", "--info"], capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1])["rpc"]


def test_without_the_rpc_backend_worker_and_serve_rpc_say_how_to_rebuild(has_rpc):
    if has_rpc:
        pytest.skip("this llama-cpp-python has the RPC backend")
    for args in (["worker", "--port", str(free_port())], ["serve", "--rpc", "127.0.0.1:50052", "--port", str(free_port())]):
        done = run_cli(*args)
        assert done.returncode == 2 and 'CMAKE_ARGS="-DGGML_RPC=on"' in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    doctor = run_cli("doctor")
    assert "RPC backend      no: " in doctor.stdout


def test_a_bad_rpc_address_is_refused_before_anything_starts():
    done = run_cli("serve", "--rpc", "127.0.0.1", "--port", str(free_port()))
    assert done.returncode == 2 and done.stderr.startswith("error: --rpc must be HOST:PORT addresses")


def test_a_worker_on_a_non_loopback_address_warns_that_rpc_is_for_trusted_networks():
    proc = subprocess.Popen([sys.executable, "-m", "localrun", "worker", "--host", "0.0.0.0", "--port", str(free_port())],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()
    finally:
        proc.kill()
        proc.wait()
    assert first.startswith("warning: listening on 0.0.0.0") and "trusted network" in first


def _worker(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "localrun", "worker", "--port", str(port), "--threads", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the worker did not listen")


@pytest.fixture(scope="module")
def split(has_rpc, tmp_path_factory):
    """Two workers and a daemon that spreads the model over them."""
    if not has_rpc:
        pytest.skip("needs llama-cpp-python built with CMAKE_ARGS=-DGGML_RPC=on")
    ports = [free_port(), free_port()]
    workers = [_worker(port) for port in ports]
    rpc = ",".join(f"127.0.0.1:{port}" for port in ports)
    front = start_daemon(tmp_path_factory.mktemp("rpc-front"), args=("--rpc", rpc))
    yield front, workers
    front.stop()
    for w in workers:
        w.kill()
        w.wait()


def test_a_model_split_over_two_workers_gives_the_greedy_tokens_of_a_local_load(split, daemon):
    front, _ = split
    remote = httpx.post(f"{front.url}/v1/completions", json=PROMPT, timeout=300).json()
    local = httpx.post(f"{daemon.url}/v1/completions", json=PROMPT, timeout=300).json()
    assert remote["choices"][0]["text"] == local["choices"][0]["text"] != ""
    ps = httpx.get(f"{front.url}/api/ps").json()["models"]
    assert ps, "the model should be loaded on the front"


def test_a_worker_killed_mid_answer_is_a_clear_error_and_the_daemon_survives(split):
    front, workers = split
    body = {**PROMPT, "max_tokens": 400, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{front.url}/v1/completions", json=body, timeout=300) as response:
        lines = response.iter_lines()
        next(line for line in lines if line.startswith("data:"))
        workers[0].kill()
        workers[0].wait()
        rest = [line for line in lines if line.startswith("data:")]
    errors = [json.loads(line[5:])["error"] for line in rest if '"error"' in line]
    assert errors and "RPC server crashed" in errors[-1]["message"], rest[-3:]  # it was computing on that worker
    assert httpx.get(f"{front.url}/health").json()["status"] == "ok"
    again = httpx.post(f"{front.url}/v1/completions", json=PROMPT, timeout=300)
    assert again.status_code == 500 and "is not reachable" in again.json()["error"]["message"]
