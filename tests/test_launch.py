"""`localrun launch claude` and `launch codex` as a user runs them: the real CLI against the real daemon,
with a stand-in `claude` (or `codex`) program on PATH that records the environment and arguments it got."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from localrun.cli.launch_commands import claude_env, exports, window_env
from tests.cli import run_cli

TIERS = ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
         "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL")


def fake_program(bin_dir: Path, name: str, record: Path) -> None:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    program = f"import json, os, sys; json.dump({{'env': dict(os.environ), 'argv': sys.argv[1:]}}, open({str(record)!r}, 'w'))"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{program}" "$@"\n')
    script.chmod(0o755)


def test_launch_execs_claude_pointed_at_the_daemon(daemon, tmp_path):
    record = tmp_path / "record.json"
    fake_program(tmp_path / "bin", "claude", record)
    env = {**daemon.env(), "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "ANTHROPIC_API_KEY": "sk-real"}
    result = run_cli("launch", "claude", "smollm2", "--min-context", "8192", "--", "-p", "hello there", env=env)
    assert result.returncode == 0, result.stderr
    seen = json.loads(record.read_text())
    assert seen["argv"] == ["-p", "hello there"]
    got = seen["env"]
    assert got["ANTHROPIC_BASE_URL"] == daemon.url
    assert got["ANTHROPIC_API_KEY"] == "" and got["ANTHROPIC_AUTH_TOKEN"]
    assert {got[name] for name in TIERS} == {"smollm2:135m"}
    assert got["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"
    assert got["LOCALRUN_HOME"] == str(daemon.home)  # the rest of the environment is kept
    # loaded with all SmolLM2 was trained for, and Claude Code is told so
    assert [m["context_length"] for m in httpx.get(f"{daemon.url}/api/ps", timeout=10).json()["models"]] == [8192]
    assert got["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "100000" and got["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"] == "6.98"


def test_a_model_that_cannot_hold_claude_codes_prompt_is_refused_before_claude_starts(daemon, tmp_path):
    record = tmp_path / "record.json"
    fake_program(tmp_path / "bin", "claude", record)
    env = {**daemon.env(), "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    result = run_cli("launch", "claude", "smollm2", env=env)
    assert result.returncode == 2 and not record.exists()
    assert result.stderr.startswith("error: smollm2:135m holds 8192 tokens per request (its trained length), but "
                                    "Claude Code needs about 32768"), result.stderr
    assert "README" in result.stderr and "--min-context" in result.stderr


@pytest.mark.parametrize("window, threshold", [(32768, 27648), (65536, 55296), (8192, 6912)])
def test_claude_code_is_told_a_window_under_100k_through_the_compaction_percentage(window, threshold):
    """Claude Code 2.1.328 compacts at min(W * pct / 100, W - 13000) tokens, W = max(window, 100k) less
    the output limit (at most 20000): the percentage puts that a little under window - output."""
    env = window_env(window)
    output = int(env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"])
    w = int(env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"]) - min(output, 20000)
    compacts_at = min(w * float(env["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"]) // 100, w - 13000)
    assert threshold - 16 <= compacts_at <= threshold and compacts_at + output <= window
    big = window_env(131072)
    assert big["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "131072" and "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE" not in big


def test_print_writes_exports_a_shell_can_eval(daemon):
    result = run_cli("launch", "claude", "smollm2", "--print", "--ctx", "8192", "--min-context", "8192",
                     env={**daemon.env(), "LOCALRUN_API_KEY": "k1,k2"})
    assert result.returncode == 0, result.stderr
    shell = subprocess.run(["sh", "-c", result.stdout + 'printf "%s|%s|%s" "$ANTHROPIC_BASE_URL" '
                                                        '"$ANTHROPIC_AUTH_TOKEN" "$ANTHROPIC_DEFAULT_HAIKU_MODEL"'],
                           capture_output=True, text=True, check=True)
    assert shell.stdout == f"{daemon.url}|k1|smollm2:135m"


def test_without_claude_installed_it_prints_the_exports_and_says_how_to_install(daemon, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**daemon.env(), "PATH": str(empty)}
    result = subprocess.run([sys.executable, "-m", "localrun", "launch", "claude", "smollm2", "--min-context", "8192"],
                            env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "claude is not installed" in result.stderr and "npm install" in result.stderr
    assert f"export ANTHROPIC_BASE_URL={daemon.url}\n" in result.stdout


def test_unknown_model_is_one_error_line(daemon):
    result = run_cli("launch", "claude", "no-such-model-xyz", "--print", env=daemon.env())
    assert result.returncode != 0
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1


def test_exports_quote_values_for_the_shell():
    text = exports(claude_env("http://127.0.0.1:1", "it's", ""))
    assert "export ANTHROPIC_MODEL='it'\"'\"'s'\n" in text
    assert "export ANTHROPIC_API_KEY=''\n" in text


def codex_config(argv: list[str]) -> dict[str, str]:
    """The `-c key=value` pairs of a codex command line."""
    return dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "-c")


def test_launch_codex_runs_codex_with_a_responses_provider_and_the_models_context(daemon, tmp_path):
    record = tmp_path / "record.json"
    fake_program(tmp_path / "bin", "codex", record)
    env = {**daemon.env(), "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    result = run_cli("launch", "codex", "smollm2", "--", "exec", "hello there", env=env)
    assert result.returncode == 0, result.stderr
    seen = json.loads(record.read_text())
    argv = seen["argv"]
    assert argv[:2] == ["-m", "smollm2:135m"] and argv[-2:] == ["exec", "hello there"]
    config = codex_config(argv)
    assert config["model_provider"] == "localrun" and config["model_context_window"] == "8192"  # SmolLM2's
    provider = config["model_providers.localrun"]
    assert f'base_url="{daemon.url}/v1"' in provider and 'wire_api="responses"' in provider
    assert 'query_params={num_ctx="8192"}' in provider and "env_key" not in provider
    assert not (tmp_path / ".codex").exists()  # nothing written to the user's Codex home


def test_launch_codex_print_shows_the_command_and_the_key_it_needs(daemon):
    env = {**daemon.env(), "LOCALRUN_API_KEY": "k1,k2"}
    result = run_cli("launch", "codex", "smollm2", "--ctx", "2048", "--print", "--", "exec", "hi", env=env)
    assert result.returncode == 0, result.stderr
    export, command = result.stdout.splitlines()
    assert export == "export LOCALRUN_CODEX_API_KEY=k1"
    argv = shlex.split(command)
    assert argv[0] == "codex" and argv[-2:] == ["exec", "hi"]
    config = codex_config(argv)
    assert config["model_context_window"] == "2048" and 'env_key="LOCALRUN_CODEX_API_KEY"' in \
        config["model_providers.localrun"]


def test_launch_codex_refuses_a_context_beyond_the_models(daemon):
    result = run_cli("launch", "codex", "smollm2", "--ctx", "100000", "--print", env=daemon.env())
    assert result.returncode == 2 and result.stderr.startswith("error: --ctx: ")
