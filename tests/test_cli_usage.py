"""Usage as a new user meets it: `-h` and `help`, help text without Python type tags, and every bad
flag or option value answered with one `error:` line and exit 2 before anything starts."""

from __future__ import annotations

import re
import sys

import pytest

from localrun.cli import main
from localrun.client import GenerateOptions
from localrun.errors import UsageError


def run(capsys, monkeypatch, *args: str) -> tuple[int, str, str]:
    """The CLI in-process through `main()` (the real error boundary): (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["localrun", *args])
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exit_info:
        main()
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def one_error_line(err: str) -> str:
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("args, message", [
    (["run"], "error: missing argument 'MODEL' (see `localrun run --help`)"),
    (["pull", "--nope", "x"], "error: no such option: --nope (see `localrun pull --help`)"),
    (["run", "smollm2", "hi", "--max-tokens", "many"], "error: invalid value for '--max-tokens': "),
    (["frobnicate"], "error: no such command 'frobnicate'"),
    (["help", "frobnicate"], "error: no such command: frobnicate (`localrun help` lists them)"),
])
def test_usage_errors_are_one_line(capsys, monkeypatch, args, message):
    code, out, err = run(capsys, monkeypatch, *args)
    assert (code, out) == (2 if args[0] != "help" else 1, "")
    assert one_error_line(err).startswith(message)


@pytest.mark.parametrize("args, message", [
    (["--max-tokens", "0"], "--max-tokens must be 1 or more, or -1 for no limit, got 0"),
    (["--max-tokens", "-5"], "--max-tokens must be 1 or more, or -1 for no limit, got -5"),
    (["--temperature", "-1"], "--temperature must be from 0 to 2, got -1"),
    (["--top-p", "1.5"], "--top-p must be from 0 to 1, got 1.5"),
    (["--ctx-size", "0"], "--ctx-size must be 16 or more, got 0"),
    (["--speculative", "1000"], "--speculative must be from 0 to 64, got 1000"),
    (["--keep-alive", "soon"], "--keep-alive: invalid duration 'soon' (use e.g. 5m, 1h30m, 90s, 300 or -1)"),
    (["--format", "xml"], "--format must be json, got 'xml'"),
])
@pytest.mark.parametrize("command", ["run", "batch"])
def test_bad_option_values_are_usage_errors_before_anything_starts(capsys, monkeypatch, tmp_path, command, args,
                                                                   message):
    monkeypatch.setenv("LOCALRUN_HOST", "127.0.0.1:9")  # nothing may be started or asked
    target = ["hi"] if command == "run" else [str(tmp_path / "in.jsonl")]
    code, out, err = run(capsys, monkeypatch, command, "smollm2", *target, *args)
    assert (code, out) == (2, "") and one_error_line(err) == f"error: {message}\n"


def test_max_tokens_minus_one_means_no_limit():
    assert GenerateOptions(max_tokens=50).merged({"max_tokens": -1}).max_tokens is None
    assert GenerateOptions().merged({"num_predict": "-1"}).to_body() == {}
    with pytest.raises(UsageError, match="option num_ctx must be 16 or more, got 8"):
        GenerateOptions().merged({"num_ctx": 8})
    with pytest.raises(UsageError, match="option seed needs a int"):
        GenerateOptions().merged({"seed": 1.5})


@pytest.mark.parametrize("args, message", [
    (["score", "smollm2", "The sky is", "-o", " blue", "-o", " blue"], "--option given more than once: ' blue'"),
    (["score", "smollm2", "The sky is", "-o", "", "-o", "x"], "--option must not be empty"),
])
def test_score_options_are_checked_in_the_cli(capsys, monkeypatch, args, message):
    monkeypatch.setenv("LOCALRUN_HOST", "127.0.0.1:9")
    code, out, err = run(capsys, monkeypatch, *args)
    assert (code, out) == (2, "") and one_error_line(err) == f"error: {message}\n"


def test_a_negative_log_tail_is_a_usage_error(capsys, monkeypatch):
    code, _, err = run(capsys, monkeypatch, "logs", "-n", "-3")
    assert code == 2 and one_error_line(err) == "error: --tail must be 0 (all) or more, got -3\n"


def test_perplexity_of_an_empty_file_is_a_usage_error(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("LOCALRUN_HOST", "127.0.0.1:9")
    (tmp_path / "empty.txt").write_text("\n \n")
    code, _, err = run(capsys, monkeypatch, "perplexity", "smollm2", str(tmp_path / "empty.txt"))
    assert code == 2 and one_error_line(err) == f"error: {tmp_path / 'empty.txt'} has no text to measure\n"


def test_h_and_help_show_the_same_text(capsys, monkeypatch):
    for command in (["run"], ["launch", "claude"], []):
        code, dash_h, _ = run(capsys, monkeypatch, *command, "-h")
        assert code == 0 and dash_h.startswith(f"Usage: localrun {' '.join(command)}".rstrip() + " ")
        assert run(capsys, monkeypatch, "help", *command)[:2] == (0, dash_h)
    code, out, err = run(capsys, monkeypatch)  # no command: the help, not an error
    assert (code, err) == (0, "") and out.startswith("Usage: localrun [OPTIONS] COMMAND") and "Commands:" in out


def test_help_names_values_as_click_does_and_never_python_types(capsys, monkeypatch):
    for command in ("run", "score", "batch", "show", "logs", "serve", "stop", "cp"):
        _, out, _ = run(capsys, monkeypatch, command, "--help")
        assert not re.search(r"<\w+(\[\w+\])?>|\{\w+\}", out), out  # no <str>, <list[str]>, {model}
    _, out, _ = run(capsys, monkeypatch, "run", "--help")
    assert out.startswith("Usage: localrun run [OPTIONS] MODEL [PROMPT]...\n")
    assert re.search(r"^  --max-tokens INTEGER ", out, re.M) and re.search(r"^  --json  ", out, re.M)
    _, out, _ = run(capsys, monkeypatch, "--help")
    assert re.search(r"^  --version  ", out, re.M)  # a flag: no value shown
