"""Choosing decode threads on a machine whose cores other programs also use.

Measured on the 2-core development machine with SmolLM2: idle, 2 threads decode 112 tok/s against
73 with 1; with one core busy elsewhere, 2 threads drop to 42 (and far lower while the daemon and
its client want CPU too) while 1 thread keeps 82. A thread waiting for a busy core stalls every
matrix multiplication, so "all cores" is right only while they are free, and the machine changes
its mind every few seconds. The tuner starts at the physical core count, tries the other choice
(n-1, or back to n) right after its first measurements, again whenever decoding gets markedly
slower than it was, and otherwise on a clock whose period doubles while trials keep losing. A
hopeless trial ends after two steps and a decisive one after three, so trials stay cheap both on an
idle machine and on a busy one. Steps compare only with steps of as many tokens: a token of an
8-stream step costs less than a lone stream's, so a batch shrinking is not a slowdown.

Where the engine can see what the other programs do (`cpuuse.CpuUse`, from /proc), that decides
too: with all cores in use, fewer threads are tried only while other programs take CPU time (on an
idle machine such a trial can only lose); with fewer, more are tried as soon as a core is idle
(a single thread decodes as fast beside a busy core as without it, so timings alone would wait for
the clock) and not while none is. A step on all cores that another program stalls may be stopped
mid-way (`stallwatch.py`, after `stall_limit`); `stalled` then drops a thread for its rerun.
"""

from __future__ import annotations

from collections import deque
from statistics import median

from localrun.engine.cpuuse import CpuUse

BUSY_ELSEWHERE = 0.3  # cores' worth of time other programs take before fewer threads may win
TAKEN = 0.6  # ... and before a sudden slowdown means one of the cores is theirs
FREE_CORE = 0.7  # idle cores' worth that makes one more thread worth a trial
STALL = 3.0  # a decode step this many times its usual length may be stopped and run on fewer threads
MIN_STALL = 0.02  # seconds: shorter steps are over before a watch could look twice


class ThreadTuner:
    """Pure bookkeeping: `threads` says what to use for the next decode step, `record` feeds timings back,
    `prompt_threads` says what a step evaluating prompt tokens uses.

    Only decode steps are recorded (their cost per token is comparable); prefill steps are not.
    `now` is a monotonic clock in seconds, given by the caller so that tests can drive time.
    """

    def __init__(self, max_threads: int, window: int = 8, period: float = 4.0, max_period: float = 16.0,
                 margin: float = 0.05, slowdown: float = 1.4) -> None:
        self.max_threads = max_threads
        self.current = max_threads
        self.window, self.margin, self.slowdown = window, margin, slowdown
        self.min_period, self.max_period = period, max_period
        self.period = period
        self._baseline: deque[float] = deque(maxlen=window)  # time per token of recent steps of `_rows` tokens
        self._usual: dict[tuple[int, int], float] = {}  # per (threads, tokens a step): the window median it usually reaches
        self._trial: list[float] = []
        self._trial_threads: int | None = None
        self._next_trial: float | None = None  # None: as soon as the first window is full
        self._trial_ended = float("-inf")
        self._rows = 0  # tokens a step in the baseline: time per token falls as a batch grows, so only
        # steps of one size compare (a trial's, the window's, the usual level)
        self.switches = 0
        self.trials = 0

    @property
    def enabled(self) -> bool:
        return self.max_threads > 1

    @property
    def threads(self) -> int:
        return self._trial_threads or self.current

    def record(self, threads: int, n_tokens: int, seconds: float, now: float, use: CpuUse | None = None) -> None:
        """One decode step's time; `use` is what the machine's CPUs did lately (None: unknown)."""
        if not self.enabled or n_tokens <= 0 or threads != self.threads:
            return
        per_token = seconds / n_tokens
        if self._trial_threads is not None:
            if n_tokens != self._rows:  # the batch changed size: its time per token compares with nothing
                self._end_trial(now)
                return
            self._trial.append(per_token)
            self._judge_trial(now)
            return
        if n_tokens != self._rows:
            self._rows = n_tokens
            self._baseline.clear()
        self._baseline.append(per_token)
        if self._taken(use, per_token):
            self._switch(self._alternative(), now)
            return
        if len(self._baseline) < (self.window // 2 if self._next_trial is None else self.window):
            return  # the first trial comes after half a window: a busy core shows at once
        level = median(self._baseline)
        usual = self._usual.setdefault((self.current, n_tokens), level)
        self._usual[self.current, n_tokens] = min(usual, level)
        due = self._next_trial is None or now >= self._next_trial
        if not self._could_win(use):
            if due:
                self._next_trial = now + self.period  # nothing to try now; look again then
        elif due or level > usual * self.slowdown or self._freed(use, now):
            self._trial_threads, self._trial = self._alternative(), []
            self.trials += 1

    def prompt_threads(self, use: CpuUse | None) -> int:
        """Threads for a call that evaluates prompt tokens: all cores while /proc shows no other program
        taking `BUSY_ELSEWHERE` of one, else the decode choice (`current`; unknown: the same). Fewer
        threads can win a single stream's decoding on an idle machine, where this server's own work
        per token (the runner's events, the daemon's stream, the client reading it) takes part of a
        core; that work all but stops while a long prompt is evaluated, and prompt rows are
        compute-bound: on 2 cores a 1252-token prompt took 9.6 s on one thread against 5.0 s on two."""
        if use is not None and use.others < BUSY_ELSEWHERE:
            return self.max_threads
        return self.current

    def stall_limit(self, n_tokens: int) -> float | None:
        """How long a decode step of `n_tokens` may run on all cores before a stall watch may stop it
        (`stallwatch.py`): STALL times its usual length; None while there is nothing to fall back to
        (fewer threads already, a trial running, or no usual length yet). A batch size not seen yet
        takes the slowest usual time per token of the sizes seen (single rows'), which is lenient."""
        usual = self._usual.get((self.current, n_tokens)) or max(
            (level for (threads, _), level in self._usual.items() if threads == self.current), default=None)
        if usual is None or self.current != self.max_threads or self._trial_threads is not None:
            return None
        return max(MIN_STALL, usual * n_tokens * STALL)

    def stalled(self, now: float) -> None:
        """A step on all cores was stopped because another program took one: one thread fewer now."""
        if self.current == self.max_threads and self._trial_threads is None:
            self._switch(self._alternative(), now)

    def _taken(self, use: CpuUse | None, per_token: float) -> bool:
        """A core taken by another program, with all cores decoding and the step much slower than
        usual: one thread fewer at once. A trial would compare against timings from before the
        program came, and every step of all cores beside a spin loop costs up to a second here."""
        usual = self._usual.get((self.current, self._rows))
        return (use is not None and self.current == self.max_threads and use.others >= TAKEN
                and usual is not None and per_token > usual * self.slowdown)

    def _could_win(self, use: CpuUse | None) -> bool:
        """Whether the other choice can win on the machine as `use` shows it (unknown: it may)."""
        if use is None:
            return True
        if self.current == self.max_threads:
            return use.others >= BUSY_ELSEWHERE
        return use.idle >= FREE_CORE

    def _freed(self, use: CpuUse | None, now: float) -> bool:
        """With fewer threads and `_could_win` saying a core is idle: try more before the clock says so,
        but not again at once after a trial (a quarter of the backed-off period after the last one). A
        drop to fewer threads because a core was taken is no trial: the idle core is the evidence."""
        return use is not None and self.current < self.max_threads and now - self._trial_ended >= self.period / 4

    def _alternative(self) -> int:
        return self.max_threads - 1 if self.current == self.max_threads else self.max_threads

    def _judge_trial(self, now: float) -> None:
        level = median(self._baseline)
        hopeless = len(self._trial) >= 2 and min(self._trial) > 2 * level
        decisive = len(self._trial) >= 3 and max(self._trial) < level / 2
        if not (hopeless or decisive) and len(self._trial) < self.window:
            return
        won = decisive or not hopeless and median(self._trial) < level * (1 - self.margin)
        if won:
            threads = self._trial_threads
            self._close_trial(now)
            self._switch(threads, now)
            return
        self._usual[self.current, self._rows] = level  # the machine as it is now: only a further slowdown re-triggers
        self._end_trial(now)

    def _end_trial(self, now: float) -> None:
        """A trial that did not win: keep the current choice and look again later."""
        self._close_trial(now)
        self.period = min(2 * self.period, self.max_period)
        self._next_trial = now + self.period

    def _close_trial(self, now: float) -> None:
        """No trial runs now; the next one for a freed core waits a while after this one (`_freed`)."""
        self._trial_threads, self._trial = None, []
        self._trial_ended = now

    def _switch(self, threads: int, now: float) -> None:
        self.current = threads
        self.switches += 1
        self._baseline.clear()
        self.period = self.min_period
        self._next_trial = now + self.period


__all__ = ["ThreadTuner"]
