"""Where localrun keeps its files: platformdirs locations, all moved under one root by `LOCALRUN_HOME`.

A leaf module: it reads the setting each call (tests point `LOCALRUN_HOME` at a temp dir per test).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from localrun import config

APP = "localrun"


def _home() -> Path | None:
    return config.read("LOCALRUN_HOME")


def data_dir() -> Path:
    """Models live here: `blobs/` and `manifests/`."""
    home = _home()
    if home:
        return home
    import platformdirs

    return Path(platformdirs.user_data_dir(APP))


def config_dir() -> Path:
    home = _home()
    if home:
        return home / "config"
    import platformdirs

    return Path(platformdirs.user_config_dir(APP))


def log_dir() -> Path:
    home = _home()
    if home:
        return home / "logs"
    import platformdirs

    return Path(platformdirs.user_log_dir(APP))


def runtime_dir() -> Path:
    """Pid files. The system's per-user runtime dir where it provides one; on a Linux or BSD machine
    without XDG_RUNTIME_DIR (containers, plain ssh, cron) the data dir's `run/`: platformdirs would
    warn on every command there and fall back to /tmp/runtime-UID, a path another user can create first."""
    home = _home()
    if home:
        return home / "run"
    if os.name == "posix" and sys.platform != "darwin" and not os.environ.get("XDG_RUNTIME_DIR"):
        return data_dir() / "run"
    import platformdirs

    return Path(platformdirs.user_runtime_dir(APP))


def models_dir() -> Path:
    return data_dir() / "models"
