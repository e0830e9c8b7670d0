"""What the machine's CPUs did lately, from /proc: the thread tuner's view of the other programs.

Decode timings alone cannot tell the tuner when a busy core frees up: a single thread decodes as
fast beside a spin loop as without it, so the fewer-threads choice would look right until the next
trial on the clock, seconds later. Nor can they tell that an idle machine has nothing to gain from a
trial of fewer threads, which only costs. /proc/stat's busy and idle time, less this process's own
(/proc/self/stat), says both. Where /proc is missing (macOS, Windows) `sample` returns None and the
tuner keeps to its clock. `run_delay` (this process's threads waiting for a CPU, in ns) is the finer
signal the stall watch needs within a single step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from localrun.engine.settings import allowed_cpus


@dataclass(frozen=True, slots=True)
class CpuUse:
    """Cores' worth of time over the last interval: used by other processes, and idle."""

    others: float
    idle: float


class CpuMeter:
    """Samples /proc at most every `interval` seconds; between samples `sample` repeats the last. A
    look `stale` seconds after the previous one starts over (None until an interval has passed): the
    time between covers what others did while this process idled, not while it decodes."""

    def __init__(self, interval: float = 0.1, now: float | None = None, stale: float = 1.0) -> None:
        self.interval, self.stale = interval, stale
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last: tuple[float, int, int, int] | None = None  # (time, busy, idle, own) in ticks
        self._use: CpuUse | None = None
        if now is not None:  # a first reading now, so that the first sample an interval later has a value
            self.sample(now)

    def sample(self, now: float, across_idle: bool = False) -> CpuUse | None:
        """`across_idle`: after a stale gap, return the reading over the gap (for a question the idle
        time answers too: is another program holding a core?); later samples still start over."""
        if self._last is not None and now - self._last[0] < self.interval:
            return self._use
        counters = _read_counters()
        if counters is None:
            return None
        last, self._last = self._last, (now, *counters)
        if last is None:
            return None
        seconds = (now - last[0]) * self._tick
        busy, idle, own = (new - old for new, old in zip(counters, last[1:]))
        use = CpuUse(others=max(0.0, busy - own) / seconds, idle=idle / seconds)
        stale = now - last[0] > self.stale
        self._use = None if stale else use
        return use if across_idle else self._use


def _read_counters() -> tuple[int, int, int] | None:
    """(busy, idle, own) clock ticks since boot: the busy time of the CPUs this process may run on
    (steal included: a VM's vCPU that the host gave away is not free), their idle time, and this
    process's user + system time. Only those CPUs: in a container pinned to 2 of a host's 64, the
    other 62 are somebody else's business."""
    allowed = {f"cpu{n}" for n in allowed_cpus()}
    busy = idle = 0
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                name, *fields = line.split(maxsplit=9)[:9]
                if name in allowed:
                    user, nice, system, idle_, iowait, irq, softirq, steal = map(int, fields)
                    busy += user + nice + system + irq + softirq + steal
                    idle += idle_ + iowait
                elif not name.startswith("cpu"):
                    break  # the per-CPU lines come first
        with open("/proc/self/stat", encoding="ascii") as f:
            own = f.read().rpartition(")")[2].split()  # the command name may hold spaces and parentheses
    except (OSError, ValueError):
        return None
    return busy, idle, int(own[11]) + int(own[12])


def run_delay() -> int | None:
    """Nanoseconds this process's threads have spent runnable but waiting for a CPU (None where the
    kernel does not say). A thread that ends meanwhile is left out: the delay can only be undercounted."""
    total = 0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[1])
        except FileNotFoundError:
            continue
        except (OSError, ValueError, IndexError):
            return None
    return total


__all__ = ["CpuMeter", "CpuUse", "run_delay"]
