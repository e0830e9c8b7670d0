"""The real Claude Code (`@anthropic-ai/claude-code`, pinned and installed by .ci/run) against the
daemon on the bundled model, started the way a user starts it: `localrun launch claude MODEL -- -p ...`.

Claude Code runs with a home of its own (never the user's ~/.claude), nonessential traffic, telemetry
and the updater off, and every proxy variable pointing at a closed loopback port with only loopback
exempt, so anything it tried to send elsewhere would fail instead of leaving the machine. Its ~23k-token
default prompt is replaced by a one-line `--system-prompt` and its built-in tools are off (`--tools ""`),
so the request is a few hundred tokens and `launch claude --min-context` lets SmolLM2's context hold it.

Claude Code sets no temperature and lets the model write up to its output limit, and SmolLM2 at its
default temperature rambles to that limit (a minute and more on two cores, then Claude Code asks it
to go on). The test model is made by `localrun create` from a Modelfile that gives short answers:
temperature 0, and the end of the first sentence or line as a stop sequence.
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

TERSE_MODELFILE = 'FROM smollm2\nPARAMETER temperature 0\nPARAMETER stop .\nPARAMETER stop "\\n"\n'
QUIET = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
         "DISABLE_ERROR_REPORTING": "1",
         **{name: "http://127.0.0.1:9" for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                                                    "https_proxy", "all_proxy")},
         "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


@pytest.fixture(scope="module")
def terse_model(daemon, tmp_path_factory) -> str:
    modelfile = tmp_path_factory.mktemp("terse") / "Modelfile"
    modelfile.write_text(TERSE_MODELFILE)
    subprocess.run([sys.executable, "-m", "localrun", "create", "claude-smollm2", "-f", str(modelfile)],
                   env=daemon.env(), check=True, capture_output=True, timeout=120)
    return "claude-smollm2:latest"


def claude_print(daemon, tmp_path: Path, model: str, prompt: str, *args: str) -> dict:
    """`claude -p PROMPT --output-format json` through `localrun launch claude`; its result object."""
    work = tmp_path / "work"
    work.mkdir()
    env = {**daemon.env(), "HOME": str(tmp_path), **QUIET}
    command = [sys.executable, "-m", "localrun", "launch", "claude", model, "--ctx", "4096", "--min-context", "2048",
               "--", "-p", prompt, "--system-prompt", "You are terse.", "--output-format", "json",
               "--no-session-persistence", "--strict-mcp-config", *args]
    result = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    return json.loads(result.stdout)


def test_claude_code_answers_a_prompt_through_localrun(daemon, tmp_path, terse_model):
    logged = len(daemon.log.read_text())
    out = claude_print(daemon, tmp_path, terse_model, "Say hello.", "--tools", "")
    assert (out["type"], out["subtype"], out["is_error"], out["num_turns"]) == ("result", "success", False, 1)
    assert out["result"] and out["stop_reason"] in ("end_turn", "stop_sequence")
    assert list(out["modelUsage"]) == [terse_model]
    # the answer Claude Code printed is the one the daemon generated for it
    [generated] = re.findall(rf"POST /v1/messages 200 model={re.escape(terse_model)} prompt=\d+ generated=(\d+)",
                             daemon.log.read_text()[logged:])
    assert int(generated) == out["usage"]["output_tokens"]
