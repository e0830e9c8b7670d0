"""Quantize and measure: `quantize` makes a smaller model, `perplexity` says what that cost.

`quantize` works without a daemon: llama.cpp's quantizer runs in a child process
(`python -m localrun.engine.quantize`, so the CLI never loads llama.cpp), writing into the store's
`partial/` directory; the finished file is moved into the store under the new name. Interrupted,
the child dies with the Ctrl-C and its partial file is deleted. `perplexity` asks the daemon.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from localrun.cli import generation as g
from localrun.cli.app import app
from localrun.cli.format import human_size, print_json

UNQUANTIZED = ("", "F32", "F16", "BF16")


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

    store = Store()
    source = store.resolve(src)
    parse_name(dst)  # a bad name fails before any work, and so does one that names a model already
    if not force:
        store.check_unused(dst)
    show_bar = sys.stderr.isatty() and not (quiet or as_json)
    report = print_json if as_json else _Bar() if show_bar else (lambda event: None)
    partial = store.temp_file("quantize")
    try:
        done = _run_child(source, partial, type_, report)
        result = store.import_file(partial, dst, source=f"quantize:{source.name}",
                                   origin={"model": source.name, "digest": source.digest, "type": done["type"]},
                                   defaults=source.defaults)
    finally:
        if isinstance(report, _Bar):
            report.close()
        partial.unlink(missing_ok=True)
    if as_json:
        print_json({"event": "success", "model": result.to_dict()})
    else:
        typer.echo(f"quantized {source.name} to {result.name} ({done['type']}, {result.short_id}, "
                   f"{human_size(result.size)} from {human_size(source.size)})")


def _run_child(source, partial: Path, type_: str, report) -> dict[str, Any]:
    """Run the quantizer child, passing its events to `report`; its "done" event, or the error it gave."""
    import subprocess
    import tempfile

    from localrun.errors import LocalrunError, UsageError

    argv = [sys.executable, "-m", "localrun.engine.quantize", str(source.path), str(partial), type_]
    if _requantizing(source):
        argv.append("--allow-requantize")
    with tempfile.TemporaryFile() as stderr:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            last = _relay(child, source, report)
        finally:
            if child.poll() is None:
                child.kill()
            child.wait()
        if last.get("event") == "done" and child.returncode == 0:
            return last
        if last.get("event") == "error":
            raise (UsageError if last.get("usage") else LocalrunError)(last["message"])
        stderr.seek(0)
        tail = stderr.read().decode("utf-8", "replace").strip().splitlines()[-1:]
        raise LocalrunError(f"the quantizer exited with status {child.returncode}" + (f": {tail[0]}" if tail else ""))


def _relay(child, source, report) -> dict[str, Any]:
    last: dict[str, Any] = {}
    for line in child.stdout:
        last = json.loads(line)
        if last.get("event") == "start" and _requantizing(source):
            sys.stderr.write(f"warning: {source.name} is already quantized ({source.quantization}); requantizing "
                             f"loses more quality than quantizing its F16 original (check with `localrun perplexity`)\n")
        if last.get("event") == "tensor":
            report(last)
    return last


def _requantizing(source) -> bool:
    """llama.cpp refuses an already quantized source unless asked; we allow it, with a warning."""
    return source.quantization.upper() not in UNQUANTIZED


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
