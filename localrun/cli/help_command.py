"""`localrun help [COMMAND]`: the help of localrun or of one of its commands, as `-h` prints it."""

from __future__ import annotations

import typer

from localrun.cli.app import app
from localrun.errors import LocalrunError


@app.command("help")
def help_(ctx: typer.Context,
          command: list[str] = typer.Argument(None, help="A command, e.g. run or launch claude.")) -> None:
    """Show the help of localrun or of one of its commands (the same as COMMAND --help)."""
    from localrun.cli.help import render_help, subcommands

    target, path = ctx.parent.command, ["localrun"]
    for name in command or []:
        found = dict(subcommands(target)).get(name)
        if found is None:
            raise LocalrunError(f"no such command: {' '.join([*path[1:], name])} (`localrun help` lists them)")
        target, path = found, [*path, name]
    typer.echo(render_help(target, path))
