"""Interactive chat through a real pseudo-terminal (pexpect) against the real daemon, plus the
pure parts of a session: multi-line input, slash commands, the transcript."""

from __future__ import annotations

import re
import sys

import pexpect
import pytest

from localrun.api_types import ShowResponse
from localrun.cli.chat import ChatSession, info_lines, read_message, transcript
from localrun.client import GenerateOptions

PROMPT = "\x1b[?2004h"  # prompt_toolkit switches bracketed paste on as each new prompt starts...
READ = "\x1b[?2004l"  # ...and off once the line is entered
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def spawn(daemon, *args: str) -> pexpect.spawn:
    env = {**daemon.env(), "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm"}
    child = pexpect.spawn(sys.executable, ["-m", "localrun", *args], env=env, encoding="utf-8", timeout=180,
                          dimensions=(40, 160))
    child.expect_exact(PROMPT)
    return child


def answer(child: pexpect.spawn, question: str) -> str:
    """Send a message; the visible text printed before the next prompt."""
    child.sendline(question)
    child.expect_exact(PROMPT)
    text = ANSI.sub("", child.before).replace("\r", "")
    return text.split(question, 1)[-1].strip() if question in text else text.strip()


def test_chat_session_on_a_terminal(daemon, tmp_path):
    child = spawn(daemon, "chat", "smollm2", "--no-markdown", "--max-tokens", "20", "--temperature", "0")
    assert answer(child, "What is the capital of France?")

    child.sendline(f"/save {tmp_path}/no/such/dir/chat.md")  # a failed slash command: one line, the chat goes on
    child.expect_exact(f"error: cannot save to {tmp_path}/no/such/dir/chat.md: No such file or directory")
    child.expect_exact(PROMPT)
    child.sendline("/set parameter num_ctx 100000")  # refused when set, not on every message after it
    child.expect_exact("error: num_ctx: smollm2:135m supports at most 8192 tokens of context, not 100000")
    child.expect_exact(PROMPT)

    child.sendline("/set parameter max_tokens 3000")
    child.expect_exact("Set parameter 'max_tokens' to '3000'")
    child.sendline("/set system You are a pirate.")
    child.expect_exact("Set system message.")
    child.sendline("/show system")
    child.expect_exact("You are a pirate.")
    child.expect_exact(PROMPT)

    child.sendline("Tell me a very long story about a dragon and a knight, with many chapters.")
    child.expect_exact(READ)  # what follows is the answer streaming
    child.expect("[A-Za-z]{3}")  # tokens arrive while the answer is still going
    child.sendintr()
    child.expect_exact("(answer stopped)")
    child.expect_exact(PROMPT)
    child.sendline("/set parameter max_tokens 20")
    child.expect_exact(PROMPT)
    assert answer(child, "Say yes.")  # the session (and the daemon) carry on after Ctrl-C
    stopped = tmp_path / "stopped.md"
    child.sendline(f"/save {stopped}")
    child.expect_exact("Saved the transcript")
    child.expect_exact(PROMPT)
    kept = stopped.read_text()  # the stopped question and its answer so far are part of the conversation
    assert "## User\n\nTell me a very long story" in kept
    assert re.search(r"many chapters\.\n\n## Assistant\n\n\S+", kept), kept

    child.sendintr()  # Ctrl-C at the prompt clears the line, does not leave
    child.expect_exact("Use Ctrl-D or /bye to exit.")
    child.sendline("/clear")
    child.expect_exact("Cleared session context")
    child.sendline('"""First line')
    child.sendline('second line"""')
    child.expect_exact(PROMPT)
    child.expect_exact(PROMPT)
    saved = tmp_path / "chat.md"
    child.sendline(f"/save {saved}")
    child.expect_exact("Saved the transcript")
    child.sendline("/nope")
    child.expect_exact("Unknown command '/nope'")
    child.sendline("/bye")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    text = saved.read_text()
    assert "You are a pirate." in text and "## User\n\nFirst line\nsecond line\n" in text
    assert "capital of France" not in text  # /clear forgot it
    assert "capital of France" in (daemon.home / "chat_history").read_text()  # history outlives the session


def test_run_without_prompt_on_a_terminal_chats_and_ctrl_d_leaves(daemon):
    child = spawn(daemon, "run", "smollm2", "--max-tokens", "16")  # Markdown rendering on
    assert answer(child, "Name a color.")
    child.sendline("/show info")
    child.expect("architecture +llama")
    child.sendline("/show template")
    child.expect_exact("<|im_start|>")
    child.sendline("/load no-such-model-xyz")  # an error is one line; the session goes on
    child.expect_exact("error: ")
    child.expect_exact(PROMPT)
    child.sendline("/set parameter temperature hot")
    child.expect_exact("error: option temperature needs a float")
    child.expect_exact(PROMPT)
    child.sendline("/load smollm2:135m")
    child.expect_exact("Loading model 'smollm2:135m'")
    child.expect_exact(PROMPT)
    assert answer(child, "Name a shape.")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_c_in_markdown_draws_the_answer_once_and_keeps_it(daemon, tmp_path):
    """A terminal emulator replays what the chat wrote: after Ctrl-C, each line is on the screen once."""
    import pyte

    screen = pyte.Screen(100, 40)
    stream = pyte.Stream(screen)
    child = pexpect.spawn(sys.executable, ["-m", "localrun", "chat", "smollm2", "--temperature", "0"],
                          env={**daemon.env(), "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm"}, encoding="utf-8",
                          timeout=180, dimensions=(40, 100))
    child.logfile_read = type("Feed", (), {"write": lambda self, text: stream.feed(text), "flush": lambda self: None})()
    child.expect_exact(PROMPT)
    child.sendline("Write a long poem about the sea, in many verses.")
    child.expect_exact(READ)
    child.expect(r"\w+ \w+ \w+ \w+")  # a few words of the answer are on the screen
    child.sendintr()
    child.expect_exact("(answer stopped)")
    child.expect_exact(PROMPT)
    rows = [row.rstrip() for row in screen.display if row.strip()]
    answer_rows = rows[1:rows.index("(answer stopped)")]
    assert rows[0].startswith(">>> Write a long poem") and answer_rows, rows
    assert len(set(answer_rows)) == len(answer_rows), rows  # no line drawn twice
    prompts = [r for r in rows if r.startswith(">>>")]
    assert prompts == [rows[0], rows[-1]], rows  # the question's, and one new prompt after the stop
    child.sendline(f"/save {tmp_path / 'poem.md'}")
    child.expect_exact("Saved the transcript")
    child.sendline("/bye")
    child.expect(pexpect.EOF)
    kept = (tmp_path / "poem.md").read_text()
    assert "## User\n\nWrite a long poem" in kept and "## Assistant\n\n" in kept


# -- pure parts of a session ----------------------------------------------------------------------

def lines(*typed: str):
    it = iter(typed)
    return lambda prompt: next(it)


@pytest.mark.parametrize("typed, message", [
    (["hello"], "hello"),
    (['"""one line"""'], "one line"),
    (['"""', "a", "b", '"""'], "a\nb"),
    (['"""first', '  indented', 'last"""'], "first\n  indented\nlast"),
])
def test_multi_line_messages(typed, message):
    assert read_message(lines(*typed)) == message


def test_slash_commands_change_the_session(capsys, tmp_path):
    session = ChatSession(client=None, model="m", messages=[{"role": "user", "content": "q"}])
    assert session.command("/set parameter temperature 0.2")
    assert session.command("/set parameter num_predict 7")
    assert session.options == GenerateOptions(temperature=0.2, max_tokens=7)
    session.command("/set system  Be brief. ")
    session.command("/set format json")
    assert session.system == "Be brief." and session.options.format == "json"
    session.command("/clear")
    assert session.messages == []
    assert session.command("/bye") is False
    out = capsys.readouterr().out
    assert "Set parameter 'temperature' to '0.2'" in out and "Cleared session context" in out


def test_bad_parameter_is_reported_without_leaving():
    session = ChatSession(client=None, model="m")
    from localrun.errors import UsageError

    with pytest.raises(UsageError, match="needs a float"):
        session.command("/set parameter temperature hot")
    with pytest.raises(UsageError, match="unknown option"):
        session.command("/set parameter colour blue")


@pytest.mark.parametrize("width, text, shown", [
    (10, "The quick brown fox jumps over the lazy dog.", "The quick \nbrown fox \njumps over\nthe lazy \ndog."),
    (8, "a\nbb cc dd", "a\nbb cc dd"),
    (5, "abcdefghijkl xy", "abcde\nfghij\nkl xy"),  # a word longer than a line is cut
])
def test_plain_answers_wrap_at_word_boundaries_while_streaming(width, text, shown):
    from localrun.cli.format import WordWrap

    for step in (1, 3, len(text)):  # however the stream splits the text
        wrap = WordWrap(width)
        out = "".join(wrap.feed(text[i:i + step]) for i in range(0, len(text), step)) + wrap.finish()
        assert out == shown
        assert all(len(line) <= width for line in out.split("\n"))


def test_ctrl_c_in_a_slash_command_comes_back_to_the_prompt(monkeypatch, capsys):
    from localrun.cli import chat

    typed = iter(["/load big-model", "/show system"])

    def read_line(prompt: str) -> str:
        for line in typed:
            return line
        raise EOFError

    def interrupted_pull(args):
        raise KeyboardInterrupt

    session = ChatSession(client=None, model="m")
    monkeypatch.setattr(session, "_load", interrupted_pull)
    monkeypatch.setattr(chat, "line_reader", lambda: read_line)
    chat.repl(session)  # returns at EOF, not with the KeyboardInterrupt
    assert capsys.readouterr().out == "Use Ctrl-D or /bye to exit.\nNo system message was specified.\n\n"


def test_transcript_and_info():
    text = transcript("smollm2", "sys", [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    assert "## System\n\nsys" in text and "## User\n\nhi" in text and "## Assistant\n\nyo" in text
    show = {"details": {"parameter_size": "135M", "quantization_level": "Q4_1", "family": "llama"},
            "model_info": {"general.architecture": "llama", "llama.context_length": 8192}}
    assert info_lines(ShowResponse.from_dict(show)) == ["  Model", "    architecture        llama", "    parameters          135M",
                                "    context length      8192", "    quantization        Q4_1"]


def test_chat_reads_a_script_from_a_pipe(daemon):
    from tests.cli import run_cli

    done = run_cli("chat", "smollm2", "--max-tokens", "6", env=daemon.env(),
                   input='/set system Be brief.\n"""Say\nhello"""\n/show system\n/bye\nnever sent\n')
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert ">>>" not in out and "\x1b" not in out
    assert out.startswith("Set system message.\n") and out.rstrip().endswith("Be brief.")
    assert len(out.splitlines()) >= 4  # the answer sits between the two command replies


def test_verbose_chat_prints_stats_on_stderr(daemon):
    from tests.cli import run_cli

    done = run_cli("chat", "smollm2", "--max-tokens", "4", "--verbose", env=daemon.env(), input="Hi\n")
    assert done.returncode == 0, done.stderr
    assert "eval rate:" in done.stderr and "eval rate:" not in done.stdout
