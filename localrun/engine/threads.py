"""Choosing decode threads on a machine whose cores other programs also use.

Measured on the 2-core development machine with SmolLM2: idle, 2 threads decode 112 tok/s against
73 with 1; with one core busy elsewhere, 2 threads drop to 42 while 1 thread keeps 82. A thread
waiting for a busy core stalls every matrix multiplication, so "all cores" is right only while
they are free. The tuner starts at the physical core count and now and then runs a short trial at
the other choice (n-1, or back to n), keeping whichever decodes faster per token.
"""

from __future__ import annotations

from collections import deque
from statistics import median


class ThreadTuner:
    """Pure bookkeeping: `threads` says what to use for the next step, `record` feeds timings back.

    Only decode steps are recorded (their cost per token is comparable); prefill steps are not.
    """

    def __init__(self, max_threads: int, period: int = 512, window: int = 12, margin: float = 0.05) -> None:
        self.max_threads = max_threads
        self.current = max_threads
        self.period, self.window, self.margin = period, window, margin
        self._baseline: deque[float] = deque(maxlen=window)
        self._trial: list[float] = []
        self._trial_threads: int | None = None
        self._since_trial = period - 2 * window  # the first trial comes early
        self.switches = 0

    @property
    def enabled(self) -> bool:
        return self.max_threads > 1

    @property
    def threads(self) -> int:
        return self._trial_threads or self.current

    def record(self, threads: int, n_tokens: int, seconds: float) -> None:
        if not self.enabled or n_tokens <= 0 or threads != self.threads:
            return
        per_token = seconds / n_tokens
        if self._trial_threads is None:
            self._baseline.append(per_token)
            self._since_trial += 1
            if self._since_trial >= self.period and len(self._baseline) == self.window:
                self._trial_threads, self._trial = self._alternative(), []
            return
        self._trial.append(per_token)
        if len(self._trial) >= self.window:
            self._conclude()

    def _alternative(self) -> int:
        return self.max_threads - 1 if self.current == self.max_threads else self.max_threads

    def _conclude(self) -> None:
        if median(self._trial) < median(self._baseline) * (1 - self.margin):
            self.current = self._trial_threads
            self.switches += 1
            self._baseline.clear()
        self._trial_threads, self._trial, self._since_trial = None, [], 0


__all__ = ["ThreadTuner"]
