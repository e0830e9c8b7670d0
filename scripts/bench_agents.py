"""What agents pay: the Anthropic dialect, forced tool calls and Claude Code's prompt cache, each
against its baseline in the same run.

    python scripts/bench_agents.py [--rounds 3]

With the bundled SmolLM2-135M on a fresh daemon:
  1. streaming through /v1/messages (Anthropic SSE, pings) vs /v1/chat/completions (OpenAI SSE), the same
     greedy request: wall time per request;
  2. decode tok/s of a tool_choice "required" answer (grammar from 2 tool schemas) vs a free answer;
  3. a Claude Code-shaped turn (2.5K-token prompt: system blocks led by the billing line, 12 tools) a second
     time with a new billing line (stripped, so the prefix is cached) vs with a new first line that is not
     the billing line (what every turn would cost if the line were kept): time to the first SSE content event;
  4. the tool-call holdback and parser in pure Python: microseconds per streamed token.
Rounds alternate the measurement and its baseline (except in 3, see there); medians are compared.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.daemon import start_daemon  # noqa: E402
from tests.test_anthropic_claude_code import TOOLS, system, user_turn  # noqa: E402
from tests.tool_fixtures import ADD, WEATHER, openai_tool  # noqa: E402

from localrun.families import CallHoldback, parse_tool_calls  # noqa: E402

MODEL = "smollm2"
QUESTION = [{"role": "user", "content": "Explain in detail how a bicycle works."}]


def stream_seconds(client: httpx.Client, path: str, body: dict) -> tuple[float, float]:
    """(seconds to the first content event, seconds to the end) of one streamed request."""
    start, first = time.perf_counter(), None
    with client.stream("POST", path, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and ('"text_delta"' in line or '"content":"' in line or "input_json" in line):
                first = time.perf_counter()
    end = time.perf_counter()
    return (first or end) - start, end - start


def dialects(client: httpx.Client, rounds: int) -> None:
    anthropic = {"model": MODEL, "max_tokens": 128, "temperature": 0, "stream": True, "messages": QUESTION}
    openai = {"model": MODEL, "max_tokens": 128, "temperature": 0, "stream": True, "messages": QUESTION}
    a, o = [], []
    for _ in range(rounds):
        o.append(stream_seconds(client, "/v1/chat/completions", openai)[1])
        a.append(stream_seconds(client, "/v1/messages", anthropic)[1])
    report("128 tokens streamed: Anthropic /v1/messages vs OpenAI", statistics.median(a), statistics.median(o), "s")


def decode_rate(client: httpx.Client, **extra) -> float:
    body = {"model": MODEL, "max_tokens": 60, "temperature": 0, "messages": [
        {"role": "user", "content": "What is the weather in Paris in celsius?"}], **extra}
    return client.post("/v1/chat/completions", json=body).json()["timings"]["predicted_per_second"]


def forced_calls(client: httpx.Client, rounds: int) -> None:
    tools = [openai_tool(WEATHER), openai_tool(ADD)]
    forced, free = [], []
    for _ in range(rounds):
        free.append(decode_rate(client))
        forced.append(decode_rate(client, tools=tools, tool_choice="required"))
    report("decode tok/s: required tool call (grammar) vs free text", statistics.median(forced),
           statistics.median(free), "tok/s")


def claude_code_turn(first_line: str) -> dict:
    blocks = system("bench")
    blocks[0] = {"type": "text", "text": first_line}
    return {"model": MODEL, "max_tokens": 8, "temperature": 0, "stream": True, "tools": TOOLS,
            "system": blocks, "messages": [user_turn("What does this project do?")]}


def prompt_cache(client: httpx.Client, rounds: int) -> None:
    billing = lambda: f"x-anthropic-billing-header: cc_version=2.0.14; cch={uuid.uuid4().hex[:5]};"  # noqa: E731
    other = lambda: f"session-marker: {uuid.uuid4().hex[:5]}"  # noqa: E731
    stream_seconds(client, "/v1/messages?beta=true", claude_code_turn(billing()))  # warm the prefix once
    # Not interleaved: a request sharing only the template's first tokens with the cached slot takes that
    # slot (the scheduler prefers the longest shared prefix, however short) and would evict the cache.
    cached = [stream_seconds(client, "/v1/messages?beta=true", claude_code_turn(billing()))[0] for _ in range(rounds)]
    uncached = [stream_seconds(client, "/v1/messages?beta=true", claude_code_turn(other()))[0] for _ in range(rounds)]
    report("Claude Code turn, time to first content: billing line stripped vs a changing first line",
           statistics.median(cached), statistics.median(uncached), "s")


def holdback_cost() -> None:
    tokens = ["The", " answer", " is", " simple", ":", " use", " the", " tool", "."] * 200
    tokens += ["<tool", "_call>", '{"name": "add", ', '"arguments": {"a": 1, "b": 2}}', "</tool_call>"]
    start = time.perf_counter()
    holdback = CallHoldback()
    for token in tokens:
        holdback.push(token)
    parse_tool_calls(holdback.finish(), {"add"})
    per_token = (time.perf_counter() - start) / len(tokens) * 1e6
    print(f"holdback + parser: {per_token:.2f} µs per streamed token")


def report(what: str, value: float, baseline: float, unit: str) -> None:
    print(f"{what}: {value:.3f} {unit} vs {baseline:.3f} {unit} (ratio {value / baseline:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as home:
        daemon = start_daemon(Path(home) / "home")
        try:
            with httpx.Client(base_url=daemon.url, timeout=300) as client:
                decode_rate(client)  # load the model
                dialects(client, args.rounds)
                forced_calls(client, args.rounds)
                prompt_cache(client, args.rounds)
        finally:
            daemon.stop()
    holdback_cost()


if __name__ == "__main__":
    main()
