"""`localrun backend add/list/rm`: edit backends.toml, the upstream servers the daemon serves models from.

Each edit reads the file, changes one table and writes the whole file atomically under a lock, so two
commands at once cannot lose each other's change. The daemon reads the file when it starts.
"""

from __future__ import annotations

from typing import List, Optional

import typer

from localrun.cli.app import app
from localrun.errors import LocalrunError, UsageError

backend_app = typer.Typer(help="Upstream servers (vLLM, llama-server, Ollama, another localrun) behind the daemon.",
                          no_args_is_help=True)
app.add_typer(backend_app, name="backend")

RESTART = "the daemon reads backends.toml when it starts: `localrun stop` and start it again to apply"


@backend_app.command("add")
def add(
    name: str = typer.Argument(..., help="A name for the backend (letters, digits, . _ -)."),
    urls: List[str] = typer.Argument(..., help="Its OpenAI base URL, e.g. http://gpu1:8000/v1; several are replicas."),
    models: List[str] = typer.Option([], "--model", "-m", help="A model it serves (repeat); default: ask its /v1/models."),
    api_key_env: str = typer.Option("", "--api-key-env", help="The environment variable that holds its API key."),
    timeout: Optional[str] = typer.Option(None, "--timeout", help="Longest wait for its answer or next chunk [10m]."),
    connect_timeout: Optional[str] = typer.Option(None, "--connect-timeout", help="Longest wait to connect [5s]."),
    max_concurrent: Optional[int] = typer.Option(None, "--max-concurrent", help="Requests at once per replica [0 = no limit]."),
    health_interval: Optional[str] = typer.Option(None, "--health-interval", help="Time between health checks [10s]."),
    replace: bool = typer.Option(False, "--replace", help="Replace a backend of the same name."),
) -> None:
    """Declare an upstream backend in backends.toml."""
    from localrun.upstream import backends

    table = {"url": urls, "models": models, "api_key_env": api_key_env, "timeout": timeout,
             "connect_timeout": connect_timeout, "max_concurrent": max_concurrent, "health_interval": health_interval}
    backend = backends.parse(name, {k: v for k, v in table.items() if v is not None}, where="backend add")
    with backends.editing() as file:
        if name in file.backends and not replace:
            raise UsageError(f"backend {name!r} exists in {file.path}; `localrun backend rm {name}` or add --replace")
        file.backends[name] = backend
    typer.echo(f"added backend {name} ({', '.join(backend.urls)}) to {file.path}; {RESTART}")


@backend_app.command("list")
def list_backends(as_json: bool = typer.Option(False, "--json", help="Print a JSON array.")) -> None:
    """List the declared backends (never their keys: only the variable's name and whether it is set)."""
    from localrun.cli.format import print_json
    from localrun.upstream import backends

    declared = list(backends.load().backends.values())
    if as_json:
        print_json([b.summary() for b in declared])
        return
    for b in declared:
        key = f"${b.api_key_env} ({'set' if b.api_key() else 'NOT SET'})" if b.api_key_env else "none"
        typer.echo(f"{b.name}\n  urls    {', '.join(b.urls)}\n  models  {', '.join(b.models) or '(from /v1/models)'}"
                   f"\n  key     {key}")


@backend_app.command("rm")
def remove(name: str = typer.Argument(..., help="The backend's name.")) -> None:
    """Remove a backend from backends.toml."""
    from localrun.upstream import backends

    with backends.editing() as file:
        if file.backends.pop(name, None) is None:
            raise LocalrunError(f"no backend {name!r} in {file.path}")
    typer.echo(f"removed backend {name}; {RESTART}")
