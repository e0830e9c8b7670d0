"""Host names as RFC 3986 writes them (`host [":" port]`), and which ones are this machine. Pure; a leaf.

    host        = IP-literal / IPv4address / reg-name
    IP-literal  = "[" IPv6address "]"            (IPvFuture is not accepted)
    reg-name    = *( unreserved / pct-encoded / sub-delims )
    port        = *DIGIT

A value that is not of this form has no host at all: `[::1].evil.com`, `[::1]evil` and
`127.0.0.1:80@evil.com` are not loopback names with something after them, they are not host names,
and whoever trusts loopback (the daemon's DNS-rebinding guard, the CLI starting a daemon) refuses
them. Bind addresses may also be a bare IPv6 address (`::1`) or a URL.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

_AUTHORITY = re.compile(r"(?:\[(?P<ip6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9\-._~!$&'()*+,;=%]*))(?::(?P<port>[0-9]*))?")


def split_host(value: str) -> str:
    """The host of a Host header or bind address, lower-cased; "" when the value is not one.

    "[::1]:80" -> "::1", "localhost:11435" -> "localhost", "::1" -> "::1", "[::1].evil.com" -> ""."""
    value = value.strip().lower()
    if "://" in value:
        return split_host(urlsplit(value).netloc)
    if value.count(":") > 1 and "[" not in value:  # a bare IPv6 bind address
        return value if _is_ip(value) else ""
    match = _AUTHORITY.fullmatch(value)
    if match is None:
        return ""
    if match.group("ip6") is not None:
        return match.group("ip6") if _is_ip(match.group("ip6"), version=6) else ""
    return match.group("name")


def is_loopback(host: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1 (a bare host name, as `split_host` returns it)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_ip(text: str, version: int | None = None) -> bool:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    return version is None or address.version == version


__all__ = ["is_loopback", "split_host"]
