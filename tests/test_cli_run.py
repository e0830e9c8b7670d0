"""`localrun run` through pipes, as shell scripts use it, against the real daemon and model."""

from __future__ import annotations

import json

from tests.cli import run_cli

TINY = ("--max-tokens", "12", "--temperature", "0")


def test_piped_stdin_and_prompt_give_plain_text(daemon):
    done = run_cli("run", "smollm2", "Summarize this in one sentence.", *TINY, env=daemon.env(),
                   input="The cat sat on the mat all afternoon, watching birds.\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() and "\x1b" not in done.stdout
    assert done.stdout.endswith("\n")
    assert "\x1b" not in done.stderr and "pulling" not in done.stderr  # present model: a silent pull


def test_piped_stdin_alone_is_the_prompt(daemon):
    done = run_cli("run", "smollm2", *TINY, env=daemon.env(), input="What is 2+2?")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_json_prints_the_full_response_object(daemon):
    done = run_cli("run", "smollm2", "Say hi.", "--json", "--max-tokens", "5", env=daemon.env())
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["object"] == "chat.completion"
    assert data["choices"][0]["message"]["content"]
    assert 0 < data["usage"]["completion_tokens"] <= 5


def test_seed_makes_answers_repeatable(daemon):
    args = ("run", "smollm2", "Tell me a fact.", "--temperature", "1.2", "--seed", "42", "--max-tokens", "10")
    first, second = (run_cli(*args, env=daemon.env()) for _ in range(2))
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout and first.stdout.strip()


def test_verbose_prints_ollama_stats_on_stderr(daemon):
    done = run_cli("run", "smollm2", "Hi", *TINY, "--verbose", env=daemon.env())
    assert done.returncode == 0, done.stderr
    for name in ("total duration", "load duration", "prompt eval count", "prompt eval rate", "eval count",
                 "eval duration", "eval rate"):
        assert f"{name}:" in done.stderr
    request_id = done.stderr.split("request id:", 1)[1].split()[0]  # the id its `localrun logs` line ends with
    assert f" id={request_id}\n" in daemon.log.read_text()
    assert "eval count:" not in done.stdout


def test_explicit_host_url(daemon):
    done = run_cli("run", "smollm2", "Hi", *TINY, "--host", daemon.url + "/v1", env=daemon.env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_unknown_model_is_one_error_line(daemon):
    done = run_cli("run", "no-such-model-xyz", "hi", env=daemon.env())
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == ""


def test_usage_errors_exit_2(daemon):
    empty = run_cli("run", "smollm2", env=daemon.env(), input="")
    assert empty.returncode == 2 and empty.stderr.startswith("error: no prompt")
    bad = run_cli("run", "smollm2", "hi", "--format", "xml", env=daemon.env())
    assert bad.returncode == 2 and "--format" in bad.stderr
    typo = run_cli("run", "smollm2", "hi", "--max-tokens", "many", env=daemon.env())
    assert typo.returncode == 2


def test_a_blank_prompt_is_refused_like_an_empty_one(daemon):
    for prompt in ("", "   ", "\n\t"):
        done = run_cli("run", "smollm2", prompt, env=daemon.env())
        assert done.returncode == 2 and done.stdout == "", prompt
        assert done.stderr in ("error: no prompt: give one as arguments or on stdin\n", "error: the prompt is blank\n")


def test_json_cut_off_by_max_tokens_fails_after_printing_it(daemon):
    done = run_cli("run", "smollm2", "List three colours as a JSON object.", "--format", "json", "--max-tokens", "3",
                   env=daemon.env())
    assert done.returncode == 1 and done.stdout.strip()  # what came is shown, and the script learns it is cut
    assert done.stderr == "error: the answer was cut off by --max-tokens 3, so its JSON is incomplete; allow more " \
                          "tokens\n"
    whole = run_cli("run", "smollm2", 'Reply with {"greeting": "hi"} as JSON.', "--format", "json", "--max-tokens",
                    "200", "--temperature", "0", env=daemon.env())  # greedy: a sampled answer may ramble past 200
    assert whole.returncode == 0, whole.stderr
    json.loads(whole.stdout)


def test_unreachable_remote_host_is_one_error_line():
    done = run_cli("run", "smollm2", "hi", "--host", "http://192.0.2.1:9", timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1


def test_ctrl_c_stops_a_streaming_answer(daemon):
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "localrun", "run", "smollm2", "Write a long story about a dragon.",
                             "--max-tokens", "2000"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=daemon.env())
    assert proc.stdout.read(1)  # the answer is streaming
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and b"Traceback" not in err


def test_a_reader_that_leaves_ends_the_answer_quietly(daemon):
    """`localrun run ... | head -c 1`: exit 141 like a Unix tool on SIGPIPE, no error text."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "localrun", "run", "smollm2", "Write a long story about a dragon.",
                             "--max-tokens", "2000"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=daemon.env())
    assert proc.stdout.read(1)
    proc.stdout.close()
    assert proc.wait(30) == 141
    assert proc.stderr.read() == b""
