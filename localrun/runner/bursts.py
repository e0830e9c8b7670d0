"""Whether an idle runner waits for the rest of a burst of requests, decided from plain data.

Clients often send several requests at once: a script's parallel calls, a batch job, an agent's
sub-tasks, Claude Code's title request beside its turn. They reach the runner over a few
milliseconds, one by one, so the first found the engine idle and started a step on its own; the
others waited for that step and had their prompts evaluated in the next, and the first stream's
second token came only after all their prompts (8 streams of a 26-token prompt on 2 cores: the first
token of one at 0.22 s, of the other seven at 1.47 s). Evaluated together, their first tokens all
came at about 1.4 s, as llama-server's did (docs/benchmarks.md).

Waiting for more costs a request that comes alone that wait, so the runner waits only while requests
have lately come in bursts. Each request that finds the engine idle leads; the next request tells
whether it led a burst: one that comes within `GATHER_GAPS` gaps of it (the longest a wait gathers)
did, one that comes later or finds the engine idle again did not. Not within one gap: once the lead's
step runs on every core, the daemon passes the burst's next requests on more slowly than while the
runner waits, and a burst told as none stopped the waits (a 4-stream burst's first tokens came 0.29 s
apart in the load benchmark's median round, against 0.006 s for llama-server). The runner waits
while one of the last `MEMORY` leads led a burst, so lone requests and bursts may alternate (a chat
beside a batch job), and a lone request after bursts pays the wait at most `MEMORY` times.
"""

from __future__ import annotations

from collections import deque

GATHER_GAPS = 5  # an idle engine gathers a burst for at most this many gaps in all
MEMORY = 4  # the last leads remembered


class Bursts:
    """What recent arrivals say about the next request that finds the engine idle."""

    __slots__ = ("gap", "_led", "_lead")

    def __init__(self, gap: float) -> None:
        self.gap = gap  # seconds; 0 never waits
        self._led: deque[bool] = deque(maxlen=MEMORY)  # whether each of the last leads led a burst
        self._lead: float | None = None  # arrival of the last lead, until the next request tells

    def arrived(self, at: float, idle: bool) -> None:
        """A generate request arrived at `at` (seconds); `idle`: the engine had nothing to do when it came in."""
        if self._lead is not None:
            self._led.append(not idle and at - self._lead <= GATHER_GAPS * self.gap)
            self._lead = None
        if idle:
            self._lead = at

    def wait(self) -> float:
        """How long an engine that was idle waits after each request for another one: 0 starts at once."""
        return self.gap if any(self._led) else 0.0


__all__ = ["Bursts", "GATHER_GAPS", "MEMORY"]
