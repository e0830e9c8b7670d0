"""The runner's loop: one thread owns the engine; it takes messages between steps and streams events.

A reader thread turns socket lines into an inbox; the engine thread drains the inbox (blocking
only when the engine is idle; then, while requests come in bursts, it waits a moment for the rest
of one, `bursts.py`), runs one engine step, and sends what each of its `llama_decode` calls
produced in one write, so the daemon wakes once per call, not once per sequence, and tokens sampled
early in a step (the decode tokens, a prompt finished in its first call) do not wait for the step's
later prompt chunks. Every request that touches the llama context (generate, tokenize,
embed, render, score) runs on the engine thread; perplexity, which brings a context of its own and
can run for minutes, runs on a thread of its own.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any

from localrun.engine import Engine, Finished, Request, Token
from localrun.engine.embed import Truncate
from localrun.engine.perplexity import perplexity
from localrun.engine.settings import allowed_cpus
from localrun.errors import InvalidRequest, LocalrunError
from localrun.families import GENERIC, Family, OutputParser, family_for
from localrun.native import Delta, Done, GenerateRequest, Started, TokenLogprob, encode_event
from localrun.ops import (
    OPS, Detokenize, Embed, Embeddings, Health, HealthCheck, Perplexity, PromptLogprobs, PromptTokens, Render, Score,
    Scores, Text, Tokenize, Tokens,
)
from localrun.runner.bursts import GATHER_GAPS, Bursts
from localrun.runner.interval import Held, stream_interval
from localrun.runner.prompt import build_chat, build_grammar, build_prompt
from localrun.runner.protocol import Channel
from localrun.sampling import SamplingParams
from localrun.tools import active_tools

SHUTDOWN = {"op": "shutdown"}


@dataclass(slots=True)
class _Choice:
    """The runner's view of one engine sequence: which request and choice it serves, its answer and
    thinking so far. The family's parser splits the text; the thinking tokens are counted (usage
    reports them), and with a reasoning budget the thought is closed once they reach it."""

    request_id: str
    index: int
    parser: OutputParser
    budget: int | None = None
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    thought_tokens: int = 0
    context: list[int] | None = None  # prompt + generated token ids, when the request wants them back
    deltas: bool = True  # False: deltas are sent only for their logprobs (GenerateRequest.deltas)
    held: Held = field(default_factory=Held)  # deltas waiting for the stream interval (interval.py)

    def over_budget(self) -> bool:
        """Counts this token when it is thinking; True once, when that makes the thinking reach its budget."""
        if not self.parser.thinking:
            return False
        self.thought_tokens += 1
        return self.thought_tokens == self.budget


class RunnerHost:
    def __init__(self, engine: Engine, channel: Channel) -> None:
        self.engine = engine
        self.channel = channel
        self.inbox: queue.SimpleQueue[tuple[float, dict[str, Any]]] = queue.SimpleQueue()  # (arrival, message)
        self.choices: dict[str, _Choice] = {}  # engine request id -> choice
        self.unslotted: set[str] = set()  # choices that have not got their sequence slot yet
        self.family: Family = family_for(engine.model.chat_template())
        self.jobs: dict[str, tuple[threading.Thread, threading.Event]] = {}  # request id -> background job
        self.stopping = False
        self.cpus = len(allowed_cpus())
        self.interval = 0.0  # seconds a stream's tokens are held after its first; set for each step (interval.py)
        self.bursts = Bursts(engine.settings.burst_wait_ms / 1000.0)

    def run(self) -> None:
        threading.Thread(target=self._read, name="runner-reader", daemon=True).start()
        while not self.stopping:
            idle = not self.engine.has_work
            self._drain(block=idle)
            if idle and self.engine.has_work:
                self._gather()
            if self.engine.has_work and not self.stopping:
                began = time.perf_counter()
                self.interval = self._interval_now()
                for events in self.engine.calls():  # each llama_decode call's tokens go out before the next call
                    started = self._started()  # before the events: a choice's Started precedes its first delta
                    messages = started + [message for event in events for message in self._emit_one(event)]
                    self.channel.send_all(messages + self._due(began))
        for thread, stop in list(self.jobs.values()):  # the model must outlive them
            stop.set()
            thread.join()

    def _interval_now(self) -> float:
        """Seconds a stream's tokens are held after its first, for the threads decoding now."""
        engine = self.engine
        return stream_interval(engine.settings.stream_interval_ms, engine.threads, self.cpus,
                               on_gpu=bool(engine.model.gpu_layers))

    def _read(self) -> None:
        try:
            for message in self.channel:
                self.inbox.put((time.perf_counter(), message))
        finally:
            self.inbox.put((time.perf_counter(), SHUTDOWN))  # the parent is gone: nobody to answer

    def _drain(self, block: bool) -> None:
        try:
            item = self.inbox.get(block=block)
            while True:
                self._handle(*item)
                item = self.inbox.get_nowait()
        except queue.Empty:
            pass

    def _gather(self) -> None:
        """The engine was idle and has work now: while requests come in bursts, take each next one that
        comes within a moment of the last, so that their prompts share the first step (`bursts.py`)."""
        wait = self.bursts.wait()
        if not wait:
            return
        deadline = time.perf_counter() + GATHER_GAPS * wait
        while not self.stopping and (left := deadline - time.perf_counter()) > 0:
            try:
                self._handle(*self.inbox.get(timeout=min(wait, left)))
            except queue.Empty:
                return

    def _handle(self, arrival: float, message: dict[str, Any]) -> None:
        op, rid = message.get("op"), message.get("id", "")
        if op == "generate":
            self.bursts.arrived(arrival, idle=not self.engine.has_work)
        if op == "shutdown":
            self.stopping = True
            return
        try:
            handler = getattr(self, f"_op_{op}")
        except AttributeError:
            self.channel.send({"type": "error", "id": rid, "message": f"unknown op {op!r}", "error": "InvalidRequest"})
            return
        try:
            if op in OPS:  # a typed operation (localrun.ops): its answer goes back as a "result"
                answer = handler(rid, OPS[op].from_dict(message))
                if answer is not None:  # perplexity answers later, from its own thread
                    self._result(rid, answer)
            else:
                handler(rid, message)
        except LocalrunError as e:
            self._error(rid, e)
        except Exception as e:  # noqa: BLE001 - one request's bug must not end the others
            self._error(rid, internal_error(e))

    def _error(self, rid: str, error: LocalrunError) -> None:
        self.channel.send({"type": "error", "id": rid, "message": error.message, "error": type(error).__name__})

    def _op_generate(self, rid: str, message: dict[str, Any]) -> None:
        request = GenerateRequest.from_dict(message["request"])
        family = self._family(request)
        text, prompt = build_chat(self.engine, request, family)
        sampling = request.sampling
        grammar = build_grammar(request, family, text)
        if grammar is not None:
            sampling.grammar, sampling.grammar_triggers = grammar
        tools = active_tools(request.tools, request.tool_choice)
        names = {tool["name"] for tool in tools} if tools else None
        keys = [f"{rid}#{index}" for index in range(max(1, request.n))]
        try:
            for index, key in enumerate(keys):
                choice_sampling = sampling if request.n <= 1 or sampling.seed is None else _reseeded(sampling, index)
                self.engine.add(Request(id=key, prompt=prompt, sampling=choice_sampling, special_text=family.special_text))
                self.choices[key] = _Choice(rid, index, OutputParser(family, text, names), request.reasoning_budget,
                                            context=list(prompt) if request.return_context else None,
                                            deltas=request.deltas)
                self.unslotted.add(key)
        except Exception:
            self._drop(keys)  # the choices already queued go too: the request failed as a whole
            raise
        self.channel.send({"type": "accepted", "id": rid, "prompt_tokens": len(prompt)})

    def _family(self, request: GenerateRequest) -> Family:
        """The family of the template the request is rendered with: a Modelfile's TEMPLATE makes its
        own family; a raw prompt has no template."""
        if request.messages is None:
            return GENERIC
        return family_for(request.template) if request.template else self.family

    def _op_cancel(self, rid: str, message: dict[str, Any]) -> None:
        for key, choice in list(self.choices.items()):
            if choice.request_id == rid:
                self.engine.cancel(key)
        if rid in self.jobs:
            self.jobs[rid][1].set()

    def _op_tokenize(self, rid: str, op: Tokenize) -> Tokens:
        return Tokens(self.engine.tokenize(op.text, add_special=op.special, parse_special=True))

    def _op_detokenize(self, rid: str, op: Detokenize) -> Text:
        n_vocab = self.engine.model.n_vocab
        if any(not 0 <= token < n_vocab for token in op.tokens):  # llama.cpp aborts on an unknown id
            raise InvalidRequest(f"tokens: ids must be within the vocabulary (0..{n_vocab - 1})")
        return Text(self.engine.detokenize(op.tokens))

    def _op_render(self, rid: str, op: Render) -> Tokens:
        request = GenerateRequest(model="", messages=op.messages, tools=op.tools, tool_choice=op.tool_choice,
                                  template=op.template)
        return Tokens(build_prompt(self.engine, request, self._family(request)))

    def _op_embed(self, rid: str, op: Embed) -> Embeddings:
        texts: list[str] = op.inputs
        if op.truncate:  # cut to the context instead of refused (Ollama's default)
            texts = [Truncate(text) for text in texts]
        vectors, tokens = self.engine.embed(texts)
        return Embeddings(vectors, tokens)

    def _op_perplexity(self, rid: str, op: Perplexity) -> None:
        """On a thread and a llama context of its own, so this model's generations go on meanwhile
        (sharing the cores); a cancel stops it between two decodes."""
        stop = threading.Event()
        thread = threading.Thread(target=self._perplexity, args=(rid, op, stop), name=f"perplexity-{rid}", daemon=True)
        self.jobs[rid] = (thread, stop)
        thread.start()

    def _perplexity(self, rid: str, op: Perplexity, stop: threading.Event) -> None:
        engine = self.engine
        try:
            result = perplexity(engine.model, op.text, ctx=op.ctx, batch=op.batch, threads=engine.threads,
                                kv_type=engine.settings.kv_cache_type, flash_attn=engine.main_flash_attn, stop=stop)
            self._result(rid, result)
        except LocalrunError as e:
            self._error(rid, e)
        except Exception as e:  # noqa: BLE001 - on this thread an escaped error would leave the caller waiting forever
            self._error(rid, LocalrunError(f"perplexity failed: {e}"))
        finally:
            self.jobs.pop(rid, None)

    def _op_score(self, rid: str, op: Score) -> Scores:
        """Exact option scoring; an option's tokens are its text tokenized on its own (see server/score.py)."""
        started = time.perf_counter()
        prompt = build_prompt(self.engine, GenerateRequest(model="", messages=op.messages, prompt=op.prompt))
        options = [self.engine.tokenize(text, add_special=False, parse_special=False) for text in op.options]
        if not all(options):
            raise InvalidRequest("options: every option must have at least one token")
        logprobs = self.engine.score(prompt, options)
        return Scores(logprobs, [len(o) for o in options], len(prompt), self.engine.scoring_cached_tokens,
                      (time.perf_counter() - started) * 1000.0)

    def _op_prompt_logprobs(self, rid: str, op: PromptLogprobs) -> PromptTokens:
        """The prompt's own tokens with their log-probabilities (the first has none) and top alternatives."""
        engine = self.engine
        tokens = engine.tokenize(op.prompt, add_special=True, parse_special=True)
        if not tokens:  # an empty prompt (for a model that adds no BOS) has nothing to score
            return PromptTokens([])
        rows = engine.prompt_logprobs(tokens, op.top)
        piece = lambda token: engine.detokenize([token])  # noqa: E731
        return PromptTokens([TokenLogprob(piece(tokens[0]), None)] + [
            TokenLogprob(piece(token), logprob, [(piece(alt), lp) for alt, lp in top])
            for token, (logprob, top) in zip(tokens[1:], rows)
        ])

    def _op_health(self, rid: str, op: HealthCheck) -> Health:
        return Health(len(self.choices), self.engine.threads, round(self._interval_now() * 1000))

    def _result(self, rid: str, answer: Any) -> None:
        """An operation's typed answer (localrun.ops), as its "result" message."""
        self.channel.send({"type": "result", "id": rid, "value": answer.to_dict()})

    def _started(self) -> list[dict[str, Any]]:
        """A "started" message for each choice that got its slot in this step, with the prompt tokens
        its cache held: a dialect that reports usage before the first token (Anthropic's
        message_start) counts what the final usage will. Before the step's events, so before the
        choice's first delta."""
        out = []
        for key in list(self.unslotted):
            choice = self.choices.get(key)
            cached = self.engine.cached_tokens(key) if choice is not None else None
            if choice is None or cached is not None:
                self.unslotted.discard(key)
            if choice is not None and cached is not None:
                out.append(encode_event(choice.request_id, Started(choice.index, cached)))
        return out

    def _emit_one(self, event: Token | Finished) -> list[dict[str, Any]]:
        """The messages of one engine event; a failure, the engine's or ours, ends that request alone."""
        if isinstance(event, Finished) and event.reason == "error":
            print(f"request {event.request_id} failed in the engine: {event.error}", file=sys.stderr)
            self._end(event.request_id, request_failed((event.error or "").split(":")[0]))
            return []
        try:
            return self._emit(event)
        except Exception as e:  # noqa: BLE001 - one request's bug must not end the others
            self._end(event.request_id, internal_error(e))
            return []

    def _end(self, key: str, error: LocalrunError) -> None:
        """End the request that choice `key` belongs to with `error`; its other choices are cancelled."""
        choice = self.choices.pop(key, None)
        if choice is None:
            return
        self._drop([k for k, c in self.choices.items() if c.request_id == choice.request_id])
        self._error(choice.request_id, error)

    def _drop(self, keys: list[str]) -> None:
        """Forget these choices and cancel them in the engine (its Finished events then go nowhere)."""
        for key in keys:
            if self.choices.pop(key, None) is not None:
                self.engine.cancel(key)

    def _emit(self, event: Token | Finished) -> list[dict[str, Any]]:
        """The protocol messages one engine event makes (none while text is held back)."""
        choice = self.choices.get(event.request_id)
        if choice is None:
            return []
        if isinstance(event, Token):
            if choice.context is not None:
                choice.context.append(event.token)
            if choice.over_budget():
                close = choice.parser.family.close_thought
                self.engine.force(event.request_id, self.engine.tokenize(close, add_special=False, parse_special=True))
            reasoning, text = choice.parser.push(event.text)
            if text or reasoning or event.logprob is not None:
                return self._delta(choice, text, _logprobs(self.engine, event), reasoning)
            return []
        del self.choices[event.request_id]
        reasoning, rest, calls = choice.parser.finish(cut_off=event.reason == "length" or bool(event.stop_text))
        out = self._delta(choice, rest, [], reasoning) if rest or reasoning else []
        out += self._release(choice)
        timings = replace(event.timings, reasoning_tokens=choice.thought_tokens)
        done = Done(choice.index, "tool_calls" if calls else event.reason, timings, "".join(choice.text), calls,
                    event.stop_text, choice.context, "".join(choice.reasoning))
        out.append(encode_event(choice.request_id, done))
        return out

    def _delta(self, choice: _Choice, text: str, logprobs: list[TokenLogprob], reasoning: str = "") -> list[dict[str, Any]]:
        """The delta's message, if the request wants it and the stream interval lets it go now (else it
        is held until the interval is due, and then goes with the others held, each its own message in
        one write); its text counts toward the Done either way."""
        choice.text.append(text)
        choice.reasoning.append(reasoning)
        if not (choice.deltas or logprobs):
            return []
        delta = Delta(choice.index, text, logprobs, reasoning)
        return self._encoded(choice, choice.held.push(delta, time.perf_counter(), self.interval))

    def _release(self, choice: _Choice) -> list[dict[str, Any]]:
        return self._encoded(choice, choice.held.release())

    def _due(self, step_began: float) -> list[dict[str, Any]]:
        """The held deltas that one more step as long as the one begun at `step_began` would keep past
        the stream interval (all of them once it is 0)."""
        now = time.perf_counter()
        step_s = now - step_began
        return [message for choice in self.choices.values()
                for message in self._encoded(choice, choice.held.due(now, step_s, self.interval))]

    @staticmethod
    def _encoded(choice: _Choice, deltas: list[Delta]) -> list[dict[str, Any]]:
        return [encode_event(choice.request_id, delta) for delta in deltas]


def internal_error(error: Exception) -> LocalrunError:
    """What the caller of a request that hit a bug in the runner is told: the error's type only (no
    source lines, no paths); the traceback goes to the runner's stderr, which the daemon logs."""
    traceback.print_exception(error, file=sys.stderr)
    return request_failed(type(error).__name__)


def request_failed(kind: str) -> LocalrunError:
    return LocalrunError(f"internal error in the runner ({kind}); this request was ended, "
                         "the model goes on serving the others")


def _logprobs(engine: Engine, event: Token) -> list[TokenLogprob]:
    """The token's own bytes go too: one that ends inside a UTF-8 character has no text of its own
    (its text shows U+FFFD). So do an alternative's, when its text is not them."""
    if event.logprob is None:
        return []
    piece = engine.model.special_piece
    top = [_alternative(piece(token), logprob) for token, logprob in event.top_logprobs or []]
    raw = piece(event.token)
    return [TokenLogprob(raw.decode("utf-8", "replace"), event.logprob, top, list(raw))]


def _alternative(raw: bytes, logprob: float) -> tuple:
    """(text, logprob), with the bytes as a third member when the text does not spell them."""
    text = raw.decode("utf-8", "replace")
    return (text, logprob) if text.encode() == raw else (text, logprob, list(raw))


def _reseeded(sampling: SamplingParams, index: int) -> SamplingParams:
    """Choices of one request must differ: choice i uses seed + i (reproducible as a whole)."""
    return replace(sampling, seed=sampling.seed + index)
