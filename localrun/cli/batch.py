"""`localrun batch`: many prompts through one model, with bounded concurrency so the daemon's
continuous batching keeps every slot busy.

Input is JSONL, one request a line: a JSON string (or plain text) is a prompt; an object has
"prompt" or "messages", and may have "id" and "options" (the names of `/set parameter`). Output is
JSONL in input order, one line per input line, keyed by its 1-based "line" number; a failed request
is an output line with "error", never a gap. Lines are written whole and flushed, so a rerun with
the same output file keeps every line answered there, asks the failed ones again, and continues where
the last run stopped. Which input an output belongs to is recorded beside it (`OUTPUT.batch`: the
input's sha256 and the model), so a rerun with another input or model is refused instead of mixing
two batches in one file.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from localrun.cli.generation import cut_json
from localrun.client import Client, Completion, GenerateOptions
from localrun.errors import LocalrunError, Overloaded, UsageError
from localrun.store.layout import atomic_write

OVERLOAD_WAIT_S = 600.0  # how long one line waits out a full queue (503) before it counts as failed


@dataclass(slots=True)
class Job:
    line: int
    id: Any = None
    messages: list[dict[str, Any]] | None = None
    options: GenerateOptions | None = None
    error: str | None = None  # the line could not be parsed: reported, not sent


def parse_line(number: int, raw: str | bytes, base: GenerateOptions, system: str | None) -> Job:
    """One input line as a Job; a malformed line becomes a Job carrying its error."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as e:
        return Job(number, error=f"not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1})")
    stripped = text.strip()
    try:
        data: Any = json.loads(stripped) if stripped[:1] in ('{', '"', '[') else stripped
    except ValueError as e:
        return Job(number, error=f"invalid JSON: {e}")
    if isinstance(data, str):
        data = {"prompt": data}
    if not isinstance(data, dict):
        return Job(number, error="expected a prompt string or an object with \"prompt\" or \"messages\"")
    job = Job(number, data.get("id"))
    try:
        job.options = base.merged(dict(data.get("options") or {}))
        job.messages = _messages(data, system)
    except (UsageError, TypeError, ValueError) as e:
        job.error = str(e)
    return job


def _messages(data: dict[str, Any], system: str | None) -> list[dict[str, Any]]:
    prefix = [{"role": "system", "content": system}] if system else []
    if isinstance(data.get("messages"), list) and data["messages"]:
        return data["messages"] if any(m.get("role") == "system" for m in data["messages"]) else \
            prefix + data["messages"]
    if isinstance(data.get("prompt"), str):
        if not data["prompt"].strip():
            raise ValueError("empty prompt")
        return prefix + [{"role": "user", "content": data["prompt"]}]
    raise ValueError("expected \"prompt\" (a string) or \"messages\" (a list)")


def read_jobs(path: Path, base: GenerateOptions, system: str | None) -> tuple[list[Job], str]:
    """The jobs of every non-blank line, and the sha256 of the input (what a resumed output must match).
    A line that is not UTF-8 is a job carrying that error, not the end of the batch."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    jobs = [parse_line(n, raw, base, system) for n, raw in enumerate(data.splitlines(), 1) if raw.strip()]
    return jobs, hashlib.sha256(data).hexdigest()


def finished_lines(out: Path) -> set[int]:
    """Line numbers answered in `out`. A torn last line (a kill mid-write) and the lines that failed are
    removed from the file, so that a rerun asks them again and writes them once."""
    if not out.exists():
        return set()
    data = out.read_bytes()
    kept, done = [], set()
    for raw in data[: data.rfind(b"\n") + 1].splitlines(keepends=True):
        try:
            record = json.loads(raw)
            number = int(record["line"])
        except (ValueError, KeyError, TypeError):
            continue
        if "error" not in record:
            kept.append(raw)
            done.add(number)
    if len(kept) != data.count(b"\n") or not data.endswith(b"\n"):
        atomic_write(out, b"".join(kept))
    return done


def check_resumable(out: Path, stamp: dict[str, str]) -> None:
    """Refuse to add to `out` unless it is empty or was written for the same input and model (its `.batch`
    file says so); record the stamp for a new output."""
    sidecar = stamp_file(out)
    if not out.exists() or out.stat().st_size == 0:
        atomic_write(sidecar, json.dumps(stamp).encode())
        return
    try:
        recorded = json.loads(sidecar.read_bytes())
    except (OSError, ValueError):
        raise UsageError(f"{out} already exists and was not written by `localrun batch` (no {sidecar.name}); "
                         f"give another --output, or delete it to start over") from None
    for key, what in (("sha256", "another input"), ("model", "another model")):
        if recorded.get(key) != stamp[key]:
            theirs = recorded.get("input") if key == "sha256" else recorded.get("model")
            raise UsageError(f"{out} holds answers for {what} ({theirs}); give another --output, "
                             f"or delete it to start over")


def stamp_file(out: Path) -> Path:
    return out.with_name(out.name + ".batch")


def sort_output(out: Path) -> None:
    """Put the records back in input order after retried lines were appended at the end."""
    lines = out.read_bytes().splitlines(keepends=True)
    ordered = sorted(lines, key=lambda raw: json.loads(raw)["line"])
    if ordered != lines:
        atomic_write(out, b"".join(ordered))


def answer(client: Client, model: str, job: Job) -> dict[str, Any]:
    """The output record of one job: the answer, or the error that stopped it."""
    record: dict[str, Any] = {"line": job.line} | ({"id": job.id} if job.id is not None else {})
    if job.error:
        return record | {"error": job.error}
    try:
        completion = _chat(client, model, job)
    except LocalrunError as e:
        return record | {"error": e.message}
    usage = completion.usage
    record |= {"response": completion.text, "finish_reason": completion.finish_reason,
               "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
               if usage else None}
    cut = cut_json(completion, job.options)
    return record | {"error": cut} if cut else record


def _chat(client: Client, model: str, job: Job, wait_s: float = OVERLOAD_WAIT_S) -> Completion:
    """One request; a full queue (503) is waited out as Retry-After says, for up to `wait_s` in all
    (a count of tries would give up sooner on a slower machine, where each answer holds its slot longer)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return client.chat(model, job.messages or [], job.options)
        except Overloaded as e:
            if time.monotonic() + e.retry_after > deadline:
                raise
            time.sleep(e.retry_after)


@dataclass
class Tally:
    done: int = 0
    failed: int = 0
    tokens: int = 0


def run_batch(client: Client, model: str, jobs: list[Job], out: IO[str], concurrency: int) -> Tally:
    """Answer `jobs` with at most `concurrency` requests in flight, writing records in input order."""
    tally = Tally()
    started = time.monotonic()
    with _progress(len(jobs)) as (progress, task), ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures: list[Future] = [pool.submit(answer, client, model, job) for job in jobs]
        try:
            for future in futures:
                record = future.result()
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                out.flush()
                _count(tally, record)
                rate = tally.tokens / max(time.monotonic() - started, 1e-9)
                progress.update(task, advance=1, rate=f"{rate:.1f} tok/s", failed=tally.failed)
        except (KeyboardInterrupt, BrokenPipeError):
            pool.shutdown(wait=False, cancel_futures=True)
            client.close()  # in-flight requests end now; their lines are rerun on resume
            raise
    return tally


def _count(tally: Tally, record: dict[str, Any]) -> None:
    tally.done += 1
    if "error" in record:
        tally.failed += 1
    tally.tokens += ((record.get("usage") or {}).get("completion_tokens") or 0)


@contextmanager
def _progress(total: int) -> Iterator[tuple[Any, Any]]:
    """A rich progress bar on stderr (a terminal animates it; a pipe gets the final state)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("batch"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                        TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=False)
    task = progress.add_task("batch", total=total, rate="0.0 tok/s", failed=0)
    with progress:
        yield progress, task


def batch(client: Client, model: str, input_path: Path, output: Path | None, base: GenerateOptions,
          system: str | None, concurrency: int) -> Tally:
    """Read, skip what `output` already has, answer the rest; a summary line on stderr."""
    if concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    jobs, sha256 = read_jobs(input_path, base, system)
    done: set[int] = set()
    if output:
        check_resumable(output, {"input": str(input_path), "sha256": sha256, "model": model})
        done = finished_lines(output)
    pending = [job for job in jobs if job.line not in done]
    if done:
        sys.stderr.write(f"resuming: {len(jobs) - len(pending)} of {len(jobs)} lines already answered in {output}\n")
    started = time.monotonic()
    with (open(output, "a", encoding="utf-8") if output else nullcontext(sys.stdout)) as out:
        tally = run_batch(client, model, pending, out, concurrency)
    if output and done and pending:
        sort_output(output)
    elapsed = time.monotonic() - started
    sys.stderr.write(f"{tally.done} answered ({tally.failed} failed), {tally.tokens} tokens in {elapsed:.1f}s "
                     f"({tally.tokens / max(elapsed, 1e-9):.1f} tok/s)\n")
    return tally


__all__ = ["Job", "Tally", "parse_line", "read_jobs", "finished_lines", "check_resumable", "answer", "run_batch",
           "batch"]
