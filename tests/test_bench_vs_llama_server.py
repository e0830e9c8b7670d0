"""The pure parts of scripts/bench_vs_llama_server.py: figures, tables, the CPU's name, the prompts.
The benchmark itself needs a llama-server binary and a quiet machine; docs/benchmarks.md has its runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "bench_vs_llama_server.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_vs_llama_server", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_markdown_table_has_a_header_rule_and_one_line_per_row(bench):
    table = bench.markdown_table(["streams", "tok/s"], [["1", "75.0"], ["8", "107.7"]])
    assert table.splitlines() == ["| streams | tok/s |", "| --- | --- |", "| 1 | 75.0 |", "| 8 | 107.7 |"]


def test_aggregate_rate_counts_tokens_after_each_first_over_the_shared_decode_window(bench):
    a = bench.Answer(start=0.0, first=1.0, end=3.0, tokens=11)
    b = bench.Answer(start=0.0, first=2.0, end=5.0, tokens=21)
    assert bench.aggregate_rate([a, b]) == pytest.approx((10 + 20) / (5.0 - 1.0))
    assert a.ttft == 1.0 and a.decode_rate == pytest.approx(10 / 2.0)


def test_the_first_token_spread_is_the_latest_first_token_less_the_earliest(bench):
    answers = [bench.Answer(start=0.0, first=first, end=3.0, tokens=5) for first in (1.47, 0.22, 1.46)]
    assert bench.first_token_spread(answers) == pytest.approx(1.25)


def test_own_decode_time_spans_the_steps_after_the_first_token(bench):
    assert bench.own_ms_per_token({"predicted_n": 65, "predicted_ms": 832.0}) == pytest.approx(13.0)
    assert bench.own_ms_per_token({"predicted_n": 1, "predicted_ms": 0.0}) == 0.0


def test_the_results_name_every_localrun_setting_the_environment_passes_on(bench):
    environ = {"LOCALRUN_STREAM_INTERVAL_MS": "25", "LOCALRUN_THREADS": "1", "PATH": "/bin", "LOCALRUN_A": "x"}
    assert bench.localrun_settings(environ, "auto") == "LOCALRUN_THREADS=auto LOCALRUN_A=x LOCALRUN_STREAM_INTERVAL_MS=25"


def test_paired_rounds_compare_each_round_with_itself(bench):
    """Round 2 ran on a slow minute for both: best-of would pair localrun's best with another minute's."""
    ours, theirs = [100.0, 60.0, 98.0], [95.0, 58.0, 101.0]
    assert bench.paired(ours, theirs, higher=True) == "1.03, 2 of 3"
    assert bench.paired([0.5, 0.9], [0.6, 0.8], higher=False) == "0.98, 1 of 2"
    assert bench.paired([], [], higher=True) == "-"


def test_ratio_guards_a_zero_baseline(bench):
    assert bench.ratio(3.0, 2.0) == "1.50" and bench.ratio(1.0, 0.0) == "-"


@pytest.mark.parametrize("cpuinfo, want", [
    ("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t: fpu\n",
     "Intel(R) Xeon(R) Processor"),
    ("processor\t: 0\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n"
     "processor\t: 1\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n",
     "AMD EPYC (family 25 model 1, AVX2)"),
    ("cpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum\nflags\t\t: avx2 avx512f amx_tile\n",
     "Intel(R) Xeon(R) Platinum (family 6 model 143, AVX-512, AMX flag)"),
    ("processor\t: 0\nmodel name\t: AMD EPYC 7763 64-Core Processor\n", "AMD EPYC 7763 64-Core Processor"),
    ("processor\t: 0\nBogoMIPS\t: 50.00\n\nModel\t: Raspberry Pi 4 Model B Rev 1.4\n", "Raspberry Pi 4 Model B Rev 1.4"),
    ("processor\t: 0\n", "unknown CPU"),
])
def test_cpu_model_names_the_cpu_from_proc_cpuinfo(bench, cpuinfo, want):
    assert bench.cpu_model(cpuinfo) == want


def test_rounds_alternate_which_server_goes_first(bench):
    servers = ("localrun", "llama-server")
    assert bench.in_turn(servers, 0) == ["localrun", "llama-server"]
    assert bench.in_turn(servers, 1) == ["llama-server", "localrun"]


def test_every_stream_of_every_round_gets_its_own_prompt(bench):
    prompts = [p for tag in ("0.8", "1.8", "0.4") for p in bench.story_prompts(tag, 8)]
    assert len(set(prompts)) == len(prompts) == 24


def test_a_streams_longest_gap_is_the_longest_wait_between_chunks_with_text(bench, monkeypatch):
    answer = bench.Answer(start=0.0)
    clock = iter([1.0, 1.1, 3.6, 3.7])
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    for piece in ("a", "b", "", "c", "d"):
        bench.read_chunk(answer, {"choices": [{"delta": {"content": piece}}]}, "x")
    assert answer.first == 1.0 and answer.longest_gap == pytest.approx(2.5) and answer.text == "abcd"
