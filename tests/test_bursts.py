"""runner/bursts.py: when an idle runner waits for the rest of a burst, from arrival times alone."""

from localrun.runner.bursts import GATHER_GAPS, MEMORY, Bursts


def burst(bursts: Bursts, at: float) -> None:
    bursts.arrived(at, idle=True)
    bursts.arrived(at + 0.004, idle=False)  # 4 ms after the one that found the engine idle


def test_it_waits_only_once_requests_have_come_in_a_burst():
    bursts = Bursts(gap=0.010)
    assert bursts.wait() == 0  # nothing seen yet: a first request starts at once
    burst(bursts, 1.0)
    assert bursts.wait() == 0.010
    bursts.arrived(2.000, idle=True)  # the next burst's lead is waited on
    assert bursts.wait() == 0.010


def test_requests_that_come_alone_end_the_waits_after_a_few_leads():
    bursts = Bursts(gap=0.010)
    burst(bursts, 1.0)
    for n in range(MEMORY):  # each came alone and paid the wait: the burst is still remembered
        bursts.arrived(2.0 + n, idle=True)
        assert bursts.wait() == 0.010
    bursts.arrived(10.0, idle=True)  # the last MEMORY leads came alone
    assert bursts.wait() == 0


def test_lone_requests_between_bursts_keep_the_wait():
    """A benchmark's rounds (1, 4, 8 streams) or a chat beside a batch job: the bursts still start together."""
    bursts = Bursts(gap=0.010)
    for round_ in range(3):
        bursts.arrived(round_ * 10.0, idle=True)
        burst(bursts, round_ * 10.0 + 1)
        assert bursts.wait() == 0.010
        burst(bursts, round_ * 10.0 + 2)


def test_a_request_that_follows_late_led_no_burst():
    bursts = Bursts(gap=0.010)
    bursts.arrived(1.000, idle=True)
    bursts.arrived(1.500, idle=False)  # half a second after its lead: a second request, not a burst
    bursts.arrived(1.501, idle=False)  # close to the one before it, but that one was no lead
    assert bursts.wait() == 0


def test_a_gap_of_zero_never_waits():
    bursts = Bursts(gap=0.0)
    bursts.arrived(1.000, idle=True)
    bursts.arrived(1.000, idle=False)
    assert bursts.wait() == 0


def test_a_burst_the_daemon_spreads_over_a_few_gaps_is_one():
    """A burst's second request 15 ms after a lead whose step already runs (the daemon, sharing the
    cores with it, passes requests on more slowly than while the runner waits) tells a burst."""
    bursts = Bursts(gap=0.010)
    bursts.arrived(1.000, idle=True)
    bursts.arrived(1.015, idle=False)
    assert bursts.wait() == 0.010
    late = Bursts(gap=0.010)
    late.arrived(1.000, idle=True)
    late.arrived(1.000 + GATHER_GAPS * 0.010 + 0.001, idle=False)  # later than a wait gathers at most
    assert late.wait() == 0
