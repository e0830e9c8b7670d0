"""The real Claude Code (`@anthropic-ai/claude-code`, pinned and installed by .ci/run) against the
daemon on the bundled model, started the way a user starts it: `localrun launch claude MODEL -- -p ...`.

Claude Code runs with a home of its own (never the user's ~/.claude), nonessential traffic, telemetry
and the updater off, and every proxy variable pointing at a closed loopback port with only loopback
exempt, so anything it tried to send elsewhere would fail instead of leaving the machine. Its ~23k-token
default prompt is replaced by a one-line `--system-prompt` and its built-in tools are off (`--tools ""`),
so the request is a few hundred tokens and `launch claude --min-context` lets SmolLM2's context hold it.

Claude Code sets no temperature and asks for up to 32000 tokens, and SmolLM2 at its default temperature
rambles until its context is full (a minute and more on two cores, then Claude Code asks it to go on).
Each run caps Claude Code's output at 256 tokens (CLAUDE_CODE_MAX_OUTPUT_TOKENS: once, in CI, an attempt
of the Read test ran past its 150 s) and turns off its retries, whose backoff would hide a 5xx behind a
timeout (CLAUDE_CODE_MAX_RETRIES=0). The test models are made by `localrun create` from Modelfiles, as a
user would make them: one gives short answers (temperature 0, the end of the first sentence or line as a
stop sequence); the other is taught by two example turns (MESSAGE) to call Claude Code's Read tool when
asked `Read: PATH`, since SmolLM2 never calls a tool on its own, and ends its answer at a blank line
(its answer to the file once rambled on to the output limit, and Claude Code asked it to go on, past the
test's timeout; the stop strings are newlines inside triple quotes, since in quotes `\\n` is a backslash
and an n). The call is the model's own output, parsed by localrun; Claude Code reads the file and sends
it back as a tool_result in the next request.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("claude") is None,
                                reason="Claude Code is not installed (.ci/run installs @anthropic-ai/claude-code)")

TERSE_MODELFILE = 'FROM smollm2\nPARAMETER temperature 0\nPARAMETER stop .\nPARAMETER stop """\n"""\n'
QUIET = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
         "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "256", "CLAUDE_CODE_MAX_RETRIES": "0",
         **{name: "http://127.0.0.1:9" for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                                                    "https_proxy", "all_proxy")},
         "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
READER_MODELFILE = '''FROM smollm2
PARAMETER temperature 0
PARAMETER stop """

"""
MESSAGE user Read: /home/user/notes.md
MESSAGE assistant """<tool_call>
{"name": "Read", "arguments": {"file_path": "/home/user/notes.md"}}
</tool_call>"""
MESSAGE user Read: /etc/hostname
MESSAGE assistant """<tool_call>
{"name": "Read", "arguments": {"file_path": "/etc/hostname"}}
</tool_call>"""
'''


@pytest.fixture(scope="module")
def terse_model(daemon, tmp_path_factory) -> str:
    return daemon.create("claude-smollm2", TERSE_MODELFILE, tmp_path_factory.mktemp("claude-smollm2"))


@pytest.fixture(scope="module")
def reader_model(daemon, tmp_path_factory) -> str:
    return daemon.create("claude-reader", READER_MODELFILE, tmp_path_factory.mktemp("claude-reader"))


def claude_print(daemon, tmp_path: Path, model: str, prompt: str, *args: str,
                 files: dict[str, str] | None = None) -> dict:
    """`claude -p PROMPT --output-format json` through `localrun launch claude`, in a work folder
    holding `files`; its result object."""
    work = tmp_path / "work"
    work.mkdir()
    for name, text in (files or {}).items():
        (work / name).write_text(text)
    env = {**daemon.env(), "HOME": str(tmp_path), **QUIET}
    command = [sys.executable, "-m", "localrun", "launch", "claude", model, "--ctx", "4096", "--min-context", "2048",
               "--", "-p", prompt, "--system-prompt", "You are terse.", "--output-format", "json",
               "--no-session-persistence", "--strict-mcp-config", *args]
    logged = len(daemon.log.read_text())
    try:
        result = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True, timeout=150,
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail("Claude Code ran past 150 s; the daemon logged:\n" + daemon.log.read_text()[logged:][-3000:])
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    return json.loads(result.stdout)


def test_claude_code_answers_a_prompt_through_localrun(daemon, tmp_path, terse_model):
    logged = len(daemon.log.read_text())
    out = claude_print(daemon, tmp_path, terse_model, "Say hello.", "--tools", "")
    assert (out["type"], out["subtype"], out["is_error"], out["num_turns"]) == ("result", "success", False, 1)
    assert out["result"] and out["stop_reason"] in ("end_turn", "stop_sequence")
    assert list(out["modelUsage"]) == [terse_model]
    # the answer Claude Code printed is the one the daemon generated for it
    assert generated(daemon, terse_model, logged) == [out["usage"]["output_tokens"]]


def generated(daemon, model: str, logged: int) -> list[int]:
    """Tokens the daemon generated for each /v1/messages request of `model` since `logged` bytes of its log."""
    line = rf"POST /v1/messages 200 model={re.escape(model)} prompt=\d+ generated=(\d+)"
    return [int(n) for n in re.findall(line, daemon.log.read_text()[logged:])]


@pytest.mark.timeout(3 * 150 + 30)
def test_claude_codes_read_call_runs_and_the_file_comes_back_to_the_model(daemon, tmp_path, reader_model):
    """Whether the tiny model imitates its examples depends on the whole prompt, which holds the file's
    path and the environment block Claude Code adds after it (date, folder): up to three file names are
    tried, and the first turn in which the model calls Read must round-trip. A broken round trip fails
    every attempt. (Left free, the model once started the call and repeated `"file_path": ...` until
    Claude Code's output limit, turn after turn; the lazy tool-call grammar now closes such a call.)"""
    for attempt, name in enumerate(("note.txt", "notes.md", "secret.txt")):
        logged = len(daemon.log.read_text())
        folder = tmp_path / f"attempt{attempt}"
        folder.mkdir()
        note = folder / "work" / name
        out = claude_print(daemon, folder, reader_model, f"Read: {note}", "--tools", "Read",
                           files={name: "The secret word is marmalade.\n"})
        assert (out["subtype"], out["is_error"], out["permission_denials"]) == ("success", False, [])
        if out["num_turns"] == 2:
            break
    assert out["num_turns"] == 2, "the model never called Read: " + out["result"][:300]
    # the word is only in the file: Claude Code ran the model's Read call and sent the file back to it
    assert "marmalade" in out["result"]
    assert sum(generated(daemon, reader_model, logged)) == out["usage"]["output_tokens"]
