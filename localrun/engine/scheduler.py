"""Which tokens go into the next `llama_decode`, decided from plain data (no model needed).

Every step: one decode token for each running sequence first (streams keep flowing), then prefill
chunks of sequences still loading their prompt, the shortest rest first, within the batch token
budget and the prompt budget the engine measures (`promptpace`: a slice of time beside decoding
streams, a few slices for each prompt in line without them). A waiting sequence gets a free slot
when there is one: the slot whose cached tokens share the longest prefix with its prompt, so that
only the rest is evaluated. When another slot (busy or not) holds a longer prefix of it, that slot's
cache is copied into the free one first; a prompt whose start is being evaluated for another
sequence right now (the `n` choices of one request, or concurrent requests with one long system
prompt) waits for that and is then copied, not evaluated twice.

Planning changes no cache: `schedule()` returns the KV cache edits (copies and trims) in the `Plan`,
in the order the engine must make them before it decodes the plan's chunks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from localrun.engine.decodecalls import split_points
from localrun.engine.drafts import guess_next
from localrun.engine.flashrows import RowRules
from localrun.engine.promptpace import PromptBudget
from localrun.engine.sequence import Sequence, Status


@dataclass(slots=True)
class Slot:
    """One sequence id of the llama context and the tokens its KV cache holds."""

    id: int
    tokens: list[int] = field(default_factory=list)
    seq: Sequence | None = None
    last_used: int = 0
    first: int = 0  # the first position whose cells a sliding-window cache still holds


@dataclass(slots=True)
class Chunk:
    """`seq.tokens[start:start + n]` at positions start.., with logits for the last `n_logits`.

    A chunk with a `draft` is the sequence's next token followed by the drafted tokens
    (n = 1 + len(draft)), all with logits, for speculative decoding. A `filler` draft is one guessed
    token that keeps a decode token from being its micro-batch's lone row (`flashrows`): not the
    sequence's drafter's, so its outcome does not teach the drafter.
    """

    seq: Sequence
    start: int
    n: int
    n_logits: int
    draft: list[int] | tuple[()] = ()
    filler: bool = False

    @property
    def prompt(self) -> bool:
        """A piece of the sequence's prompt."""
        return self.start < self.seq.n_prompt

    @property
    def decodes(self) -> bool:
        """A generated token without a draft of the drafter's (no prompt): one token of decoding."""
        return (not self.draft or self.filler) and not self.prompt


@dataclass(frozen=True, slots=True)
class Trim:
    """Cut slot `slot`'s cache back to its first `keep` tokens."""

    slot: int
    keep: int


@dataclass(frozen=True, slots=True)
class Copy:
    """Make slot `target`'s cache a copy of slot `source`'s."""

    source: int
    target: int


@dataclass(slots=True)
class Plan:
    """One step: the cache edits to make first, in order, then the chunks to decode.

    `call_cost`: what another call for decode tokens costs, in cells one row attends over
    (`decodecalls.call_cost`); None: decode tokens always share one call. `cells`: a slot's KV stream size.
    `rows`: flash attention's rules (`RowRules`): the fewest rows in a long prompt's piece
    (`least_piece`), and in prefix mode which chunks go to the flash-attention context.
    """

    chunks: list[Chunk] = field(default_factory=list)
    edits: list[Trim | Copy] = field(default_factory=list)
    call_cost: float | None = None
    cells: int = 1 << 30
    rows: RowRules = RowRules()

    def batches(self) -> list[list[Chunk]]:
        """The step as `llama_decode` calls: the decode tokens together (apart where a long cache would
        make the others attend over its cells, `decodecalls`), drafts of one length together, then the
        prompt chunks in calls where each takes equally many tokens (`stairs`).

        With a KV stream per slot llama.cpp splits a call into micro-batches holding equally many
        tokens of each sequence, taking sequences with consecutive ids together. A prompt chunk sharing
        a call with decode tokens (or with a chunk one token longer) would have a token evaluated as a
        lone row, and a lone row attends with other kernels than a chunk of rows: its cache entry, and
        every later token, would differ from the same prompt run alone. Prompt pieces of equal length,
        each at least two tokens, are evaluated as they are alone; several of them in one micro-batch
        cost one pass over the weights instead of one each.

        In prefix mode (`RowRules.prefix`) the chunks of the flash-attention context come first, in
        calls of their own: a call goes to one context.
        """
        flash = [c for c in self.chunks if self.rows.flash(c.start)]
        rest = [c for c in self.chunks if not self.rows.flash(c.start)]
        return self._calls(flash, split=False) + self._calls(rest, split=True)

    def _calls(self, chunks: list[Chunk], split: bool) -> list[list[Chunk]]:
        decodes: list[Chunk] = []
        drafts: dict[int, list[Chunk]] = {}
        prompts: list[Chunk] = []
        for c in chunks:
            if c.draft:
                drafts.setdefault(c.n, []).append(c)
            elif c.decodes:
                decodes.append(c)
            else:
                prompts.append(c)
        prompts.sort(key=lambda c: c.seq.slot)  # consecutive slots share micro-batches
        return self._decode_calls(decodes, split) + list(drafts.values()) + _pieces(prompts, self.rows)

    def _decode_calls(self, decodes: list[Chunk], split: bool) -> list[list[Chunk]]:
        """The flash-attention context skips masked cells: its decode tokens share one call."""
        if not decodes or self.call_cost is None or not split:
            return [decodes] if decodes else []
        cuts = split_points([(c.seq.slot, c.start + 1) for c in decodes], self.call_cost, self.cells)
        return [decodes[a:b] for a, b in zip([0, *cuts], [*cuts, len(decodes)])]


def stairs(sizes: list[int], least: list[int] | None = None) -> list[list[tuple[int, int]]]:
    """Split chunks of these sizes into calls in which every taking part evaluates the same number of
    tokens, never fewer than its `least` (default MIN_PREFILL: never a lone one) unless that is its whole
    chunk: each call takes the shortest remainder from every chunk that keeps at least its least or
    none. Returns each call as (chunk index, tokens) pairs; a chunk's pieces come in order and add up
    to its size."""
    least = least or [MIN_PREFILL] * len(sizes)
    left = dict(enumerate(sizes))
    calls = []
    while left:
        n = min(left.values())
        call = [(i, n) for i, r in left.items() if r == n or (n >= least[i] and r - n >= least[i])]
        calls.append(call)
        for i, _ in call:
            left[i] -= n
            if not left[i]:
                del left[i]
    return calls


def _pieces(chunks: list[Chunk], rows: RowRules) -> list[list[Chunk]]:
    """The prompt chunks cut into the calls `stairs` plans; only a chunk's last piece wants logits."""
    done = [0] * len(chunks)
    calls = []
    least = [least_piece(c.seq.n_prompt, rows.least_rows_at(c.start, c.seq.n_prompt)) for c in chunks]
    for call in stairs([c.n for c in chunks], least):
        pieces = []
        for i, n in call:
            c = chunks[i]
            last = done[i] + n == c.n
            pieces.append(c if n == c.n else Chunk(c.seq, c.start + done[i], n, c.n_logits if last else 0))
            done[i] += n
        calls.append(pieces)
    return calls


# llama.cpp's CPU kernels round a prompt chunk of one token differently from a chunk of several, so
# a prompt whose last token were evaluated alone (after a prefix-cache hit, or left over by the
# batch budget) would continue differently from the same prompt evaluated cold. Prompt chunks are
# therefore never a lone token unless the whole prompt is one token.
MIN_PREFILL = 2


def least_piece(n_prompt: int, least_rows: int) -> int:
    """The fewest tokens a piece of this prompt may have (unless it is the whole rest): `least_rows`
    for a prompt that long (flash attention's tiled kernel, `flashrows`), else MIN_PREFILL."""
    return least_rows if least_rows and n_prompt >= least_rows else MIN_PREFILL


def cached_keep(shared: int, n_prompt: int, rows: RowRules) -> int:
    """How many of a prompt's first tokens to take from a slot that shares `shared` of them: a little
    less where the rest would leave a piece under its least rows (a lone token, or under a tile before
    the flash-attention prefix's end, `RowRules.prefix`), which the same prompt sent cold never has."""
    end = n_prompt
    if rows.prefix and n_prompt > rows.prefix:
        keep = min(shared, n_prompt - MIN_PREFILL)
        if keep >= rows.prefix:
            return keep
        end = rows.prefix  # the prefix's part must keep its tile from here on
    return max(0, min(shared, end - least_piece(end, rows.least_rows_at(0, n_prompt))))


def prefill_size(remaining: int, budget: int, least: int = MIN_PREFILL) -> int:
    """Prompt tokens to evaluate this step: at most `budget`, never fewer than `least` (unless that is
    all), never fewer than `least` left behind."""
    n = min(remaining, budget)
    if n < remaining and remaining - n < least:
        n = remaining - least
    return n if n >= least or n == remaining else 0


def prompt_piece(start: int, rest: int, n_prompt: int, rows: RowRules, budget: int, batch_size: int) -> int:
    """How many of the `rest` prompt tokens from position `start` the next piece takes: exactness first
    (no piece under its least rows, `least_piece`; none across the flash-attention prefix's end,
    `RowRules.prefix`), progress always (an otherwise empty batch, `budget == batch_size`, takes what
    fits); 0 when nothing fits the budget."""
    remaining = rows.room(start, rest)
    least = least_piece(n_prompt, rows.least_rows_at(start, n_prompt))
    return prefill_size(remaining, budget, least) or (min(remaining, budget) if budget == batch_size else 0)


# A prompt sharing fewer tokens than this with one still being evaluated is not held back for it:
# evaluating them again beside the other costs little, and a burst of chats that share only a chat
# template's first tokens must start together.
SHARE_MIN = 32

# With a KV stream per slot llama.cpp copies a slot's cache whole, every cell of the stream. Measured
# with SmolLM2 on 2 cores (scripts/bench_prefix_copy.py), a copy costs what evaluating one prompt
# token costs per 1,100-1,400 cells; small models hold the most cache bytes per weight,
# so asking one saved token per 512 cells leaves a margin for them and more for larger models.
CELLS_PER_SAVED_TOKEN = 512
COPY_FLOOR = 4


def copy_min(stream_cells: int) -> int:
    """The fewest prompt tokens a copy of a slot's cache of this many cells must save (0: one unified
    buffer, where a copy only shares cells)."""
    return max(COPY_FLOOR, -(-stream_cells // CELLS_PER_SAVED_TOKEN))


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class Scheduler:
    """Owns the queue and the slots. `schedule()` plans a step; `commit()` records that it ran.

    `can_cut`: whether a slot's cache can be cut back to a prefix when a new sequence takes the slot;
    a recurrent model's state cannot, so its slots start over. `share`: whether a slot's cache may be
    copied into another's; without it caches are never shared between slots. `window`: a sliding
    window model's attention span (0: none); its cache lets cells older than the window go (the engine
    records the first position held in `Slot.first`), so a prefix is reused only where the window
    before the prefix's end is still there. `call_cost`: see `Plan`. `rows`: flash attention's rules
    (`flashrows`): prompt pieces of a long prompt hold `rows.least_rows` tokens or more, and from
    `rows.lone_from` on a decode token without a neighbouring slot's in its call gets a filler row.
    `copy_min`: the fewest prompt tokens a copy of another slot's cache must save (`copy_min()`).
    """

    def __init__(self, n_slots: int, batch_size: int, ctx_size: int = 1 << 30, can_cut: bool = True,
                 share: bool = False, window: int = 0, call_cost: float | None = None,
                 rows: RowRules = RowRules(), copy_min: int = SHARE_MIN) -> None:
        self.slots = [Slot(i) for i in range(n_slots)]
        self.batch_size = batch_size
        self.ctx_size = ctx_size
        self.can_cut = can_cut
        self.share = share
        self.window = window
        self.call_cost = call_cost
        self.rows = rows
        self.copy_min = copy_min
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._clock = 0

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def find(self, seq_id: str) -> Sequence | None:
        for seq in (*self.running, *self.waiting):
            if seq.id == seq_id:
                return seq
        return None

    def schedule(self, prompt_budget: PromptBudget | None = None) -> Plan:
        """Plan the next step. `prompt_budget`: the most prompt tokens it takes (`promptpace`); None: as
        many as the batch holds."""
        plan = Plan(call_cost=self.call_cost, cells=self.ctx_size, rows=self.rows)
        self._admit(plan)
        budget = self.batch_size
        # Decode tokens first, prefill after: running streams keep flowing, and prompts take a bounded
        # share of a step they decode in. Decode tokens go in slot order: llama.cpp reuses the previous
        # step's compute graph only when the batch visits the KV streams in the same order, and
        # rebuilding it every step cost 20% at 8 sequences.
        decoding = [s for s in sorted(self.running, key=lambda s: s.slot) if not s.prefilling and s.pending]
        for i, seq in enumerate(decoding[:budget]):
            draft = self._draft(seq, budget - (len(decoding) - i)) if seq.drafter else ()
            plan.chunks.append(Chunk(seq, seq.n_evaluated, 1 + len(draft), 1 + len(draft), draft))
            budget -= 1 + len(draft)
        budget -= self._fill_lone(plan.chunks, budget)
        # The shortest rest first (ties: the oldest): a chat arriving while an agent's long prompt loads
        # gets its first token in the next step, not after the whole long prompt.
        prompts = sorted((s for s in self.running if s.prefilling), key=lambda s: s.prompt_left)
        if prompt_budget is not None:
            budget = min(budget, prompt_budget.tokens(bool(plan.chunks), [s.prompt_left for s in prompts]))
        for seq in prompts:
            n = prompt_piece(seq.n_evaluated, seq.prompt_left, seq.n_prompt, self.rows, budget, self.batch_size)
            if n:
                done = seq.n_evaluated + n == seq.n_prompt
                plan.chunks.append(Chunk(seq, seq.n_evaluated, n, 1 if done else 0))
                budget -= n
        return plan

    def _draft(self, seq: Sequence, room: int) -> list[int]:
        """Draft tokens for a decoding sequence: within the batch room left after the other decode
        tokens, within the context, and no more than the tokens it may still generate."""
        room = self.rows.max_draft(min(room, self.ctx_size - len(seq.tokens)))
        room = self.rows.room(seq.n_evaluated, room + 1) - 1  # a draft stays on its side of the prefix
        if seq.max_tokens is not None:
            room = min(room, seq.max_tokens - seq.n_generated - 1)
        return seq.drafter.propose(seq.tokens, room) if room >= 1 else []

    def _fill_lone(self, chunks: list[Chunk], budget: int) -> int:
        """Give a filler row to each decode token that would be its micro-batch's lone row over a long
        cache (`flashrows`): llama.cpp puts neighbouring slots' tokens in one micro-batch, so a token
        is lone when neither neighbour slot decodes in its call. Returns the rows added."""
        lone_from = self.rows.lone_from
        if lone_from is None:
            return 0
        decoding = {c.seq.slot for c in chunks if c.decodes}
        added = 0
        for i, c in enumerate(chunks):
            if (added < budget and c.decodes and lone_from <= c.start < self.ctx_size - 1
                    and not {c.seq.slot - 1, c.seq.slot + 1} & decoding):
                chunks[i] = Chunk(c.seq, c.start, 2, 2, [guess_next(c.seq.tokens)], filler=True)
                added += 1
        return added

    def prompt_tile(self) -> int:
        """The most rows a prompt in line must take in its next piece by the tile rule
        (`RowRules.least_rows_at`): 0 when none is before a flash-attention tile's end, so that a
        bounded step (`promptpace.least_for`) need not hold two tiles past it."""
        return max((self.rows.least_rows_at(s.n_evaluated, s.n_prompt)
                    for s in (*self.running, *self.waiting) if s.prefilling), default=0)

    def commit(self, chunks: list[Chunk]) -> None:
        """These chunks were decoded: their tokens are now in the slots' caches."""
        for c in chunks:
            c.seq.n_evaluated = c.start + c.n
            slot = self.slots[c.seq.slot]
            del slot.tokens[c.start:]
            slot.tokens.extend(c.seq.tokens[c.start:c.start + c.n - len(c.draft)])
            slot.tokens.extend(c.draft)

    def settle(self, chunk: Chunk, accepted: int) -> Trim | None:
        """The model confirmed the first `accepted` tokens of a chunk's draft: the rest must leave the
        slot's cache, by the returned trim (the sequence's next token, sampled after them, is pending
        as usual)."""
        seq, keep = chunk.seq, chunk.start + 1 + accepted
        if not chunk.filler:
            seq.drafter.adapt(len(chunk.draft), accepted)
        seq.n_evaluated = keep
        if keep == chunk.start + chunk.n:
            return None
        del self.slots[seq.slot].tokens[keep:]
        return Trim(seq.slot, keep)

    def finish(self, seq: Sequence) -> None:
        """Take a sequence out (finished or cancelled); its slot keeps the cache for prefix reuse."""
        seq.status = Status.FINISHED
        if seq in self.running:
            self.running.remove(seq)
            self.slots[seq.slot].seq = None
        elif seq in self.waiting:
            self.waiting.remove(seq)

    def _admit(self, plan: Plan) -> None:
        while self.waiting and not self._prefix_in_flight(self.waiting[0]):
            slot = self._best_slot(self.waiting[0].tokens)
            if slot is None:
                return
            seq = self.waiting.popleft()
            self._copy_best_prefix(slot, seq, plan)
            keep = cached_keep(common_prefix(slot.tokens, seq.tokens), seq.n_prompt, self.rows)
            keep = keep if self.can_cut and self._holds(slot, keep) else 0
            if keep < len(slot.tokens):
                plan.edits.append(Trim(slot.id, keep))
                del slot.tokens[keep:]
                slot.first = min(slot.first, keep)
            self._clock += 1
            slot.seq, slot.last_used = seq, self._clock
            seq.slot, seq.status = slot.id, Status.RUNNING
            seq.n_cached = seq.n_evaluated = keep
            self.running.append(seq)

    def _prefix_in_flight(self, seq: Sequence) -> bool:
        """Whether a running sequence is still evaluating a long prefix of this one's prompt."""
        return self.share and any(
            other.prefilling and min(common_prefix(other.tokens, seq.tokens), other.n_prompt) >= SHARE_MIN
            for other in self.running)

    def _copy_best_prefix(self, slot: Slot, seq: Sequence, plan: Plan) -> None:
        """Copy the cache of the slot sharing the longest prefix with `seq` into `slot`, when that pays."""
        if not self.share:
            return
        shared = [self._reusable(s, seq.tokens) for s in self.slots]
        source = self.slots[max(range(len(shared)), key=shared.__getitem__)]
        if source is not slot and shared[source.id] - shared[slot.id] >= self.copy_min:
            plan.edits.append(Copy(source.id, slot.id))
            slot.tokens, slot.first = list(source.tokens), source.first

    def _holds(self, slot: Slot, keep: int) -> bool:
        """Whether the slot's cache can serve a prefix of `keep` tokens: a sliding-window cache must
        still hold the window before it (llama-server's rule)."""
        return not self.window or keep == 0 or slot.first <= max(0, keep - self.window)

    def _reusable(self, slot: Slot, tokens: list[int]) -> int:
        """How many of `tokens` the slot's cache can serve."""
        shared = common_prefix(slot.tokens, tokens)
        return shared if self._holds(slot, shared) else 0

    def _best_slot(self, tokens: list[int]) -> Slot | None:
        """The free slot that serves this prompt best while destroying the least cached work.

        A shared prefix counts only when it is at least half of what the slot holds: a prompt that
        shares a chat template's first tokens with a long cached conversation must not evict it.
        Then a slot next to a busy one: llama.cpp evaluates sequences with consecutive ids in one
        micro-batch, so running sequences in scattered slots cost a pass over the weights each per
        step. Then fewest cached tokens thrown away, then least recently used.
        """
        free = [s for s in self.slots if s.seq is None]
        if not free:
            return None
        busy = {s.id for s in self.slots if s.seq is not None}

        def key(slot: Slot) -> tuple[int, bool, int, int]:
            shared = self._reusable(slot, tokens)
            useful = shared if 2 * shared >= len(slot.tokens) else 0
            beside = slot.id - 1 in busy or slot.id + 1 in busy
            return useful, beside, -(len(slot.tokens) - useful), -slot.last_used

        return max(free, key=key)


__all__ = ["Chunk", "Copy", "Plan", "Scheduler", "Slot", "Trim", "cached_keep", "common_prefix", "copy_min",
           "least_piece", "prompt_piece", "stairs"]
