"""Access control and request limits: ASGI middleware in front of every route.

From the outside in (see `install`):

    OriginGuard   bound to loopback, a Host header that is not a loopback name is refused (403):
                  a DNS-rebinding page reaches 127.0.0.1 under its own name. A browser's Origin
                  must be allowed, or the request is refused (403) before it can do anything.
    CORS          Starlette's CORSMiddleware: loopback origins plus LOCALRUN_ORIGINS; answers
                  preflights (which carry no key, so it sits outside the key check).
    KeyGuard      with LOCALRUN_API_KEY set, every route but /health and the chat page's static files
                  needs `Authorization: Bearer` or `x-api-key`, compared in constant time against
                  every key (401). The page must load without the key so that it can ask for it.
    BodyLimits    the body is read once and parsed once, before any route runs (body.py): size
                  (413), JSON size and nesting, valid Unicode text, and the counts a request may ask
                  for (messages, inputs, max tokens) (400). Not for the routes app.py names as
                  `streamed` (model files uploaded to /api/blobs, streamed to disk by their route).

Every refusal is a JSON error in the dialect of the request (server/errors.py).
"""

from __future__ import annotations

import fnmatch
import hmac
import ipaddress
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from localrun.config import Settings
from localrun.errors import UsageError
from localrun.hosts import is_loopback, split_host
from localrun.server.body import BodyLimits
from localrun.server.errors import dialect, error_response

OPEN_PATHS = frozenset({"/health", "/"})
OPEN_PREFIX = "/ui/"  # the chat page's files (server/web): public, they ship in the package
LOOPBACK_ORIGIN = r"https?://(localhost|127(\.\d{1,3}){3}|\[::1\])(:\d{1,5})?"
_MAX_TOKEN_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "num_predict")
_INPUT_FIELDS = ("input", "prompt", "inputs")


# --- pure decisions --------------------------------------------------------------------------


def origin_pattern(extra: tuple[str, ...]) -> str:
    """One regex for every allowed Origin: loopback ones, plus LOCALRUN_ORIGINS (globs, `*` allowed)."""
    return "|".join([LOOPBACK_ORIGIN, *(fnmatch.translate(origin.rstrip("/")) for origin in extra)])


def same_origin(origin: str, host: str) -> bool:
    """A page this daemon served at an IP address calling back to it (http://192.168.1.5:11435 asking
    Host 192.168.1.5:11435). Not for names: DNS rebinding points any name at this daemon."""
    try:
        ipaddress.ip_address(split_host(host))
    except ValueError:
        return False
    return urlsplit(origin).netloc.lower() == host.strip().lower()


def key_matches(presented: str, keys: tuple[str, ...]) -> bool:
    """Constant time over every key, so timing tells neither which key nor how much matched."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(presented.encode(), key.encode())
    return found


def presented_key(headers: dict[bytes, bytes]) -> str:
    auth = headers.get(b"authorization", b"").decode("latin-1").strip()
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return headers.get(b"x-api-key", b"").decode("latin-1").strip()


@dataclass(frozen=True, slots=True)
class Limits:
    max_body: int
    max_messages: int
    max_tokens: int
    max_inputs: int

    @classmethod
    def from_config(cls, config: Settings) -> Limits:
        return cls(config.max_body, config.max_messages, config.max_tokens, config.max_inputs)

    def check(self, data: Any) -> str | None:
        """Why a parsed request body is refused, or None. Field names cover every dialect."""
        if not isinstance(data, dict):
            return None
        messages = data.get("messages")
        if isinstance(messages, list) and len(messages) > self.max_messages:
            return f"messages: at most {self.max_messages} per request (LOCALRUN_MAX_MESSAGES)"
        for name in _INPUT_FIELDS:
            value = data.get(name)
            if isinstance(value, list) and len(value) > self.max_inputs:
                return f"{name}: at most {self.max_inputs} inputs per request (LOCALRUN_MAX_INPUTS)"
        n = data.get("n")
        if isinstance(n, int) and n > self.max_inputs:
            return f"n: at most {self.max_inputs} choices per request (LOCALRUN_MAX_INPUTS)"
        options = data.get("options")
        for source in (data, options if isinstance(options, dict) else {}):
            for name in _MAX_TOKEN_FIELDS:
                value = source.get(name)
                if isinstance(value, (int, float)) and not isinstance(value, bool) and value > self.max_tokens:
                    return f"{name}: at most {self.max_tokens} tokens (LOCALRUN_MAX_TOKENS)"
        return None


def check_bind(host: str, config: Settings, insecure: bool) -> None:
    """Refuse to serve a non-loopback address without an API key, unless the user insists."""
    if is_loopback(split_host(host)) or config.api_keys or insecure:
        return
    raise UsageError(f"refusing to listen on {host} without an API key: anyone who can reach it could use it; "
                     f"set LOCALRUN_API_KEY, or pass --insecure to `localrun serve` to allow it anyway")


# --- middleware ------------------------------------------------------------------------------


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers", [])}


class OriginGuard:
    def __init__(self, app: ASGIApp, loopback_bind: bool, origins: re.Pattern[str]) -> None:
        self.app, self.loopback_bind, self.origins = app, loopback_bind, origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self.refusal(_headers(scope))
            if refusal:
                return await error_response(dialect(scope), 403, refusal)(scope, receive, send)
        await self.app(scope, receive, send)

    def refusal(self, headers: dict[bytes, bytes]) -> str | None:
        host = headers.get(b"host", b"").decode("latin-1")
        if self.loopback_bind and host and not is_loopback(split_host(host)):
            return (f"host {host!r} is not a loopback name; this daemon listens on loopback only "
                    f"(requests from other names are refused against DNS rebinding)")
        origin = headers.get(b"origin", b"").decode("latin-1")
        if origin and not self.origins.fullmatch(origin) and not same_origin(origin, host):
            return f"origin {origin!r} is not allowed; add it to LOCALRUN_ORIGINS"
        return None


class KeyGuard:
    def __init__(self, app: ASGIApp, keys: tuple[str, ...]) -> None:
        self.app, self.keys = app, keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")  # a lifespan scope has none
        if scope["type"] == "http" and self.keys and path not in OPEN_PATHS and not path.startswith(OPEN_PREFIX):
            if not key_matches(presented_key(_headers(scope)), self.keys):
                response = error_response(dialect(scope), 401, "missing or invalid API key: send it as "
                                          "`Authorization: Bearer KEY` or `x-api-key: KEY`",
                                          {"WWW-Authenticate": "Bearer"})
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


def install(app: Any, config: Settings, streamed: tuple[str, ...] = ()) -> None:
    """Add the guards to `app`; `config.host` must be the address the daemon is bound to. `streamed`:
    the path prefixes of routes that read their own bodies (BodyLimits)."""
    origins = origin_pattern(config.origins)
    # Starlette runs the last added middleware first: add from the inside out.
    limits = Limits.from_config(config)
    app.add_middleware(BodyLimits, max_body=limits.max_body, check=limits.check, streamed=streamed)
    app.add_middleware(KeyGuard, keys=config.api_keys)
    app.add_middleware(CORSMiddleware, allow_origin_regex=origins, allow_methods=["*"], allow_headers=["*"],
                       expose_headers=["Retry-After"], max_age=600)
    app.add_middleware(OriginGuard, loopback_bind=is_loopback(split_host(config.host)),
                       origins=re.compile(origins))


__all__ = ["KeyGuard", "Limits", "OriginGuard", "check_bind", "install", "is_loopback", "key_matches",
           "origin_pattern", "same_origin", "split_host"]
