"""The runner's choice of stream interval, from plain data (runner/interval.py); what holding does to
a stream is tested on the real model in test_runner.py."""

from __future__ import annotations

from localrun.native import Delta
from localrun.runner.interval import AUTO_MS, Held, stream_interval


def test_the_auto_stream_interval_holds_only_while_no_cpu_is_spare():
    """`auto` holds tokens only when the daemon's wake-ups would come out of decoding (runner/interval.py)."""
    assert stream_interval(None, threads=2, cpus=2, on_gpu=False) == AUTO_MS / 1000
    assert stream_interval(None, threads=1, cpus=2, on_gpu=False) == 0  # the tuner gave a CPU back, or a user did
    assert stream_interval(None, threads=8, cpus=16, on_gpu=False) == 0  # hyperthreads: physical cores decode
    assert stream_interval(None, threads=4, cpus=4, on_gpu=True) == 0
    assert stream_interval(0, threads=2, cpus=2, on_gpu=False) == 0
    assert stream_interval(40, threads=1, cpus=16, on_gpu=True) == 0.04


def delta(text: str) -> Delta:
    return Delta(0, text)


def test_a_streams_first_delta_goes_at_once_and_the_next_wait_until_due():
    held = Held()
    assert held.push(delta("a"), now=0.0, interval=0.025) == [delta("a")]
    assert held.push(delta("b"), now=0.010, interval=0.025) == []
    assert held.push(delta("c"), now=0.020, interval=0.025) == []
    assert held.due(now=0.020, step_s=0.010, interval=0.025) == []  # held 10 ms: one more step makes 20
    assert held.push(delta("d"), now=0.030, interval=0.025) == []
    assert held.due(now=0.030, step_s=0.010, interval=0.025) == [delta("b"), delta("c"), delta("d")]
    assert held.push(delta("e"), now=0.040, interval=0.025) == []  # a new wait begins
    assert held.release() == [delta("e")] and held.release() == []


def test_when_the_interval_drops_to_zero_the_held_deltas_go_first_in_order():
    """`auto` follows the tuner's thread count: a stream held at 2 threads of 2 CPUs must not let a
    later token overtake the held ones at 1 thread (an earlier form sent it at once, out of order)."""
    held = Held()
    held.push(delta("a"), now=0.0, interval=0.025)
    held.push(delta("b"), now=0.010, interval=0.025)
    assert held.push(delta("c"), now=0.020, interval=0.0) == []
    assert held.due(now=0.020, step_s=0.010, interval=0.0) == [delta("b"), delta("c")]
    assert held.push(delta("d"), now=0.030, interval=0.0) == [delta("d")]


def test_without_an_interval_every_delta_goes_at_once():
    held = Held()
    assert [held.push(delta(t), now=0.0, interval=0.0) for t in "abc"] == [[delta("a")], [delta("b")], [delta("c")]]
    assert held.due(now=1.0, step_s=1.0, interval=0.0) == []
