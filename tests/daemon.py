"""A real daemon for tests: `python -m localrun serve` on a free loopback port, with its own home
holding the bundled model. Session-scoped through the `daemon` fixture in conftest.py, so the
server, OpenAI, Ollama and Anthropic tests share one process (and one loaded runner)."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.cli import run_cli

MODEL = "smollm2"
EMBED_CTX = 512  # the session daemon's embeddings context (conftest.py): long-input tests stay short


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Daemon:
    proc: subprocess.Popen
    home: Path
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment a CLI subprocess needs to talk to this daemon."""
        return {**os.environ, "LOCALRUN_HOME": str(self.home), "LOCALRUN_HOST": f"127.0.0.1:{self.port}"}

    def create(self, name: str, modelfile: str, folder: Path) -> str:
        """`localrun create NAME` against this daemon, from a Modelfile written into `folder`, as a user
        makes a model; the model's full name."""
        path = folder / "Modelfile"
        path.write_text(modelfile)
        run_cli("create", name, "-f", str(path), env=self.env(), timeout=120).check_returncode()
        return f"{name}:latest"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def give_bundled_model(home: Path) -> None:
    """Leave in `home`'s store what `localrun pull smollm2` leaves there: a copy of one store the bundled
    model was pulled into once per test process (a pull costs about a second, a copy a tenth)."""
    shutil.copytree(_pulled_store(), home / "models", dirs_exist_ok=True)


@functools.cache
def _pulled_store() -> Path:
    home = Path(tempfile.mkdtemp(prefix="localrun-pulled-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    run_cli("pull", MODEL, "--quiet", env={"LOCALRUN_HOME": str(home)}, timeout=120).check_returncode()
    return home / "models"


def start_daemon(home: Path, extra_env: dict[str, str] | None = None, pull: bool = True,
                 args: tuple[str, ...] = ()) -> Daemon:
    """Give `home` the bundled model as a pull would (offline) and start a daemon serving it (`args` go to
    serve)."""
    home.mkdir(parents=True, exist_ok=True)
    # The tests pull from file servers on loopback, which the daemon refuses unless it is allowed.
    env = {**os.environ, "LOCALRUN_HOME": str(home), "LOCALRUN_KEEP_ALIVE": "-1", "LOCALRUN_ALLOW_PRIVATE_PULL": "1",
           **(extra_env or {})}
    if pull:
        give_bundled_model(home)
    port = free_port()
    log = home / "daemon.log"
    command = [sys.executable, "-m", "localrun", "serve", "--host", "127.0.0.1", "--port", str(port), *args]
    proc = subprocess.Popen(command, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    daemon = Daemon(proc, home, port, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{daemon.url}/health", timeout=1).status_code == 200:
                return daemon
        except httpx.HTTPError:
            time.sleep(0.05)  # the daemon is up in about a second: look often
    daemon.stop()
    raise RuntimeError(f"daemon did not become healthy: {log.read_text()[-2000:]}")
