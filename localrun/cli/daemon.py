"""The background daemon's lifecycle: find it, start it detached, wait until healthy, stop it.

Files are keyed by port so several daemons (different LOCALRUN_HOST ports) can share one home:
`runtime_dir()/serve-PORT.pid` (written by `serve` itself, removed when it exits) and
`log_dir()/serve-PORT.log` (the detached daemon's stdout and stderr). A pid file whose process is
gone (a crash, a reboot) is stale and removed on sight. Only loopback daemons are managed: a
`--host` elsewhere is used as it is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from enum import Enum
from pathlib import Path

import httpx

from localrun.client.address import Address
from localrun.errors import DaemonUnavailable
from localrun.paths import log_dir, runtime_dir

START_TIMEOUT = 60.0
STOP_MARGIN = 15.0  # beyond the daemon's own drain (LOCALRUN_SHUTDOWN_TIMEOUT): closing connections, runners


class State(Enum):
    UP = "up"  # a localrun (or compatible) /health answers
    DOWN = "down"  # nothing listens
    FOREIGN = "foreign"  # something listens but it is not a healthy localrun daemon


def pid_file(port: int) -> Path:
    return runtime_dir() / f"serve-{port}.pid"


def log_file(port: int) -> Path:
    return log_dir() / f"serve-{port}.log"


def write_pid_file(port: int) -> Path:
    path = pid_file(port)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{os.getpid()}\n")
    return path


def remove_pid_file(port: int) -> None:
    """Remove the pid file if it is this process's (a newer daemon may own it by now)."""
    if read_pid(port) == os.getpid():
        pid_file(port).unlink(missing_ok=True)


def read_pid(port: int) -> int | None:
    """The live daemon's pid from the pid file; a stale file is deleted and None returned."""
    path = pid_file(port)
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        if path.exists():
            path.unlink(missing_ok=True)
        return None
    if pid == os.getpid() or _is_localrun(pid):
        return pid
    path.unlink(missing_ok=True)
    return None


def _is_localrun(pid: int) -> bool:
    """Alive, not a zombie, and (where /proc tells) a localrun process: pids get reused after crashes."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}")
    if not proc.exists():
        return True
    try:
        if ") Z" in (proc / "stat").read_text():
            return False
        return b"localrun" in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def probe(address: Address, timeout: float = 3.0) -> State:
    try:
        response = httpx.get(f"{address.base_url}/health", timeout=timeout, verify=False)  # loopback http
        healthy = response.status_code == 200 and response.json().get("status") == "ok"
    except httpx.ConnectError:
        return State.DOWN
    except (httpx.HTTPError, ValueError, AttributeError):
        return State.FOREIGN
    return State.UP if healthy else State.FOREIGN


def busy_message(address: Address) -> str:
    return (f"port {address.port} on {address.host or '127.0.0.1'} is taken by a program that is not a localrun "
            f"daemon; stop it or pick another port with LOCALRUN_HOST or --host")


def ensure_running(address: Address) -> None:
    """Make sure a daemon answers at `address`, starting one in the background if nothing listens."""
    if not address.is_loopback:
        return
    state = probe(address, timeout=10.0 if read_pid(address.port) else 3.0)
    if state is State.UP:
        return
    if state is State.FOREIGN:
        raise DaemonUnavailable(busy_message(address))
    from filelock import FileLock

    runtime_dir().mkdir(parents=True, exist_ok=True)
    with FileLock(str(runtime_dir() / f"serve-{address.port}.lock")):
        if probe(address) is not State.UP:  # another CLI process may have started it meanwhile
            start(address)


def start(address: Address) -> int:
    """Start `python -m localrun serve` detached, logging to the log file; wait until it is healthy."""
    log = log_file(address.port)
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "localrun", "serve", "--host", address.host or "127.0.0.1",
               "--port", str(address.port)]
    with open(log, "ab") as out:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    _wait_healthy(address, child, log)
    return child.pid


def _wait_healthy(address: Address, child: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise DaemonUnavailable(_exit_reason(address, log))
        if probe(address, timeout=2.0) is State.UP:
            return
        time.sleep(0.1)
    raise DaemonUnavailable(f"the daemon did not become healthy within {START_TIMEOUT:.0f}s; see `localrun logs`")


def _exit_reason(address: Address, log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    last = lines[-1].strip() if lines else "no output"
    if "address already in use" in "\n".join(lines[-5:]).lower():
        return busy_message(address)
    return f"the daemon exited at start: {last} (log: {log})"


def stop(address: Address) -> int | None:
    """SIGTERM the daemon of this port and wait for it: it lets requests in flight finish for up to
    LOCALRUN_SHUTDOWN_TIMEOUT, then ends them; SIGKILL only if it is still there STOP_MARGIN later.
    Its pid, or None when none ran."""
    pid = read_pid(address.port)
    if pid is None:
        if probe(address) is State.UP:
            raise DaemonUnavailable(f"the daemon at {address.base_url} was not started from this home "
                                    f"(no pid file); stop it where it runs")
        return None
    os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, _drain_s() + STOP_MARGIN):
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 5.0)
    pid_file(address.port).unlink(missing_ok=True)
    return pid


def _drain_s() -> float:
    """The daemon's drain time as this environment sets it (the daemon was started from it)."""
    from localrun.config import read
    from localrun.errors import UsageError

    try:
        return read("LOCALRUN_SHUTDOWN_TIMEOUT")
    except UsageError:
        return 0.0  # `serve` refuses such a value: no daemon started with it


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _is_localrun(pid):
            return True
        time.sleep(0.05)
    return False


__all__ = ["State", "pid_file", "log_file", "write_pid_file", "remove_pid_file", "read_pid", "probe",
           "ensure_running", "start", "stop", "busy_message"]
