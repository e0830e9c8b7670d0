"""The engine: one llama.cpp model and context, many sequences, continuous batching.

`step()` asks the scheduler for a plan, evaluates it (every decode token in one `llama_decode`,
each prompt chunk in its own), then samples a token for every sequence that produced logits and
turns it into events (text, finish). Everything about which tokens go where lives in the
scheduler; everything about pointers lives in `backend`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterator

import llama_cpp as L

from localrun.engine import chat_template
from localrun.engine.backend import Batch, Model, extra_buffer_types, has_gpu, init_backend
from localrun.engine.contexts import open_contexts
from localrun.engine.cpuuse import CpuMeter
from localrun.engine.decodecalls import bridges, call_cost
from localrun.engine.detokenizer import Detokenizer
from localrun.engine.drafts import Drafter
from localrun.engine.embed import Embedder
from localrun.engine.events import Event, Finished, Timings, Token
from localrun.engine.flashrows import RowRules, row_rules
from localrun.engine.rowcheck import rows_alike
from localrun.engine.logprobs import log_softmax, logits_at, top_n
from localrun.engine.sampler import Sampler
from localrun.engine.promptpace import PromptPace, least_for
from localrun.engine.scheduler import Chunk, Copy, Scheduler, Trim, copy_min
from localrun.engine.scoring import Scorer
from localrun.engine.sequence import Request, Sequence, Status
from localrun.engine.stallwatch import StallWatch
from localrun.config import PREFIX_CELLS, EngineSettings, resolve_flash_attn
from localrun.memory import kv_bytes_per_token
from localrun.engine.settings import physical_cores
from localrun.engine.stops import StopMatcher
from localrun.engine.threads import ThreadTuner
from localrun.errors import ContextOverflow, InvalidRequest, LocalrunError
from localrun.sampling import MAX_DRAFT, SamplingParams

WARM_UP_TEXT = "Warm up: a short text of a dozen tokens or so."
ABORTED = 2  # llama_decode: the abort callback stopped it and the ubatch's tokens left the cache
BRIDGE_TOKEN = 0  # what a bridge row evaluates (`_bridges`): any token will do, its cell goes again at once


@dataclass(slots=True)
class _State:
    """The per-request helpers a Sequence carries through the engine."""

    request: Request
    sampler: Sampler
    detok: Detokenizer
    stops: StopMatcher
    t_prompt: float = 0.0
    t_first: float = 0.0
    forced: list[int] = field(default_factory=list)  # the next tokens, decided by the caller instead of sampled


class Engine:
    """Continuous batching over `settings.parallel` sequence slots of one model."""

    def __init__(self, model_path: str, settings: EngineSettings | None = None) -> None:
        self.settings = settings = settings or EngineSettings()  # checked when it was built
        self.cpu_plan = init_backend()
        self.model = Model(model_path, settings.gpu_layers, settings.safe_mode, settings.rpc)
        self._tuner = ThreadTuner(physical_cores()) if settings.threads is None else None
        self._cpu = CpuMeter(now=time.perf_counter()) if self._tuner else None  # what other programs do, for the tuner
        self._threads = self._tuner.threads if self._tuner else settings.threads
        self._step_decodes = 0  # decode tokens in this step's plan
        self._decoded = (self._threads, 0.0)  # this step's decode calls so far: their threads, seconds
        # RPC workers do not count as a GPU here: they may compute on CPUs, whose flash-attention kernel would
        # make batched answers differ from solo ones; LOCALRUN_FLASH_ATTN=auto lets llama.cpp choose for them.
        self.can_draft = _can_drop_tail(self.model)
        can_cut = not (L.llama_model_is_recurrent(self.model.ptr) or L.llama_model_is_hybrid(self.model.ptr))
        window = L.llama_model_n_swa(self.model.ptr)
        self.flash_attn = self._flash_mode(resolve_flash_attn(settings.flash_attn, settings.kv_cache_type, has_gpu()),
                                           plain_attention=can_cut and not window)
        rows = self._row_rules()
        try:
            self.speculative_exact = self._drafts_exact(rows) if settings.speculative and self.can_draft else None
            self._contexts = open_contexts(self.model, self.flash_attn, n_slots=settings.parallel,
                                           ctx_size=settings.ctx_size, batch_size=settings.batch_size,
                                           threads=self._threads, kv_type=settings.kv_cache_type,
                                           kv_unified=settings.kv_unified, swa_full=False)
        except Exception:
            self.model.free()
            raise
        self.ctx = self._contexts.main
        self.batch = Batch(settings.batch_size)
        # A stopped step must leave the cache as it was: true of KV caches, not of a recurrent state.
        watch = self._tuner is not None and self._tuner.enabled and can_cut and StallWatch.available()
        self._stall = StallWatch() if watch else None
        if self._stall:
            self._stall.attach(*self._contexts.all)
        for ctx in self._contexts.all:
            self._warm_up(ctx)
        self.scheduler = Scheduler(settings.parallel, settings.batch_size, settings.ctx_size, can_cut, share=True,
                                   window=window, call_cost=self._decode_call_cost(can_cut and not window),
                                   rows=rows, copy_min=copy_min(0 if settings.kv_unified else settings.ctx_size))
        self._pace = PromptPace(settings.prefill_slice_ms / 1000, settings.batch_size)
        self._embedder: Embedder | None = None
        self._scorer: Scorer | None = None
        self._eog: list[int] | None = None

    def _flash_mode(self, resolved: str, plain_attention: bool) -> str:
        """Flash attention for a sequence's first cells only ("prefix", `flashrows`) needs a CPU, an f16
        cache, a stream per slot and a model whose every layer attends over the whole cache, with
        cells of one position each (`kvstate` reads no M-RoPE positions); elsewhere it is "off", which
        it equals past the prefix."""
        s = self.settings
        if resolved != "prefix":
            return resolved
        one_position = L.llama_model_rope_type(self.model.ptr) not in (L.LLAMA_ROPE_TYPE_MROPE, L.LLAMA_ROPE_TYPE_IMROPE)
        fits = (plain_attention and one_position and s.kv_cache_type == "f16" and not s.kv_unified
                and not self.model.gpu_layers)
        return "prefix" if fits else "off"

    def _drafts_exact(self, rows: RowRules) -> bool:
        """Whether drafted answers equal plain ones bit for bit here: measured once, when drafting is
        on, with each kind of attention the engine computes with."""
        kinds = ("on", "off") if self.flash_attn == "prefix" else (self.flash_attn,)
        return all(rows_alike(self.model, rows.max_draft(self.settings.speculative) + 1, threads=self._threads,
                              flash_attn=kind, kv_type=self.settings.kv_cache_type) for kind in kinds)

    def _warm_up(self, ctx) -> None:
        """Evaluate a few rows once at load, as llama-server does: the weights are paged in before the
        first request, and a kernel that dies on this CPU (a matrix product over several rows is what
        ggml's AMX and repacked paths run) dies now, while the daemon can still retry the load safely.
        Embedding models (with a pooling type) and encoder-decoder models skip it: they do not decode
        this way. A warm-up llama.cpp refuses is not an error here; the first request would say why."""
        arch = self.model.meta("general.architecture") or ""
        if self.model.meta(f"{arch}.pooling_type") is not None or L.llama_model_has_encoder(self.model.ptr):
            return
        tokens = self.model.tokenize(WARM_UP_TEXT, add_special=True, parse_special=False)[:self.settings.batch_size]
        self.batch.clear()
        for pos, token in enumerate(tokens):
            self.batch.add(token, pos, 0, pos == len(tokens) - 1)
        self.batch.decode(ctx)
        L.llama_memory_seq_rm(L.llama_get_memory(ctx), 0, -1, -1)

    def _row_rules(self) -> RowRules:
        """The schedule rules that keep CPU flash attention exact (`flashrows`). A filler row must
        leave the cache when the model disagrees with it: a model that cannot drop a tail does without."""
        cpu_kernel = self.flash_attn == "on" and not self.model.gpu_layers
        rules = row_rules(cpu_kernel, self.settings.kv_cache_type, prefix=self.flash_attn == "prefix")
        return rules if self.can_draft else replace(rules, lone_from=None)

    def _decode_call_cost(self, plain_attention: bool) -> float | None:
        """What another decode call costs in attended cells (`decodecalls`), where splitting a step's
        decode tokens can pay: on CPUs, with a KV stream per slot and flash attention off (its kernel
        skips masked cells), for models whose every layer attends over the whole cache (not a
        sliding window's, not a recurrent state). None elsewhere: one call. Flash attention off means
        an f16 cache (a quantized one turns it on); in prefix mode the main context has it off."""
        if (not plain_attention or self.flash_attn not in ("off", "prefix") or self.settings.kv_unified
                or self.model.gpu_layers):
            return None
        arch = self.model.meta("general.architecture") or ""

        def number(key: str, default: int) -> int:  # per-layer arrays (a few architectures) read as the default
            value = self.model.meta(f"{arch}.{key}")
            return int(value) if value and value.isdigit() else default

        return call_cost(L.llama_model_size(self.model.ptr), kv_bytes_per_token(number))

    # -- requests ---------------------------------------------------------------------------

    def add(self, request: Request) -> None:
        """Queue a request; it joins the running batch at the next step with a free slot."""
        prompt = self._checked_prompt(request)
        if self.scheduler.find(request.id):
            raise InvalidRequest(f"request id {request.id!r} is already in use")
        p = _resolved(request.sampling, self.settings.ctx_size)
        drafter = self._drafter(p.speculative)
        banned = self._eog_tokens() if p.ignore_eos else []
        sampler = Sampler(self.model.vocab, self.model.n_vocab, p, p.seed if p.seed is not None else self.settings.seed, banned)
        piece = self.model.special_piece if request.special_text else self.model.piece
        state = _State(request, sampler, Detokenizer(piece), StopMatcher(p.stop))
        self.scheduler.add(Sequence(request.id, list(prompt), len(prompt), p.max_tokens, state=state, drafter=drafter))

    def _drafter(self, speculative: int | None) -> Drafter | None:
        """The request's drafter: its own draft length, else the engine's; none when off or impossible."""
        n_draft = self.settings.speculative if speculative is None else speculative
        if not 0 <= n_draft <= MAX_DRAFT:
            raise InvalidRequest(f"speculative must be a draft length from 0 (off) to {MAX_DRAFT}, got {n_draft}")
        return Drafter(n_draft) if n_draft and self.can_draft else None

    def cancel(self, request_id: str) -> None:
        """Stop a request at the next step (a Finished event with reason "cancelled" follows)."""
        seq = self.scheduler.find(request_id)
        if seq is not None:
            seq.cancelled = True

    def force(self, request_id: str, tokens: list[int]) -> None:
        """Make `tokens` the request's next tokens instead of sampling them (a reasoning budget closes
        a thought this way). The engine does not know why; the runner decides when."""
        seq = self.scheduler.find(request_id)
        if seq is not None:
            seq.state.forced.extend(tokens)

    def cached_tokens(self, request_id: str) -> int | None:
        """How many of the request's prompt tokens its slot's cache held, once it has a slot; None while
        it waits for one, or once it is over (its Finished's timings say it then)."""
        seq = self.scheduler.find(request_id)
        return seq.n_cached if seq is not None and seq.status is Status.RUNNING else None

    @property
    def threads(self) -> int:
        """The CPU threads decoding runs with: the tuner's choice, which may change between steps."""
        return self._tuner.current if self._tuner else self._threads

    @property
    def main_flash_attn(self) -> str:
        """The main context's flash attention ("on", "off" or "auto"; off in prefix mode): what a side
        job over long texts (perplexity) computes with."""
        return "off" if self.flash_attn == "prefix" else self.flash_attn

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def step(self) -> list[Event]:
        """One scheduler step: a decode token per running sequence plus prefill chunks (`calls`)."""
        return [event for events in self.calls() for event in events]

    def calls(self) -> Iterator[list[Event]]:
        """One scheduler step, one `llama_decode` call at a time: the events of each call as soon as
        its logits are sampled, so that a caller can send the decode tokens, or a prompt's first
        token, before the step's later calls (other prompts' chunks) run. Iterate it to the end.

        The step's tokens go to llama.cpp as `plan.batches()` says (decode tokens in one call, or a few
        where a long cache's row would make the others read its cells, `decodecalls`; prompt chunks in
        calls of their own), and each call's logits are sampled before the next call reuses them.
        Raises LocalrunError if llama.cpp fails to decode; the engine should then be closed.
        """
        events = self._reap_cancelled()
        plan = self.scheduler.schedule(self._pace.budget(least_for(self.scheduler.prompt_tile())))
        self._step_decodes = sum(1 for c in plan.chunks if c.decodes)
        for edit in plan.edits:
            self._edit_cache(edit)
        for chunks in plan.batches():
            ctx = self._contexts.of(self.scheduler.rows.flash(chunks[0].start))
            indices = self._evaluate(chunks, ctx)
            for chunk, index in zip(chunks, indices):
                events.extend(self._sample(chunk, index, ctx))
            yield events
            events = []
        self._record_decoding()
        if events:  # cancellations in a step with nothing to evaluate
            yield events

    def _sample(self, chunk: Chunk, index: int, ctx) -> list[Event]:
        """The events of one chunk's logits. A failure here (a sampler, a grammar, a detokenizer) is one
        sequence's: it ends that sequence alone, as Finished(reason="error"), and the step goes on.
        A failing llama_decode is everyone's and still raises."""
        try:
            if chunk.draft:
                return self._verify(chunk, index, ctx)
            return self._next_token(chunk.seq, index, ctx) if chunk.n_logits else []
        except Exception as error:  # noqa: BLE001 - one request's failure must not end the others
            return [self._fail(chunk.seq, error)]

    def _fail(self, seq: Sequence, error: Exception) -> Finished:
        reason = f"{type(error).__name__}: {error}"
        if seq.status is Status.FINISHED:  # it failed after finishing: its own Finished was lost
            return Finished(seq.id, "error", Timings(), error=reason)
        finished = self._finish(seq, "error")
        finished.error = reason
        return finished

    # -- one step -------------------------------------------------------------------------------

    def _edit_cache(self, edit: Trim | Copy) -> None:
        """Make one of the scheduler's cache edits. A copy: with a KV stream per slot llama.cpp copies the
        whole stream at the start of the next `llama_decode`, cell for cell, so the copy attends exactly
        as the original (with one unified buffer the two sequences share cells instead; in prefix mode
        the cells are saved and restored, `contexts`). A trim: the scheduler plans one only where
        llama.cpp can make it (`can_cut`), so a refusal is a bug."""
        if isinstance(edit, Copy):
            self._contexts.copy(edit.source, edit.target)
        elif not self._contexts.trim(edit.slot, edit.keep):
            raise LocalrunError(f"llama.cpp could not cut slot {edit.slot}'s cache back to {edit.keep} tokens")

    def _evaluate(self, chunks: list[Chunk], ctx) -> list[int]:
        """Fill the batch with the chunks and decode it in `ctx` (where their slots' cells move first,
        in prefix mode); returns each chunk's last batch index."""
        bridged = self._bridges(chunks, ctx)
        indices = self._fill(chunks, ctx, bridged)
        try:
            self._decode(chunks, ctx)
        finally:  # a bridge's cell never stays behind, not even after a failed call
            for slot, pos in bridged:
                self._contexts.drop(ctx, slot, pos)
        return indices

    def _fill(self, chunks: list[Chunk], ctx, bridged: list[tuple[int, int]]) -> list[int]:
        """The batch of the chunks' rows and the bridges' (`_bridges`); each chunk's last batch index."""
        batch, indices, now = self.batch, [], time.perf_counter()
        batch.clear()
        waiting = iter(bridged)  # in slot order, as the chunks: llama.cpp joins only increasing neighbours
        bridge = next(waiting, None)
        for c in chunks:
            while bridge is not None and bridge[0] < c.seq.slot:
                batch.add(BRIDGE_TOKEN, bridge[1], bridge[0], False)
                bridge = next(waiting, None)
            self._contexts.place(c.seq.slot, ctx)
            seq, tokens = c.seq, c.seq.tokens
            if c.start == seq.n_cached and seq.prefilling:
                seq.state.t_prompt = now
            last = c.start + c.n - 1
            for pos in range(c.start, c.start + c.n - len(c.draft)):
                index = batch.add(tokens[pos], pos, seq.slot, pos > last - c.n_logits)
            for pos, token in enumerate(c.draft, c.start + 1):
                index = batch.add(token, pos, seq.slot, True)
            indices.append(index)
        return indices

    def _bridges(self, chunks: list[Chunk], ctx) -> list[tuple[int, int]]:
        """Throwaway rows that join a decode call's slots into one micro-batch (`decodecalls.bridges`).
        Only in prefix mode's flash-attention context: its streams hold at most PREFIX_CELLS cells, so a
        bridge lengthens no row's attention, and the kernel skips the cells a row does not see."""
        if ctx is not self._contexts.flash or not all(c.decodes and c.n == 1 for c in chunks):
            return []
        def room(slot: int) -> int | None:
            pos = self._contexts.next_position(ctx, slot)
            return pos if pos < PREFIX_CELLS else None

        return bridges([c.seq.slot for c in chunks], room)

    def _decode(self, chunks: list[Chunk], ctx) -> None:
        decoding = all(c.decodes for c in chunks)
        threads = self._tuned_threads(decoding)
        start = time.perf_counter()
        status, stopped = self._watched_decode(ctx) if decoding else (self.batch.decode(ctx), False)
        if stopped:  # llama.cpp took the step's tokens back out of the cache: the same step, one thread fewer
            self._tuner.stalled(time.perf_counter())
            threads = self._tuned_threads(decoding)
            start = time.perf_counter()
            status = self.batch.decode(ctx)
        if status != 0:
            raise LocalrunError(f"llama_decode failed with status {status} ({self.batch.n} tokens)")
        self.scheduler.commit(chunks)
        if self.scheduler.window:  # the window cache may have let old cells go
            for c in chunks:
                slot = c.seq.slot
                self.scheduler.slots[slot].first = max(0, L.llama_memory_seq_pos_min(self._contexts.memory(slot), slot))
        seconds = time.perf_counter() - start
        if self._tuner and decoding:
            self._decoded = (threads, self._decoded[1] + seconds)
        elif all(c.prompt for c in chunks):
            self._pace.record(self.batch.n, seconds, "main" if ctx is self._contexts.main else "prefix")

    def _record_decoding(self) -> None:
        """Give the tuner the step's decode calls as one: a step may split its decode tokens into
        calls of different sizes (`decodecalls`), but its tokens per second compare with other steps'."""
        threads, seconds = self._decoded
        if self._tuner and self._step_decodes:
            end = time.perf_counter()
            self._tuner.record(threads, self._step_decodes, seconds, end, self._cpu.sample(end))
            self._decoded = (threads, 0.0)

    def _watched_decode(self, ctx) -> tuple[int, bool]:
        """A decode step that the stall watch may stop once it runs past the tuner's limit while
        another program holds a core (`stallwatch.py`): llama_decode's status, and whether it was stopped."""
        # the whole step's usual length: a call that holds part of a split step's tokens (`decodecalls`)
        # still pays a whole pass over the weights, and a lone long cache's row costs more than the average
        limit = self._tuner.stall_limit(self._step_decodes) if self._stall else None
        if limit is None:
            return self.batch.decode(ctx), False
        self._stall.begin(limit)
        status = self.batch.decode(ctx)
        stopped = self._stall.end() and status == ABORTED
        return status, stopped

    def _tuned_threads(self, decoding: bool) -> int:
        """The tuner's choice; a trial runs on decode calls only (they are what it measures), so a
        long prompt arriving mid-trial is not evaluated with the thread count under test; calls with
        prompt tokens take all cores unless another program holds one (`ThreadTuner.prompt_threads`)."""
        if self._tuner:
            if decoding:
                wanted = self._tuner.threads
            else:  # a prompt after an idle while: what the others did meanwhile says whether a core is theirs
                wanted = self._tuner.prompt_threads(self._cpu.sample(time.perf_counter(), across_idle=True))
            if wanted != self._threads:
                self._threads = wanted
                self._contexts.set_threads(wanted)
        return self._threads

    def _next_token(self, seq: Sequence, index: int, ctx) -> list[Event]:
        """Sample one token for `seq` from the logits at `index` of `ctx` and turn it into events."""
        st: _State = seq.state
        if seq.max_tokens == 0:  # prompt only (e.g. to warm the cache)
            st.t_first = time.perf_counter()
            return [self._finish(seq, "length")]
        want = st.request.sampling.logprobs
        logprobs = log_softmax(logits_at(ctx, index, self.model.n_vocab)) if want is not None else None
        token = st.sampler.take(st.forced.pop(0)) if st.forced else st.sampler.sample(ctx, index)
        if seq.n_generated == 0:
            st.t_first = time.perf_counter()
        seq.tokens.append(token)
        eog = self.model.is_eog(token) and not st.request.sampling.ignore_eos
        text = "" if eog else st.stops.push(st.detok.push(token))
        reason = "stop" if (eog or st.stops.matched) else self._length_reached(seq)
        if reason and not st.stops.matched:
            text += st.stops.flush()  # text held for a stop string that never came
        events: list[Event] = []
        if not eog or text:
            events.append(self._token_event(seq, token, text, logprobs, want))
        if reason:
            events.append(self._finish(seq, reason))
        return events

    def _verify(self, chunk: Chunk, index: int, ctx) -> list[Event]:
        """Sample along a drafted chunk while the model agrees with the draft.

        Row j's logits are the model's distribution after the next token and draft[:j], exactly as
        if those tokens had been decoded one by one, so sampling there in order (the sampler chain,
        its seed and any grammar advancing token by token) gives the tokens plain decoding gives.
        The first sampled token that differs from the draft ends the chunk; the draft tokens after
        it leave the cache.
        """
        seq, draft = chunk.seq, chunk.draft
        first = index - len(draft)
        events: list[Event] = []
        for j in range(len(draft) + 1):
            if j and not chunk.filler:
                seq.drafter.accepted += 1  # draft[j - 1] was confirmed and its row is used
            events.extend(self._next_token(seq, first + j, ctx))
            if j == len(draft) or seq.status is Status.FINISHED or seq.tokens[-1] != draft[j]:
                break
        trim = self.scheduler.settle(chunk, j)
        if trim is not None:
            self._edit_cache(trim)
        return events

    def _length_reached(self, seq: Sequence) -> str | None:
        if seq.max_tokens is not None and seq.n_generated >= seq.max_tokens:
            return "length"
        return "length" if len(seq.tokens) >= self.settings.ctx_size else None

    def _token_event(self, seq: Sequence, token: int, text: str, logprobs, want: int | None) -> Token:
        if logprobs is None:
            return Token(seq.id, text, token)
        top = top_n(logprobs, want) if want else None
        return Token(seq.id, text, token, float(logprobs[token]), top)

    def _finish(self, seq: Sequence, reason: str) -> Finished:
        st: _State = seq.state
        self.scheduler.finish(seq)
        st.sampler.free()
        now = time.perf_counter()
        first = st.t_first or now
        timings = Timings(
            prompt_tokens=seq.n_prompt, cached_tokens=seq.n_cached,
            prompt_ms=(first - st.t_prompt) * 1000 if st.t_prompt else 0.0,
            generated_tokens=seq.n_generated, generation_ms=(now - first) * 1000 if st.t_first else 0.0,
            draft_tokens=seq.drafter.proposed if seq.drafter else 0,
            draft_accepted=seq.drafter.accepted if seq.drafter else 0)
        return Finished(seq.id, reason, timings, st.stops.matched if reason == "stop" else None)

    def _reap_cancelled(self) -> list[Event]:
        cancelled = [s for s in (*self.scheduler.running, *self.scheduler.waiting) if s.cancelled]
        return [self._finish(seq, "cancelled") for seq in cancelled]

    # -- prompts --------------------------------------------------------------------------------

    def _checked_prompt(self, request: Request) -> list[int]:
        prompt, limit = request.prompt, self.settings.ctx_size
        if not prompt:
            raise InvalidRequest("the prompt is empty")
        if min(prompt) < 0 or max(prompt) >= self.model.n_vocab:
            raise InvalidRequest(f"the prompt has token ids outside the vocabulary (0..{self.model.n_vocab - 1})")
        if len(prompt) + 1 <= limit:
            return prompt
        if not request.truncate:
            # Anthropic's wording, which Claude Code and other agents recognise (they compact and retry)
            raise ContextOverflow(f"prompt is too long: {len(prompt)} tokens > {limit - 1} maximum (the context holds "
                                  f"{limit} tokens per request, including at least one generated token)")
        return self._truncated(prompt, request.sampling.max_tokens)

    def _truncated(self, prompt: list[int], max_tokens: int | None) -> list[int]:
        """Keep the newest tokens, leaving room for max_tokens (at most half the context); keep BOS."""
        limit = self.settings.ctx_size
        room = limit - 1 - min(max_tokens or 0, limit // 2)
        head = prompt[:1] if prompt[0] == L.llama_vocab_bos(self.model.vocab) else []
        return head + prompt[len(prompt) - room + len(head):]

    def _eog_tokens(self) -> list[int]:
        if self._eog is None:
            self._eog = self.model.eog_tokens()
        return self._eog

    # -- text -----------------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return self.model.tokenize(text, add_special, parse_special)

    def detokenize(self, tokens: list[int]) -> str:
        """Text of the tokens, special tokens included by name (the inverse of `tokenize`)."""
        return b"".join(self.model.special_piece(t) for t in tokens).decode("utf-8", "replace")

    def render_chat(self, messages: list[dict], tools: list[dict] | None = None,
                    add_generation_prompt: bool = True, template: str | None = None, **extra: Any) -> str:
        """The prompt text for a conversation, from `template` (a Modelfile's) or the model's own."""
        return chat_template.render(template or self._template, messages, tools=tools,
                                    add_generation_prompt=add_generation_prompt,
                                    bos_token=self._bos_text, eos_token=self._eos_text,
                                    fallback=chat_template.builtin_for(self.model.meta("general.architecture")), **extra)

    @property
    def _template(self) -> str | None:
        return self.model.chat_template()

    @property
    def _bos_text(self) -> str:
        return self.model.token_text(L.llama_vocab_bos(self.model.vocab))

    @property
    def _eos_text(self) -> str:
        return self.model.token_text(L.llama_vocab_eos(self.model.vocab))

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        """Normalised embeddings of each text and the total number of tokens evaluated."""
        if self._embedder is None:
            size = min(self.settings.embed_ctx_size, L.llama_model_n_ctx_train(self.model.ptr) or 2048)
            self._embedder = Embedder(self.model, size, self._threads)
        return self._embedder.embed(texts)

    def score(self, prompt_tokens: list[int], options: list[list[int]]) -> list[float]:
        """Sum of full-vocabulary log-probabilities of each option's tokens after the prompt.

        Runs at once on the caller's (the engine's) thread: the prompt is evaluated once (reusing
        the previous scoring prompt's prefix) as generation evaluates it, and each option after it
        (`scoring`). `scoring_cached_tokens` then tells how many prompt tokens were reused.
        """
        return self._get_scorer().score(prompt_tokens, options)

    def _get_scorer(self) -> Scorer:
        """The scoring context, created on first use."""
        if self._scorer is None:
            s = self.settings
            self._scorer = Scorer(self.model, s.ctx_size, s.batch_size, self._threads, self.flash_attn,
                                  self.scheduler.rows, s.kv_cache_type)
        return self._scorer

    def prompt_logprobs(self, tokens: list[int], top: int = 0) -> list[tuple[float, list[tuple[int, float]]]]:
        """Log-probability of each prompt token after the first (and the `top` alternatives there),
        on the scoring contexts, the text evaluated as generation evaluates a prompt (`scoring`)."""
        return self._get_scorer().prompt_logprobs(tokens, top)

    @property
    def scoring_cached_tokens(self) -> int:
        return self._scorer.n_cached if self._scorer else 0

    # -- facts and lifetime -----------------------------------------------------------------------

    @property
    def info(self) -> dict[str, Any]:
        m, s = self.model, self.settings
        return {
            "architecture": m.meta("general.architecture"),
            "n_ctx_train": L.llama_model_n_ctx_train(m.ptr),
            "n_vocab": m.n_vocab,
            "n_embd": L.llama_model_n_embd(m.ptr),
            "bos_token": self._bos_text,
            "eos_token": self._eos_text,
            "has_chat_template": self._template is not None,
            "threads": self._threads,
            "threads_mode": "auto (physical cores, tuned against n-1)" if self._tuner else "fixed",
            "n_ctx": L.llama_n_ctx(self.ctx),
            "ctx_size": s.ctx_size,
            "parallel": s.parallel,
            "batch_size": s.batch_size,
            "gpu_layers": m.gpu_layers,
            "gpu_offload": m.offloads,
            "flash_attn": self.flash_attn,
            "kv_cache_type": s.kv_cache_type,
            "kv_unified": s.kv_unified,
            "speculative": s.speculative if self.can_draft else 0,
            "speculative_exact": self.speculative_exact,
            "safe_mode": s.safe_mode,
            "extra_buffer_types": [] if s.safe_mode else extra_buffer_types(),
            "cpu": self.cpu_plan.lines(),
        }

    def close(self) -> None:
        """Free everything llama.cpp holds for this engine; safe to call twice."""
        for seq in (*self.scheduler.running, *self.scheduler.waiting):
            seq.state.sampler.free()
        for helper in (self._embedder, self._scorer):
            if helper:
                helper.close()
        self._embedder = self._scorer = None
        self.batch.free()
        if self._stall:
            self._stall.close()
            self._stall = None
        if self.ctx:
            self._contexts.free()
            self.ctx = None
        self.model.free()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _resolved(sampling: SamplingParams, ctx_size: int) -> SamplingParams:
    """What the sampler runs: knobs still unset take llama.cpp's defaults, and repeat_last_n -1
    (Ollama's "the whole context") becomes this context's length per slot."""
    p = sampling.filled()
    return replace(p, repeat_last_n=ctx_size) if p.repeat_last_n == -1 else p


def _can_drop_tail(model: Model) -> bool:
    """Whether a refused draft can leave the cache: not in recurrent state, and not in a sliding
    window cache, which may already have let go of the cells the draft pushed out of its window."""
    ptr = model.ptr
    return not (L.llama_model_is_recurrent(ptr) or L.llama_model_is_hybrid(ptr) or L.llama_model_n_swa(ptr) > 0)


__all__ = ["Engine"]
