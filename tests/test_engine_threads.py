"""The thread tuner keeps whichever thread count decodes faster, from recorded step times: plain data
in, a decision out, with the clock driven by the test."""

from __future__ import annotations

from localrun.engine.threads import ThreadTuner


class Machine:
    """A simulated decode loop: seconds per token for each thread count, and a clock."""

    def __init__(self, tuner: ThreadTuner, rates: dict[int, float]) -> None:
        self.tuner, self.rates, self.now, self.used = tuner, rates, 0.0, []

    def run(self, seconds: float, rows: int = 1) -> None:
        end = self.now + seconds
        while self.now < end:
            threads = self.tuner.threads
            step = rows / self.rates[threads]
            self.now += step
            self.used.append(threads)
            self.tuner.record(threads, rows, step, self.now)

    def share(self, threads: int) -> float:
        return self.used.count(threads) / len(self.used)


IDLE = {2: 112.0, 1: 73.0}  # tok/s measured on the 2-core machine
BUSY = {2: 8.6, 1: 60.0}  # one core kept busy elsewhere (issue 15's measurement for 2 threads)


def test_a_busy_core_is_noticed_within_the_first_tokens():
    machine = Machine(ThreadTuner(2), BUSY)
    machine.run(1.0)
    assert machine.tuner.current == 1 and machine.tuner.switches == 1
    assert machine.used[:8] == [2, 2, 2, 2, 1, 1, 1, 1]  # half a window at 2 threads, then a decisive trial


def test_an_idle_machine_stays_at_all_cores_and_trials_cost_little():
    machine = Machine(ThreadTuner(2), IDLE)
    machine.run(120)
    assert machine.tuner.current == 2 and machine.tuner.switches == 0
    assert machine.tuner.trials >= 5  # it keeps checking, on a clock that backs off
    assert machine.share(1) < 0.01


def test_a_core_getting_busy_mid_stream_switches_at_once_and_back_when_it_frees():
    machine = Machine(ThreadTuner(2), IDLE)
    machine.run(30)
    assert machine.tuner.current == 2
    machine.rates = BUSY
    machine.run(1.0)  # a slowdown triggers a trial without waiting for the clock
    assert machine.tuner.current == 1
    machine.used.clear()
    machine.run(30)
    assert machine.share(2) < 0.05  # hopeless trials end after two steps
    machine.rates = IDLE
    machine.run(20)  # the next scheduled trial finds the free core
    assert machine.tuner.current == 2


def test_a_machine_that_is_only_somewhat_slower_does_not_thrash():
    machine = Machine(ThreadTuner(2), IDLE)
    machine.run(10)
    machine.rates = {2: 70.0, 1: 50.0}  # busier, but both cores still win
    machine.run(60)
    assert machine.tuner.current == 2 and machine.tuner.switches == 0
    assert machine.share(1) < 0.05


def test_batched_steps_are_compared_per_token():
    machine = Machine(ThreadTuner(4), {4: 40.0, 3: 80.0})
    machine.run(5, rows=8)
    assert machine.tuner.current == 3


def test_one_core_means_no_tuning():
    tuner = ThreadTuner(1)
    assert not tuner.enabled
    tuner.record(1, 1, 0.01, 0.0)
    assert tuner.threads == 1


def test_ignores_steps_timed_with_other_threads():
    tuner = ThreadTuner(2, window=2)
    tuner.record(1, 1, 100.0, 0.0)  # not the thread count it asked for
    assert tuner.threads == 2 and tuner.switches == 0
