"""The runner protocol: JSON lines over one Unix socket shared by the daemon and its runner child.

The daemon creates a socketpair and passes one end to `python -m localrun.runner --fd N`.
Every message is one JSON object on one line. The child's stdout is unused; its stderr is
kept by the parent so a crash can be explained with its last lines.

Parent -> runner (each carries a caller-chosen string `id`, except shutdown):
    {"op": "generate", "id", "request": GenerateRequest.to_dict()}
    {"op": "cancel",   "id"}                       stop that generation within one engine step (or that
                                                   perplexity job between two decodes: error "Cancelled")
    {"op": OP, "id", **op.to_dict()}               the other operations, typed in localrun.ops (request and
                                                   answer): tokenize, detokenize, render, embed, score,
                                                   prompt_logprobs, perplexity (on a context and a thread of
                                                   its own: generations go on meanwhile), health
    {"op": "shutdown"}                             finish nothing, exit 0

Runner -> parent:
    {"type": "ready", "info": {...}}               once, after the model loaded
    {"type": "fatal", "message"}                   once, when loading failed; then the runner exits
    {"type": "accepted", "id", "prompt_tokens"}    the generation is queued in the engine (errors come before)
    {"type": "delta", "id", "index", "text", "logprobs": [[token, logprob, [[alt, lp], ...]], ...]}
                                                   (with request.deltas false: only those with logprobs)
    {"type": "done",  "id", "index", "finish_reason", "timings", "text", "tool_calls", "stop_sequence"}
    {"type": "result", "id", "value"}              answer to the other ops: value is the op's RESULT.to_dict()
    {"type": "error", "id", "message", "error"}    this request failed; error names a class in localrun.errors

A generation with n choices sends a "done" per index; the parent knows it is over after n of them.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Any, Iterator

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # built once: encode runs per token


def encode(message: dict[str, Any]) -> bytes:
    return _ENCODER.encode(message).encode() + b"\n"


class Channel:
    """The runner's end: read messages line by line, send from any thread."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._reader = sock.makefile("rb", buffering=1 << 16)
        self._lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        self.send_all([message])

    def send_all(self, messages: list[dict[str, Any]]) -> None:
        """Several messages (one line each) in one write: an engine step's events cost one syscall
        here and one wake-up in the daemon, however many sequences produced them."""
        if messages:
            data = b"".join(map(encode, messages))
            with self._lock:
                self._sock.sendall(data)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for line in self._reader:
            if line.strip():
                yield json.loads(line)
