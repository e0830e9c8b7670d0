"""`localrun batch`: input forms, input order, failed lines kept, resume after an interruption."""

from __future__ import annotations

import json

import httpx
import pytest

from localrun.cli.batch import check_resumable, finished_lines, parse_line, read_jobs
from localrun.client import GenerateOptions
from localrun.errors import UsageError
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
    assert "resuming: 3 of 7 lines already answered" in again.stderr and again.returncode == 1
    resumed = records(out)
    assert [r["line"] for r in resumed] == [1, 2, 3, 4, 6, 7, 8]  # the failed lines asked again, written once
    assert resumed[:3] == got[:3]  # kept, not asked again

    # A line that failed for a passing reason is answered on the next run, in its place.
    # (the line is swapped whole: the answer's text is the model's, and may serialize differently)
    out.write_text("".join(json.dumps({"line": 2, "error": "gone"}) + "\n" if json.loads(line)["line"] == 2 else line
                           for line in out.read_text().splitlines(keepends=True)))
    done = run_cli("batch", "smollm2", str(source), "-o", str(out), "--max-tokens", "6", env=daemon.env())
    assert "resuming: 4 of 7 lines already answered" in done.stderr and done.returncode == 1  # 6 and 7 still fail
    final = records(out)
    assert [r["line"] for r in final] == [1, 2, 3, 4, 6, 7, 8] and final[1]["response"]


def test_an_output_of_another_input_or_model_is_refused(daemon, tmp_path):
    source, other, out = tmp_path / "in.jsonl", tmp_path / "other.jsonl", tmp_path / "out.jsonl"
    source.write_text('"Say one word."\n')
    other.write_text('"Say two words."\n')
    assert run_cli("batch", "smollm2", str(source), "-o", str(out), "--max-tokens", "3",
                   env=daemon.env()).returncode == 0
    before = out.read_bytes()
    mixed = run_cli("batch", "smollm2", str(other), "-o", str(out), env=daemon.env())
    assert mixed.returncode == 2 and mixed.stderr == f"error: {out} holds answers for another input ({source}); " \
                                                      "give another --output, or delete it to start over\n"
    assert out.read_bytes() == before
    foreign = tmp_path / "notes.jsonl"
    foreign.write_text('{"mine": 1}\n')
    refused = run_cli("batch", "smollm2", str(source), "-o", str(foreign), env=daemon.env())
    assert refused.returncode == 2 and "was not written by `localrun batch`" in refused.stderr


def test_a_line_that_is_not_utf8_gets_its_own_error(daemon, tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'"Say one word."\n"caf\xe9"\n{"prompt": "  "}\n')
    done = run_cli("batch", "smollm2", str(source), "--max-tokens", "3", env=daemon.env())
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 1 and [r["line"] for r in lines] == [1, 2, 3] and lines[0]["response"]
    assert lines[1]["error"] == "not UTF-8 text (byte 0xe9 at column 5)" and lines[2]["error"] == "empty prompt"


def test_json_cut_off_by_max_tokens_is_a_failed_line(daemon, tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('"List three colours as a JSON object."\n')
    done = run_cli("batch", "smollm2", str(source), "--format", "json", "--max-tokens", "3", env=daemon.env())
    record = json.loads(done.stdout)
    assert done.returncode == 1 and record["finish_reason"] == "length" and record["response"]
    assert record["error"] == "the answer was cut off by --max-tokens 3, so its JSON is incomplete; allow more tokens"


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
    ('{"prompt": "x", "options": {"temperature": "hot"}}', "needs a float"), ('{"prompt": " "}', "empty prompt"),
    ('""', "empty prompt"),
])
def test_bad_lines_carry_their_error(text, error):
    assert error in parse_line(3, text, BASE, None).error


def test_finished_lines_drops_a_torn_last_line_and_failed_lines(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"line": 1, "response": "a"}\n{"line": 3, "error": "x"}\n{"line": 2, "response": "b"}\n'
                   '{"line": 4, "resp')
    assert finished_lines(out) == {1, 2}
    assert out.read_text() == '{"line": 1, "response": "a"}\n{"line": 2, "response": "b"}\n'
    assert finished_lines(tmp_path / "absent.jsonl") == set()


def test_resume_checks_the_stamp_beside_the_output(tmp_path):
    out = tmp_path / "out.jsonl"
    stamp = {"input": "a.jsonl", "sha256": "1" * 64, "model": "smollm2:135m"}
    check_resumable(out, stamp)  # a new output: the stamp is written first
    assert json.loads((tmp_path / "out.jsonl.batch").read_text()) == stamp
    out.write_text('{"line": 1, "response": "a"}\n')
    check_resumable(out, stamp)
    with pytest.raises(UsageError, match=r"holds answers for another model \(smollm2:135m\)"):
        check_resumable(out, {**stamp, "model": "gemma3:270m"})
    with pytest.raises(UsageError, match=r"holds answers for another input \(a.jsonl\)"):
        check_resumable(out, {**stamp, "sha256": "2" * 64})


def test_read_jobs_hashes_the_bytes_and_numbers_every_line(tmp_path):
    import hashlib

    source = tmp_path / "in.jsonl"
    source.write_bytes(b'"a"\r\n\n\xff\xfe\n"b"')
    jobs, sha256 = read_jobs(source, BASE, None)
    assert sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert [(j.line, j.error) for j in jobs] == [(1, None), (3, "not UTF-8 text (byte 0xff at column 1)"), (4, None)]


def test_a_full_queue_is_waited_out_not_reported(tmp_path):
    """One slot and no queue: 3 concurrent requests, two of which get 503 first; none may end as an error."""
    from tests.daemon import start_daemon

    small = start_daemon(tmp_path / "small", {"LOCALRUN_PARALLEL": "1", "LOCALRUN_MAX_QUEUE": "0"})
    try:
        source = tmp_path / "in.jsonl"
        source.write_text("".join(f'"Say the number {n}."\n' for n in range(3)))
        done = run_cli("batch", "smollm2", str(source), "--max-tokens", "4", "-c", "3", env=small.env())
        assert done.returncode == 0, done.stderr
        assert [("response" in json.loads(line)) for line in done.stdout.splitlines()] == [True] * 3
        metrics = httpx.get(f"{small.url}/metrics").text
        assert 'route="/v1/chat/completions",method="POST",status="503"' in metrics  # the queue really was full
    finally:
        small.stop()
