"""Model-store commands: pull, list, show, rm, cp. They work without a daemon.

`rm` goes through this home's daemon when it runs, so a loaded model is unloaded as well; `pull --host`
and `rm --host` act on the store of a server that has its own (see cli/targets.py).

Output rules: results go to stdout, progress and errors to stderr. A progress bar only when stderr
is a terminal (no bar, no ANSI on a pipe or with --quiet, just the final line); --json gives one
JSON object per line for scripts.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from typing import Any, Optional

import typer

from localrun.cli.app import app

SERVER_HELP = "A server with its own store (URL; Ollama or localrun) to do this on; default: this home's store."


def _complete_catalogue(incomplete: str) -> list[str]:
    """Shell completion for `pull`: catalogue names and aliases."""
    from localrun.store import load_catalogue

    return [n for n in load_catalogue().names() if n.startswith(incomplete)]


def _complete_local(incomplete: str) -> list[str]:
    """Shell completion for `show`, `rm`, `cp`: the models in the store."""
    from localrun.store import Store

    return [m.name for m in Store().list() if m.name.startswith(incomplete)]


@app.command()
def pull(
    model: str = typer.Argument(..., help="smollm2, name:tag, hf.co/user/repo[:quant], an https://….gguf URL or a file.",
                                autocompletion=_complete_catalogue),
    link: bool = typer.Option(False, "--link", help="Use a local file in place instead of copying it into the store."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar, only the final line."),
    as_json: bool = typer.Option(False, "--json", help="Progress events and the result as JSON lines."),
    host: Optional[str] = typer.Option(None, "--host", help=SERVER_HELP),
) -> None:
    """Download a model (or import a local GGUF file) into the store; a no-op when it is present."""
    from localrun.store import Store

    show_bar = sys.stderr.isatty() and not (quiet or as_json)
    reporter = _JsonReporter() if as_json else PullBar() if show_bar else None
    try:
        server = _server(host)
        if server is not None:
            return _pull_on_server(server, model, link, reporter, as_json)
        result = Store().pull(model, link=link, progress=reporter)
    finally:
        if isinstance(reporter, PullBar):
            reporter.close()
    if as_json:
        _print_json({"status": "success", "model": result.to_dict()})
    else:
        typer.echo(f"pulled {result.name} ({result.short_id}, {_size(result.size)})")


@app.command("list")
def list_models(as_json: bool = typer.Option(False, "--json", help="Print a JSON array.")) -> None:
    """List the models in the store."""
    from localrun.store import Store

    models = Store().list()
    if as_json:
        _print_json([m.to_dict() for m in models])
        return
    rows = [("NAME", "ID", "SIZE", "QUANT", "PARAMS", "MODIFIED")]
    rows += [(m.name, m.short_id, _size(m.size), m.quantization, m.parameter_size, _ago(m.modified)) for m in models]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


app.command("ls", hidden=True)(list_models)


@app.command()
def show(
    model: str = typer.Argument(..., help="A pulled model's name.", autocompletion=_complete_local),
    as_json: bool = typer.Option(False, "--json", help="Everything as one JSON object."),
    template: bool = typer.Option(False, "--template", help="Print only the chat template."),
    license_: bool = typer.Option(False, "--license", help="Print only the license."),
    metadata: bool = typer.Option(False, "--metadata", help="Print the raw GGUF key/values."),
) -> None:
    """Show a model's facts read from its GGUF header: architecture, size, context, template, tokens."""
    from localrun.store import Store

    store = Store()
    resolved, info = store.resolve(model), store.show(model)
    if as_json:
        _print_json({**resolved.to_dict(), **info.to_dict()})
    elif template:
        typer.echo(info.chat_template)
    elif license_:
        typer.echo(info.license or "(no license in the GGUF metadata)")
    elif metadata:
        for key, value in info.metadata.items():
            typer.echo(f"{key} = {value!r}" if isinstance(value, str) else f"{key} = {value}")
    else:
        _print_info(resolved, info)


def _server(host: Optional[str]):
    """The server whose own store `--host` names, or None for this home's store (see cli/targets.py)."""
    if host is None:
        return None
    from localrun.cli import targets

    target = targets.resolve(host)
    return None if target.local else target.address


def _pull_on_server(address, model: str, link: bool, reporter, as_json: bool) -> None:
    from localrun.cli import targets
    from localrun.client import Client
    from localrun.errors import UsageError

    if link:
        raise UsageError("--link works with this home's store only, not with a server's (--host)")
    with Client.from_host(address.base_url) as client:
        targets.pull_on_server(client, model, reporter or (lambda status: None))
    if as_json:
        _print_json({"status": "success", "model": {"name": model, "host": address.base_url}})
    else:
        typer.echo(f"pulled {model} on {address.base_url}")


@app.command()
def rm(
    models: list[str] = typer.Argument(..., help="Names of pulled models.", autocompletion=_complete_local),
    host: Optional[str] = typer.Option(None, "--host", help=SERVER_HELP),
) -> None:
    """Remove models; blobs no other name uses are deleted. This home's running daemon (or the server
    --host names) removes them itself, so a loaded model is unloaded too."""
    from localrun.cli import targets

    target = targets.resolve(host)
    if target.up and (target.local or host is not None):
        from localrun.client import Client

        with Client.from_host(target.address.base_url) as client:
            for name in models:
                client.delete(name)
                typer.echo(f"deleted {name}")
        return
    from localrun.store import Store

    store = Store()
    for name in models:
        store.remove(name)
        typer.echo(f"deleted {name}")


@app.command()
def cp(
    source: str = typer.Argument(..., help="A pulled model.", autocompletion=_complete_local),
    destination: str = typer.Argument(..., help="The new name (name[:tag])."),
) -> None:
    """Give a pulled model another name (no copy of the file is made)."""
    from localrun.store import Store

    copied = Store().copy(source, destination)
    typer.echo(f"copied {source} to {copied.name}")


def _print_info(model, info) -> None:
    facts = [("name", model.name), ("architecture", info.architecture), ("parameters", info.parameter_size),
             ("quantization", info.quantization), ("context length", str(info.context_length)),
             ("embedding length", str(info.embedding_length)), ("license", info.license or "-"),
             ("size", _size(model.size)), ("digest", model.digest), ("source", model.source)]
    if model.origin:  # made by `localrun quantize`
        origin = model.origin
        facts.append(("quantized from", f"{origin['model']} ({origin['digest'].removeprefix('sha256:')[:12]})"))
    typer.echo("  Model")
    for key, value in facts:
        typer.echo(f"    {key:<18}{value}")
    if info.special_tokens:
        typer.echo("\n  Special tokens")
        for key, value in info.special_tokens.items():
            typer.echo(f"    {key:<18}{value!r}")
    if info.chat_template:
        typer.echo(f"\n  Chat template: {len(info.chat_template)} characters (show --template prints it)")


class PullBar:
    """A rich progress bar on stderr: bytes, speed and ETA while pulling, one line per other step."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TransferSpeedColumn(), TimeRemainingColumn(), console=Console(stderr=True))
        self.progress.start()
        self.tasks: dict[str, Any] = {}

    def __call__(self, event) -> None:
        if event.total:  # bytes: one bar per download
            task = self.tasks.get(event.status)
            if task is None:
                task = self.tasks[event.status] = self.progress.add_task(event.status, total=event.total)
            self.progress.update(task, completed=event.completed, total=event.total)
        elif event.status != "success" and event.status not in self.tasks:  # a step: one line above the bars
            self.tasks[event.status] = None
            self.progress.console.print(event.status, highlight=False)

    def close(self) -> None:
        self.progress.stop()


class _JsonReporter:
    """Ollama-style JSON lines: every status change, and byte progress at most ten times a second."""

    def __init__(self) -> None:
        self.last_status, self.last_time = "", 0.0

    def __call__(self, event) -> None:
        now = time.monotonic()
        done = event.total and event.completed >= event.total
        if event.status != self.last_status or done or now - self.last_time >= 0.1:
            if event.status != "success":
                _print_json(event.to_dict())
            self.last_status, self.last_time = event.status, now


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}" if n < 10 * scale else f"{n / scale:.0f} {unit}"
    return f"{n} B"


def _ago(when: datetime) -> str:
    seconds = (datetime.now(timezone.utc) - when).total_seconds()
    for unit, scale in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= scale:
            count = int(seconds // scale)
            return f"{count} {unit}{'s' if count > 1 else ''} ago"
    return "just now"
