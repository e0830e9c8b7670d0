"""Which tokens go into the next `llama_decode`, decided from plain data (no model needed).

Every step: one decode token for each running sequence first (streams keep flowing), then prefill
chunks of sequences still loading their prompt, oldest first, within the batch token budget. A
waiting sequence gets a free slot when there is one: the slot whose cached tokens share the longest
prefix with its prompt, so that only the rest is evaluated.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from localrun.engine.sequence import Sequence, Status


@dataclass(slots=True)
class Slot:
    """One sequence id of the llama context and the tokens its KV cache holds."""

    id: int
    tokens: list[int] = field(default_factory=list)
    seq: Sequence | None = None
    last_used: int = 0


@dataclass(slots=True)
class Chunk:
    """`seq.tokens[start:start + n]` at positions start.., with logits for the last `n_logits`."""

    seq: Sequence
    start: int
    n: int
    n_logits: int


@dataclass(slots=True)
class Plan:
    """One step: the chunks to decode, and the slots cut back to a prefix on the way (slot id, tokens kept)."""

    chunks: list[Chunk] = field(default_factory=list)
    trims: list[tuple[int, int]] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        return sum(c.n for c in self.chunks)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def keep_all(slot_id: int, keep: int) -> int:
    return keep


class Scheduler:
    """Owns the queue and the slots. `schedule()` plans a step; `commit()` records that it ran.

    `trim(slot_id, keep)` cuts a slot's KV cache back to its first `keep` tokens when a new sequence
    takes the slot, and returns how many it really kept: a cache that cannot drop part of a sequence
    (sliding-window attention past its window) keeps none.
    """

    def __init__(self, n_slots: int, batch_size: int, trim: Callable[[int, int], int] = keep_all) -> None:
        self.slots = [Slot(i) for i in range(n_slots)]
        self.batch_size = batch_size
        self.trim = trim
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

    def schedule(self) -> Plan:
        plan = Plan()
        self._admit(plan)
        budget = self.batch_size
        for seq in self.running:  # decode tokens first, prefill after: running streams never stall
            if not seq.prefilling and seq.pending and budget:
                plan.chunks.append(Chunk(seq, seq.n_evaluated, 1, 1))
                budget -= 1
        for seq in self.running:
            if seq.prefilling and budget:
                n = min(seq.n_prompt - seq.n_evaluated, budget)
                done = seq.n_evaluated + n == seq.n_prompt
                plan.chunks.append(Chunk(seq, seq.n_evaluated, n, 1 if done else 0))
                budget -= n
        return plan

    def commit(self, plan: Plan) -> None:
        """The plan's decode succeeded: its tokens are now in the slots' caches."""
        for c in plan.chunks:
            c.seq.n_evaluated = c.start + c.n
            slot = self.slots[c.seq.slot]
            del slot.tokens[c.start:]
            slot.tokens.extend(c.seq.tokens[c.start:c.start + c.n])

    def finish(self, seq: Sequence) -> None:
        """Take a sequence out (finished or cancelled); its slot keeps the cache for prefix reuse."""
        seq.status = Status.FINISHED
        if seq in self.running:
            self.running.remove(seq)
            self.slots[seq.slot].seq = None
        elif seq in self.waiting:
            self.waiting.remove(seq)

    def _admit(self, plan: Plan) -> None:
        while self.waiting:
            slot = self._best_slot(self.waiting[0].tokens)
            if slot is None:
                return
            seq = self.waiting.popleft()
            keep = min(common_prefix(slot.tokens, seq.tokens), seq.n_prompt - 1)
            if keep < len(slot.tokens):
                keep = self.trim(slot.id, keep)
                plan.trims.append((slot.id, keep))
                del slot.tokens[keep:]
            self._clock += 1
            slot.seq, slot.last_used = seq, self._clock
            seq.slot, seq.status = slot.id, Status.RUNNING
            seq.n_cached = seq.n_evaluated = keep
            self.running.append(seq)

    def _best_slot(self, tokens: list[int]) -> Slot | None:
        """The free slot sharing the longest prefix; among equals, the least recently used."""
        free = [s for s in self.slots if s.seq is None]
        if not free:
            return None
        return max(free, key=lambda s: (common_prefix(s.tokens, tokens), -s.last_used))


__all__ = ["Chunk", "Plan", "Scheduler", "Slot", "common_prefix"]
