"""How long the runner holds a stream's tokens before it writes them, decided from plain data.

Every write of the runner wakes the daemon, whose Python then runs for about 0.3 ms a wake-up, on
the runner's own core (a Unix socket wakes its reader with a "sync" wake-up, docs/benchmarks.md).
When the decode threads use every CPU the runner may run on, that time comes out of decoding: with
one SmolLM2 stream on 2 cores, about 4% of every token, and holding a stream's tokens for 25 ms
(two or three tokens a write) took localrun from 0.93-0.97 of llama-server's speed to 1.00-1.03.
With a CPU to spare (fewer decode threads than CPUs, as on a machine with hyperthreads, or the
model on a GPU) the daemon runs there at no cost to the decode (one thread of two CPUs: the same
speed either way), and holding would only make the stream burstier. Held tokens still go as one
message each, so every client sees a chunk per token, as from llama-server and Ollama.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from localrun.native import Delta

AUTO_MS = 25  # the interval `auto` holds for while no CPU is spare


def stream_interval(setting_ms: int | None, threads: int, cpus: int, on_gpu: bool) -> float:
    """Seconds a stream's tokens wait after its first: the setting's when it is a number; for
    `auto` (None), `AUTO_MS` while the decode threads leave no CPU spare, else none."""
    if setting_ms is not None:
        return setting_ms / 1000.0
    return AUTO_MS / 1000.0 if threads >= cpus and not on_gpu else 0.0


@dataclass(slots=True)
class Held:
    """One stream's deltas waiting for the interval. Its first delta always goes at once; once one
    waits, every later one waits behind it, so the order holds when the interval changes (`auto`
    follows the thread count, which the tuner may change between steps)."""

    deltas: list[Delta] = field(default_factory=list)
    since: float = 0.0  # when the oldest waiting delta came
    sent: bool = False

    def push(self, delta: Delta, now: float, interval: float) -> list[Delta]:
        """What goes now: this delta, unless the interval holds it or others wait before it."""
        if self.deltas or (interval and self.sent):
            if not self.deltas:
                self.since = now
            self.deltas.append(delta)
            return []
        self.sent = True
        return [delta]

    def due(self, now: float, step_s: float, interval: float) -> list[Delta]:
        """The waiting deltas, if one more step of `step_s` would keep them past the interval: a stream
        then gets about one write per interval, and no token waits much longer than it."""
        return self.release() if self.deltas and now - self.since + step_s >= interval else []

    def release(self) -> list[Delta]:
        out, self.deltas = self.deltas, []
        return out
