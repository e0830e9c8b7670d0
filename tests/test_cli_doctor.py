"""`localrun doctor` reports the real llama.cpp build (through the runner subprocess), paths and the daemon."""

from __future__ import annotations

import json
import sys

from localrun.cli.doctor_commands import build_info, render
from tests.cli import run_cli


def test_doctor_reports_build_paths_and_daemon(localrun_home):
    done = run_cli("doctor", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    build = data["llama_cpp"]
    assert "error" not in build, build
    assert build["supports_gpu_offload"] in (True, False) and build["default_threads"] >= 1
    assert "CPU" in build["system_info"]
    assert data["paths"]["models"].startswith(str(localrun_home))
    assert data["disk_free_bytes"] > 0
    assert data["daemon"]["state"] == "down"
    text = run_cli("doctor").stdout
    assert "GPU offload" in text and "not running" in text and str(localrun_home) in text
    assert "CPU features" in text and "weight buffers" in text and build["cpu"]
    if "AMX_INT8 = 1" in build["system_info"]:  # a build with AMX: the decision is stated in words
        assert any(line.startswith("AMX: ") for line in build["cpu"]) and "  AMX: " in text


def test_doctor_sees_a_running_daemon(daemon):
    data = json.loads(run_cli("doctor", "--json", env=daemon.env()).stdout)
    assert data["daemon"]["state"] == "up" and data["daemon"]["address"] == daemon.url


def test_a_broken_build_degrades_to_one_line(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    info = build_info()
    assert "error" in info
    report = {"localrun": "0", "python": "3", "llama_cpp": info, "paths": {}, "disk_free_bytes": 0,
              "daemon": {"address": "x", "state": "down", "pid": None, "log": "l"}}
    assert "unavailable:" in render(report)


def test_without_localrun_home_or_xdg_runtime_dir_commands_stay_quiet(tmp_path, monkeypatch):
    """Containers and plain ssh sessions have no XDG_RUNTIME_DIR: no warning on every command, and
    the pid files go under the user's data dir, not a /tmp path another user could create first."""
    monkeypatch.delenv("LOCALRUN_HOME", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    env = {f"XDG_{kind}_HOME": str(tmp_path / kind.lower()) for kind in ("DATA", "CONFIG", "STATE", "CACHE")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    done = run_cli("doctor", "--json")
    assert done.returncode == 0 and done.stderr == ""
    assert json.loads(done.stdout)["paths"]["runtime"] == str(tmp_path / "data" / "localrun" / "run")
    listing = run_cli("list")
    assert listing.returncode == 0 and listing.stderr == ""
