"""The background daemon as users meet it: auto-started by a command that needs it, status, ps,
logs, stop; a stale pid file after a crash; a port taken by something else; `serve` in the
foreground with its pid file and graceful SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from localrun import __version__

from localrun.cli import daemon as lifecycle
from localrun.client.address import parse_address
from tests.cli import run_cli
from tests.daemon import free_port

TINY = ("--max-tokens", "4", "--temperature", "0")


@pytest.fixture
def port(monkeypatch):
    """A free loopback port for this test's daemon; whatever runs there is stopped at the end."""
    number = free_port()
    monkeypatch.setenv("LOCALRUN_HOST", f"127.0.0.1:{number}")
    yield number
    run_cli("stop", timeout=60)
    pid = lifecycle.read_pid(number)
    if pid:
        os.kill(pid, signal.SIGKILL)


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_auto_start_status_ps_logs_stop(port, monkeypatch):
    monkeypatch.setenv("LOCALRUN_SHUTDOWN_TIMEOUT", "2m")  # `stop` below waits for an answer on a busy machine
    assert not healthy(port)
    clients = [subprocess.Popen([sys.executable, "-m", "localrun", "run", "smollm2", "Hi", *TINY],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]  # two scripts at once start one daemon between them
    errs = []
    for client in clients:
        out, err = client.communicate(timeout=240)
        assert client.returncode == 0, err
        assert out.strip()
        errs.append(err)
    assert sum("verifying sha256 digest" in err for err in errs) == 1  # the missing model was pulled, once
    pid = lifecycle.read_pid(port)
    assert pid and healthy(port)
    log = lifecycle.log_file(port).read_text()
    assert log.count("Started server process") == 1

    status = run_cli("status")
    assert status.returncode == 0 and f"pid {pid}" in status.stdout and "1 model(s) loaded" in status.stdout
    ps = run_cli("ps").stdout.splitlines()
    assert ps[0].split() == ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"]
    assert ps[1].startswith("smollm2:135m") and "CPU" in ps[1] and "from now" in ps[1]
    assert "Application startup complete" in run_cli("logs").stdout

    assert run_cli("run", "smollm2", "Hi", *TINY, "--ctx-size", "1024").returncode == 0
    assert re.split(r"\s{3,}", run_cli("ps").stdout.splitlines()[1])[4] == "1024"  # CONTEXT, per request
    assert run_cli("run", "smollm2", "Hi", *TINY, "--keep-alive", "0").returncode == 0
    deadline = time.monotonic() + 20
    while len(run_cli("ps").stdout.splitlines()) > 1:  # keep-alive 0: unloaded after the answer
        assert time.monotonic() < deadline
        time.sleep(0.5)

    assert run_cli("run", "smollm2", "Hi", *TINY).returncode == 0
    assert [m["name"] for m in json.loads(run_cli("ps", "--json").stdout)] == ["smollm2:135m"]
    assert json.loads(run_cli("status", "--json").stdout) == {
        "address": f"http://127.0.0.1:{port}", "state": "up", "pid": pid, "version": __version__, "loaded": 1}
    unloaded = run_cli("stop", "smollm2")  # as `ollama stop MODEL`: that model only
    assert (unloaded.returncode, unloaded.stdout, unloaded.stderr) == (0, "", "")
    assert json.loads(run_cli("ps", "--json").stdout) == [] and healthy(port)
    again = run_cli("stop", "smollm2")
    assert again.returncode == 1 and again.stderr == "error: model 'smollm2' is not loaded\n"

    # `stop` is graceful: an answer streaming when it comes is finished, not cut off.
    answer = subprocess.Popen([sys.executable, "-m", "localrun", "run", "smollm2", "Tell me a story.",
                               "--max-tokens", "24", "--temperature", "0"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = answer.stdout.read(1)
    stopped = run_cli("stop")
    out, err = answer.communicate(timeout=180)
    assert answer.returncode == 0 and err == "" and len((first + out).split()) > 8, err
    assert stopped.returncode == 0 and f"stopped localrun (pid {pid})" in stopped.stdout
    assert not healthy(port) and not lifecycle.pid_file(port).exists()
    assert run_cli("status").returncode == 1
    assert json.loads(run_cli("status", "--json").stdout)["state"] == "down"
    assert "not running" in run_cli("stop").stdout


def test_stop_ends_an_answer_longer_than_the_drain_on_a_line_of_its_own(port, monkeypatch):
    monkeypatch.setenv("LOCALRUN_SHUTDOWN_TIMEOUT", "0")
    assert run_cli("run", "smollm2", "Hi", *TINY).returncode == 0  # starts the daemon with that setting
    answer = subprocess.Popen([sys.executable, "-m", "localrun", "run", "smollm2", "Tell me a long story.",
                               "--max-tokens", "2000", "--temperature", "0"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = answer.stdout.read(1)
    started = time.monotonic()
    assert run_cli("stop").returncode == 0 and time.monotonic() - started < 15
    out, err = answer.communicate(timeout=60)
    assert answer.returncode == 1 and err == "error: the server is shutting down\n"
    assert (first + out).endswith("\n") and (first + out).strip()  # the error starts a line of its own


def test_logs_follow_waits_for_the_log_and_prints_new_lines_until_ctrl_c(port):
    path = lifecycle.log_file(port)
    follower = subprocess.Popen([sys.executable, "-m", "localrun", "logs", "-f"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    assert follower.stderr.readline() == f"waiting for the daemon to write its log ({path})\n"  # a fresh home
    path.parent.mkdir(parents=True)
    path.write_text("first line\n")
    assert follower.stdout.readline() == "first line\n"
    with open(path, "a") as f:
        f.write("second line\n")
    assert follower.stdout.readline() == "second line\n"
    follower.send_signal(signal.SIGINT)
    assert follower.wait(30) == 0


def test_stale_pid_file_is_cleaned(port):
    pid_file = lifecycle.pid_file(port)
    pid_file.parent.mkdir(parents=True)
    for stale in (dead_pid(), None):
        if stale is None:  # a live pid that is not localrun (pids are reused after a crash)
            sleeper = subprocess.Popen(["sleep", "30"])
            stale = sleeper.pid
        pid_file.write_text(f"{stale}\n")
        status = run_cli("status")
        assert status.returncode == 1 and "not running" in status.stdout
        assert not pid_file.exists()
        pid_file.write_text(f"{stale}\n")
        assert "not running" in run_cli("stop").stdout and not pid_file.exists()
    assert sleeper.poll() is None  # stop never signals a process that is not localrun
    sleeper.kill()


def test_busy_port_is_reported_clearly(port):
    with socket.socket() as squatter:  # listens but never speaks HTTP
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        started = time.monotonic()
        with ThreadPoolExecutor(3) as pool:  # each waits out its probe's timeout: together, not in turn
            done, serve, status = pool.map(lambda args: run_cli(*args),
                                           [("run", "smollm2", "hi"), ("serve", "--port", str(port)), ("status",)])
        assert done.returncode == 1
        assert len(done.stderr.splitlines()) == 1 and "not a localrun daemon" in done.stderr
        assert time.monotonic() - started < 30
        assert serve.returncode == 1 and "not a localrun daemon" in serve.stderr
        assert "not a localrun daemon" in status.stdout
    assert not lifecycle.pid_file(port).exists()


def test_run_on_a_taken_port_waits_out_one_health_probe_not_two(port):
    """The probe that found the port taken decides: `run` no longer probes again before saying so (each
    probe of a program that never answers waits out its whole timeout)."""
    connections, stop = [], threading.Event()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        squatter.settimeout(0.1)

        def count() -> None:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    connections.append(squatter.accept()[0])

        counter = threading.Thread(target=count)
        counter.start()
        done = run_cli("run", "smollm2", "hi")
        stop.set()
        counter.join()
        for connection in connections:
            connection.close()
    assert done.returncode == 1 and "not a localrun daemon" in done.stderr
    assert len(connections) == 1


def test_foreground_serve_pid_file_and_sigterm(port):
    server = subprocess.Popen([sys.executable, "-m", "localrun", "serve", "--port", str(port), "--gpu-layers", "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not healthy(port):
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
            time.sleep(0.2)
        assert lifecycle.read_pid(port) == server.pid
        second = run_cli("serve", "--port", str(port))
        assert second.returncode == 1 and "already" in second.stderr
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
        assert not lifecycle.pid_file(port).exists()
    finally:
        if server.poll() is None:
            server.kill()


def test_serve_refuses_bad_gpu_layers(port):
    done = run_cli("serve", "--port", str(port), "--gpu-layers", "most")
    assert done.returncode == 2 and "--gpu-layers" in done.stderr


def test_serve_refuses_a_public_bind_without_a_key(port):
    done = run_cli("serve", "--host", "0.0.0.0", "--port", str(port))
    assert done.returncode == 2 and "LOCALRUN_API_KEY" in done.stderr
    assert not healthy(port)


def test_remote_hosts_are_not_managed():
    assert not parse_address("http://10.1.2.3:8000").is_loopback
    lifecycle.ensure_running(parse_address("http://192.0.2.1:9"))  # returns at once: nothing to start there


def test_serve_help_lists_every_setting():
    from localrun.config import SETTINGS

    text = run_cli("serve", "--help", env={"COLUMNS": "200"}).stdout
    assert [s.env for s in SETTINGS if s.env not in text] == []


def test_a_daemon_that_dies_at_start_is_explained(tmp_path):
    address = parse_address("127.0.0.1:1234")
    log = tmp_path / "serve.log"
    log.write_text("INFO: Started\nERROR: [Errno 98] error while attempting to bind: address already in use\n")
    assert "not a localrun daemon" in lifecycle._exit_reason(address, log)
    log.write_text("error: LOCALRUN_MAX_QUEUE must be an integer, got 'x'\n")
    assert lifecycle._exit_reason(address, log).startswith(
        "the daemon exited at start: error: LOCALRUN_MAX_QUEUE must be an integer")


def test_auto_start_reports_a_daemon_that_cannot_start(port, monkeypatch):
    monkeypatch.setenv("LOCALRUN_MAX_QUEUE", "lots")
    done = run_cli("run", "smollm2", "hi")
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1
    assert "LOCALRUN_MAX_QUEUE" in done.stderr
