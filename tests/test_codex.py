"""The real Codex CLI (`@openai/codex`, pinned and installed by .ci/run) against the daemon on the
bundled model, started the way a user starts it: `localrun launch codex -- exec ...`.

Codex runs with a home of its own (never the user's ~/.codex), analytics and update checks off, and
every proxy variable pointing at a closed loopback port with only loopback exempt: anything it tried
to send elsewhere would fail instead of leaving the machine. Its base instructions are replaced by a
short file and its optional tools are switched off, so that the prompt (~1.7k tokens instead of ~6k)
fits SmolLM2 and prefills in seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("codex") is None,
                                reason="the Codex CLI is not installed (.ci/run installs @openai/codex)")

INSTRUCTIONS = "You are a coding agent in a terminal. Answer briefly."
OFF = ("goals", "multi_agent", "apps", "plugins", "remote_plugin", "view_image", "unified_exec", "skill_search",
       "image_generation")
QUIET = ["-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false", "-c", "web_search=disabled",
         *[arg for feature in OFF for arg in ("--disable", feature)]]
KNOWN_WARNING = "Model metadata for"  # Codex knows no metadata for a local model; it says so and goes on


def codex_exec(daemon, tmp_path: Path, prompt: str, instructions: str = INSTRUCTIONS) -> list[dict]:
    """`codex exec --json` through `localrun launch codex`; its JSON events."""
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (tmp_path / "instructions.md").write_text(instructions)
    env = {**daemon.env(), "CODEX_HOME": str(home), "HOME": str(tmp_path),
           **{name: "http://127.0.0.1:9" for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                                                      "https_proxy", "all_proxy")},
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    command = [sys.executable, "-m", "localrun", "launch", "codex", "smollm2", "--ctx", "4096", "--",
               "exec", "--json", "--ephemeral", "--skip-git-repo-check", "-C", str(work),
               "-c", f"model_instructions_file={tmp_path / 'instructions.md'}", *QUIET, prompt]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def test_codex_completes_a_turn_without_a_protocol_error(daemon, tmp_path):
    events = codex_exec(daemon, tmp_path, "Say hello.")
    errors = [e for e in events if e["type"] in ("error", "turn.failed")
              or (e.get("item", {}).get("type") == "error" and KNOWN_WARNING not in e["item"]["message"])]
    assert errors == []
    assert [e["item"]["text"] for e in events if e.get("item", {}).get("type") == "agent_message"][0]
    [done] = [e for e in events if e["type"] == "turn.completed"]
    assert 500 < done["usage"]["input_tokens"] < 4096 and done["usage"]["output_tokens"] > 0
    assert "/v1/responses" in daemon.log.read_text()
