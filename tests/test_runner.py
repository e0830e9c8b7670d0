"""The runner child process through the daemon's side of its protocol: generation, crash
reporting and load errors, on the real model."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from localrun.errors import ContextOverflow, LocalrunError, ModelLoadError, RunnerCrashed
from localrun.native import GenerateRequest
from localrun.sampling import SamplingParams
from localrun.config import EngineSettings
from localrun.server.runner_process import RunnerProcess

OPTIONS = EngineSettings(parallel=2, ctx_size=512)


def request(prompt: str, max_tokens: int = 8, **kw) -> dict:
    """Greedy, and never ending early at an end-of-generation token: lengths are what the test asks."""
    sampling = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    return GenerateRequest(model="m", prompt=prompt, sampling=sampling, **kw).to_dict()


async def generate(runner: RunnerProcess, prompt: str, max_tokens: int = 8) -> tuple[str, dict]:
    text, done = [], {}
    async for message in runner.stream("generate", request=request(prompt, max_tokens)):
        if message["type"] == "delta":
            text.append(message["text"])
        elif message["type"] == "done":
            done = message
    return "".join(text), done


def test_generates_tokenizes_and_reports_info(smollm2_path):
    async def main() -> None:
        runner = await RunnerProcess.start(smollm2_path, OPTIONS)
        try:
            assert runner.info["parallel"] == 2 and runner.info["ctx_size"] == 512
            text, done = await generate(runner, "The capital of France is")
            assert text and done["finish_reason"] == "length" and done["text"] == text
            assert done["timings"]["generated_tokens"] == 8
            tokens = (await runner.call("tokenize", text="hello world", special=False))["tokens"]
            assert (await runner.call("detokenize", tokens=tokens))["text"] == "hello world"
            with pytest.raises(ContextOverflow):
                await generate(runner, "word " * 1000)
            assert runner.alive  # a refused request does not hurt the runner
        finally:
            await runner.close()
        assert runner.proc.returncode == 0

    asyncio.run(main())


def test_cancel_by_closing_the_stream_frees_the_slot(smollm2_path):
    async def main() -> None:
        runner = await RunnerProcess.start(smollm2_path, EngineSettings(parallel=1, ctx_size=512))
        try:
            stream = runner.stream("generate", request=request("Tell a long story.", max_tokens=400))
            async for message in stream:
                if message["type"] == "delta":
                    break
            await stream.aclose()
            text, done = await asyncio.wait_for(generate(runner, "Hi", 4), 30)  # the only slot is free again
            assert done["timings"]["generated_tokens"] == 4
        finally:
            await runner.close()

    asyncio.run(main())


def test_sigkill_mid_stream_gives_every_request_the_reason(smollm2_path):
    async def main() -> None:
        runner = await RunnerProcess.start(smollm2_path, OPTIONS)

        async def consume() -> None:
            await generate(runner, "Tell a long story about the sea.", max_tokens=400)

        tasks = [asyncio.create_task(consume()) for _ in range(2)]
        await asyncio.sleep(0.5)
        os.kill(runner.pid, signal.SIGKILL)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            assert isinstance(result, RunnerCrashed), result
            assert "SIGKILL" in result.message
        assert not runner.alive
        with pytest.raises(RunnerCrashed):
            await generate(runner, "again")

    asyncio.run(main())


@pytest.mark.parametrize("content", [b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64, b"<html>not a model</html>"])
def test_a_file_llama_cannot_load_is_a_load_error(tmp_path, content):
    path = tmp_path / "broken.gguf"
    path.write_bytes(content)

    async def main() -> None:
        with pytest.raises(ModelLoadError, match="model failed to load"):
            await RunnerProcess.start(path, OPTIONS)

    asyncio.run(main())


def test_info_describes_the_build():
    out = subprocess.run([sys.executable, "-m", "localrun.runner", "--info"], capture_output=True, text=True,
                         timeout=60, check=True)
    info = json.loads(out.stdout)
    assert info["default_threads"] >= 1 and "CPU" in info["system_info"]
    assert isinstance(info["supports_gpu_offload"], bool)


def test_perplexity_runs_beside_generation(smollm2_path):
    """Perplexity of a long text takes many decodes on a context of its own, on a thread of its own:
    a generation sent after it is answered before it ends."""
    from tests.test_perplexity import TEXT

    async def main() -> None:
        runner = await RunnerProcess.start(smollm2_path, EngineSettings(parallel=1, ctx_size=512))
        try:
            job = asyncio.create_task(runner.call("perplexity", text=TEXT * 2, ctx=32, batch=32))  # ~35 decodes
            await asyncio.sleep(0.5)
            text, done = await asyncio.wait_for(generate(runner, "Hi", 4), 60)
            assert done["timings"]["generated_tokens"] == 4 and not job.done()
            assert (await asyncio.wait_for(job, 300))["chunks"] >= 25
        finally:
            await runner.close()
        assert runner.proc.returncode == 0

    asyncio.run(main())


def test_an_exception_in_one_request_ends_that_request_only(smollm2_path):
    """A bug a request reaches inside the runner (here: a text that is not text) fails that request
    with a short message, no source lines, while another generation goes on untouched."""
    async def main() -> None:
        runner = await RunnerProcess.start(smollm2_path, OPTIONS)
        try:
            alone, _ = await generate(runner, "Once upon a time", 16)
            victim = asyncio.create_task(generate(runner, "Once upon a time", 16))
            with pytest.raises(LocalrunError) as failed:
                await runner.call("tokenize", text=12345, special=False)
            message = failed.value.message
            assert message.startswith("internal error in the runner (") and "the model goes on" in message
            assert "File " not in message and "line " not in message
            with pytest.raises(LocalrunError, match="internal error"):  # a request the runner cannot even read
                await generate_request(runner, {**request("hi", 4, n=2), "sampling": {"logit_bias": {"x": 1}}})
            assert (await victim)[0] == alone and runner.alive
            assert (await generate(runner, "Once upon a time", 16))[0] == alone
        finally:
            await runner.close()

    asyncio.run(main())


async def generate_request(runner: RunnerProcess, body: dict) -> list[dict]:
    return [message async for message in runner.stream("generate", request=body)]


def test_without_deltas_only_logprobs_travel_and_done_has_the_whole_text(smollm2_path):
    """A request nobody streams (GenerateRequest.deltas False) costs the daemon no wake-up per token:
    the runner sends no deltas, unless they carry logprobs, and Done carries the same text."""
    async def main() -> None:
        runner = await RunnerProcess.start(smollm2_path, OPTIONS)
        try:
            streamed = await generate_request(runner, request("Once upon a time", 12))
            quiet = await generate_request(runner, request("Once upon a time", 12, deltas=False))
            with_logprobs = request("Once upon a time", 12, deltas=False)
            with_logprobs["sampling"]["logprobs"] = 2
            scored = await generate_request(runner, with_logprobs)
        finally:
            await runner.close()
        kinds = [m["type"] for m in quiet]
        assert "delta" not in kinds and kinds[-1] == "done"
        assert quiet[-1]["text"] == streamed[-1]["text"] == "".join(m["text"] for m in streamed if m["type"] == "delta")
        deltas = [m for m in scored if m["type"] == "delta"]
        assert len(deltas) == 12 and all(m["logprobs"] for m in deltas) and scored[-1]["text"] == quiet[-1]["text"]

    asyncio.run(main())


@pytest.mark.parametrize("interval_ms, held", [(0, False), (1, False), (1000, True)])
def test_the_stream_interval_holds_a_streams_tokens_and_sends_each_as_its_own_delta(smollm2_path, interval_ms, held):
    """EngineSettings.stream_interval_ms: the first delta goes at once; later ones wait until one more
    step would keep them past the interval (1 ms: every step's token is due at its end), or until the
    choice ends (1 s, longer than 12 tokens take: the other 11 come in one write, just before Done).
    Held or not, each token is a delta of its own: clients see a chunk per token."""
    async def main() -> list[tuple[float, dict]]:
        options = EngineSettings(parallel=2, ctx_size=512, stream_interval_ms=interval_ms)
        runner = await RunnerProcess.start(smollm2_path, options)
        try:
            stream = runner.stream("generate", request=request("Once upon a time", 12))
            return [(time.perf_counter(), message) async for message in stream]
        finally:
            await runner.close()

    seen = asyncio.run(main())
    messages = [m for _, m in seen]
    arrivals = [at for at, m in seen if m["type"] == "delta"]
    kinds = [m["type"] for m in messages]
    assert len(arrivals) == 12 and kinds.index("started") < kinds.index("delta") and kinds[-1] == "done"
    assert "".join(m["text"] for m in messages if m["type"] == "delta") == messages[-1]["text"]
    assert messages[-1]["timings"]["generated_tokens"] == 12
    later_spread, answer_time = arrivals[-1] - arrivals[1], seen[-1][0] - arrivals[0]
    assert (later_spread < 0.1 * answer_time) if held else (later_spread > 0.5 * answer_time)


def test_a_steps_decode_tokens_go_out_before_its_prompt_chunks_run(smollm2_path):
    """A step evaluates the running streams' tokens in one llama_decode call and a new prompt in the
    next: the runner sends each call's tokens as soon as they are sampled, so a running stream's
    token does not wait for another request's prefill (nor a prompt's first token for the others')."""
    async def main() -> tuple[list[tuple[float, str, dict]], dict]:
        runner = await RunnerProcess.start(smollm2_path, EngineSettings(parallel=2, ctx_size=1024))
        seen: list[tuple[float, str, dict]] = []
        two_deltas = asyncio.Event()

        async def consume(name: str, body: dict) -> None:
            async for message in runner.stream("generate", request=body):
                seen.append((time.perf_counter(), name, message))
                if name == "running" and sum(m["type"] == "delta" for _, _, m in seen) >= 2:
                    two_deltas.set()

        try:
            running = asyncio.create_task(consume("running", request("Once upon a time", 200)))
            await two_deltas.wait()
            await consume("new", request("The story so far: " + "the fox ran on and on, " * 60, 4))
            await running
        finally:
            await runner.close()
        return seen, next(m for _, name, m in seen if name == "new" and m["type"] == "done")

    seen, done = asyncio.run(main())
    accepted = next(t for t, name, m in seen if name == "new" and m["type"] == "accepted")  # before that step
    first_new = next(t for t, name, m in seen if name == "new" and m["type"] == "delta")
    running_in_that_step = min(t for t, name, m in seen if name == "running" and m["type"] == "delta" and t > accepted)
    prefill_s = done["timings"]["prompt_ms"] / 1000
    assert done["timings"]["prompt_tokens"] > 300
    assert first_new - running_in_that_step > prefill_s / 2, "the running stream's token waited for the prefill"


def test_once_requests_come_in_bursts_a_burst_starts_in_one_step(smollm2_path):
    """runner/bursts.py: two requests sent 20 ms apart to an idle runner. The first pair, before the
    runner has seen a burst, starts apart: the second prompt waits for the first's step, so its first
    token comes a whole prefill later. The next pair is gathered: both prompts are evaluated in one
    step, and their first tokens come out together (within the short last piece of the longer prompt)."""
    animals = iter(["fox", "owl", "cat", "elk"])

    async def first_token_gap(runner: RunnerProcess) -> tuple[float, float]:
        """Seconds between the pair's first tokens, and the second request's own prefill time."""
        firsts: dict[str, float] = {}
        dones: dict[str, dict] = {}

        async def consume(name: str) -> None:
            body = request(f"The {name} story: " + f"the {name} ran on and on, " * 20, 2)  # two fit one step
            async for message in runner.stream("generate", request=body):
                if message["type"] == "delta":
                    firsts.setdefault(name, time.perf_counter())
                elif message["type"] == "done":
                    dones[name] = message

        lead, follower = next(animals), next(animals)
        first = asyncio.create_task(consume(lead))
        await asyncio.sleep(0.02)  # the lead's step has begun, unless the runner waits for a burst
        await consume(follower)
        await first
        assert dones[follower]["timings"]["prompt_tokens"] > 120 and dones[follower]["timings"]["cached_tokens"] <= 1  # BOS
        return abs(firsts[follower] - firsts[lead]), dones[follower]["timings"]["prompt_ms"] / 1000

    async def main() -> tuple[tuple[float, float], tuple[float, float]]:
        runner = await RunnerProcess.start(smollm2_path, EngineSettings(parallel=2, ctx_size=1024, burst_wait_ms=50))
        try:
            await generate(runner, "Hello", 1)  # alone, once the runner is up (requests sent earlier wait for it)
            return await first_token_gap(runner), await first_token_gap(runner)
        finally:
            await runner.close()

    (apart, prefill), (together, _) = asyncio.run(main())
    assert apart > prefill / 2, "the first pair was gathered before any burst was seen"
    assert together < apart / 3, f"the second pair started apart: {together:.3f} s between first tokens"
