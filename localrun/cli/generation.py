"""What `run`, `chat` and `batch` share: reaching the model (pull, start the daemon), the options
from flags, and Ollama-style `--verbose` timing stats.

A model is managed locally (pulled into this home's store, served by an auto-started daemon) when the
target is this home's daemon; a server with a store of its own is asked to pull a missing model, and
one without the Ollama API is used as it is (see targets.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Optional, TypeVar

import typer

if TYPE_CHECKING:
    from localrun.client import Client, Completion, GenerateOptions

T = TypeVar("T")

# Options shared by run and chat (Typer reads the metadata; one declaration serves both).
SYSTEM = typer.Option(None, "--system", help="System message.")
TEMPERATURE = typer.Option(None, "--temperature", help="Sampling temperature (0 = greedy).")
TOP_P = typer.Option(None, "--top-p", help="Nucleus sampling threshold.")
SEED = typer.Option(None, "--seed", help="Random seed: the same seed and request give the same answer.")
MAX_TOKENS = typer.Option(None, "--max-tokens", help="Most tokens to generate (-1: no limit).")
CTX_SIZE = typer.Option(None, "--ctx-size", help="Context length for this model, in tokens.")
FORMAT = typer.Option(None, "--format", help="Output format: json.")
KEEP_ALIVE = typer.Option(None, "--keep-alive", help="How long the model stays loaded: 5m, 3600, -1 (forever), 0.")
SPECULATIVE = typer.Option(None, "--speculative",
                           help="Speculative decoding: most tokens drafted per step (0 = off; default: the server's).")
VERBOSE = typer.Option(False, "--verbose", help="Print timing stats on stderr after each answer.")
THINK = typer.Option(None, "--think/--no-think",
                     help="Thinking models: think or not (default: the model's way); --think also shows the "
                          "thinking when the output is piped.")
HIDE_THINKING = typer.Option(False, "--hidethinking", help="Thinking models: do not show the thinking.")
THINK_BUDGET = typer.Option(None, "--think-budget", help="Thinking models: most thinking tokens, then the answer.")
HOST = typer.Option(None, "--host", help="Daemon or any OpenAI-compatible server (URL); default LOCALRUN_HOST.")


def options_from_flags(temperature: Optional[float], top_p: Optional[float], seed: Optional[int],
                       max_tokens: Optional[int], ctx_size: Optional[int], format: Optional[str],
                       keep_alive: Optional[str], speculative: Optional[int], think: Optional[bool] = None,
                       think_budget: Optional[int] = None) -> GenerateOptions:
    """The options the flags give, each checked here: a bad value is a usage error (exit 2) naming its flag,
    not the server's validation text. `--max-tokens -1` means no limit, as Ollama's num_predict -1."""
    from localrun.client import GenerateOptions
    from localrun.client.types import coerce_option
    from localrun.durations import parse_duration
    from localrun.errors import InvalidRequest, UsageError

    if format not in (None, "json"):
        raise UsageError(f"--format must be json, got {format!r}")
    if keep_alive is not None:
        try:
            parse_duration(keep_alive)
        except InvalidRequest as e:
            raise UsageError(f"--keep-alive: {e.message}") from None
    flags = {"--temperature": ("temperature", temperature), "--top-p": ("top_p", top_p), "--seed": ("seed", seed),
             "--max-tokens": ("max_tokens", max_tokens), "--ctx-size": ("num_ctx", ctx_size),
             "--speculative": ("speculative", speculative), "--think-budget": ("reasoning_budget", think_budget)}
    values = {name: coerce_option(name, value, flag) for flag, (name, value) in flags.items()}
    return GenerateOptions(**values, format=format, keep_alive=keep_alive, think=think)


def connect(model: str, host: Optional[str]) -> tuple[Client, str]:
    """A client for `host` with `model` ready: pulled if missing, into this home's store with the daemon
    running, or by the server itself when it has a store of its own (see targets.py)."""
    from localrun.cli import daemon, targets
    from localrun.client import Client
    from localrun.errors import DaemonUnavailable

    target = targets.resolve(host)
    if target.local:
        if target.taken:  # known from the probe just made: no second wait on a program that never answers
            raise DaemonUnavailable(daemon.busy_message(target.address))
        if not target.up:
            daemon.ensure_running(target.address)  # first: a taken port fails fast, before any download
        return Client.from_host(target.address.base_url), ensure_model(model)
    client = Client.from_host(target.address.base_url)
    try:
        return client, ensure_on_server(client, model)
    except BaseException:
        client.close()
        raise


def ensure_model(name: str) -> str:
    """Pull `name` into the store if it is not there (progress on stderr); its canonical name."""
    from localrun.store.store import Store

    reporter = PullReporter()
    try:
        return Store().pull(name, progress=reporter).name
    finally:
        reporter.close()


def ensure_on_server(client: Client, name: str) -> str:
    """Have the server pull `name` if it lacks it (its progress on stderr); `name` as given."""
    from localrun.cli import targets

    reporter = PullReporter()
    try:
        targets.ensure_served(client, name, reporter)
    finally:
        reporter.close()
    return name


class PullReporter:
    """Pull progress on stderr once work happens (a present model pulls silently): the store's
    progress bar on a terminal, one line per step on a pipe."""

    def __init__(self) -> None:
        self._status = ""
        self._bar = None

    def __call__(self, event) -> None:
        if event.status in ("pulling manifest", "success") and not self._status:
            return
        if sys.stderr.isatty():
            if self._bar is None:
                from localrun.cli.store_commands import PullBar

                self._bar = PullBar()
            self._bar(event)
        elif event.status != self._status:
            sys.stderr.write(event.status + "\n")
            sys.stderr.flush()
        self._status = event.status

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


@contextmanager
def reader_may_leave() -> Iterator[None]:
    """A reader that goes away (`| head`) ends the command quietly with 141, as SIGPIPE ends Unix tools;
    leaving the block closes the stream, so the daemon stops generating."""
    try:
        yield
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        raise typer.Exit(141) from None


def until_first_text(deltas: Iterable[T]) -> Iterator[T]:
    """`deltas` (text, or a stream's pieces), with a spinner on a terminal's stderr while the model
    loads and reads the prompt."""
    if not sys.stderr.isatty():
        yield from deltas
        return
    from rich.console import Console

    status = Console(stderr=True).status("", spinner="dots")
    status.start()
    try:
        for delta in deltas:
            status.stop()
            yield delta
    finally:
        status.stop()


def print_stream(deltas: Iterable[str]) -> None:
    """Write streamed text to stdout as it comes. An error after some text first ends the line, so that
    its `error:` line starts a line of its own."""
    from localrun.errors import LocalrunError

    open_line = False
    try:
        for delta in deltas:
            sys.stdout.write(delta)
            sys.stdout.flush()
            open_line = not delta.endswith("\n") if delta else open_line
    except LocalrunError:
        if open_line:
            sys.stdout.write("\n")
            sys.stdout.flush()
        raise


def cut_json(completion: Completion, options: GenerateOptions | None) -> str | None:
    """Why an answer asked for as JSON is not valid JSON: the token limit cut it off; None when it was not."""
    if options is None or options.format != "json" or completion.finish_reason != "length":
        return None
    limit = f"--max-tokens {options.max_tokens}" if options.max_tokens is not None else "the token limit"
    return f"the answer was cut off by {limit}, so its JSON is incomplete; allow more tokens"


def messages_for(prompt: str, system: Optional[str]) -> list[dict]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]


def print_stats(completion: Completion, total_s: float) -> None:
    """Ollama's --verbose block on stderr."""
    sys.stderr.write(format_stats(completion, total_s) + "\n")
    sys.stderr.flush()


def format_stats(completion: Completion, total_s: float) -> str:
    t = completion.timings
    u = completion.usage
    prompt_n = t.prompt_n if t else (u.prompt_tokens if u else 0)
    eval_n = t.predicted_n if t else (u.completion_tokens if u else 0)
    rows = [("total duration", _seconds(total_s))]
    if t:
        rows.append(("load duration", _seconds(t.load_ms / 1000)))
    rows.append(("prompt eval count", f"{prompt_n} token(s)"))
    if t:
        rows += [("prompt eval duration", _seconds(t.prompt_ms / 1000)),
                 ("prompt eval rate", f"{t.prompt_per_second:.2f} tokens/s")]
    rows.append(("eval count", f"{eval_n} token(s)"))
    if t:
        rows += [("eval duration", _seconds(t.predicted_ms / 1000)),
                 ("eval rate", f"{t.predicted_per_second:.2f} tokens/s")]
    if u and u.cached_tokens:
        rows.append(("prompt cache hit", f"{u.cached_tokens} token(s)"))
    if t and t.draft_n:
        rows.append(("draft acceptance", f"{t.draft_n_accepted}/{t.draft_n} token(s) "
                                         f"({t.draft_n_accepted / t.draft_n:.0%})"))
    if completion.request_id:
        rows.append(("request id", completion.request_id))
    return "\n".join(f"{name + ':':<22}{value}" for name, value in rows)


def _seconds(s: float) -> str:
    return f"{s * 1000:.2f}ms" if s < 1 else f"{s:.3f}s"


__all__ = ["connect", "ensure_model", "ensure_on_server", "options_from_flags", "messages_for", "print_stats",
           "format_stats", "print_stream", "cut_json"]
