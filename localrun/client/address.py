"""Daemon addresses: `LOCALRUN_HOST` / `--host` values parsed into a base URL. Pure, no I/O.

Accepted forms, as Ollama accepts OLLAMA_HOST:

    "127.0.0.1:11435"  "localhost"  ":8080"  "http://10.0.0.2:8000"  "https://api.example.com/v1"

A missing scheme means http; a missing port means 11435 without a scheme and the scheme's port with
one; a trailing "/v1" is dropped because the client adds its own route prefixes. Wildcard bind
addresses (0.0.0.0, ::) are reached through loopback.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from localrun.config import DEFAULT_PORT
from localrun.errors import UsageError
from localrun.hosts import is_loopback, split_host

_WILDCARD = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}
_SCHEME_PORT = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Address:
    scheme: str
    host: str
    port: int
    path: str = ""

    @property
    def base_url(self) -> str:
        """The URL the client talks to (wildcard binds become loopback)."""
        host = _WILDCARD.get(self.host, self.host)
        host = f"[{host}]" if ":" in host else host
        return f"{self.scheme}://{host}:{self.port}{self.path}"

    @property
    def is_loopback(self) -> bool:
        """Whether this is a daemon on this machine, which the CLI may start and stop."""
        return is_loopback(_WILDCARD.get(self.host, self.host))


def parse_address(value: str) -> Address:
    """Parse a host setting; raises UsageError on anything that is not host[:port] or a URL."""
    text = value.strip()
    explicit = "://" in text
    try:
        parts = urlsplit(text if explicit else f"http://{text}")
    except ValueError:  # an unclosed "[" and the like
        parts = None
    if (parts is None or parts.scheme not in _SCHEME_PORT or parts.query or parts.fragment
            or (parts.netloc.partition(":")[0] and not split_host(parts.netloc))):
        raise UsageError(f"invalid host {value!r}: expected HOST[:PORT] or http(s)://HOST[:PORT]")
    try:
        port = parts.port
    except ValueError:
        raise UsageError(f"invalid port in host {value!r}") from None
    if port is None:
        port = _SCHEME_PORT[parts.scheme] if explicit else DEFAULT_PORT
    path = parts.path.rstrip("/")
    path = path[: -len("/v1")] if path.endswith("/v1") else path
    return Address(parts.scheme, parts.hostname or "", port, path)


__all__ = ["Address", "parse_address"]
