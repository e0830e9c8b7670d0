"""The real Codex CLI (`@openai/codex`, pinned and installed by .ci/run) against the daemon on the
bundled model, started the way a user starts it: `localrun launch codex -- exec ...`.

Codex runs with a home of its own (never the user's ~/.codex), analytics and update checks off, and
every proxy variable pointing at a closed loopback port with only loopback exempt: anything it tried
to send elsewhere would fail instead of leaving the machine. Its base instructions are replaced by a
short file and its optional tools are switched off, so that the prompt (~1.7k tokens instead of ~6k)
fits SmolLM2 and prefills in seconds.

SmolLM2 never calls a tool on its own under Codex's `tool_choice: auto`. For the tool-using turn it
runs as a model made by `localrun create` from a Modelfile, as a user would make one: temperature 0
and two example turns (MESSAGE) in which the user asks `Run: CMD` and the assistant calls Codex's
`exec_command` tool in the generic tool-call format. The call is the model's own output, parsed by
localrun; Codex runs it and sends its output back in the next request.
"""

from __future__ import annotations

import json
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


def codex_exec(daemon, tmp_path: Path, prompt: str, model: str = "smollm2", instructions: str = INSTRUCTIONS,
               files: dict[str, str] | None = None) -> list[dict]:
    """`codex exec --json` through `localrun launch codex`, in a work folder holding `files`; its JSON events."""
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    for name, text in (files or {}).items():
        (work / name).write_text(text)
    (tmp_path / "instructions.md").write_text(instructions)
    env = {**daemon.env(), "CODEX_HOME": str(home), "HOME": str(tmp_path),
           **{name: "http://127.0.0.1:9" for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                                                      "https_proxy", "all_proxy")},
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    command = [sys.executable, "-m", "localrun", "launch", "codex", model, "--ctx", "4096", "--",
               "exec", "--json", "--ephemeral", "--skip-git-repo-check", "-C", str(work),
               "-c", f"model_instructions_file={tmp_path / 'instructions.md'}", *QUIET, prompt]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def errors(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] in ("error", "turn.failed")
            or (e.get("item", {}).get("type") == "error" and KNOWN_WARNING not in e["item"]["message"])]


def test_codex_completes_a_turn_without_a_protocol_error(daemon, tmp_path):
    """Greedy, so the answer is the same every run: sampled at the default temperature, SmolLM2 now
    and then rambled about Codex's skill list until the context ran out (an incomplete response)."""
    greedy = daemon.create("smollm2-greedy", "FROM smollm2\nPARAMETER temperature 0\n", tmp_path)
    events = codex_exec(daemon, tmp_path, "Say hello.", greedy)
    assert errors(events) == []
    assert [e["item"]["text"] for e in events if e.get("item", {}).get("type") == "agent_message"][0]
    [done] = [e for e in events if e["type"] == "turn.completed"]
    assert 500 < done["usage"]["input_tokens"] < 4096 and done["usage"]["output_tokens"] > 0
    assert "/v1/responses" in daemon.log.read_text()


AGENT_MODELFILE = '''FROM smollm2
PARAMETER temperature 0
MESSAGE user Run: ls
MESSAGE assistant """<tool_call>
{"name": "exec_command", "arguments": {"cmd": "ls"}}
</tool_call>"""
MESSAGE user Run: pwd
MESSAGE assistant """<tool_call>
{"name": "exec_command", "arguments": {"cmd": "pwd"}}
</tool_call>"""
'''


@pytest.fixture(scope="module")
def agent_model(daemon, tmp_path_factory) -> str:
    return daemon.create("codex-smollm2", AGENT_MODELFILE, tmp_path_factory.mktemp("agent"))


def test_a_codex_tool_call_runs_and_its_output_comes_back_to_the_model(daemon, tmp_path, agent_model):
    requests_before = daemon.log.read_text().count("POST /v1/responses")
    events = codex_exec(daemon, tmp_path, "Run: cat note.txt", agent_model,
                        files={"note.txt": "The secret word is marmalade.\n"})
    assert errors(events) == []
    [ran] = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"]
    assert "cat note.txt" in ran["command"] and ran["exit_code"] == 0
    assert "marmalade" in ran["aggregated_output"]  # Codex ran the model's call
    # the word is only in the file: the model read it in the call's output, sent back in the next request
    [answer] = [e["item"]["text"] for e in events if e.get("item", {}).get("type") == "agent_message"]
    assert "marmalade" in answer
    assert daemon.log.read_text().count("POST /v1/responses") - requests_before == 2
