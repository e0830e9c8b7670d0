"""The thread tuner keeps whichever thread count decodes faster, from recorded step times and what
/proc says the other programs do: plain data in, a decision out, with the clock driven by the test.
The /proc readers themselves (the CPU meter, the stall watch) are tested against real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from localrun.engine.cpuuse import CpuMeter, CpuUse
from localrun.engine.stallwatch import StallWatch
from localrun.engine.threads import ThreadTuner


class Machine:
    """A simulated decode loop: seconds per token for each thread count, a clock, and (when `use` is
    set) what /proc would say the other programs do."""

    def __init__(self, tuner: ThreadTuner, rates: dict[int, float], use: CpuUse | None = None) -> None:
        self.tuner, self.rates, self.now, self.used, self.use = tuner, rates, 0.0, [], use

    def run(self, seconds: float, rows: int = 1) -> None:
        end = self.now + seconds
        while self.now < end:
            threads = self.tuner.threads
            step = rows / self.rates[threads]
            self.now += step
            self.used.append(threads)
            self.tuner.record(threads, rows, step, self.now, self.use)

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


# What /proc shows on the 2-core machine: the daemon and a client take a little; a spin loop a core.
QUIET = CpuUse(others=0.08, idle=0.0)  # decoding on both cores, nothing else running
SPIN = CpuUse(others=1.1, idle=0.0)  # with one decode thread or two: no core idle
FREED = CpuUse(others=0.08, idle=0.9)  # one decode thread, the spin loop gone


def test_with_cpu_use_known_an_idle_machine_pays_for_no_trials():
    machine = Machine(ThreadTuner(2), IDLE, QUIET)
    machine.run(120)
    assert machine.tuner.trials == 0 and machine.share(1) == 0


def test_with_cpu_use_known_a_busy_core_is_still_noticed_at_once():
    machine = Machine(ThreadTuner(2), BUSY, SPIN)
    machine.run(1.0)
    assert machine.tuner.current == 1
    assert machine.used[:8] == [2, 2, 2, 2, 1, 1, 1, 1]


def test_a_program_taking_a_core_mid_stream_costs_one_slow_step():
    """Beside a spin loop every step on both cores stalls (up to a second each here); a trial would
    judge against timings from before it came. With /proc saying another program took a core and the
    step much slower than usual, the tuner drops a thread at once."""
    machine = Machine(ThreadTuner(2), IDLE, QUIET)
    machine.run(10)
    machine.rates = {2: 2.0, 1: 60.0}  # steps of half a second on both cores
    machine.use = SPIN
    machine.used.clear()
    machine.run(2.0)
    assert machine.used[:3] == [2, 1, 1] and machine.tuner.current == 1


def test_a_slower_step_with_no_other_program_is_not_a_taken_core():
    machine = Machine(ThreadTuner(2), IDLE, QUIET)
    machine.run(10)
    machine.rates = {2: 50.0, 1: 40.0}  # slower (heat, memory), but nobody else runs
    machine.run(30)
    assert machine.tuner.current == 2 and machine.tuner.trials == 0


def test_prompt_work_takes_all_cores_unless_another_program_holds_one():
    """Decoding may settle on fewer threads (a single stream's own streaming can tip a trial); prompt
    rows are compute-bound, and that streaming all but stops while a long prompt is evaluated."""
    machine = Machine(ThreadTuner(2), BUSY, SPIN)
    machine.run(1.0)
    tuner = machine.tuner
    assert tuner.current == 1
    assert tuner.prompt_threads(SPIN) == 1 and tuner.prompt_threads(None) == 1  # held, or nothing known
    assert tuner.prompt_threads(FREED) == 2
    assert ThreadTuner(2).prompt_threads(SPIN) == 2  # never fewer than the decode choice


def test_a_freed_core_is_taken_back_within_steps_not_at_the_next_clock_trial():
    machine = Machine(ThreadTuner(2), BUSY, SPIN)
    machine.run(20)  # long enough for trials to lose and the clock to back off
    assert machine.tuner.current == 1
    machine.used.clear()
    machine.run(30)
    assert machine.share(2) == 0  # no core idle: no trial of two threads costs anything
    machine.rates, machine.use = IDLE, FREED
    machine.used.clear()
    machine.run(0.5)
    assert machine.tuner.current == 2
    assert machine.used.index(2) <= 8  # within a window of steps; the clock alone waited up to 16 s


def test_a_core_freed_soon_after_it_was_taken_is_tried_at_once():
    """A spin loop takes a core mid-answer (one thread from then on) and stops a second later, as in the
    benchmark's busy row: the next steps try both cores at once. Only a trial holds the next one
    back; the drop to one thread was no trial, and the idle core is the evidence."""
    machine = Machine(ThreadTuner(2), IDLE, QUIET)
    machine.run(10)
    machine.rates, machine.use = {2: 2.0, 1: 60.0}, SPIN
    machine.run(1.0)  # one stalled step on both cores, then ~30 on one
    assert machine.tuner.current == 1 and machine.tuner.trials == 0
    machine.rates, machine.use = IDLE, FREED
    machine.used.clear()
    machine.run(0.3)
    assert machine.used.index(2) == 1 and machine.tuner.current == 2


def test_a_freed_core_that_does_not_help_is_not_tried_over_and_over():
    machine = Machine(ThreadTuner(2), {2: 50.0, 1: 73.0}, FREED)  # an idle core, yet two threads lose
    machine.tuner.current = 1
    machine.run(60)
    assert machine.tuner.current == 1
    assert machine.share(2) < 0.05


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_the_cpu_meter_counts_another_process_and_not_this_one():
    """/proc's view (Linux): a spinning child shows in `others`; this process's own time does not."""
    meter = CpuMeter(interval=0.0)
    assert meter.sample(time.perf_counter()) is None  # a first look has nothing to compare with
    child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 0.6\nwhile time.time() < end: pass"])
    try:
        time.sleep(0.5)
        use = meter.sample(time.perf_counter())
    finally:
        child.wait()
    assert use is not None and use.others >= 0.3
    meter.sample(time.perf_counter())
    end = time.perf_counter() + 0.4
    while time.perf_counter() < end:  # this process busy, nothing else
        pass
    assert meter.sample(time.perf_counter()).others < use.others


MEASURE_ON = """
import os, sys, time
from localrun.engine.cpuuse import CpuMeter
for cpu in map(int, sys.argv[1:]):
    os.sched_setaffinity(0, {cpu})
    meter = CpuMeter(interval=0.0, now=time.perf_counter())
    time.sleep(0.4)
    print(meter.sample(time.perf_counter()).others)
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_the_cpu_meter_looks_only_at_the_cpus_this_process_may_run_on():
    """A container pinned to some of a host's CPUs must not count the rest as its competition."""
    mine, theirs = sorted(os.sched_getaffinity(0))[:2]
    spin = f"import os, time\nos.sched_setaffinity(0, {{{theirs}}})\nend = time.time() + 1.5\nwhile time.time() < end: pass"
    child = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.2)
        out = subprocess.run([sys.executable, "-c", MEASURE_ON, str(mine), str(theirs)], capture_output=True,
                             text=True, check=True).stdout.split()
    finally:
        child.wait()
    on_mine, on_theirs = map(float, out)
    assert on_theirs - on_mine >= 0.5  # the spinner counts only where it runs


def test_a_stall_limit_exists_only_on_all_cores_with_a_usual_step_length():
    tuner = ThreadTuner(2)
    assert tuner.stall_limit(1) is None  # nothing known yet
    machine = Machine(tuner, IDLE, QUIET)
    machine.run(5)
    assert tuner.stall_limit(1) == pytest.approx(max(0.02, 3 / 112.0), rel=0.05)
    assert tuner.stall_limit(8) == pytest.approx(8 * 3 / 112.0, rel=0.05)
    tuner.stalled(machine.now)
    assert tuner.current == 1 and tuner.stall_limit(1) is None  # nothing fewer to fall back to


def test_the_stall_watch_stops_a_step_only_while_this_process_waits_for_a_cpu():
    """A "step" (this thread spinning) with another process spinning on the same CPU: the watch sees
    this process's threads waiting for the CPU and stops it; alone on the CPU it runs on."""
    if not (hasattr(os, "sched_setaffinity") and StallWatch.available()):
        pytest.skip("needs CPU affinity, libc and /proc/self/task/*/schedstat")
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})  # this thread, and the watch's thread started from it
    watch = StallWatch()
    try:
        assert not step_watched(watch)
        spin = f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\nend = time.time() + 2\nwhile time.time() < end: pass"
        child = subprocess.Popen([sys.executable, "-c", spin])
        try:
            time.sleep(0.2)
            assert step_watched(watch)
        finally:
            child.kill()
            child.wait()
    finally:
        watch.close()
        os.sched_setaffinity(0, before)


def step_watched(watch: StallWatch, limit: float = 0.05, seconds: float = 0.4) -> bool:
    watch.begin(limit)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    return watch.end()


def test_a_trial_ends_without_a_verdict_when_the_batch_changes_size():
    """Time per token falls as a batch grows (8 rows cost less each than 1), so a trial begun on
    single-row steps must not be judged on 8-row ones: that once made one thread look faster."""
    tuner = ThreadTuner(2)
    for step in range(4):
        tuner.record(2, 1, 0.013, step * 0.013)
    assert tuner.threads == 1  # the first trial has begun
    tuner.record(1, 8, 0.087, 0.1)  # 10.9 ms a token: "faster" only because the batch grew
    assert tuner.threads == 2 and tuner.current == 2 and tuner.switches == 0


def test_a_batch_shrinking_is_not_a_taken_core():
    """Eight streams decode at 7 ms a token, one alone at 10 ms: with the daemon and its clients busy
    beside them (others >= TAKEN), comparing the two sizes once switched to one thread at once."""
    tuner, now = ThreadTuner(2), 0.0
    busy_daemon = CpuUse(others=0.7, idle=0.0)
    for _ in range(20):  # a trial of one thread on the way, no faster
        now += 0.056
        tuner.record(tuner.threads, 8, 0.056, now, busy_daemon)
    for _ in range(3):
        now += 0.010
        tuner.record(tuner.threads, 1, 0.010, now, busy_daemon)
    assert tuner.current == 2 and tuner.switches == 0
    assert tuner.stall_limit(1) == pytest.approx(0.021)  # no usual single step yet: the slowest known, 7 ms x 3


def test_the_cpu_meter_starts_over_after_an_idle_while():
    """A reading across a long gap would count what others did while this process idled."""
    meter = CpuMeter(interval=0.0, now=0.0, stale=1.0)
    assert meter.sample(0.5) is not None
    assert meter.sample(5.0) is None  # starts over
    assert meter.sample(5.2) is not None


def test_a_reading_across_an_idle_while_is_given_when_asked_for_and_not_kept():
    """Whether another program holds a core, the idle while answers too (a prompt's thread count)."""
    meter = CpuMeter(interval=0.1, now=0.0, stale=1.0)
    assert meter.sample(5.0, across_idle=True) is not None
    assert meter.sample(5.05) is None  # within the interval the decode tuner still has no reading
    assert meter.sample(5.2) is not None
