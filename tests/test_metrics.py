"""`GET /metrics`: Prometheus text that parses, and counters that move by what requests really did."""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest

from localrun.native import Delta, Done, Timings
from localrun.server.metrics import Histogram, Metrics, Observer

SAMPLE = re.compile(r'^[a-z_:][a-z0-9_:]*(\{([a-z_]+="([^"\\]|\\.)*",?)*\})? -?[0-9.e+Inf-]+$')


def scrape(url: str) -> dict[str, float]:
    """Every sample of a scrape as {"name{labels}": value}, after checking each line's syntax."""
    response = httpx.get(f"{url}/metrics", timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for line in response.text.splitlines():
        if line.startswith("# "):
            assert line.split()[1] in ("HELP", "TYPE"), line
            continue
        assert SAMPLE.match(line), line
        key, value = line.rsplit(" ", 1)
        samples[key] = float(value)
    return samples


def test_histogram_buckets_are_cumulative_and_inclusive():
    h = Histogram((1.0, 2.0))
    for value in (0.5, 1.0, 1.5, 3.0):
        h.observe(value)
    lines = list(h.lines("x", (("model", 'a"b'),)))
    assert lines == ['x_bucket{model="a\\"b",le="1.0"} 2', 'x_bucket{model="a\\"b",le="2.0"} 3',
                     'x_bucket{model="a\\"b",le="+Inf"} 4', 'x_sum{model="a\\"b"} 6.0', 'x_count{model="a\\"b"} 4']


def test_observer_counts_tokens_ttft_and_speed_once():
    metrics = Metrics()
    observer = Observer("m", 0.0, 7, metrics)
    for event in (Delta(0, "a"), Delta(0, "b"), Done(0, "stop", Timings(7, 0, 1.0, 20, 500.0))):
        observer.see(event)
    assert metrics.tokens_in == {(("model", "m"),): 7} and metrics.tokens_out == {(("model", "m"),): 20}
    assert sum(metrics.ttft[(("model", "m"),)].counts) == 1
    assert metrics.tps[(("model", "m"),)].total == 40.0


def test_observer_takes_ttft_from_done_when_no_delta_came(monkeypatch):
    """A whole answer arrives without deltas (GenerateRequest.deltas): its first token came
    generation_ms before the Done."""
    metrics = Metrics()
    monkeypatch.setattr("localrun.server.metrics.time.perf_counter", lambda: 10.0)
    observer = Observer("m", 4.0, 7, metrics)
    observer.see(Done(0, "stop", Timings(7, 0, 1.0, 20, 2500.0)))
    observer.see(Done(1, "stop", Timings(7, 0, 1.0, 20, 500.0)))
    histogram = metrics.ttft[(("model", "m"),)]
    assert sum(histogram.counts) == 1 and histogram.total == pytest.approx(3.5)


def test_a_streamed_chat_moves_every_counter(daemon):
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "Count to five."}], "max_tokens": 12,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    httpx.post(f"{daemon.url}/v1/chat/completions", json={**body, "stream": False}, timeout=120).raise_for_status()
    before = scrape(daemon.url)
    with httpx.stream("POST", f"{daemon.url}/v1/chat/completions", json=body, timeout=120) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    usage = chunks[-1]["usage"]
    counted = 'localrun_requests_total{route="/v1/chat/completions",method="POST",status="200"}'
    # A request is counted once its handler returns, which can be just after the client read the last byte.
    deadline, after = time.monotonic() + 5, scrape(daemon.url)
    while after.get(counted, 0.0) == before.get(counted, 0.0) and time.monotonic() < deadline:
        time.sleep(0.05)
        after = scrape(daemon.url)

    def moved(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    model = 'model="smollm2:135m"'
    assert moved(counted) == 1
    assert moved(f"localrun_prompt_tokens_total{{{model}}}") == usage["prompt_tokens"]
    assert moved(f"localrun_generated_tokens_total{{{model}}}") == usage["completion_tokens"]
    assert moved(f"localrun_time_to_first_token_seconds_count{{{model}}}") == 1
    assert moved(f"localrun_tokens_per_second_count{{{model}}}") == 1
    assert after["localrun_loaded_models"] >= 1
    assert after[f"localrun_running_sequences{{{model}}}"] == 0
    assert after[f"localrun_queue_depth{{{model}}}"] == 0
    assert after[f"localrun_parallel_slots{{{model}}}"] >= 1
    ps = {m["name"]: m for m in httpx.get(f"{daemon.url}/api/ps", timeout=10).json()["models"]}
    assert after[f"localrun_decode_threads{{{model}}}"] == ps["smollm2:135m"]["threads"] >= 1  # the live choice


def test_unknown_paths_and_methods_do_not_grow_the_label_set(daemon):
    for i in range(3):
        httpx.get(f"{daemon.url}/no/such/path/{i}", timeout=10)
        httpx.request(f"INVENTED{i}", f"{daemon.url}/health", timeout=10)
    samples = scrape(daemon.url)
    assert not any("/no/such" in key or "INVENTED" in key for key in samples)
    assert samples['localrun_requests_total{route="/health",method="other",status="405"}'] >= 3
    assert samples['localrun_requests_total{route="unrouted",method="GET",status="404"}'] >= 3
