"""Model-store commands: pull, list, show, rm, cp, create. They work without a daemon.

`rm` goes through this home's daemon when it runs, so a loaded model is unloaded as well. When `--host`
or LOCALRUN_HOST names a server that has a store of its own (see cli/targets.py), every one of them acts
on that store through the Ollama API the server speaks (/api/pull, /api/tags, /api/show, /api/delete,
/api/copy, /api/create), and prints what the server says in the same format as for this home's store.

Output rules: results go to stdout, progress and errors to stderr. A progress bar only when stderr
is a terminal (no bar, no ANSI on a pipe or with --quiet, just the final line); --json gives one
JSON object per line for scripts.
"""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime, timezone
from typing import Any, Callable, Optional

import typer

from localrun.cli.app import app
from localrun.cli.format import print_json

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
        print_json({"status": "success", "model": result.to_dict()})
    else:
        typer.echo(f"pulled {result.name} ({result.short_id}, {_size(result.size)})")


@app.command("list")
def list_models(
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array."),
    host: Optional[str] = typer.Option(None, "--host", help=SERVER_HELP),
) -> None:
    """List the models in the store."""
    server = _server(host)
    if server is not None:
        models = _ask_server(server, "list", lambda client: client.tags())
        if as_json:
            print_json([_tag_dict(tag, server.base_url) for tag in models])
        else:
            _print_table([_tag_row(tag) for tag in models])
        return
    from localrun.store import Store

    models = Store().list()
    remote = _declared_upstream_models()
    if as_json:
        print_json([m.to_dict() for m in models] + [{"name": name, "backend": backend} for name, backend in remote])
        return
    _print_table([(m.name, m.short_id, _size(m.size), m.quantization, m.parameter_size, _ago(m.modified))
                  for m in models] + [(name, f"backend:{backend}", "-", "-", "-", "-") for name, backend in remote])


def _declared_upstream_models() -> list[tuple[str, str]]:
    """(model, backend) for the models backends.toml names; a running daemon's /api/tags (`list --host`)
    also shows those it discovered from the upstreams' /v1/models."""
    from localrun.upstream import backends

    return [(model, b.name) for b in backends.load().backends.values() for model in b.models]


def _print_table(models: list[tuple[str, ...]]) -> None:
    rows = [("NAME", "ID", "SIZE", "QUANT", "PARAMS", "MODIFIED"), *models]
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
    modelfile: bool = typer.Option(False, "--modelfile", help="Print a Modelfile that `create` makes this model from."),
    host: Optional[str] = typer.Option(None, "--host", help=SERVER_HELP),
) -> None:
    """Show a model's facts read from its GGUF header (architecture, size, context, template, tokens) and
    what its Modelfile set (parameters, system prompt)."""
    server = _server(host)
    if server is not None:
        return _show_on_server(server, model, as_json, template, license_, metadata, modelfile)
    from localrun.store import Store, modelfile_of

    store = Store()
    resolved, info = store.resolve(model), store.show(model)
    if as_json:
        print_json({**resolved.to_dict(), **info.to_dict()})
    elif modelfile:
        typer.echo(modelfile_of(resolved, info), nl=False)
    elif template:
        _print_template(resolved.template or info.chat_template, info.architecture)
    elif license_:
        typer.echo(resolved.modelfile_license or info.license or "(no license in the GGUF metadata)")
    elif metadata:
        for key, value in info.metadata.items():
            typer.echo(f"{key} = {value!r}" if isinstance(value, str) else f"{key} = {value}")
    else:
        _print_info(resolved, info)


def _server(host: Optional[str]):
    """The server whose own store `--host` (or LOCALRUN_HOST) names, or None for this home's store: a
    loopback address where nothing, this home's daemon or (with no --host) a program that is not localrun
    listens is this home's (see cli/targets.py)."""
    from localrun.cli import targets

    target = targets.resolve(host)
    return None if target.local else target.address


def _pull_on_server(address, model: str, link: bool, reporter, as_json: bool) -> None:
    from localrun.cli import targets
    from localrun.errors import UsageError

    if link:
        raise UsageError("--link works with this home's store only, not with a server's (--host)")
    progress = reporter or (lambda status: None)
    _ask_server(address, "pull", lambda client: targets.pull_on_server(client, model, progress))
    if as_json:
        print_json({"status": "success", "model": {"name": model, "host": address.base_url}})
    else:
        typer.echo(f"pulled {model} on {address.base_url}")


@app.command()
def rm(
    models: list[str] = typer.Argument(..., help="Names of pulled models.", autocompletion=_complete_local),
    host: Optional[str] = typer.Option(None, "--host", help=SERVER_HELP),
) -> None:
    """Remove models; blobs no other name uses are deleted. This home's running daemon (or the server
    --host or LOCALRUN_HOST names) removes them itself, so a loaded model is unloaded too."""
    from localrun.cli import targets

    target = targets.resolve(host)
    if target.up:  # this home's running daemon, or a server with a store of its own
        for name in models:
            _ask_server(target.address, "rm", lambda client, name=name: client.delete(name))
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
    force: bool = typer.Option(False, "--force", "-f", help="Replace DESTINATION when it names another model."),
    host: Optional[str] = typer.Option(None, "--host", help=SERVER_HELP),
) -> None:
    """Give a pulled model another name (no copy of the file is made). A name that already names another
    model is kept unless --force is given."""
    server = _server(host)
    if server is not None:
        _ask_server(server, "cp", lambda client: client.copy(source, destination))
        typer.echo(f"copied {source} to {destination}")
        return
    from localrun.store import Store

    copied = Store().copy(source, destination, force=force)
    typer.echo(f"copied {source} to {copied.name}")


@app.command()
def create(
    name: str = typer.Argument(..., help="The new model's name (name[:tag]); an existing one is replaced."),
    file: str = typer.Option("Modelfile", "--file", "-f", help="The Modelfile to read (- for stdin)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress, only the final line."),
    host: Optional[str] = typer.Option(None, "--host", help=SERVER_HELP),
) -> None:
    """Make a model from a Modelfile: FROM a model or a GGUF file, with PARAMETER, SYSTEM, TEMPLATE (a
    Jinja chat template), MESSAGE and LICENSE. It shares the FROM model's file; no copy is made."""
    from pathlib import Path

    from localrun.errors import UsageError
    from localrun.store import parse_modelfile

    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read the Modelfile {file}: {getattr(e, 'strerror', None) or e}") from None
    recipe = parse_modelfile(text)
    server = _server(host)
    if server is not None:
        given = {k: getattr(recipe, k) for k in ("system", "template", "license") if getattr(recipe, k) is not None}
        fields = {"from": recipe.base, "parameters": recipe.parameters, "messages": list(recipe.messages), **given}
        _ask_server(server, "create", lambda client: client.create(name, fields))
        typer.echo(f"created {name} on {server.base_url}")
        return
    from localrun.store import Store

    show_bar = sys.stderr.isatty() and not quiet
    reporter = PullBar() if show_bar else None
    folder = Path.cwd() if file == "-" else Path(file).resolve().parent
    try:
        made = Store().create(name, recipe, folder=folder, progress=reporter)
    finally:
        if reporter is not None:
            reporter.close()
    typer.echo(f"created {made.name} ({made.short_id}, shares the file of {recipe.base})")


def _ask_server(address, command: str, call: Callable[[Any], Any]) -> Any:
    """`call(client)` on the server at `address`. When it fails and the server does not speak the Ollama
    API at all (vLLM, llama-server: 404 on /api/version too), one error line says so instead."""
    from localrun.client import Client
    from localrun.errors import AuthError, DaemonUnavailable, LocalrunError, Overloaded

    with Client.from_host(address.base_url) as client:
        try:
            return call(client)
        except (AuthError, DaemonUnavailable, Overloaded):
            raise
        except LocalrunError:
            if _speaks_ollama(client):
                raise  # the server's own answer: a model it lacks, a bad name
    raise LocalrunError(f"{address.base_url} does not speak the Ollama API (no /api/version): `localrun {command}` "
                        f"on a server needs one with a store of its own (Ollama or localrun)")


def _speaks_ollama(client) -> bool:
    from localrun.errors import LocalrunError

    try:
        client.version()
    except LocalrunError:
        return False
    return True


def _tag_dict(tag: dict[str, Any], base_url: str) -> dict[str, Any]:
    """One model of a server's /api/tags with the keys of this home's `list --json` that it tells."""
    details = tag.get("details") if isinstance(tag.get("details"), dict) else {}
    digest = str(tag.get("digest") or "")
    return {"name": str(tag.get("name") or tag.get("model") or ""),
            "digest": f"sha256:{digest.removeprefix('sha256:')}" if digest else "",
            "size": tag.get("size") if isinstance(tag.get("size"), int) else 0,
            "modified": str(tag.get("modified_at") or ""),
            "architecture": str(details.get("family") or ""),
            "parameter_size": str(details.get("parameter_size") or ""),
            "quantization": str(details.get("quantization_level") or ""),
            "host": base_url}


def _tag_row(tag: dict[str, Any]) -> tuple[str, ...]:
    model = _tag_dict(tag, "")
    modified = _parse_time(model["modified"])
    return (model["name"], model["digest"].removeprefix("sha256:")[:12] or str(tag.get("remote_host") or "-"),
            _size(model["size"]) if model["size"] else "-", model["quantization"] or "-",
            model["parameter_size"] or "-", _ago(modified) if modified else "-")


def _parse_time(text: str) -> Optional[datetime]:
    """An RFC 3339 time as Ollama writes it (nanoseconds, `Z`), readable by Python 3.10's fromisoformat."""
    text = re.sub(r"(\.\d{6})\d+", r"\1", text.strip()).replace("Z", "+00:00")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


_SHOW_FIELDS = {"template": ("template", "chat template"), "license": ("license", "license"),
                "metadata": ("model_info", "metadata (model_info)"), "modelfile": ("modelfile", "Modelfile")}


def _show_on_server(address, model: str, as_json: bool, template: bool, license_: bool, metadata: bool,
                    modelfile: bool = False) -> None:
    from localrun.errors import LocalrunError

    wanted = ("template" if template else "license" if license_ else "metadata" if metadata
              else "modelfile" if modelfile else "")
    wanted = "" if as_json else wanted  # --json shows everything, as for this home's store

    def ask(client) -> tuple[dict[str, Any], Optional[dict[str, Any]]]:
        shown = client.show(model)
        if not isinstance(shown, dict):
            raise LocalrunError(f"{address.base_url}/api/show answered with something that is not an object")
        if wanted:
            return shown, None
        try:  # size and digest are in /api/tags only
            return shown, _find_tag(client.tags(), model, shown)
        except LocalrunError:
            return shown, None

    shown, tag = _ask_server(address, "show", ask)
    if wanted:
        key, what = _SHOW_FIELDS[wanted]
        value = shown.get(key)
        if value is None or (wanted == "metadata" and not isinstance(value, dict)):
            raise LocalrunError(f"{address.base_url} does not tell the {what} of {model}: its /api/show has no "
                                f"{key!r}")
        if wanted == "template":
            _print_template(value, _shown_facts(model, shown, None, "")["architecture"])
        elif wanted == "license":
            typer.echo(value or "(no license in the server's answer)")
        elif wanted == "modelfile":
            typer.echo(value, nl=False)
        else:
            for k, v in value.items():
                typer.echo(f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {v}")
        return
    facts = _shown_facts(model, shown, tag, address.base_url)
    if as_json:
        print_json(facts)
        return
    rows = [("name", facts["name"]), ("architecture", facts["architecture"] or "-"),
            ("parameters", facts["parameter_size"] or "-"), ("quantization", facts["quantization"] or "-"),
            ("context length", str(facts["context_length"] or "-")),
            ("embedding length", str(facts["embedding_length"] or "-")),
            ("license", _first_line(facts["license"]) or "-"),
            ("size", _size(facts["size"]) if facts["size"] else "-"), ("digest", facts["digest"] or "-"),
            ("server", address.base_url)]
    _print_model(rows, {}, facts["chat_template"])


def _find_tag(tags: list[dict[str, Any]], model: str, shown: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The /api/tags entry of `model`: by name (Ollama adds `:latest`), else by the blob digest in the
    Modelfile's FROM line (localrun's tags carry the blob digest; its names resolve catalogue aliases)."""
    for tag in tags:
        if tag.get("name") in (model, f"{model}:latest"):
            return tag
    found = re.search(r"^FROM .*sha256[-:]([0-9a-f]{64})\s*$", str(shown.get("modelfile") or ""), re.MULTILINE)
    if found:
        for tag in tags:
            if str(tag.get("digest") or "").removeprefix("sha256:") == found.group(1):
                return tag
    return None


def _shown_facts(model: str, shown: dict[str, Any], tag: Optional[dict[str, Any]], base_url: str) -> dict[str, Any]:
    """A server's /api/show (and its /api/tags entry) under the keys of this home's `show --json`."""
    details = shown.get("details") if isinstance(shown.get("details"), dict) else {}
    info = shown.get("model_info") if isinstance(shown.get("model_info"), dict) else {}
    listed = _tag_dict(tag, base_url) if tag else {}
    architecture = str(info.get("general.architecture") or details.get("family") or "")
    count = info.get("general.parameter_count")
    return {"name": listed.get("name") or model, "digest": listed.get("digest", ""), "size": listed.get("size", 0),
            "modified": str(shown.get("modified_at") or listed.get("modified", "")),
            "architecture": architecture, "parameters": count if isinstance(count, int) else 0,
            "parameter_size": str(details.get("parameter_size") or ""),
            "quantization": str(details.get("quantization_level") or ""),
            "context_length": info.get(f"{architecture}.context_length") or 0,
            "embedding_length": info.get(f"{architecture}.embedding_length") or 0,
            "license": str(shown.get("license") or ""), "chat_template": str(shown.get("template") or ""),
            "metadata": info, "host": base_url}


def _print_template(template: str, architecture: str) -> None:
    """The chat template on stdout; for a model without one, which template renders its chats instead
    (on stderr, so `show --template > file` still writes what the model carries)."""
    if template:
        typer.echo(template)
        return
    sys.stderr.write(f"this model has no chat template in its GGUF metadata; its chats are rendered with "
                     f"llama.cpp's built-in template for its architecture ({architecture or 'unknown'}), "
                     f"or ChatML when llama.cpp has none\n")


def _first_line(text: str, width: int = 60) -> str:
    """A license as one short line (Ollama's /api/show sends the whole license text)."""
    line = text.strip().split("\n", 1)[0].strip()
    return line if len(line) <= width and line == text.strip() else line[:width].rstrip() + " …"


def _print_info(model, info) -> None:
    facts = [("name", model.name), ("architecture", info.architecture), ("parameters", info.parameter_size),
             ("quantization", info.quantization), ("context length", str(info.context_length)),
             ("embedding length", str(info.embedding_length)), ("license", info.license or "-"),
             ("loads with", _context_in_use(model)), ("size", _size(model.size)), ("digest", model.digest),
             ("source", model.source)]
    if model.origin:  # made by `localrun quantize`
        origin = model.origin
        facts.append(("quantized from", f"{origin['model']} ({origin['digest'].removeprefix('sha256:')[:12]})"))
    _print_model(facts, info.special_tokens, model.template or info.chat_template)
    if model.defaults:
        typer.echo("\n  Parameters")
        for key, value in model.defaults.items():
            typer.echo(f"    {key:<18}{value}")
    if model.system:
        typer.echo(f"\n  System\n    {_first_line(model.system, 100)}")


def _context_in_use(model) -> str:
    """The context a load of `model` gets with this environment's settings, and why."""
    from localrun.config import Settings
    from localrun.memory import context_for

    settings = Settings.from_env()
    ctx, why = context_for(model, model.defaults.get("num_ctx"), settings)
    why = "its Modelfile's num_ctx" if why == "num_ctx" else why
    return f"{ctx} tokens per request x {settings.engine.parallel} slots ({why})"


def _print_model(facts: list[tuple[str, str]], special_tokens: dict[str, Any], chat_template: str) -> None:
    """`show`'s text: the facts, the special tokens when known, and the chat template's size."""
    typer.echo("  Model")
    for key, value in facts:
        typer.echo(f"    {key:<18}{value}")
    if special_tokens:
        typer.echo("\n  Special tokens")
        for key, value in special_tokens.items():
            typer.echo(f"    {key:<18}{value!r}")
    if chat_template:
        typer.echo(f"\n  Chat template: {len(chat_template)} characters (show --template prints it)")


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
