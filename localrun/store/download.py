"""One resumable, verified HTTP download into a `.partial` file.

The partial file is the state: a new process (after Ctrl-C, kill -9 or a reboot) re-hashes what is
there and asks the server for the rest with `Range`, plus `If-Range` with the validator (ETag or
Last-Modified) saved beside it, so a file that changed on the server is fetched whole instead of
being spliced onto old bytes. Each attempt streams with httpx; connection errors, timeouts, 5xx
and 429 are retried with exponential backoff (the retry budget counts attempts that made no
progress, so a long download over a flaky link still finishes).
The first 24 bytes are checked against the GGUF header before anything more is written, and the
finished file is checked against the expected sha256 (catalogue, else the server's X-Linked-Etag);
a mismatch deletes the partial file. Fast links: the bytes are hashed on a helper thread as they
arrive, the kernel starts writing them to disk behind the reader (writeback.py), and plain-TCP
reads are 1 MiB instead of 64 KiB (reads.py).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from localrun import config
from localrun.errors import ChecksumMismatch, DownloadError, NotGGUF, SourceRefused
from localrun.store.digests import BackgroundHash
from localrun.store.ggufinfo import HEADER_SIZE, check_header
from localrun.store.layout import ensure_space
from localrun.store.reads import widen_reads
from localrun.store.sources import is_public
from localrun.store.writeback import WriteBehind

_HEX64 = frozenset("0123456789abcdef")
PROGRESS_INTERVAL = 0.05  # seconds between progress callbacks (the last one always comes)


@dataclass(frozen=True, slots=True)
class Guard:
    """Which hosts a pull may fetch from, checked before every request, each redirect hop included.

    The daemon pulls for HTTP clients, which must not use it to probe or reach the host's network:
    a host that resolves to a non-public address (loopback, link-local, private ...) is refused
    unless `allow_private` (LOCALRUN_ALLOW_PRIVATE_PULL) or it is one of `trusted` (the host of
    LOCALRUN_MIRROR, which the operator chose). The CLI pulls for its own user and has no guard."""

    trusted: frozenset[str] = frozenset()
    allow_private: bool = False

    @classmethod
    def from_env(cls) -> Guard:
        mirror = config.read("LOCALRUN_MIRROR")
        host = urlsplit(mirror if "://" in mirror else f"http://{mirror}").hostname if mirror else None
        return cls(frozenset({host} if host else ()), config.read("LOCALRUN_ALLOW_PRIVATE_PULL"))

    def check(self, request: httpx.Request) -> None:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise SourceRefused(f"refusing to download from {url.scheme}: URLs; use http or https")
        host = url.host
        if self.allow_private or host in self.trusted:
            return
        try:
            found = socket.getaddrinfo(host, url.port or 443, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise DownloadError(f"cannot download a GGUF model from {host}") from None
        if not found or not all(is_public(info[4][0]) for info in found):
            raise SourceRefused(f"refusing to download from {host}: it is a local or private address; set "
                                "LOCALRUN_ALLOW_PRIVATE_PULL=1 on the daemon to allow it")


@dataclass(frozen=True, slots=True)
class Policy:
    """Retry and timeout settings; tests shrink them, everyone else keeps the defaults."""

    retries: int = 6  # consecutive attempts without progress before giving up
    first_connect_retries: int = 2  # fewer when the server was never reached: no network fails fast
    backoff: float = 0.5  # seconds before the first retry; doubles, capped at 10 s
    connect_timeout: float = 15.0
    read_timeout: float = 60.0
    guard: Guard | None = None  # set for pulls the daemon makes for HTTP clients

    def client(self) -> httpx.Client:
        timeout = httpx.Timeout(self.read_timeout, connect=self.connect_timeout)
        hooks = {"request": [self.guard.check]} if self.guard else {}
        return httpx.Client(timeout=timeout, follow_redirects=True, headers={"Accept-Encoding": "identity"},
                            event_hooks=hooks)


class _Retry(Exception):
    """An attempt failed in a way worth retrying (5xx, short body, moved offset)."""


class Download:
    """Fetch `url` into `partial`, resuming whatever is already there; `run()` returns the digest."""

    def __init__(self, client: httpx.Client, url: str, partial: Path, *, sha256: str = "",
                 policy: Policy = Policy(), progress: Callable[[int, int], None] | None = None) -> None:
        self.client, self.url, self.partial, self.policy = client, url, partial, policy
        self.expected = sha256
        self.progress = progress or (lambda completed, total: None)
        self.label = urlsplit(url).path.rsplit("/", 1)[-1] or url
        self.server_sha = ""
        self.total = 0
        self._hasher = BackgroundHash()
        self._head = b""
        self.offset = 0
        self._last_report = 0.0
        self._reached = False  # has any response arrived?
        self._validator_file = partial.with_suffix(".validator")
        self._validator = ""

    def run(self) -> str:
        """Download (or finish downloading) and verify; returns "sha256:<hex>" of the partial file."""
        try:
            self._load_partial()
            return self._attempts()
        except NotGGUF:
            self.partial.unlink(missing_ok=True)  # never keep (or later resume) a body that is not GGUF
            raise
        finally:
            self._hasher.close()

    def _attempts(self) -> str:
        failures = 0
        while True:
            before = self.offset
            try:
                if self._attempt():
                    return self._verify()
                error: Exception = _Retry("the server ended the response early")
            except (httpx.TransportError, _Retry) as e:
                error = e
            failures = 0 if self.offset > before else failures + 1
            limit = self.policy.retries if self._reached else self.policy.first_connect_retries
            if failures > limit:
                raise self._give_up(error)
            time.sleep(min(self.policy.backoff * 2 ** max(failures - 1, 0), 10.0))

    def _load_partial(self) -> None:
        """Pick up a partial file left by an earlier process: re-hash it and continue after it."""
        self.partial.parent.mkdir(parents=True, exist_ok=True)
        if not self.partial.exists():
            return
        if self._validator_file.exists():
            self._validator = self._validator_file.read_text().strip()
        with open(self.partial, "rb") as f:
            while chunk := f.read(4 << 20):
                self._take(chunk)
        if len(self._head) >= HEADER_SIZE:
            try:
                check_header(self._head, self.label)
            except NotGGUF:  # garbage from an older attempt: start over
                self._restart()

    def _attempt(self) -> bool:
        headers = {"Range": f"bytes={self.offset}-"} if self.offset else {}
        if self.offset and self._validator:
            headers["If-Range"] = self._validator
        with self.client.stream("GET", self.url, headers=headers) as response:
            self._reached = True
            if response.status_code == 416 and self.offset and self.offset == self._content_range_total(response):
                return True  # the partial file is already complete
            self._check_status(response)
            self._note_server_facts(response)
            self._keep_validator(response)
            ensure_space(self.partial.parent, self.total - self.offset, self.label)
            widen_reads(response)
            with open(self.partial, "ab") as out:
                behind = WriteBehind(out.fileno(), self.offset)
                try:
                    for chunk in response.iter_raw():
                        self._write(out, chunk)
                        behind.written(self.offset)
                finally:
                    behind.close()  # before the file (and its descriptor) is closed
        return not self.total or self.offset >= self.total

    def _check_status(self, response: httpx.Response) -> None:
        code = response.status_code
        if code == 206:
            if self._content_range_start(response) != self.offset:
                self._restart()
                raise _Retry("the server resumed at the wrong offset")
            return
        if code == 200:
            if self.offset:  # the server ignored Range: take the whole body again
                self._restart()
            return
        if code == 416:
            self._restart()
            raise _Retry("the server refused the resume range")
        if code >= 500 or code == 429:
            raise _Retry(f"HTTP {code}")
        raise self._http_error(code)

    def _note_server_facts(self, response: httpx.Response) -> None:
        if "text/html" in response.headers.get("content-type", ""):
            raise NotGGUF(f"{self.label}: the server sent a web page, not a GGUF file ({self.url})")
        length = int(response.headers.get("content-length", 0) or 0)
        self.total = self._content_range_total(response) or (self.offset + length if length else 0)
        for r in (*response.history, response):
            etag = r.headers.get("x-linked-etag", "").strip('"').removeprefix("W/").strip('"').lower()
            if len(etag) == 64 and set(etag) <= _HEX64:
                self.server_sha = etag

    def _keep_validator(self, response: httpx.Response) -> None:
        """Remember what identifies this version of the file, for If-Range on a later resume."""
        etag = response.headers.get("etag", "")
        validator = etag if etag and not etag.startswith("W/") else response.headers.get("last-modified", "")
        if self.offset == 0 and validator:
            self._validator = validator
            self._validator_file.write_text(validator)

    def _write(self, out, chunk: bytes) -> None:
        if self.offset < HEADER_SIZE:
            head = (self._head + chunk)[:HEADER_SIZE]
            if len(head) >= HEADER_SIZE:
                check_header(head, self.label)  # refuse a non-GGUF body before writing any of it
        out.write(chunk)
        self._take(chunk)
        now = time.monotonic()
        if now - self._last_report >= PROGRESS_INTERVAL or self.offset == self.total:
            self._last_report = now
            self.progress(self.offset, self.total)

    def _take(self, chunk: bytes) -> None:
        self._hasher.update(chunk)
        if len(self._head) < HEADER_SIZE:
            self._head = (self._head + chunk)[:HEADER_SIZE]
        self.offset += len(chunk)

    def _restart(self) -> None:
        self.partial.unlink(missing_ok=True)
        self._validator_file.unlink(missing_ok=True)
        self._validator = ""
        self._hasher.close()
        self._hasher, self._head, self.offset = BackgroundHash(), b"", 0

    def _verify(self) -> str:
        check_header(self._head, self.label)  # a body shorter than a header ends here
        got = self._hasher.hexdigest()
        want = self.expected or self.server_sha
        self._validator_file.unlink(missing_ok=True)
        if want and got != want:
            self.partial.unlink(missing_ok=True)
            raise ChecksumMismatch(
                f"{self.label}: checksum mismatch (expected sha256:{want[:12]}…, got sha256:{got[:12]}…); "
                "the download was discarded"
            )
        return f"sha256:{got}"

    def _http_error(self, code: int) -> DownloadError:
        if code == 404:
            return DownloadError(f"{self.url}: not found (HTTP 404)")
        if code in (401, 403):
            return DownloadError(f"{self.url}: access denied (HTTP {code}); the repository may be gated or private")
        return DownloadError(f"{self.url}: HTTP {code}")

    def _give_up(self, error: Exception) -> DownloadError:
        host = urlsplit(self.url).netloc
        if isinstance(error, httpx.ConnectError):
            return DownloadError(f"cannot reach {host}: {error or 'connection failed'} "
                                 "(no network? LOCALRUN_MIRROR can point at a mirror)")
        if isinstance(error, httpx.TimeoutException):
            return DownloadError(f"{host} stopped responding (timed out); run the pull again to resume")
        return DownloadError(f"downloading {self.label} from {host} failed: {error}; run the pull again to resume")

    @staticmethod
    def _content_range_start(response: httpx.Response) -> int:
        value = response.headers.get("content-range", "")  # "bytes 100-199/200"
        try:
            return int(value.split()[1].split("-")[0])
        except (IndexError, ValueError):
            return -1

    @staticmethod
    def _content_range_total(response: httpx.Response) -> int:
        total = response.headers.get("content-range", "").rpartition("/")[2]
        return int(total) if total.isdigit() else 0


__all__ = ["Download", "Guard", "Policy"]
