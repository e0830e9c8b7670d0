"""Blobs a client sends over HTTP (Ollama's `POST /api/blobs/<digest>`, which `ollama create` uses for a
Modelfile's `FROM ./model.gguf`): written to `partial/` and hashed on the way, and let into `blobs/`
only when the digest is the one the client named and the file parses as GGUF, as a pull's are.

The bytes are the client's, so what is wrong with them is the client's fault (400), not a server's
answer as in a download (502)."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable
from pathlib import Path

from localrun.errors import InvalidRequest, LocalrunError
from localrun.store.ggufinfo import HEADER_SIZE, check_header, read_info
from localrun.store.layout import Layout, ensure_space, os_errors
from localrun.store.model import ModelInfo
from localrun.store.scratch import scratch_file

_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")

Install = Callable[[Path, str, ModelInfo], None]


def blob_digest(text: str) -> str:
    """The store's form of a digest a client wrote ("sha256:<hex>"; Ollama also accepts "sha256-<hex>")."""
    match = _DIGEST.fullmatch(text)
    if not match:
        raise InvalidRequest(f"invalid digest format {text[:80]!r}: expected sha256:<64 lowercase hex digits>")
    return f"sha256:{match.group(1)}"


class BlobUpload:
    """One upload in progress: `write` its bytes in order, then `finish` (verify and move in) or
    `discard`. Not thread-safe; one caller at a time. The first bytes are checked for a GGUF header,
    so a file of another kind is refused before the rest of it is written."""

    def __init__(self, layout: Layout, digest: str, install: Install, size: int = 0) -> None:
        self.digest, self._install = digest, install
        self._scratch = contextlib.ExitStack()  # two uploads of one blob: two files
        self.path = self._scratch.enter_context(scratch_file(layout, "upload"))
        try:
            ensure_space(layout.partial, size, "the uploaded file")
            self._file = open(self.path, "wb")
        except BaseException:
            self._scratch.close()
            raise
        self._hash = hashlib.sha256()
        self._head = b""
        self.size = 0

    def write(self, data: bytes) -> None:
        if len(self._head) < HEADER_SIZE:
            self._head += data[:HEADER_SIZE - len(self._head)]
            if len(self._head) == HEADER_SIZE:
                self._check(lambda: check_header(self._head, "the uploaded file"))
        self._hash.update(data)
        with os_errors():
            self._file.write(data)
        self.size += len(data)

    def finish(self) -> None:
        """Verify the whole file and move it into `blobs/`; on any refusal nothing is left behind."""
        try:
            with os_errors():
                self._file.close()
            got = f"sha256:{self._hash.hexdigest()}"
            if got != self.digest:
                raise InvalidRequest(f"digest mismatch: the URL names {self.digest}, the body's is {got} "
                                     f"({self.size} bytes); nothing was stored")
            if len(self._head) < HEADER_SIZE:  # a body too short for `write` to have checked it
                self._check(lambda: check_header(self._head, "the uploaded file"))
            info = self._check(lambda: read_info(self.path, "the uploaded file"))
            self._install(self.path, self.digest, info)
        finally:
            self.discard()

    def discard(self) -> None:
        self._file.close()
        self._scratch.close()  # deletes the file unless it was moved in

    def _check(self, parse: Callable[[], ModelInfo | None]) -> ModelInfo | None:
        """A GGUF check whose refusal is the client's fault: 400, and the upload is dropped."""
        try:
            return parse()
        except LocalrunError as e:
            self.discard()
            raise InvalidRequest(f"{e} (only GGUF files can be uploaded: localrun does not convert other "
                                 f"formats)") from None


__all__ = ["BlobUpload", "blob_digest"]
