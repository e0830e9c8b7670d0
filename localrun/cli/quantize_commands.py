"""Quantize and measure: `quantize` makes a smaller model, `perplexity` says what that cost.

`quantize` works without a daemon: the store runs llama.cpp's quantizer in a child process
(store/quantizing.py, so the CLI never loads llama.cpp), writing into the store's `partial/`
directory; the finished file is moved into the store under the new name. Interrupted, the child dies
with the Ctrl-C and its partial file is deleted. `perplexity` asks the daemon.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from localrun.cli import generation as g
from localrun.cli.app import app
from localrun.cli.format import human_size, print_json


@app.command()
def quantize(
    src: str = typer.Argument(..., help="A pulled model to quantize, e.g. smollm2 (pull a GGUF file first)."),
    dst: str = typer.Argument(..., help="The name for the result, e.g. smollm2:q8_0."),
    type_: str = typer.Option("Q4_K_M", "--type", "-t", help="Target type: Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q4_0, F16, ..."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar, only the final line."),
    as_json: bool = typer.Option(False, "--json", help="Progress events and the result as JSON lines."),
    force: bool = typer.Option(False, "--force", "-f", help="Replace DST when it already names a model."),
) -> None:
    """Quantize a model with llama.cpp into a new model in the store (its manifest records the origin)."""
    from localrun.store import Store
    from localrun.store.names import parse_name
    from localrun.store.quantizing import requantize_warning, requantizing

    store = Store()
    source = store.resolve(src)
    parse_name(dst)  # a bad name fails before any work, and so does one that names a model already
    if not force:
        store.check_unused(dst)
    show_bar = sys.stderr.isatty() and not (quiet or as_json)
    bar = _Bar() if show_bar else None

    def report(event: dict[str, Any]) -> None:
        if event["event"] == "start" and requantizing(source):
            sys.stderr.write(requantize_warning(source) + "\n")
        if event["event"] == "tensor":
            if as_json:
                print_json(event)
            elif bar is not None:
                bar(event)

    try:
        result = store.quantize(source, dst, type_, report)
    finally:
        if bar is not None:
            bar.close()
    if as_json:
        print_json({"event": "success", "model": result.to_dict()})
    else:
        typer.echo(f"quantized {source.name} to {result.name} ({result.origin['type']}, {result.short_id}, "
                   f"{human_size(result.size)} from {human_size(source.size)})")


class _Bar:
    """A rich progress bar on stderr counting tensors."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("quantizing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True))
        self.progress.start()
        self.task = self.progress.add_task("quantizing", total=None)

    def __call__(self, event: dict[str, Any]) -> None:
        self.progress.update(self.task, completed=event["index"], total=event["total"])

    def close(self) -> None:
        self.progress.stop()


@app.command()
def perplexity(
    model: str = typer.Argument(..., help="Model name, e.g. smollm2 or smollm2:q8_0."),
    file: Path = typer.Argument(..., help="A UTF-8 text file ('-' for stdin)."),
    ctx: int = typer.Option(512, "--ctx", help="Tokens per chunk; the second half of each chunk is scored."),
    batch: int = typer.Option(2048, "--batch", help="Tokens per evaluation: batch // ctx chunks go together."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    host: Optional[str] = g.HOST,
) -> None:
    """Perplexity of a text under a model (as llama-perplexity), to compare a quantization with its source."""
    from localrun.errors import UsageError

    if ctx < 16 or batch < 1:
        raise UsageError(f"--ctx must be 16 or more and --batch 1 or more, got --ctx {ctx} --batch {batch}")
    text = _read_text(file)
    if not text.strip():
        raise UsageError(f"{file} has no text to measure")
    client, model = g.connect(model, host)
    with client:
        result = client.perplexity(model, text, ctx=ctx, batch=batch)
    if as_json:
        print_json(result.to_dict())
        return
    typer.echo(f"perplexity {result.perplexity:.4f}  ({result.scored} of {result.tokens} tokens scored "
               f"in {result.chunks} chunks of {result.ctx}, {result.seconds:.1f} s)")


def _read_text(file: Path) -> str:
    from localrun.errors import UsageError

    if str(file) == "-":
        return sys.stdin.read()
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {file}: {getattr(e, 'strerror', None) or e}") from None
