"""Thinking in the terminal, as `ollama run` shows it: the bundled SmolLM2 under DeepSeek R1's real chat
template (made with /api/create, so its family is DeepSeek's), whose prompt opens a thought that a
reasoning budget closes; then the answer follows. Through the real CLI, piped and on a pseudo-terminal."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pexpect
import pytest

from localrun.cli.thinking import CLOSE, DIM, OPEN, ThinkingView, shows_thinking
from localrun.client.client import ANSWER, THINKING
from tests.cli import run_cli

MODEL = "r1-cli"
TEMPLATE = Path(__file__).parent / "data" / "templates" / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
ASK = ["What is the capital of France?", "--temperature", "0", "--max-tokens", "30", "--think-budget", "6"]


@pytest.mark.parametrize("think, hide, terminal, shown", [
    (None, False, True, True), (None, True, True, False), (True, False, True, True),
    (None, False, False, False), (True, False, False, True), (True, True, False, False), (False, False, False, False),
])
def test_thinking_shows_on_a_terminal_and_on_a_pipe_only_when_asked(think, hide, terminal, shown):
    assert shows_thinking(think, hide, terminal) is shown


def test_the_view_frames_the_thinking_and_passes_the_answer_on(capsys):
    pieces = [(THINKING, "Hm, "), (THINKING, "France."), (ANSWER, "Paris"), (ANSWER, ".")]
    assert "".join(ThinkingView(show=True, dim=False).answer(pieces)) == "Paris."
    assert capsys.readouterr().out == OPEN + "Hm, France." + CLOSE
    assert "".join(ThinkingView(show=False, dim=False).answer(pieces)) == "Paris."
    assert capsys.readouterr().out == ""
    list(ThinkingView(show=True, dim=True).answer(pieces[:2]))  # a thought that never ends is still closed
    assert capsys.readouterr().out == DIM + OPEN + "Hm, France." + CLOSE + "\x1b[0m"


@pytest.fixture(scope="module")
def model(daemon) -> str:
    reply = httpx.post(f"{daemon.url}/api/create", timeout=60, json={
        "model": MODEL, "from": "smollm2", "template": TEMPLATE.read_text(), "stream": False})
    assert reply.status_code == 200, reply.text
    return MODEL


def test_piped_output_gets_the_answer_and_the_thinking_only_when_asked(daemon, model):
    plain = run_cli("run", model, *ASK, env=daemon.env())
    assert plain.returncode == 0, plain.stderr
    answer = plain.stdout.strip()
    assert answer and "Thinking" not in plain.stdout  # (the tiny model may imitate </think> in its answer)

    asked = run_cli("run", model, *ASK, "--think", env=daemon.env())
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.startswith(OPEN) and CLOSE in asked.stdout and "\x1b[" not in asked.stdout
    thought, shown_answer = asked.stdout[len(OPEN):].split(CLOSE, 1)
    assert thought.strip() and shown_answer.strip() == answer

    hidden = run_cli("run", model, *ASK, "--think", "--hidethinking", env=daemon.env())
    assert hidden.stdout == plain.stdout


def test_no_think_uses_the_familys_switch(daemon, model):
    off = run_cli("run", model, "What is the capital of France?", "--temperature", "0", "--max-tokens", "12",
                  "--no-think", "--think", env=daemon.env())  # the last flag wins: --think
    assert off.stdout.startswith(OPEN)
    off = run_cli("run", model, "What is the capital of France?", "--temperature", "0", "--max-tokens", "12",
                  "--no-think", env=daemon.env())
    assert off.returncode == 0 and off.stdout.strip() and "Thinking" not in off.stdout


def test_a_terminal_shows_the_thinking_dimmed_before_the_answer(daemon, model):
    child = pexpect.spawn(sys.executable, ["-m", "localrun", "run", model, *ASK], env=daemon.env(), encoding="utf-8",
                          timeout=180, dimensions=(40, 160))
    child.expect(pexpect.EOF)
    out = child.before.replace("\r", "")
    assert DIM + OPEN in out and CLOSE.strip() in out
    assert out.index(CLOSE.strip()) < len(out.rstrip()) - len(CLOSE.strip())  # an answer follows the thought


def test_chat_shows_the_thinking_until_told_to_hide_it(daemon, model):
    from tests.test_cli_chat import answer, spawn

    child = spawn(daemon, "chat", model, "--temperature", "0", "--max-tokens", "30", "--think-budget", "6",
                  "--no-markdown")
    first = answer(child, "What is the capital of France?")
    assert first.index("Thinking...") < first.index("...done thinking.") < len(first) - len("...done thinking.")
    answer(child, "/set hidethinking")
    second = answer(child, "What is the capital of Spain?")
    assert "Thinking" not in second and second
    child.sendline("/bye")
    child.expect(pexpect.EOF)
