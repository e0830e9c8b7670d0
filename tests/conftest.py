"""Shared fixtures: every test gets its own LOCALRUN_HOME so nothing touches the user's files."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def localrun_home(tmp_path, monkeypatch):
    home = tmp_path / "localrun-home"
    home.mkdir()
    monkeypatch.setenv("LOCALRUN_HOME", str(home))
    for var in ("LOCALRUN_MIRROR", "LOCALRUN_API_KEY", "LOCALRUN_HOST", "LOCALRUN_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    return home
