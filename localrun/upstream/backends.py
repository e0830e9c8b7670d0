"""backends.toml: the upstream servers the user declared, parsed, checked and written back atomically.

    [backends.gpu]
    url = ["http://10.0.0.5:8000/v1", "http://10.0.0.6:8000/v1"]   # one URL, or several: replicas
    models = ["llama3.1:70b"]        # optional: without it, the upstream's /v1/models says
    api_key_env = "VLLM_API_KEY"     # optional: the variable that holds the key (the key never is here)
    connect_timeout = "5s"           # optional, per backend: connecting to a replica
    timeout = "10m"                  # ... the longest silence while waiting for or reading an answer
    max_concurrent = 32              # ... requests at once per replica (0 = no limit); more get 503
    health_interval = "10s"          # ... how often each replica is checked in the background

The file lives in the config directory. The CLI edits it (`localrun backend add/rm`) and the daemon
reads it at start. A key is read from the environment when a request is sent and is never logged.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

from localrun.durations import parse_duration
from localrun.errors import InvalidRequest, UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FILE = "backends.toml"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYS = {"url", "models", "api_key_env", "connect_timeout", "timeout", "max_concurrent", "health_interval"}


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    urls: tuple[str, ...]  # base URLs ending in /v1; more than one are replicas of the same models
    models: tuple[str, ...] = ()  # empty: discovered from the upstream's /v1/models
    api_key_env: str = ""
    connect_timeout: float = 5.0
    timeout: float = 600.0
    max_concurrent: int = 0
    health_interval: float = 10.0

    def api_key(self) -> str | None:
        """The key from the environment at the time of asking (a restart is not needed to rotate it)."""
        return os.environ.get(self.api_key_env) or None if self.api_key_env else None

    def headers(self) -> dict[str, str]:
        key = self.api_key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    def summary(self) -> dict[str, Any]:
        """What `backend list --json` and `doctor` show: everything but the key itself."""
        return {"name": self.name, "urls": list(self.urls), "models": list(self.models),
                "api_key_env": self.api_key_env, "api_key_set": self.api_key() is not None,
                "connect_timeout": self.connect_timeout, "timeout": self.timeout,
                "max_concurrent": self.max_concurrent, "health_interval": self.health_interval}

    def check(self) -> list[dict[str, Any]]:
        """Ask each replica's /models now (doctor): reachable, and which models it lists, or why not."""
        import httpx

        results = []
        for url in self.urls:
            try:
                response = httpx.get(url + "/models", headers=self.headers(), timeout=self.connect_timeout)
                response.raise_for_status()
                ids = [str(m.get("id")) for m in response.json().get("data") or [] if isinstance(m, dict)]
                results.append({"url": url, "ok": True, "models": ids})
            except (httpx.HTTPError, ValueError, AttributeError) as e:
                results.append({"url": url, "ok": False, "error": str(e) or type(e).__name__})
        return results

    def to_toml(self) -> str:
        lines = [f"[backends.{self.name}]", f"url = {_list(self.urls) if len(self.urls) > 1 else _str(self.urls[0])}"]
        if self.models:
            lines.append(f"models = {_list(self.models)}")
        if self.api_key_env:
            lines.append(f"api_key_env = {_str(self.api_key_env)}")
        default = Backend("x", ("x",))
        for key in ("connect_timeout", "timeout", "max_concurrent", "health_interval"):
            if getattr(self, key) != getattr(default, key):
                lines.append(f"{key} = {getattr(self, key)!r}")
        return "\n".join(lines) + "\n"


@dataclass(slots=True)
class BackendsFile:
    path: Path
    backends: dict[str, Backend] = field(default_factory=dict)

    def text(self) -> str:
        head = "# Upstream servers behind localrun (`localrun backend add/list/rm` edits this file).\n"
        return head + "".join("\n" + b.to_toml() for b in self.backends.values())

    def save(self) -> None:
        """Write the whole file to a temporary sibling and rename it over the old one: a reader sees the
        old file or the new, never half of one."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(self.text())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


def default_path() -> Path:
    from localrun import paths

    return paths.config_dir() / FILE


def load(path: Path | None = None) -> BackendsFile:
    """The declared backends; none when the file does not exist. A bad file is one UsageError naming it."""
    path = path or default_path()
    if not path.exists():
        return BackendsFile(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"{path}: {e}") from None
    tables = data.get("backends", {})
    if not isinstance(tables, dict) or set(data) - {"backends"}:
        raise UsageError(f"{path}: expected only [backends.NAME] tables")
    return BackendsFile(path, {name: parse(name, table, where=str(path)) for name, table in tables.items()})


@contextlib.contextmanager
def editing(path: Path | None = None) -> Iterator[BackendsFile]:
    """The file to change in the `with` block, saved at its end, under a lock against other editors."""
    from filelock import FileLock

    path = path or default_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.with_name(f".{path.name}.lock"))):
        file = load(path)
        yield file
        file.save()


def parse(name: str, table: Any, where: str = FILE) -> Backend:
    """One [backends.NAME] table, checked: every problem names the file, the backend and the key."""
    def bad(message: str) -> UsageError:
        return UsageError(f"{where}: backend {name!r}: {message}")

    if not _NAME.fullmatch(name):
        raise bad("a name is letters, digits, '.', '_' or '-' (at most 64)")
    if not isinstance(table, dict):
        raise bad("expected a table")
    unknown = set(table) - _KEYS
    if unknown:
        raise bad(f"unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_KEYS))}")
    urls = table.get("url")
    urls = [urls] if isinstance(urls, str) else urls
    if not urls or not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise bad("url: give one URL or a list of URLs (replicas)")
    models = table.get("models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) and m.strip() for m in models):
        raise bad("models: a list of model names")
    env = table.get("api_key_env", "")
    if not isinstance(env, str) or (env and not _ENV.fullmatch(env)):
        raise bad("api_key_env: the NAME of an environment variable that holds the key, not the key")
    try:
        return Backend(name, tuple(normalize_url(u) for u in urls), tuple(m.strip() for m in models), env,
                       connect_timeout=_seconds(table, "connect_timeout", 5.0),
                       timeout=_seconds(table, "timeout", 600.0),
                       max_concurrent=_count(table, "max_concurrent"),
                       health_interval=_seconds(table, "health_interval", 10.0))
    except ValueError as e:
        raise bad(str(e)) from None


def normalize_url(url: str) -> str:
    """An OpenAI base URL: http(s), no query, ending in /v1 (added when the path is empty)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"url {url!r}: expected http://HOST:PORT/v1 or https://...")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"url {url!r}: no query, fragment or credentials (put the key in api_key_env)")
    path = parts.path.rstrip("/") or "/v1"
    return f"{parts.scheme}://{parts.netloc}{path}"


def _seconds(table: dict[str, Any], key: str, default: float) -> float:
    value = table.get(key, default)
    try:
        seconds = parse_duration(value) if isinstance(value, (str, int, float)) else -1.0
    except InvalidRequest:
        seconds = -1.0
    if seconds <= 0:
        raise ValueError(f"{key}: a positive duration such as 30 or \"30s\"")
    return seconds


def _count(table: dict[str, Any], key: str) -> int:
    value = table.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{key}: a whole number >= 0 (0 = no limit)")
    return value


def _str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(_str(item) for item in items) + "]"


__all__ = ["Backend", "BackendsFile", "FILE", "default_path", "editing", "load", "normalize_url", "parse"]
