"""Generation commands: run, chat, batch. Thin: flags in, `generation` / `chat` / `batch` do the work."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from localrun.cli import generation as g
from localrun.cli.app import app


@app.command()
def run(
    model: str = typer.Argument(..., help="Model name, e.g. smollm2."),
    prompt: Optional[List[str]] = typer.Argument(None, help="The prompt; piped stdin goes before it."),
    json_out: bool = typer.Option(False, "--json", help="Print the full response object as JSON."),
    system: Optional[str] = g.SYSTEM, temperature: Optional[float] = g.TEMPERATURE, top_p: Optional[float] = g.TOP_P,
    seed: Optional[int] = g.SEED, max_tokens: Optional[int] = g.MAX_TOKENS, ctx_size: Optional[int] = g.CTX_SIZE,
    format: Optional[str] = g.FORMAT, keep_alive: Optional[str] = g.KEEP_ALIVE,
    speculative: Optional[int] = g.SPECULATIVE, verbose: bool = g.VERBOSE,
    think: Optional[bool] = g.THINK, hide_thinking: bool = g.HIDE_THINKING,
    think_budget: Optional[int] = g.THINK_BUDGET,
    host: Optional[str] = g.HOST,
) -> None:
    """Answer a prompt and exit, or chat when run on a terminal with no prompt (as `ollama run`)."""
    options = g.options_from_flags(temperature, top_p, seed, max_tokens, ctx_size, format, keep_alive, speculative,
                                   think, think_budget)
    text = " ".join(prompt or [])
    interactive = not text and sys.stdin.isatty() and sys.stdout.isatty()
    if not sys.stdin.isatty():
        piped = sys.stdin.read()
        text = f"{piped.rstrip()}\n\n{text}" if piped.strip() and text else (piped.strip() or text)
    if not interactive and not text.strip():
        from localrun.errors import UsageError

        raise UsageError("no prompt: give one as arguments or on stdin" if not text else "the prompt is blank")
    client, model = g.connect(model, host)
    with client:
        if interactive:
            _chat(client, model, options, system, markdown=True, verbose=verbose, host=host,
                  hide_thinking=hide_thinking)
            return
        with g.reader_may_leave():
            _answer_once(client, model, g.messages_for(text, system), options, json_out, verbose, hide_thinking)


def _answer_once(client, model: str, messages: list, options, json_out: bool, verbose: bool,
                 hide_thinking: bool) -> None:
    import json
    import time

    from localrun.cli.thinking import ThinkingView, shows_thinking

    started = time.monotonic()
    if json_out:
        completion = client.chat(model, messages, options)
        sys.stdout.write(json.dumps(completion.raw, indent=2, ensure_ascii=False) + "\n")
    else:
        stream = client.chat(model, messages, options, stream=True)
        terminal = sys.stdout.isatty()
        view = ThinkingView(shows_thinking(options.think, hide_thinking, terminal), dim=terminal)
        g.print_stream(view.answer(g.until_first_text(stream.pieces())))
        completion = stream.completion
        sys.stdout.write("" if completion.text.endswith("\n") else "\n")
    sys.stdout.flush()
    if verbose:
        g.print_stats(completion, time.monotonic() - started)
    if cut := g.cut_json(completion, options):
        from localrun.errors import LocalrunError

        raise LocalrunError(cut)


@app.command()
def chat(
    model: str = typer.Argument(..., help="Model name, e.g. smollm2."),
    no_markdown: bool = typer.Option(False, "--no-markdown", help="Print answers raw instead of rendered Markdown."),
    system: Optional[str] = g.SYSTEM, temperature: Optional[float] = g.TEMPERATURE, top_p: Optional[float] = g.TOP_P,
    seed: Optional[int] = g.SEED, max_tokens: Optional[int] = g.MAX_TOKENS, ctx_size: Optional[int] = g.CTX_SIZE,
    format: Optional[str] = g.FORMAT, keep_alive: Optional[str] = g.KEEP_ALIVE,
    speculative: Optional[int] = g.SPECULATIVE, verbose: bool = g.VERBOSE,
    think: Optional[bool] = g.THINK, hide_thinking: bool = g.HIDE_THINKING,
    think_budget: Optional[int] = g.THINK_BUDGET,
    host: Optional[str] = g.HOST,
) -> None:
    """Chat interactively: streamed answers, slash commands (/? for help), history across sessions."""
    options = g.options_from_flags(temperature, top_p, seed, max_tokens, ctx_size, format, keep_alive, speculative,
                                   think, think_budget)
    client, model = g.connect(model, host)
    with client:
        markdown = not no_markdown and sys.stdout.isatty()
        _chat(client, model, options, system, markdown=markdown, verbose=verbose, host=host,
              hide_thinking=hide_thinking)


def _chat(client, model: str, options, system: Optional[str], markdown: bool, verbose: bool,
          host: Optional[str], hide_thinking: bool) -> None:
    from localrun.cli import targets
    from localrun.cli.chat import ChatSession, repl

    repl(ChatSession(client, model, options, system, markdown=markdown, verbose=verbose,
                     manage_models=targets.resolve(host).local, hide_thinking=hide_thinking))


@app.command()
def batch(
    model: str = typer.Argument(..., help="Model name, e.g. smollm2."),
    input: Path = typer.Argument(..., help="JSONL: a prompt string, {\"prompt\": ...} or {\"messages\": [...]} a line."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Output JSONL (rerun to resume); default stdout."),
    concurrency: int = typer.Option(8, "--concurrency", "-c", help="Requests in flight at once."),
    system: Optional[str] = g.SYSTEM, temperature: Optional[float] = g.TEMPERATURE, top_p: Optional[float] = g.TOP_P,
    seed: Optional[int] = g.SEED, max_tokens: Optional[int] = g.MAX_TOKENS, ctx_size: Optional[int] = g.CTX_SIZE,
    format: Optional[str] = g.FORMAT, keep_alive: Optional[str] = g.KEEP_ALIVE,
    speculative: Optional[int] = g.SPECULATIVE, host: Optional[str] = g.HOST,
) -> None:
    """Answer every line of a JSONL file, in input order; failed lines carry an "error"."""
    from localrun.cli.batch import batch as run_batch
    from localrun.errors import LocalrunError

    options = g.options_from_flags(temperature, top_p, seed, max_tokens, ctx_size, format, keep_alive, speculative)
    client, model = g.connect(model, host)
    with client, g.reader_may_leave():
        tally = run_batch(client, model, input, output, options, system, concurrency)
    if tally.failed:
        raise LocalrunError(f"{tally.failed} of {tally.done} lines failed; their output lines carry the error")
