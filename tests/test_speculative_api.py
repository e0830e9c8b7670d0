"""Speculative decoding through the daemon: the per-request setting in every dialect, the
acceptance counts in timings and /metrics, the CLI flag, and clear refusals of bad values."""

from __future__ import annotations

import anthropic
import httpx
import ollama
import pytest

from localrun.config import SPECULATIVE_ON, read
from localrun.errors import UsageError
from tests.cli import run_cli
from tests.test_metrics import scrape
from tests.test_speculative import TEXT

COPY = f"Repeat this text exactly:\n{TEXT}"
MODEL = "smollm2:135m"


def openai_chat(url: str, **extra) -> httpx.Response:
    body = {"model": "smollm2", "messages": [{"role": "user", "content": COPY}], "temperature": 0,
            "max_tokens": 64, **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


def test_a_request_turns_drafting_on_and_reads_its_acceptance_in_timings_and_metrics(daemon):
    before = scrape(daemon.url)
    plain = openai_chat(daemon.url).json()
    drafted = openai_chat(daemon.url, speculative=16).json()
    after = scrape(daemon.url)
    assert plain["timings"]["draft_n"] == 0
    t = drafted["timings"]
    assert t["draft_n"] >= t["draft_n_accepted"] >= 20, t
    assert drafted["choices"][0]["message"]["content"].startswith("The river starts high")
    label = f'{{model="{MODEL}"}}'
    assert after[f"localrun_draft_tokens_total{label}"] - before.get(f"localrun_draft_tokens_total{label}", 0) == t["draft_n"]
    assert (after[f"localrun_draft_accepted_tokens_total{label}"]
            - before.get(f"localrun_draft_accepted_tokens_total{label}", 0)) == t["draft_n_accepted"]


def test_the_ollama_and_anthropic_dialects_pass_the_setting(daemon):
    before = scrape(daemon.url).get(f'localrun_draft_tokens_total{{model="{MODEL}"}}', 0)
    answer = ollama.Client(host=daemon.url).chat(
        model="smollm2", messages=[{"role": "user", "content": COPY}],
        options={"temperature": 0, "num_predict": 48, "speculative": 16})
    assert answer.eval_count > 0
    middle = scrape(daemon.url)[f'localrun_draft_tokens_total{{model="{MODEL}"}}']
    assert middle > before
    message = anthropic.Anthropic(base_url=daemon.url, api_key="unused", max_retries=0).messages.create(
        model="smollm2", max_tokens=48, messages=[{"role": "user", "content": COPY}],
        extra_body={"speculative": 16, "temperature": 0})
    assert message.usage.output_tokens > 0
    assert scrape(daemon.url)[f'localrun_draft_tokens_total{{model="{MODEL}"}}'] > middle


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "speculative": 65}),
    ("/v1/completions", {"prompt": "hi", "speculative": -1}),
    ("/api/generate", {"prompt": "hi", "options": {"speculative": "many"}}),
    ("/v1/messages", {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "speculative": 100}),
])
def test_bad_draft_lengths_are_400_with_the_field_named(daemon, path, body):
    response = httpx.post(f"{daemon.url}{path}", json={"model": "smollm2", "stream": False, **body}, timeout=60)
    assert response.status_code == 400
    assert "speculative" in response.text


def test_run_speculative_verbose_prints_the_acceptance(daemon):
    done = run_cli("run", "smollm2", COPY, "--max-tokens", "48", "--temperature", "0", "--speculative", "16",
                   "--verbose", env=daemon.env())
    assert done.returncode == 0, done.stderr
    assert "draft acceptance:" in done.stderr and "The river starts" in done.stdout


def test_server_setting_parses_off_on_and_lengths():
    def setting(value: str) -> int:
        return read("LOCALRUN_SPECULATIVE", {"LOCALRUN_SPECULATIVE": value})

    assert [setting(v) for v in ("off", "0", "on", "8", " ON ")] == [0, 0, SPECULATIVE_ON, 8, SPECULATIVE_ON]
    for bad in ("65", "-1", "fast"):
        with pytest.raises(UsageError, match="LOCALRUN_SPECULATIVE must be off, on or a draft length"):
            setting(bad)


def test_serve_refuses_a_bad_setting_before_starting():
    done = run_cli("serve", "--speculative", "fast", "--port", "1")
    assert done.returncode == 2 and "speculative" in done.stderr and "Traceback" not in done.stderr
    done = run_cli("serve", "--port", "1", env={"LOCALRUN_SPECULATIVE": "99"})
    assert done.returncode == 2 and "LOCALRUN_SPECULATIVE" in done.stderr


def test_a_daemon_with_drafting_on_and_a_q8_0_cache_answers_as_without_drafts(tmp_path):
    from tests.daemon import start_daemon

    daemon = start_daemon(tmp_path / "home", {"LOCALRUN_SPECULATIVE": "on", "LOCALRUN_KV_CACHE_TYPE": "q8_0",
                                              "LOCALRUN_PARALLEL": "2", "LOCALRUN_CTX_SIZE": "1024"})
    try:
        drafted = openai_chat(daemon.url).json()
        plain = openai_chat(daemon.url, speculative=0).json()
        running = httpx.get(f"{daemon.url}/api/ps").json()["models"][0]
        assert running["speculative"] == SPECULATIVE_ON and running["speculative_exact"] is True
    finally:
        daemon.stop()
    assert drafted["timings"]["draft_n_accepted"] >= 20 and plain["timings"]["draft_n"] == 0
    assert drafted["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
