"""The daemon's side of one runner child process: start it, route its events, survive its death.

Each request gets an asyncio queue of protocol messages, filled straight from the socket's read
callback (`_Lines`): a streamed token costs one wake-up here, its request's. When the child dies
(kill -9, an abort in llama.cpp) every request in flight receives an error naming the cause (its
last stderr lines), and `alive` turns False so the model manager starts a fresh runner on the next
request.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable

from localrun.config import EngineSettings
from localrun.cpu_features import crash_hint
from localrun.errors import LoadCrashed, ModelLoadError, RunnerCrashed, error_class
from localrun.ops import Health, HealthCheck, ask
from localrun.runner.protocol import encode

log = logging.getLogger("localrun.runner")

STDERR_TAIL = 20
LOAD_TIMEOUT_S = 300.0


class RunnerProcess:
    """One live runner. Create with `await RunnerProcess.start(path, options)`."""

    def __init__(self, proc: asyncio.subprocess.Process, path: Path, options: EngineSettings) -> None:
        self.proc, self.path, self.options = proc, path, options
        self._transport: asyncio.Transport | None = None
        self._ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.info: dict[str, Any] = {}
        self._queues: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self._ids = itertools.count()
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self._death: str | None = None
        self._closing = False
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def start(cls, path: Path, options: EngineSettings) -> RunnerProcess:
        parent, child = socket.socketpair()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "localrun.runner", "--model", str(path), "--fd", str(child.fileno()),
                "--settings", options.to_json(), pass_fds=(child.fileno(),), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, start_new_session=True,
            )
        finally:
            child.close()
        runner = cls(proc, path, options)
        loop = asyncio.get_running_loop()
        runner._transport, _ = await loop.create_unix_connection(lambda: _Lines(runner._line, runner._eof), sock=parent)
        runner._tasks.append(asyncio.create_task(runner._read_stderr()))
        await runner._handshake()
        return runner

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self._death is None and self.proc.returncode is None

    async def _handshake(self) -> None:
        try:
            message = await asyncio.wait_for(self._ready, LOAD_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self.kill()
            raise ModelLoadError(f"model failed to load: timed out after {LOAD_TIMEOUT_S:.0f}s") from None
        if message.get("type") == "ready":
            self.info = message.get("info", {})
            return
        await self._wait_exit()
        if message.get("message"):
            raise ModelLoadError(message["message"])
        reason = f"model failed to load: {self._crash_reason(loading=True)}"
        cpu_like = bool(crash_hint(self.death_signal or "", loading=True))
        raise (LoadCrashed if cpu_like else ModelLoadError)(reason)

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            if line:
                self._stderr.append(line)
                log.debug("runner %d: %s", self.proc.pid, line)

    def _line(self, line: bytes) -> None:
        """One message from the runner: the handshake's first, then each to its request's queue."""
        message = json.loads(line.decode())  # str: json skips sniffing the bytes' encoding
        if not self._ready.done():
            self._ready.set_result(message)
            return
        queue = self._queues.get(message.get("id", ""))
        if queue is not None:
            queue.put_nowait(message)

    def _eof(self) -> None:
        if not self._ready.done():
            self._ready.set_result({})  # the handshake explains the death
        else:
            self._tasks.append(asyncio.create_task(self._died()))

    async def _died(self) -> None:
        """The socket closed: wait for the exit code, then fail every request still in flight."""
        await self._wait_exit()
        self._death = self._crash_reason()
        log.log(logging.INFO if self._closing else logging.WARNING, "runner for %s exited: %s", self.path.name,
                self._death)
        self.fail_all(f"runner crashed: {self._death}", "RunnerCrashed")

    def fail_all(self, message: str, error: str) -> None:
        """End every request in flight with `error` (a class name in localrun.errors)."""
        for queue in self._queues.values():
            queue.put_nowait({"type": "error", "message": message, "error": error})

    async def _wait_exit(self) -> None:
        try:
            await asyncio.wait_for(self.proc.wait(), 5.0)
        except asyncio.TimeoutError:
            pass
        await asyncio.sleep(0)  # let the stderr reader catch up with the last lines

    @property
    def death_signal(self) -> str | None:
        """The name of the signal that killed the runner ("SIGILL"), if one did."""
        code = self.proc.returncode
        return signal.Signals(-code).name if code is not None and code < 0 else None

    def _crash_reason(self, loading: bool = False) -> str:
        """How the runner ended, its last stderr lines, and what a CPU-feature crash means."""
        status = f"killed by signal {self.death_signal}" if self.death_signal else f"exit code {self.proc.returncode}"
        tail = " | ".join(_told(self._stderr)[-3:])
        hint = crash_hint(self.death_signal or "", loading)
        return status + (f": {tail}" if tail else "") + (f" ({hint})" if hint else "")

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """A request with one answer (tokenize, render, embed, perplexity, health). Cancelling the
        waiting task asks the runner to stop the work (a perplexity job stops between two decodes)."""
        async with self._session(op, fields) as queue:
            try:
                message = await queue.get()
            except asyncio.CancelledError:
                self._cancel(fields["id"])
                raise
        return _result(message)

    async def health(self, timeout: float = 1.0) -> Health | None:
        """The runner's own state between two engine steps (running sequences, the CPU threads it
        decodes with now); None when it is gone or too busy to say within `timeout`."""
        if not self.alive:
            return None
        try:
            return await asyncio.wait_for(ask(self, HealthCheck()), timeout)
        except Exception:  # noqa: BLE001 - a dying or busy runner must not break the caller
            return None

    async def stream(self, op: str, **fields: Any) -> AsyncIterator[dict[str, Any]]:
        """A generation: yield delta/done messages until every choice is done. Closing early cancels it."""
        choices = max(1, fields.get("request", {}).get("n", 1))
        async with self._session(op, fields) as queue:
            rid = fields["id"]
            done = 0
            try:
                while done < choices:
                    message = await queue.get()
                    if message["type"] == "error":
                        _result(message)
                    done += message["type"] == "done"
                    yield message
            finally:
                if done < choices:
                    self._cancel(rid)

    def _cancel(self, rid: str) -> None:
        """Tell the runner to stop a request. No await: this also runs while the caller's task is being cancelled."""
        if self.alive:
            with contextlib.suppress(ConnectionError):
                self._send({"op": "cancel", "id": rid})

    def _session(self, op: str, fields: dict[str, Any]) -> _Session:
        if not self.alive:
            raise RunnerCrashed(f"runner crashed: {self._death or 'not running'}")
        fields.setdefault("id", f"r{next(self._ids)}")
        return _Session(self, op, fields)

    def _send(self, message: dict[str, Any]) -> None:
        """Hand one message to the socket. No drain: what the transport buffers is a request already
        held in memory (and bounded by the body limits), or a small control message."""
        assert self._transport is not None
        if self._transport.is_closing():
            raise ConnectionResetError("the runner's socket is closed")
        self._transport.write(encode(message))

    async def close(self, timeout: float = 5.0) -> None:
        """Ask the runner to exit; kill it if it does not."""
        self._closing = True
        if self.proc.returncode is None:
            try:
                self._send({"op": "shutdown"})
                await asyncio.wait_for(self.proc.wait(), timeout)
            except (asyncio.TimeoutError, ConnectionError, OSError):
                await self.kill()
        if self._transport is not None:
            self._transport.close()
        for task in self._tasks:
            task.cancel()

    async def kill(self) -> None:
        if self.proc.returncode is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await self.proc.wait()


class _Session:
    """Register a request's queue, send it, and always unregister it."""

    def __init__(self, runner: RunnerProcess, op: str, fields: dict[str, Any]) -> None:
        self.runner, self.message = runner, {"op": op, **fields}
        self.id = fields["id"]

    async def __aenter__(self) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.runner._queues[self.id] = queue
        try:
            self.runner._send(self.message)
        except (ConnectionError, OSError):
            self.runner._queues.pop(self.id, None)
            raise RunnerCrashed(f"runner crashed: {self.runner._death or 'connection lost'}") from None
        return queue

    async def __aexit__(self, *exc: object) -> None:
        self.runner._queues.pop(self.id, None)


class _Lines(asyncio.Protocol):
    """The daemon's end of the runner socket: complete lines go to `on_line` inside the event loop's
    read callback (no reader task between the socket and a request's queue), EOF to `on_eof`."""

    def __init__(self, on_line: Callable[[bytes], None], on_eof: Callable[[], None]) -> None:
        self._on_line, self._on_eof = on_line, on_eof
        self._partial: list[bytes] = []  # a line's pieces so far, joined once its newline arrives

    def data_received(self, data: bytes) -> None:
        if b"\n" not in data:
            self._partial.append(data)
            return
        if self._partial:
            data = b"".join((*self._partial, data))
            self._partial.clear()
        *lines, rest = data.split(b"\n")
        if rest:
            self._partial.append(rest)
        for line in lines:
            if line:
                self._on_line(line)

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_eof()


def _told(lines: Iterable[str]) -> list[str]:
    """The stderr lines a caller may see: a Python traceback's header, frames and source lines are left
    out (they name files and code), its final `Error: message` line and llama.cpp's own lines stay."""
    return [line for line in lines if not line.startswith(("Traceback ", " ", "\t"))]


def _result(message: dict[str, Any]) -> dict[str, Any]:
    """The value of an answer, or the error it carries raised as the matching localrun error."""
    if message["type"] != "error":
        return message.get("value", message)
    raise error_class(message.get("error", ""))(message["message"])
