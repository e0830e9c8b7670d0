"""The interactive chat of `localrun chat` and `localrun run` on a terminal.

A `ChatSession` holds the conversation and its settings; `repl()` reads messages (multi-line between
triple quotes, history in `data_dir()/chat_history`) and hands each to `ask()` or, for a slash
command, to `command()`. Ctrl-C while an answer streams closes the stream (the daemon cancels the
generation) and keeps the session, the question and the answer so far; Ctrl-C at the prompt clears the
line; Ctrl-D or /bye leaves. A slash command that fails says why in one line and the chat goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from localrun.api_types import ShowResponse
from localrun.cli.format import WordWrap
from localrun.cli.thinking import ThinkingView, shows_thinking
from localrun.cli.generation import (cut_json, ensure_model, ensure_on_server, print_stats, print_stream,
                                     until_first_text)
from localrun.client import Client, GenerateOptions
from localrun.client.types import ALIASES
from localrun.errors import LocalrunError, UsageError

FRAME_S = 0.125  # Markdown is re-rendered at most this often while an answer streams

HELP = """Available commands:
  /set parameter NAME VALUE  Set a sampling parameter (temperature, top_p, top_k, min_p, seed,
                             max_tokens, num_ctx, repeat_penalty, stop, speculative)
  /set system TEXT           Set the system message
  /set format json           Answer in JSON (/set noformat to undo)
  /set verbose | quiet       Show or hide timing stats after each answer
  /set think | nothink       Thinking models: think or not
  /set hidethinking | showthinking  Hide or show the thinking
  /show info | template | system | parameters
  /clear                     Forget the conversation so far
  /load MODEL                Switch to another model (starts a new conversation)
  /save FILE                 Save the transcript as Markdown
  /bye                       Leave (or Ctrl-D)
  /help, /?                  This help

Use \"\"\" to begin and end a multi-line message. Ctrl-C stops an answer."""


@dataclass
class ChatSession:
    client: Client
    model: str
    options: GenerateOptions = field(default_factory=GenerateOptions)
    system: str | None = None
    markdown: bool = True
    verbose: bool = False
    manage_models: bool = True  # /load pulls into this home's store (false: the server pulls, see targets.py)
    hide_thinking: bool = False
    messages: list[dict[str, str]] = field(default_factory=list)

    # -- one turn -------------------------------------------------------------------------------

    def ask(self, text: str) -> None:
        """Send one user message and stream the answer. A stopped answer is kept as far as it came (with
        its question), as Ollama keeps it; one that failed keeps nothing."""
        turn = {"role": "user", "content": text}
        system = [{"role": "system", "content": self.system}] if self.system else []
        started = time.monotonic()
        stream = self.client.chat(self.model, system + self.messages + [turn], self.options, stream=True)
        terminal = sys.stdout.isatty()
        view = ThinkingView(shows_thinking(self.options.think, self.hide_thinking, terminal), dim=terminal)
        deltas = view.answer(until_first_text(stream.pieces()))
        parts: list[str] = []
        try:
            with _no_echo():
                if self.markdown:
                    _render_markdown(deltas, parts)
                else:
                    _render_plain(deltas, parts)
        except KeyboardInterrupt:
            stream.close()  # drops the connection: the daemon cancels the generation
            partial = "".join(parts)
            say(("" if self.markdown or not partial or partial.endswith("\n") else "\n") + "(answer stopped)")
            if partial:
                self.messages += [turn, {"role": "assistant", "content": partial}]
            return
        self.messages += [turn, {"role": "assistant", "content": "".join(parts)}]
        if cut := cut_json(stream.completion, self.options):
            say(f"warning: {cut}")
        if self.verbose:
            print_stats(stream.completion, time.monotonic() - started)

    # -- slash commands -------------------------------------------------------------------------

    def command(self, line: str) -> bool:
        """Run one slash command; False when the session should end."""
        words = line.split(None, 2)
        name = words[0].lower()
        if name in ("/bye", "/exit", "/quit"):
            return False
        handlers: dict[str, Callable[[list[str]], None]] = {
            "/set": self._set, "/show": self._show, "/clear": self._clear, "/load": self._load,
            "/save": self._save, "/help": self._help, "/?": self._help}
        handler = handlers.get(name)
        if handler is None:
            say(f"Unknown command '{words[0]}'. Type /? for help")
        else:
            handler(words[1:])
        return True

    def _set(self, args: list[str]) -> None:
        what = args[0].lower() if args else ""
        rest = args[1] if len(args) > 1 else ""
        if what == "parameter" and len(rest.split(None, 1)) == 2:
            name, value = rest.split(None, 1)
            options = self.options.merged({name: value})
            if ALIASES.get(name, name) == "num_ctx" and options.num_ctx is not None:
                self._check_context(options.num_ctx)
            self.options = options
            say(f"Set parameter '{name}' to '{value}'")
        elif what == "system" and rest:
            self.system = rest.strip().strip('"')
            say("Set system message.")
        elif what in ("format", "noformat"):
            self.options = self.options.merged({"format": "json" if what == "format" else None})
            say("Set format to 'json' mode." if what == "format" else "Disabled format.")
        elif what in ("verbose", "quiet"):
            self.verbose = what == "verbose"
            say(f"Set '{what}' mode.")
        elif what in ("think", "nothink"):
            self.options = dataclasses.replace(self.options, think=what == "think")
            say(f"Set '{what}' mode.")
        elif what in ("hidethinking", "showthinking"):
            self.hide_thinking = what == "hidethinking"
            say(f"Set '{what}' mode.")
        else:
            say("Usage: /set parameter NAME VALUE | /set system TEXT | /set format json | /set verbose | "
                "/set think")

    def _check_context(self, num_ctx: int) -> None:
        """Refuse a context longer than the model was trained for now, not on every message after it.
        A server that does not tell (no /api/show) is left to answer for itself."""
        try:
            limit = self.client.trained_context(self.model)
        except LocalrunError:
            return
        if limit is not None and num_ctx > limit:
            raise UsageError(f"num_ctx: {self.model} supports at most {limit} tokens of context, not {num_ctx}")

    def _show(self, args: list[str]) -> None:
        what = args[0].lower() if args else ""
        if what == "system":
            say(self.system or "No system message was specified.")
        elif what == "parameters":
            body = self.options.to_body()
            say("\n".join(f"{k:<16}{v}" for k, v in body.items()) or "No parameters were set.")
        elif what == "info":
            say("\n".join(info_lines(self.client.show(self.model))))
        elif what == "template":
            say(self.client.show(self.model).template or "No template was specified.")
        else:
            say("Usage: /show info | template | system | parameters")

    def _clear(self, args: list[str]) -> None:
        self.messages.clear()
        say("Cleared session context")

    def _load(self, args: list[str]) -> None:
        if not args:
            say("Usage: /load MODEL")
            return
        model = ensure_model(args[0]) if self.manage_models else ensure_on_server(self.client, args[0])
        self.model = model
        self.messages.clear()
        say(f"Loading model '{model}'")

    def _save(self, args: list[str]) -> None:
        if not args:
            say("Usage: /save FILE")
            return
        path = Path(" ".join(args)).expanduser()
        try:
            path.write_text(transcript(self.model, self.system, self.messages), encoding="utf-8")
        except OSError as e:
            raise LocalrunError(f"cannot save to {path}: {e.strerror or e}") from None
        say(f"Saved the transcript to {path}")

    def _help(self, args: list[str]) -> None:
        say(HELP)


def transcript(model: str, system: str | None, messages: list[dict[str, str]]) -> str:
    """The conversation as Markdown, one heading per turn."""
    parts = [f"# Chat with {model} ({datetime.now():%Y-%m-%d %H:%M})\n"]
    if system:
        parts.append(f"## System\n\n{system}\n")
    parts += [f"## {m['role'].capitalize()}\n\n{m['content']}\n" for m in messages]
    return "\n".join(parts)


def info_lines(show: ShowResponse) -> list[str]:
    """Ollama's `/show info` block from an `/api/show` answer."""
    rows = [("architecture", show.architecture), ("parameters", show.details.parameter_size),
            ("context length", show.context_length or ""), ("embedding length", show.embedding_length or ""),
            ("quantization", show.details.quantization_level)]
    lines = ["  Model"] + [f"    {name:<20}{value}" for name, value in rows if value != ""]
    if show.license:
        lines += ["", "  License", f"    {show.license.splitlines()[0]}"]
    return lines


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _render_plain(deltas: Iterator[str], parts: list[str]) -> None:
    """The answer as it streams into `parts`; on a terminal, lines break at word boundaries."""
    wrap = WordWrap(shutil.get_terminal_size().columns) if sys.stdout.isatty() else None

    def shown() -> Iterator[str]:
        for delta in deltas:
            parts.append(delta)
            yield wrap.feed(delta) if wrap else delta
        if wrap:
            yield wrap.finish()

    print_stream(shown())
    sys.stdout.write("\n" if "".join(parts).endswith("\n") else "\n\n")  # a blank line after each answer
    sys.stdout.flush()


def _render_markdown(deltas: Iterator[str], parts: list[str]) -> None:
    """Re-render the answer so far as Markdown while it streams into `parts` (rich Live, a few frames a
    second). Frames are drawn here, not by Live's refresh thread, and a Ctrl-C waits for the frame being
    drawn: a frame cut in half was drawn again below itself."""
    from rich.console import Console
    from rich.live import Live
    from rich.markdown import Markdown

    parts.append(next(deltas, ""))  # the spinner and the live answer must not share the screen
    live = Live(Markdown("".join(parts)), console=Console(), auto_refresh=False, vertical_overflow="visible")
    with _whole_frames() as frame:
        with frame():
            live.start(refresh=True)
        try:
            drawn = time.monotonic()
            for delta in deltas:
                parts.append(delta)
                if time.monotonic() - drawn >= FRAME_S:
                    with frame():
                        live.update(Markdown("".join(parts)), refresh=True)
                    drawn = time.monotonic()
        finally:
            with frame():
                live.update(Markdown("".join(parts)))
                live.stop()  # draws the last frame once, whole
    sys.stdout.write("\n")


@contextlib.contextmanager
def _no_echo() -> Iterator[None]:
    """The terminal does not echo what is typed while an answer is drawn. Its "^C" landed at the cursor,
    which after a full-width line of the live Markdown sits at the right edge: the echo wrapped to a
    new line, and the last frame was drawn again on it. Typed text is kept for the next prompt."""
    try:
        import termios
    except ImportError:  # Windows: no termios, nothing to do
        yield
        return
    fd = sys.stdin.fileno() if sys.stdin.isatty() else -1
    if fd < 0:
        yield
        return
    saved = termios.tcgetattr(fd)
    quiet = list(saved)
    quiet[3] &= ~(termios.ECHO | termios.ECHOCTL)  # lflags
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


@contextlib.contextmanager
def _whole_frames() -> Iterator[Callable[[], contextlib.AbstractContextManager[None]]]:
    """Ctrl-C (SIGINT) raises KeyboardInterrupt at once, except inside `frame()`: there it is held until
    the frame is drawn."""
    state = {"drawing": False, "pending": False}

    def on_sigint(signum: int, frame: Any) -> None:
        if not state["drawing"]:
            raise KeyboardInterrupt
        state["pending"] = True

    @contextlib.contextmanager
    def drawing() -> Iterator[None]:
        state["drawing"] = True
        try:
            yield
        finally:
            state["drawing"] = False
        if state["pending"]:
            state["pending"] = False
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield drawing
    finally:
        signal.signal(signal.SIGINT, previous)


# -- reading input --------------------------------------------------------------------------------

def read_message(read_line: Callable[[str], str]) -> str:
    """One message: a line, or the lines between an opening and a closing triple quote."""
    line = read_line(">>> ")
    if not line.lstrip().startswith('"""'):
        return line
    text, lines = line.lstrip()[3:], []
    while not text.rstrip().endswith('"""'):
        lines.append(text)
        text = read_line("... ")
    lines.append(text.rstrip()[:-3])
    return "\n".join(lines).strip("\n")


def line_reader() -> Callable[[str], str]:
    """prompt_toolkit with persistent history on a terminal; on a pipe, lines without prompts."""
    if not sys.stdin.isatty():
        return lambda prompt: input()
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory

    from localrun.paths import data_dir

    data_dir().mkdir(parents=True, exist_ok=True)
    session: PromptSession = PromptSession(history=FileHistory(str(data_dir() / "chat_history")),
                                           placeholder="Send a message (/? for help)")
    return lambda prompt: session.prompt(prompt)


def repl(session: ChatSession) -> None:
    """Read, answer, repeat until /bye or Ctrl-D. Ctrl-C anywhere but in an answer (at the prompt, in a
    slash command such as a /load that pulls, between the two) comes back to the prompt."""
    read_line = line_reader()
    while True:
        try:
            if not _turn(session, read_line):
                return
        except KeyboardInterrupt:
            say("Use Ctrl-D or /bye to exit.")
        except EOFError:
            say("")
            return
        except LocalrunError as e:
            say(f"error: {e.message}")


def _turn(session: ChatSession, read_line: Callable[[str], str]) -> bool:
    """One message or slash command; False when the session should end."""
    text = read_message(read_line).strip()
    if text.startswith("/"):
        return session.command(text)
    if text:
        session.ask(text)
    return True


__all__ = ["ChatSession", "repl", "read_message", "info_lines", "transcript", "HELP"]
