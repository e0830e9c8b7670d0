"""The thread tuner keeps whichever thread count decodes faster, from recorded step times."""

from __future__ import annotations

from localrun.engine.threads import ThreadTuner


def drive(tuner: ThreadTuner, seconds_per_token: dict[int, float], steps: int) -> list[int]:
    used = []
    for _ in range(steps):
        threads = tuner.threads
        used.append(threads)
        tuner.record(threads, 4, 4 * seconds_per_token[threads])
    return used


def test_switches_to_fewer_threads_when_a_core_is_busy():
    tuner = ThreadTuner(2, period=20, window=4)
    drive(tuner, {2: 1 / 42, 1: 1 / 82}, 40)
    assert tuner.current == 1 and tuner.switches == 1


def test_stays_at_all_cores_when_they_are_free():
    tuner = ThreadTuner(2, period=20, window=4)
    used = drive(tuner, {2: 1 / 112, 1: 1 / 73}, 200)
    assert tuner.current == 2 and tuner.switches == 0
    assert 1 in used  # it did try
    assert used.count(1) <= 4 * 10  # trials are short and rare


def test_goes_back_up_when_the_machine_frees():
    tuner = ThreadTuner(4, period=20, window=4)
    drive(tuner, {4: 1 / 40, 3: 1 / 80}, 40)
    assert tuner.current == 3
    drive(tuner, {4: 1 / 120, 3: 1 / 80}, 40)
    assert tuner.current == 4


def test_one_core_means_no_tuning():
    tuner = ThreadTuner(1)
    assert not tuner.enabled
    tuner.record(1, 1, 0.01)
    assert tuner.threads == 1


def test_ignores_steps_timed_with_other_threads():
    tuner = ThreadTuner(2, period=4, window=2)
    tuner.record(1, 1, 100.0)  # not the thread count it asked for
    assert tuner.threads == 2 and tuner.switches == 0
