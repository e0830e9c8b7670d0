"""Load test: N concurrent streaming clients for T seconds against a loopback daemon, mixing the
OpenAI, Ollama and Anthropic routes (those the daemon has) and cancellations.

    python scripts/loadtest.py                       # 64 clients, 60 s, its own daemon on the bundled model
    python scripts/loadtest.py --clients 8 --duration 10 --json
    python scripts/loadtest.py --url http://127.0.0.1:11435 --pid 1234   # a running daemon (loopback only)

Pass (exit 0) when:
  - no request failed, except 503 "busy" answers (documented overload, retried after Retry-After);
  - every finished greedy answer is identical to the same request run alone before the load
    (no request ever sees another's data);
  - the memory of the daemon and its runners (RSS) at the end is within 10% of its value after
    the first minute (or after half the run, when the run is shorter).

Bounded: at most --max-requests requests and --duration seconds (at most 600), loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPTS = [
    "Name three colors.", "What is 2 + 2?", "Say hello in French.", "List two animals that fly.",
    "What is the capital of Italy?", "Give me a word that rhymes with cat.", "Count from one to five.",
    "Describe the sea in one sentence.",
]
MAX_DURATION_S = 600
MEMORY_TOLERANCE = 0.10


# --- one request in each dialect ---------------------------------------------------------------


@dataclass(frozen=True)
class Dialect:
    name: str
    path: str

    def body(self, model: str, prompt: str, max_tokens: int) -> dict:
        messages = [{"role": "user", "content": prompt}]
        if self.name == "ollama":
            return {"model": model, "messages": messages, "stream": True,
                    "options": {"temperature": 0, "seed": 1, "num_predict": max_tokens}}
        if self.name == "anthropic":
            return {"model": model, "messages": messages, "stream": True, "temperature": 0, "max_tokens": max_tokens}
        return {"model": model, "messages": messages, "stream": True, "temperature": 0, "seed": 1,
                "max_tokens": max_tokens}

    def text_of(self, line: str) -> str:
        """The text a stream line carries; raises StreamError on an error event."""
        if self.name == "ollama":
            data = json.loads(line) if line.strip() else {}
            if "error" in data:
                raise StreamError(str(data["error"]))
            return data.get("message", {}).get("content", "")
        if not line.startswith("data: ") or line == "data: [DONE]":
            return ""
        data = json.loads(line[6:])
        if "error" in data:
            raise StreamError(json.dumps(data["error"]))
        if self.name == "anthropic":
            return data.get("delta", {}).get("text", "") if data.get("type") == "content_block_delta" else ""
        choices = data.get("choices") or [{}]
        return choices[0].get("delta", {}).get("content") or ""


DIALECTS = [Dialect("openai", "/v1/chat/completions"), Dialect("ollama", "/api/chat"),
            Dialect("anthropic", "/v1/messages")]


class StreamError(Exception):
    pass


class Busy(Exception):
    def __init__(self, retry_after: float) -> None:
        self.retry_after = retry_after


@dataclass
class Outcome:
    text: str
    ttft: float | None
    cancelled: bool


async def run_one(client: httpx.AsyncClient, dialect: Dialect, body: dict, cancel_after: int | None) -> Outcome:
    """Stream one answer; with `cancel_after`, hang up after that many text pieces."""
    started, ttft, pieces = time.perf_counter(), None, []
    async with client.stream("POST", dialect.path, json=body) as response:
        if response.status_code == 503:
            raise Busy(float(response.headers.get("retry-after", "1")))
        if response.status_code != 200:
            raise StreamError(f"HTTP {response.status_code}: {(await response.aread())[:200]!r}")
        async for line in response.aiter_lines():
            text = dialect.text_of(line)
            if text:
                ttft = ttft if ttft is not None else time.perf_counter() - started
                pieces.append(text)
                if cancel_after is not None and len(pieces) >= cancel_after:
                    return Outcome("".join(pieces), ttft, True)
    return Outcome("".join(pieces), ttft, False)


# --- the load -----------------------------------------------------------------------------------


@dataclass
class Results:
    requests: int = 0
    completed: int = 0
    cancelled: int = 0
    busy: int = 0
    errors: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)


async def client_loop(index: int, client: httpx.AsyncClient, cases: list[tuple[Dialect, str]],
                      reference: dict, args: argparse.Namespace, deadline: float, results: Results) -> None:
    rng = random.Random(index)
    while time.monotonic() < deadline and results.requests < args.max_requests:
        dialect, prompt = rng.choice(cases)
        cancel_after = rng.randint(1, 3) if rng.random() < args.cancel_rate else None
        results.requests += 1
        try:
            outcome = await run_one(client, dialect, dialect.body(args.model, prompt, args.max_tokens), cancel_after)
        except Busy as busy:
            results.busy += 1
            await asyncio.sleep(min(busy.retry_after, 2.0))
            continue
        except (StreamError, httpx.HTTPError, ValueError) as e:
            results.errors.append(f"{dialect.name}: {type(e).__name__}: {e}"[:300])
            continue
        if outcome.ttft is not None:
            results.ttfts.append(outcome.ttft)
        if outcome.cancelled:
            results.cancelled += 1
            continue
        results.completed += 1
        expected = reference[(dialect.name, prompt)]
        if outcome.text != expected:
            results.mismatches.append(f"{dialect.name} {prompt!r}: got {outcome.text!r}, alone {expected!r}"[:400])


async def references(client: httpx.AsyncClient, cases: list[tuple[Dialect, str]], args) -> tuple[dict, list[float]]:
    """Each request run alone, one at a time: the answers the loaded runs must reproduce, and the
    time to first token without load (the baseline for the loaded figures)."""
    out, ttfts = {}, []
    for dialect, prompt in cases:
        outcome = await run_one(client, dialect, dialect.body(args.model, prompt, args.max_tokens), None)
        out[(dialect.name, prompt)] = outcome.text
        ttfts.extend([outcome.ttft] if outcome.ttft is not None else [])
    return out, sorted(ttfts)


async def sample_memory(pid: int, at: float, box: dict) -> None:
    await asyncio.sleep(at)
    box["baseline"] = process_tree_rss(pid)


async def load(args: argparse.Namespace, base_url: str, pid: int | None) -> dict:
    limits = httpx.Limits(max_connections=args.clients + 4, max_keepalive_connections=args.clients + 4)
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(args.timeout, connect=10.0), limits=limits,
                                 headers=auth_headers()) as client:
        paths = (await client.get("/openapi.json")).json()["paths"]
        dialects = [d for d in DIALECTS if d.path in paths]
        cases = [(d, p) for d in dialects for p in PROMPTS[:args.prompts]]
        reference, alone = await references(client, cases, args)
        results, memory = Results(), {}
        started = time.monotonic()
        deadline = started + args.duration
        checkpoint = min(60.0, args.duration / 2)
        sampler = asyncio.create_task(sample_memory(pid, checkpoint, memory)) if pid else None
        await asyncio.gather(*(client_loop(i, client, cases, reference, args, deadline, results)
                               for i in range(args.clients)))
        elapsed = time.monotonic() - started
        if sampler is not None:
            await sampler
            memory["end"] = process_tree_rss(pid)
    return summary(args, dialects, results, elapsed, memory, checkpoint, alone)


def summary(args, dialects, results: Results, elapsed: float, memory: dict, checkpoint: float,
            alone: list[float]) -> dict:
    ttfts = sorted(results.ttfts)
    growth = (memory["end"] / memory["baseline"] - 1.0) if memory.get("baseline") else None
    ok = not results.errors and not results.mismatches and results.completed > 0
    ok = ok and (growth is None or growth <= MEMORY_TOLERANCE)
    return {
        "pass": ok, "clients": args.clients, "duration_s": round(elapsed, 1), "dialects": [d.name for d in dialects],
        "requests": results.requests, "completed": results.completed, "cancelled": results.cancelled,
        "busy_503": results.busy, "errors": len(results.errors), "mismatches": len(results.mismatches),
        "ttft_p50_ms": round(percentile(ttfts, 0.50) * 1000, 1) if ttfts else None,
        "ttft_p99_ms": round(percentile(ttfts, 0.99) * 1000, 1) if ttfts else None,
        "ttft_alone_p50_ms": round(percentile(alone, 0.50) * 1000, 1) if alone else None,
        "memory_checkpoint_s": checkpoint,
        "rss_at_checkpoint_mb": round(memory["baseline"] / 2**20, 1) if memory.get("baseline") else None,
        "rss_at_end_mb": round(memory["end"] / 2**20, 1) if memory.get("end") else None,
        "rss_growth": round(growth, 4) if growth is not None else None,
        "first_errors": results.errors[:5], "first_mismatches": results.mismatches[:5],
    }


def percentile(sorted_values: list[float], q: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    return statistics.quantiles(sorted_values, n=100, method="inclusive")[min(98, max(0, int(q * 100) - 1))]


# --- processes ----------------------------------------------------------------------------------


def process_tree_rss(pid: int) -> int:
    """RSS in bytes of the daemon and its runner children (read from /proc)."""
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = dict(line.split(":", 1) for line in (proc / "status").read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if int(proc.name) == pid or int(status.get("PPid", "0").strip()) == pid:
            total += int(status.get("VmRSS", "0 kB").split()[0]) * 1024
    return total


def auth_headers() -> dict[str, str]:
    from localrun.config import read

    keys = read("LOCALRUN_API_KEY")
    return {"Authorization": f"Bearer {keys[0]}"} if keys else {}


def start_own_daemon(args: argparse.Namespace):
    from tests.daemon import start_daemon

    home = Path(tempfile.mkdtemp(prefix="localrun-loadtest-"))
    return start_daemon(home, {"LOCALRUN_PARALLEL": str(args.parallel), "LOCALRUN_MAX_QUEUE": str(args.max_queue)})


def check_loopback(url: str) -> None:
    host = urlsplit(url).hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1") and not host.startswith("127."):
        raise SystemExit(f"loadtest: refusing to load {host}: loopback daemons only")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--duration", type=float, default=60.0, help=f"seconds of load (at most {MAX_DURATION_S})")
    p.add_argument("--max-requests", type=int, default=20_000, help="stop after this many requests in all")
    p.add_argument("--max-tokens", type=int, default=24, help="tokens per answer")
    p.add_argument("--cancel-rate", type=float, default=0.15, help="share of requests hung up after 1-3 pieces")
    p.add_argument("--prompts", type=int, default=len(PROMPTS), help=f"distinct prompts (1-{len(PROMPTS)})")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--url", help="a running loopback daemon (default: start one with the bundled model)")
    p.add_argument("--pid", type=int, help="with --url: the daemon's pid, for the memory check")
    p.add_argument("--parallel", type=int, default=4, help="own daemon: LOCALRUN_PARALLEL")
    p.add_argument("--max-queue", type=int, default=64, help="own daemon: LOCALRUN_MAX_QUEUE")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a response may stay silent (a busy box queues)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    args = p.parse_args(argv)
    if not 0 < args.duration <= MAX_DURATION_S:
        p.error(f"--duration must be within (0, {MAX_DURATION_S}]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    daemon = None if args.url else start_own_daemon(args)
    url = args.url or daemon.url
    check_loopback(url)
    try:
        result = asyncio.run(load(args, url, args.pid if args.url else daemon.proc.pid))
    finally:
        if daemon is not None:
            daemon.stop()
            shutil.rmtree(daemon.home, ignore_errors=True)  # its copy of the model, ~100 MB
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>22}: {value}")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
