"""Quantize a GGUF file with llama.cpp's `llama_model_quantize`, in a child process of the CLI or the
daemon (store/quantizing.py runs it).

    python -m localrun.engine.quantize SRC OUT TYPE [--allow-requantize] [--threads N]

Each line on stdout is one JSON event:
    {"event": "start", "type": "Q8_0"}                                            the type is known
    {"event": "tensor", "index": 3, "total": 272, "name": "blk.0.attn_k.weight"}   one per tensor
    {"event": "done", "type": "Q8_0", "size": 144000000}                          exit 0
    {"event": "error", "message": "...", "usage": true|false}                     exit 2 (usage) or 1

It runs in its own process so neither loads llama.cpp, and so Ctrl-C can end it at once: the
quantize call holds the GIL-free C loop for seconds to minutes and would not see a Python signal.
Progress comes from llama.cpp's own per-tensor log lines (`[  12/ 272] name - ...`); its errors
("failed to quantize: ...") come from the same log, since the call's return code does not say.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import signal
import sys

import llama_cpp as L

_TENSOR = re.compile(r"^\[\s*(\d+)/\s*(\d+)\]\s+(\S+)")
_FAILED = re.compile(r"failed to quantize: (.*)")


def quantize_types() -> dict[str, int]:
    """Every target type this llama.cpp build knows, by llama-quantize's name ("Q4_K_M": ftype)."""
    types = {name.removeprefix("LLAMA_FTYPE_MOSTLY_"): getattr(L, name)
             for name in dir(L) if name.startswith("LLAMA_FTYPE_MOSTLY_")}
    types["F32"] = L.LLAMA_FTYPE_ALL_F32
    return dict(sorted(types.items()))


class _LogLines:
    """llama.cpp logs in fragments; this joins them into lines and turns the interesting ones into events."""

    def __init__(self, emit) -> None:
        self.emit, self.pending, self.error = emit, "", ""

    def feed(self, text: str) -> None:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self._line(line)

    def _line(self, line: str) -> None:
        if match := _TENSOR.match(line):
            self.emit({"event": "tensor", "index": int(match[1]), "total": int(match[2]), "name": match[3]})
        if match := _FAILED.search(line):
            self.error = match[1].strip()

    def finish(self) -> str:
        """Flush the last unterminated fragment; the error llama.cpp reported, if any."""
        self.feed("\n")
        return self.error


def quantize(src: str, out: str, type_name: str, allow_requantize: bool, threads: int, emit) -> int:
    """Quantize `src` into `out`; emits events and returns the exit status (0, 1 or 2)."""
    types = quantize_types()
    ftype = types.get(type_name.upper())
    if ftype is None:
        emit({"event": "error", "usage": True,
              "message": f"unknown quantization type {type_name!r}; choose one of {', '.join(types)}"})
        return 2
    emit({"event": "start", "type": type_name.upper()})
    lines = _LogLines(emit)
    callback = L.llama_log_callback(lambda level, text, user: lines.feed(text.decode("utf-8", "replace")))
    L.llama_log_set(callback, ctypes.c_void_p(0))
    L.llama_backend_init()
    params = L.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize, params.nthread = ftype, allow_requantize, threads
    status = L.llama_model_quantize(src.encode(), out.encode(), ctypes.byref(params))
    error = lines.finish()
    if error or status != 0:
        emit({"event": "error", "usage": False, "message": _explain(error or f"llama.cpp returned {status}", type_name)})
        return 1
    emit({"event": "done", "type": type_name.upper(), "size": os.path.getsize(out)})
    return 0


def _explain(error: str, type_name: str) -> str:
    if "requantizing" in error:
        return f"{error} (the source is already quantized)"
    return f"cannot quantize to {type_name.upper()}: {error}"


def _emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _die_with_parent() -> None:
    """A CLI or daemon killed outright (`kill -9`, the OOM killer) must not leave its quantizer writing
    on for minutes: on Linux the kernel sends this process SIGKILL when its parent dies."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the parent's Ctrl-C still ends it (same process group)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m localrun.engine.quantize", description=__doc__.splitlines()[0])
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument("type")
    p.add_argument("--allow-requantize", action="store_true", help="accept an already quantized source")
    p.add_argument("--threads", type=int, default=0, help="0 = llama.cpp's choice (all cores)")
    args = p.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C must end the C loop now, not after it
    _die_with_parent()
    return quantize(args.src, args.out, args.type, args.allow_requantize, args.threads, _emit)


if __name__ == "__main__":
    sys.exit(main())
