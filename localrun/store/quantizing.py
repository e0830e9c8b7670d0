"""Quantizing a model of the store into a new one: llama.cpp's quantizer runs in a child process
(`python -m localrun.engine.quantize`, so neither the CLI nor the daemon loads llama.cpp for it; a
Ctrl-C ends both at once), writing into `partial/`; the store takes the finished file in.

Its events (engine/quantize.py) go to the caller as they come: "start" (the type is known),
"tensor" (index, total, name), and finally "done" (type, size), or an error raised here."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localrun.errors import LocalrunError, UsageError
from localrun.store.model import Model

UNQUANTIZED = ("", "F32", "F16", "BF16")

Event = dict[str, Any]


def requantizing(source: Model) -> bool:
    """llama.cpp refuses an already quantized source unless asked; localrun allows it, with a warning
    (the only model at hand offline is a Q4_1)."""
    return source.quantization.upper() not in UNQUANTIZED


def requantize_warning(source: Model) -> str:
    return (f"warning: {source.name} is already quantized ({source.quantization}); requantizing loses more "
            f"quality than quantizing its F16 original (check with `localrun perplexity`)")


def run_quantizer(source: Model, partial: Path, type_: str, on_event: Callable[[Event], None]) -> Event:
    """Quantize `source` into `partial` to `type_`, passing the child's events to `on_event`; its "done"
    event. An unknown type raises UsageError, a type llama.cpp cannot make of it LocalrunError."""
    argv = [sys.executable, "-m", "localrun.engine.quantize", str(source.path), str(partial), type_]
    if requantizing(source):
        argv.append("--allow-requantize")
    with tempfile.TemporaryFile() as stderr:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            last: Event = {}
            for line in child.stdout:
                last = json.loads(line)
                on_event(last)
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


__all__ = ["UNQUANTIZED", "requantize_warning", "requantizing", "run_quantizer"]
