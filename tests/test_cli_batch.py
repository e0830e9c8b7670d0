"""`localrun batch`: input forms, input order, failed lines kept, resume after an interruption."""

from __future__ import annotations

import json

import httpx
import pytest

from localrun.cli.batch import finished_lines, parse_line
from localrun.client import GenerateOptions
from tests.cli import run_cli

INPUT = [
    '"What is 2+2?"',
    "Name a fruit.",
    '{"id": "a", "prompt": "Say hi.", "options": {"temperature": 0, "max_tokens": 3}}',
    '{"messages": [{"role": "user", "content": "Say bye."}]}',
    "",
    '{"prompt": ',
    '{"prompt": "x", "options": {"colour": 1}}',
    '{"prompt": "Count to three."}',
]


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_batch_answers_in_order_keeps_failures_and_resumes(daemon, tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("\n".join(INPUT) + "\n")
    first = run_cli("batch", "smollm2", str(source), "-o", str(out), "--max-tokens", "6", "-c", "4",
                    env=daemon.env())
    assert first.returncode == 1 and first.stderr.strip().splitlines()[-1] == \
        "error: 2 of 7 lines failed; their output lines carry the error"
    got = records(out)
    assert [r["line"] for r in got] == [1, 2, 3, 4, 6, 7, 8]  # input order; the blank line has no output
    answered = [r for r in got if "response" in r]
    assert len(answered) == 5 and all(r["response"] and r["usage"]["completion_tokens"] <= 6 for r in answered)
    assert got[2]["id"] == "a" and got[2]["usage"]["completion_tokens"] <= 3  # per-line options win
    assert "invalid JSON" in got[4]["error"] and "unknown option 'colour'" in got[5]["error"]

    # An interrupted run: three lines written, the fourth torn in the middle.
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:3]) + lines[3][:10])
    again = run_cli("batch", "smollm2", str(source), "-o", str(out), "--max-tokens", "6", env=daemon.env())
    assert "resuming: 3 of 7 lines already" in again.stderr
    resumed = records(out)
    assert [r["line"] for r in resumed] == [1, 2, 3, 4, 6, 7, 8]
    assert resumed[:3] == got[:3]  # kept, not asked again

    done = run_cli("batch", "smollm2", str(source), "-o", str(out), env=daemon.env())
    assert done.returncode == 0 and "resuming: 7 of 7" in done.stderr and len(records(out)) == 7


def test_batch_to_stdout(daemon, tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('"Say one word."\n"Say two words."\n')
    done = run_cli("batch", "smollm2", str(source), "--max-tokens", "4", env=daemon.env())
    assert done.returncode == 0, done.stderr
    assert [r["line"] for r in map(json.loads, done.stdout.splitlines())] == [1, 2]


def test_missing_input_file_is_a_usage_error(daemon, tmp_path):
    done = run_cli("batch", "smollm2", str(tmp_path / "nope.jsonl"), env=daemon.env())
    assert done.returncode == 2 and done.stderr.startswith("error: cannot read")


BASE = GenerateOptions(max_tokens=9)


@pytest.mark.parametrize("text, messages", [
    ('"hi"', [{"role": "user", "content": "hi"}]),
    ("plain text line", [{"role": "user", "content": "plain text line"}]),
    ('{"prompt": "p"}', [{"role": "system", "content": "S"}, {"role": "user", "content": "p"}]),
    ('{"messages": [{"role": "user", "content": "m"}]}', [{"role": "system", "content": "S"},
                                                           {"role": "user", "content": "m"}]),
    ('{"messages": [{"role": "system", "content": "own"}]}', [{"role": "system", "content": "own"}]),
])
def test_input_forms(text, messages):
    job = parse_line(1, text, BASE, "S" if text.startswith("{") else None)
    assert job.error is None and job.messages == messages and job.options == BASE


@pytest.mark.parametrize("text, error", [
    ('{"prompt": ', "invalid JSON"), ("[1, 2]", "expected a prompt"), ('{"other": 1}', "expected \"prompt\""),
    ('{"prompt": "x", "options": {"temperature": "hot"}}', "needs a float"),
])
def test_bad_lines_carry_their_error(text, error):
    assert error in parse_line(3, text, BASE, None).error


def test_finished_lines_cuts_a_torn_last_line(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"line": 1, "response": "a"}\n{"line": 3, "error": "x"}\n{"line": 4, "resp')
    assert finished_lines(out) == {1, 3}
    assert out.read_text().endswith('"x"}\n')
    assert finished_lines(tmp_path / "absent.jsonl") == set()


def test_a_full_queue_is_waited_out_not_reported(tmp_path):
    """One slot and no queue: most of 6 concurrent requests get 503 first; none may end as an error."""
    from tests.daemon import start_daemon

    small = start_daemon(tmp_path / "small", {"LOCALRUN_PARALLEL": "1", "LOCALRUN_MAX_QUEUE": "0"})
    try:
        source = tmp_path / "in.jsonl"
        source.write_text("".join(f'"Say the number {n}."\n' for n in range(6)))
        done = run_cli("batch", "smollm2", str(source), "--max-tokens", "4", "-c", "6", env=small.env())
        assert done.returncode == 0, done.stderr
        assert [("response" in json.loads(line)) for line in done.stdout.splitlines()] == [True] * 6
        metrics = httpx.get(f"{small.url}/metrics").text
        assert 'route="/v1/chat/completions",method="POST",status="503"' in metrics  # the queue really was full
    finally:
        small.stop()
