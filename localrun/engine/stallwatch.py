"""Stopping a decode step that another program has stalled, so that it runs again on fewer threads.

When a program starts using one of the cores in the middle of a decode step, the step's threads wait
for each other at every operation while one of them waits for its core: on 2 cores beside a spin
loop one step took 0.3-1.8 s where 12 ms is usual. The thread tuner drops a thread after such a step;
this watch ends the step itself. llama.cpp asks an abort callback between the graph's operations
and, when it says stop, takes the step's tokens back out of the cache (`llama_decode` returns 2), so
the engine can run the same step again, unchanged, with one thread fewer.

The callback runs on a decoding thread hundreds of times a step, so it is no Python function: it is
libc's `strlen` over a two-byte flag (b"\\x01\\x00" reads 1, true; b"\\x00\\x00" reads 0, false),
which the watching thread sets. That thread looks every few milliseconds at a step that has run past
its limit, and stops it only if this process's threads have been waiting for a CPU meanwhile (their
run delay in /proc/self/task/*/schedstat): a step that is slow for another reason runs on.
"""

from __future__ import annotations

import ctypes
import threading
import time

import llama_cpp as L

from localrun.engine.cpuuse import run_delay

TICK = 0.05  # seconds between the watcher's looks at a running step: a stall lasts far longer
WAITING = 0.25  # threads' worth of run delay per second of step that means the CPUs are taken
IDLE_AFTER = 0.5  # seconds without a step before the watcher sleeps until the next one


class StallWatch:
    """`attach(ctx)` once; `begin(limit)` before a decode step, `end()` after it: True when the watch
    stopped it."""

    def __init__(self) -> None:
        self._flag = ctypes.create_string_buffer(2)
        self._callback = L.ggml_abort_callback(_strlen())
        self._contexts: tuple = ()
        self._lock = threading.Lock()
        self._step: tuple[int, float, float] | None = None  # (number, began, limit in seconds)
        self._count = 0
        self._busy = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._watch, name="stall-watch", daemon=True)
        self._thread.start()

    @staticmethod
    def available() -> bool:
        """Whether this machine has what the watch needs: libc's strlen and per-thread schedstat."""
        return _strlen() is not None and run_delay() is not None

    def attach(self, *contexts) -> None:
        """Make this watch's flag the llama contexts' abort callback, until `close`."""
        for ctx in contexts:
            L.llama_set_abort_callback(ctx, self._callback, ctypes.cast(self._flag, ctypes.c_void_p))
        self._contexts = contexts

    def begin(self, limit: float) -> None:
        with self._lock:
            self._count += 1
            self._step = (self._count, time.perf_counter(), limit)
            self._flag[0] = b"\x00"
        if not self._busy.is_set():  # the watcher sleeps: wake it (awake, it looks on its own)
            self._busy.set()

    def end(self) -> bool:
        with self._lock:
            self._step = None
            stopped = self._flag[0] != b"\x00"
            self._flag[0] = b"\x00"
        return stopped

    def stop(self, number: int | None = None) -> None:
        """Stop the running step (or only step `number`, if it is still the one running)."""
        with self._lock:
            if self._step is not None and number in (None, self._step[0]):
                self._flag[0] = b"\x01"

    def close(self) -> None:
        """Stop watching; the context no longer asks this watch's flag (which goes with it)."""
        for ctx in self._contexts:
            L.llama_set_abort_callback(ctx, L.ggml_abort_callback(), None)
        self._contexts = ()
        self._closed = True
        self._busy.set()
        self._thread.join()

    def _watch(self) -> None:
        since: tuple[int, float, int] | None = None  # (step, time, run delay) when a step passed half its limit
        idle_since = time.perf_counter()
        while not self._closed:
            time.sleep(TICK)
            step = self._step
            now = time.perf_counter()
            if step is None:
                if now - idle_since > IDLE_AFTER:
                    self._busy.clear()
                    if self._step is None and not self._closed:  # else a begin or close set it meanwhile
                        self._busy.wait()
                    idle_since = time.perf_counter()
                continue
            idle_since = now
            number, began, limit = step
            if now - began < limit / 2:
                continue
            if since is None or since[0] != number:
                since = (number, now, run_delay())
            elif now - began >= limit and _stalled(since[1], since[2], now, run_delay()):
                self.stop(number)


def _strlen() -> int | None:
    """The address of libc's strlen, or None where this process has no C library to ask."""
    try:
        return ctypes.cast(ctypes.CDLL(None).strlen, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None


def _stalled(t0: float, delay0: int | None, t1: float, delay1: int | None) -> bool:
    """Whether this process's threads waited for a CPU for WAITING of the time between two looks."""
    if delay0 is None or delay1 is None or t1 <= t0:
        return False
    return (delay1 - delay0) / 1e9 / (t1 - t0) >= WAITING


__all__ = ["StallWatch"]
