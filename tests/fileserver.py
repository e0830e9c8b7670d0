"""A real threaded HTTP file server on loopback, with Range support and fault injection.

It serves files the way Hugging Face does (`/<repo>/resolve/<revision>/<file>`, optionally via a
302 carrying `X-Linked-Etag`, and `/api/models/<repo>` listings), and can misbehave on request:
drop the connection after N bytes, send wrong bytes, answer an HTML page with 200, a 404, a 500
that heals after some tries, or stall mid-body. Every request is logged, so tests assert on what
was actually asked for (e.g. that a resume requested only the missing bytes).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHUNK = 1 << 20


@dataclass
class Fault:
    """Misbehaviour for the next `times` requests of one path (then the path heals)."""

    times: int = 1
    status: int = 0  # answer this status instead of the file
    html: bool = False  # answer 200 with a web page
    drop_after: int = -1  # close the connection after this many body bytes
    stall_after: int = -1  # stop sending (for `stall` seconds) after this many body bytes
    stall: float = 0.0
    corrupt: bool = False  # flip bytes in the body
    slow: float = 0.0  # seconds to sleep before each 1 MiB chunk
    length: int = -1  # claim this Content-Length (e.g. more than any disk holds)
    no_length: bool = False  # send no Content-Length: the body ends when the connection closes


@dataclass
class Logged:
    path: str
    range_start: int  # -1 without a Range header
    status: int
    sent: int


@dataclass
class _File:
    data: bytes | Path
    etag_sha: str = ""  # sent as X-Linked-Etag
    redirect: bool = False  # answer 302 to /cdn/... first, as the Hub does

    @property
    def size(self) -> int:
        return len(self.data) if isinstance(self.data, bytes) else self.data.stat().st_size

    @property
    def etag(self) -> str:
        """A strong validator of this version of the file, for ETag / If-Range."""
        if isinstance(self.data, bytes):
            return f'"{hashlib.sha256(self.data).hexdigest()[:20]}"'
        return f'"{self.size}-{self.data.stat().st_mtime_ns}"'


class FileServer:
    """`with FileServer() as server: server.add("/a.gguf", data); server.url("/a.gguf")`."""

    def __init__(self) -> None:
        self.files: dict[str, _File] = {}
        self.faults: dict[str, list[Fault]] = {}
        self.log: list[Logged] = []
        self.lock = threading.Lock()
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def add(self, path: str, data: bytes | Path, *, etag: bool = False, redirect: bool = False) -> str:
        """Serve `data` at `path`; `etag` sends its true sha256 as X-Linked-Etag. Returns the URL."""
        sha = _sha256(data) if etag else ""
        self.files[path] = _File(data, sha, redirect)
        return self.url(path)

    def add_hf(self, repo: str, files: dict[str, bytes | Path], revision: str = "0" * 40) -> None:
        """Serve a Hugging Face-like repository: its files (with LFS sha256) and its API listing."""
        siblings = []
        for name, data in files.items():
            self.add(f"/{repo}/resolve/{revision}/{name}", data, etag=True, redirect=True)
            siblings.append({"rfilename": name, "size": len(data) if isinstance(data, bytes) else data.stat().st_size,
                             "lfs": {"sha256": _sha256(data), "size": self.files[f"/{repo}/resolve/{revision}/{name}"].size}})
        listing = {"id": repo, "sha": revision, "siblings": [{"rfilename": "README.md"}, *siblings]}
        self.add(f"/api/models/{repo}", json.dumps(listing).encode())

    def fault(self, path: str, **kwargs) -> None:
        self.faults.setdefault(path, []).append(Fault(**kwargs))

    def body_requests(self, path: str) -> list[Logged]:
        """The logged requests for `path` that were answered with file bytes (200/206)."""
        return [r for r in self.log if r.path == path and r.status in (200, 206)]

    def _take_fault(self, path: str) -> Fault | None:
        with self.lock:
            queue = self.faults.get(path, [])
            if not queue:
                return None
            fault = queue[0]
            fault.times -= 1
            if fault.times <= 0:
                queue.pop(0)
            return fault


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # clients hanging up are expected here
        pass


def _handler(server: FileServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path.startswith("/cdn/"):
                path = path[len("/cdn"):]
            elif path in server.files and server.files[path].redirect:
                return self._redirect(path)
            file = server.files.get(path)
            fault = server._take_fault(path)
            start = _range_start(self.headers.get("Range", ""))
            if_range = self.headers.get("If-Range")
            if file is not None and if_range and if_range != file.etag:
                start = -1  # the file changed since the client's copy began: send all of it
            if fault and (fault.status or fault.html):
                return self._fault_reply(path, fault, start)
            if file is None:
                return self._reply(path, 404, b"not found", start)
            self._send_file(path, file, start, fault)

        def _redirect(self, path: str) -> None:
            file = server.files[path]
            self.send_response(302)
            self.send_header("Location", "/cdn" + path)
            self.send_header("X-Linked-Etag", f'"{file.etag_sha}"')
            self.send_header("X-Linked-Size", str(file.size))
            self.send_header("Content-Length", "0")
            server.log.append(Logged(path, _range_start(self.headers.get("Range", "")), 302, 0))
            self.end_headers()

        def _fault_reply(self, path: str, fault: Fault, start: int) -> None:
            if fault.html:
                body = b"<!DOCTYPE html><html><body>Sign in to continue</body></html>" * 40
                return self._reply(path, 200, body, start, "text/html; charset=utf-8")
            self._reply(path, fault.status, b"server says no", start)

        def _reply(self, path: str, status: int, body: bytes, start: int, ctype: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            server.log.append(Logged(path, start, status, len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _send_file(self, path: str, file: _File, start: int, fault: Fault | None) -> None:
            size = file.size
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                server.log.append(Logged(path, start, 416, 0))
                self.end_headers()
                return
            status = 206 if start >= 0 else 200
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            claimed = fault.length if fault and fault.length >= 0 else size - max(start, 0)
            if fault and fault.no_length:
                self.send_header("Connection", "close")
                self.close_connection = True
            else:
                self.send_header("Content-Length", str(claimed))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            self.send_header("ETag", file.etag)
            if file.etag_sha and not file.redirect:
                self.send_header("X-Linked-Etag", f'"{file.etag_sha}"')
            self.end_headers()
            entry = Logged(path, start, status, 0)
            server.log.append(entry)
            self._stream(file, max(start, 0), fault, entry)

        def _stream(self, file: _File, offset: int, fault: Fault | None, entry: Logged) -> None:
            limit = fault.drop_after if fault and fault.drop_after >= 0 else None
            stall_at = fault.stall_after if fault and fault.stall_after >= 0 else None
            try:
                for chunk in _chunks(file.data, offset):
                    if fault and fault.slow:
                        time.sleep(fault.slow)
                    if fault and fault.corrupt:
                        chunk = chunk[:-64] + bytes(b ^ 0x55 for b in chunk[-64:])  # header intact, data wrong
                    if stall_at is not None and entry.sent + len(chunk) > stall_at:
                        self.wfile.write(chunk[: stall_at - entry.sent])
                        self.wfile.flush()
                        entry.sent = stall_at
                        time.sleep(fault.stall)
                        return self._hang_up()
                    if limit is not None and entry.sent + len(chunk) > limit:
                        self.wfile.write(chunk[: limit - entry.sent])
                        entry.sent = limit
                        return self._hang_up()
                    self.wfile.write(chunk)
                    entry.sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _hang_up(self) -> None:
            self.close_connection = True
            try:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    return Handler


def _chunks(data: bytes | Path, offset: int):
    if isinstance(data, bytes):
        for i in range(offset, len(data), CHUNK):
            yield data[i:i + CHUNK]
        return
    with open(data, "rb") as f:
        f.seek(offset)
        while chunk := f.read(CHUNK):
            yield chunk


def _range_start(header: str) -> int:
    match = re.fullmatch(r"bytes=(\d+)-(\d*)", header.strip())
    return int(match.group(1)) if match else -1


def _sha256(data: bytes | Path) -> str:
    if isinstance(data, bytes):
        return hashlib.sha256(data).hexdigest()
    h = hashlib.sha256()
    with open(data, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()
