"""Model-store commands: pull, list, show, rm, cp, create. They work without a daemon.

Each command has one path: it asks the store `open_store` picks (cli/stores.py) and prints the
answer. That is this home's store, or, when `--host` or LOCALRUN_HOST names a server that has a store
of its own (see cli/targets.py), that server's over the Ollama API it speaks, printed in the same
format. `rm` goes through this home's daemon when it runs, so a loaded model is unloaded as well.

Output rules: results go to stdout, progress and errors to stderr. A progress bar only when stderr
is a terminal (no bar, no ANSI on a pipe or with --quiet, just the final line); --json gives one
JSON object per line for scripts.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from typing import Any, Iterable, Optional

import typer

from localrun.cli.app import app
from localrun.cli.format import first_line, human_size, print_json
from localrun.cli.stores import Shown, open_store

SERVER_HELP = ("A server with its own store (URL; Ollama or localrun) to do this on; default: LOCALRUN_HOST's, "
               "else this home's store.")


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
    show_bar = sys.stderr.isatty() and not (quiet or as_json)
    reporter = _JsonReporter() if as_json else PullBar() if show_bar else None
    try:
        made = open_store(host, "pull").pull(model, link, reporter)
    finally:
        if isinstance(reporter, PullBar):
            reporter.close()
    if as_json:
        print_json({"status": "success", "model": made.json})
    else:
        typer.echo(f"pulled {made.name} on {made.host}" if made.host
                   else f"pulled {made.name} ({made.short_id}, {human_size(made.size)})")


@app.command("list")
def list_models(
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array."),
    host: Optional[str] = typer.Option(None, "--host", help=SERVER_HELP),
) -> None:
    """List the models in the store."""
    models = open_store(host, "list").list()
    if as_json:
        print_json([m.json for m in models])
        return
    _print_table([(m.name, m.digest.removeprefix("sha256:")[:12] or m.where or "-",
                   human_size(m.size) if m.size else "-", m.quantization or "-", m.parameter_size or "-",
                   _ago(m.modified) if m.modified else "-") for m in models])


def _print_table(models: list[tuple[str, ...]]) -> None:
    rows = [("NAME", "ID", "SIZE", "QUANT", "PARAMS", "MODIFIED"), *models]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


app.command("ls", hidden=True)(list_models)

# show's flags that print one part: (the Shown attribute, what it is, /api/show's member for it)
_PARTS = {"template": ("template", "chat template", "template"), "license": ("license", "license", "license"),
          "metadata": ("metadata", "metadata (model_info)", "model_info"),
          "modelfile": ("modelfile", "Modelfile", "modelfile")}


@app.command()
def show(
    model: str = typer.Argument(..., help="A pulled model's name.", autocompletion=_complete_local),
    as_json: bool = typer.Option(False, "--json", help="Everything as one JSON object."),
    template: bool = typer.Option(False, "--template", help="Print only the chat template."),
    license_: bool = typer.Option(False, "--license", help="Print only the license."),
    metadata: bool = typer.Option(False, "--metadata", help="Print the raw GGUF key/values."),
    modelfile: bool = typer.Option(False, "--modelfile", help="Print a Modelfile that `create` makes this model from."),
    host: Optional[str] = typer.Option(None, "--host", help=SERVER_HELP),
) -> None:
    """Show a model's facts read from its GGUF header (architecture, size, context, template, tokens) and
    what its Modelfile set (parameters, system prompt)."""
    store = open_store(host, "show")
    shown = store.show(model)
    wanted = ("modelfile" if modelfile else "template" if template else "license" if license_
              else "metadata" if metadata else "")
    if as_json:
        print_json(shown.json)
    elif wanted:
        _print_part(shown, wanted, model, store.where)
    else:
        _print_model(shown)


def _print_part(shown: Shown, wanted: str, model: str, where: str) -> None:
    """One part of `show`; a server that did not tell it is one error line."""
    from localrun.errors import LocalrunError

    attribute, what, key = _PARTS[wanted]
    value = getattr(shown, attribute)
    if value is None:
        raise LocalrunError(f"{where} does not tell the {what} of {model}: its /api/show has no {key!r}")
    if wanted == "template":
        _print_template(value, shown.architecture)
    elif wanted == "modelfile":
        typer.echo(value, nl=False)
    elif wanted == "metadata":
        for k, v in value.items():
            typer.echo(f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {v}")
    else:
        typer.echo(value)


@app.command()
def rm(
    models: list[str] = typer.Argument(..., help="Names of pulled models.", autocompletion=_complete_local),
    host: Optional[str] = typer.Option(None, "--host", help=SERVER_HELP),
) -> None:
    """Remove models; blobs no other name uses are deleted. This home's running daemon (or the server
    --host or LOCALRUN_HOST names) removes them itself, so a loaded model is unloaded too."""
    store = open_store(host, "rm", daemon=True)
    for name in models:
        store.remove(name)
        typer.echo(f"deleted {name}")


@app.command()
def cp(
    source: str = typer.Argument(..., help="A pulled model.", autocompletion=_complete_local),
    destination: str = typer.Argument(..., help="The new name (name[:tag])."),
    force: bool = typer.Option(False, "--force", "-f", help="Replace DESTINATION when it names another model."),
    host: Optional[str] = typer.Option(None, "--host", help=SERVER_HELP),
) -> None:
    """Give a pulled model another name (no copy of the file is made). A name that already names another
    model is kept unless --force is given."""
    copied = open_store(host, "cp").copy(source, destination, force)
    typer.echo(f"copied {source} to {copied}")


@app.command()
def create(
    name: str = typer.Argument(..., help="The new model's name (name[:tag]); an existing one is replaced."),
    file: str = typer.Option("Modelfile", "--file", "-f", help="The Modelfile to read (- for stdin)."),
    quantize: Optional[str] = typer.Option(None, "--quantize", metavar="TYPE",
                                           help="Quantize the FROM model's file to TYPE (Q4_K_M, Q8_0, ...)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress, only the final line."),
    host: Optional[str] = typer.Option(None, "--host", help=SERVER_HELP),
) -> None:
    """Make a model from a Modelfile: FROM a model or a GGUF file, with PARAMETER, SYSTEM, TEMPLATE (a
    Jinja chat template), MESSAGE and LICENSE. It shares the FROM model's file (no copy is made), or with
    --quantize has that file quantized."""
    from pathlib import Path

    from localrun.errors import UsageError
    from localrun.store import parse_modelfile

    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read the Modelfile {file}: {getattr(e, 'strerror', None) or e}") from None
    recipe = parse_modelfile(text)
    store = open_store(host, "create")
    bar = PullBar() if sys.stderr.isatty() and not quiet else None  # a server's: hashing, uploading
    folder = Path.cwd() if file == "-" else Path(file).resolve().parent
    try:
        made = store.create(name, recipe, folder, bar or _warnings, quantize)
    finally:
        if bar is not None:
            bar.close()
    made_of = f"{quantize.upper()} of {recipe.base}" if quantize else f"shares the file of {recipe.base}"
    typer.echo(f"created {made.name} on {made.host}" if made.host
               else f"created {made.name} ({made.short_id}, {made_of})")


def _warnings(event) -> None:
    """Without a progress bar, a step that warns (quantizing an already quantized model) still says so."""
    if event.status.startswith("warning: "):
        sys.stderr.write(event.status + "\n")


def _print_template(template: str, architecture: str) -> None:
    """The chat template on stdout; for a model without one, which template renders its chats instead
    (on stderr, so `show --template > file` still writes what the model carries)."""
    if template:
        typer.echo(template)
        return
    sys.stderr.write(f"this model has no chat template in its GGUF metadata; its chats are rendered with "
                     f"llama.cpp's built-in template for its architecture ({architecture or 'unknown'}), "
                     f"or ChatML when llama.cpp has none\n")


def _print_model(shown: Shown) -> None:
    """`show`'s text: the facts, the special tokens when known, the chat template's size, and what the
    Modelfile set."""
    _print_section("  Model", shown.facts())
    if shown.special_tokens:
        _print_section("\n  Special tokens", [(key, repr(value)) for key, value in shown.special_tokens.items()])
    if shown.chat_template:
        typer.echo(f"\n  Chat template: {len(shown.chat_template)} characters (show --template prints it)")
    if shown.parameters:
        _print_section("\n  Parameters", shown.parameters.items())
    if shown.system:
        typer.echo(f"\n  System\n    {first_line(shown.system, 100)}")


def _print_section(title: str, rows: Iterable[tuple[str, Any]]) -> None:
    typer.echo(title)
    for key, value in rows:
        typer.echo(f"    {key:<18}{value}")


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
                print_json(event.to_dict())
            self.last_status, self.last_time = event.status, now


def _ago(when: datetime) -> str:
    seconds = (datetime.now(timezone.utc) - when).total_seconds()
    for unit, scale in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= scale:
            count = int(seconds // scale)
            return f"{count} {unit}{'s' if count > 1 else ''} ago"
    return "just now"
