"""`localrun score`: which of several answers the model finds most likely, exactly (via the daemon)."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from localrun.cli import generation as g
from localrun.cli.app import app

BAR_WIDTH = 30


@app.command()
def score(
    model: str = typer.Argument(..., help="Model name, e.g. smollm2."),
    prompt: str = typer.Argument(..., help="The text the options continue, used as written (no chat template)."),
    option: list[str] = typer.Option(..., "--option", "-o", help="A candidate continuation; give two or more."),
    mean: bool = typer.Option(False, "--mean", help="Rank by mean log-probability per token instead of the sum."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole answer as JSON."),
    host: Optional[str] = g.HOST,
) -> None:
    """Score options by their exact log-probability after PROMPT; prints probabilities among them."""
    _check_options(option)
    client, model = g.connect(model, host)
    with client:
        result = client.score(model, prompt, option, normalize="mean" if mean else "sum")
    if as_json:
        typer.echo(json.dumps(result.to_dict()))
        return
    width = max(len(c.option) for c in result.choices)
    bars = sys.stdout.isatty()
    for c in result.choices:
        bar = "█" * round(c.prob * BAR_WIDTH) if bars else ""
        typer.echo(f"{c.option:<{width}}  {c.prob:6.1%}  logprob {c.logprob:9.4f}  {bar}".rstrip())


def _check_options(options: list[str]) -> None:
    """The daemon refuses these too; here they are usage errors (exit 2) before any model loads."""
    from localrun.errors import UsageError

    if any(not option for option in options):
        raise UsageError("--option must not be empty")
    twice = sorted({option for option in options if options.count(option) > 1})
    if twice:
        raise UsageError(f"--option given more than once: {', '.join(map(repr, twice))}")
