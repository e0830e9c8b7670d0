"""Pure formatting of CLI output: sizes, the UNTIL column, processors, tables, --verbose stats."""

from datetime import datetime, timedelta, timezone

import pytest

from localrun.cli.format import human_size, processor, table, until
from localrun.cli.generation import format_stats
from localrun.client import Completion, Timings, Usage

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("n, text", [(0, "0 B"), (999, "999 B"), (33_000, "33 KB"), (98_362_432, "98 MB"),
                                     (101_000_000, "101 MB"), (1_000_000_000, "1 GB"), (4_700_000_000, "4.7 GB"),
                                     (120_000_000_000, "120 GB"), (2_500_000_000_000, "2.5 TB")])
def test_human_size(n, text):
    assert human_size(n) == text


@pytest.mark.parametrize("delta, text", [
    (timedelta(minutes=4, seconds=20), "4 minutes from now"), (timedelta(seconds=599.9), "10 minutes from now"),
    (timedelta(seconds=1), "1 second from now"),
    (timedelta(hours=2), "2 hours from now"), (timedelta(days=1), "1 day from now"),
    (timedelta(seconds=-5), "Stopping..."), (timedelta(days=365 * 290), "Forever"),
])
def test_until(delta, text):
    assert until((NOW + delta).isoformat(), now=NOW) == text


def test_until_accepts_z_suffix():
    assert until("2026-01-01T00:10:00Z", now=NOW) == "10 minutes from now"


@pytest.mark.parametrize("size, vram, text", [(100, 0, "100% CPU"), (100, 100, "100% GPU"), (100, 52, "48%/52% CPU/GPU")])
def test_processor(size, vram, text):
    assert processor(size, vram) == text


def test_table_aligns_columns():
    assert table(["NAME", "ID"], [["smollm2:135m", "abc"]]).splitlines() == ["NAME           ID", "smollm2:135m   abc"]


def test_verbose_stats_in_ollama_words():
    c = Completion("x", usage=Usage(10, 4, 6), timings=Timings(4, 20.0, 200.0, 4, 100.0, 40.0, 6, 1500.0))
    lines = dict(line.split(":", 1) for line in format_stats(c, 1.75).splitlines())
    assert lines["total duration"].strip() == "1.750s"
    assert lines["load duration"].strip() == "1.500s"
    assert lines["prompt eval count"].strip() == "4 token(s)"
    assert lines["prompt eval rate"].strip() == "200.00 tokens/s"
    assert lines["eval duration"].strip() == "100.00ms"
    assert lines["eval rate"].strip() == "40.00 tokens/s"
    assert lines["prompt cache hit"].strip() == "6 token(s)"
