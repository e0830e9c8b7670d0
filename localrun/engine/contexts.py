"""The engine's llama contexts: one, or in prefix mode two over the same model and slots.

In prefix mode (`flashrows`, `RowRules.prefix`) a sequence's first `PREFIX_CELLS` cells are computed
in a context with flash attention whose KV streams hold no more than that, and its later cells in
the main context without it. Each slot's cells live in one of them (its home); a chunk is evaluated
in the context its first position belongs to, and when that is not the slot's home the cells move
first: saved from one context, their values re-laid (`kvstate`), restored in the other. A move of
256 SmolLM2 cells takes a few milliseconds, once per sequence that outgrows the prefix (or back, when a
slot's cache is cut to a prefix that short for a new prompt).

Copies between slots are moves too in prefix mode: llama.cpp copies a stream only at the next
`llama_decode` of its context, so a stream copied with `llama_memory_seq_cp` and then saved before
that would be saved as it was before the copy.
"""

from __future__ import annotations

import llama_cpp as L

from localrun.config import PREFIX_CELLS
from localrun.engine.backend import Model, new_context, seq_state, set_seq_state
from localrun.engine.kvstate import StateLayoutError, relaid
from localrun.errors import LocalrunError

MAIN, FLASH = 0, 1


class Contexts:
    """`main`, and `flash` in prefix mode (else None). `homes[slot]`: the context holding its cells."""

    def __init__(self, main, n_slots: int, flash=None) -> None:
        self.main, self.flash = main, flash
        self.all = [main] if flash is None else [main, flash]
        self._memories = [L.llama_get_memory(ctx) for ctx in self.all]
        self.homes = [MAIN] * n_slots

    def of(self, flash: bool):
        """The context for a chunk on this side of the prefix's end."""
        return self.flash if flash and self.flash is not None else self.main

    def memory(self, slot: int):
        return self._memories[self.homes[slot]]

    def place(self, slot: int, ctx) -> None:
        """Make `ctx` the slot's home, moving its cells there if it holds any."""
        where = self.all.index(ctx)
        if where != self.homes[slot]:
            self._move(slot, slot, where)

    def copy(self, source: int, target: int) -> None:
        """Make the target slot's cache a copy of the source's (in the source's home)."""
        if self.flash is None:
            L.llama_memory_seq_cp(self._memories[MAIN], source, target, -1, -1)
        else:
            self._move(source, target, self.homes[source])

    def trim(self, slot: int, keep: int) -> bool:
        """Cut the slot's cache back to its first `keep` tokens; False where llama.cpp cannot."""
        return L.llama_memory_seq_rm(self.memory(slot), slot, keep, -1)

    def next_position(self, ctx, slot: int) -> int:
        """Where the slot's stream in `ctx` takes its next cell: one past the last it holds (0: empty)."""
        return L.llama_memory_seq_pos_max(self._memories[self.all.index(ctx)], slot) + 1

    def drop(self, ctx, slot: int, start: int) -> None:
        """Remove the slot's cells in `ctx` from position `start` on."""
        L.llama_memory_seq_rm(self._memories[self.all.index(ctx)], slot, start, -1)

    def set_threads(self, threads: int) -> None:
        for ctx in self.all:
            L.llama_set_n_threads(ctx, threads, threads)

    def _move(self, source: int, target: int, where: int) -> None:
        """Save the source slot's cells from its home, restore them as the target's in context
        `where` (re-laid if that stores values the other way), and drop what the target had elsewhere."""
        here = self.homes[source]
        state = seq_state(self.all[here], source)
        L.llama_memory_seq_rm(self._memories[self.homes[target]], target, -1, -1)  # saved first: may be the source
        if where != here:
            try:
                state = relaid(state, transposed=where == MAIN)
            except StateLayoutError as error:
                raise LocalrunError(f"this model's KV cells cannot move between contexts ({error}): "
                                    "set LOCALRUN_FLASH_ATTN to on or off") from None
        if not set_seq_state(self.all[where], target, state):
            raise LocalrunError(f"llama.cpp could not move slot {source}'s cache")
        self.homes[target] = where

    def free(self) -> None:
        for ctx in self.all:
            L.llama_free(ctx)
        self.all = []


def open_contexts(model: Model, flash_attn: str, *, n_slots: int, ctx_size: int, batch_size: int, threads: int,
                  kv_type: str, kv_unified: bool = False, swa_full: bool = True) -> Contexts:
    """The main context of `ctx_size` cells per slot, with `flash_attn` ("on", "off", "auto"; off in
    prefix mode), and in prefix mode the flash-attention one for every slot's first cells."""
    prefix = flash_attn == "prefix"
    main = new_context(model, n_ctx=n_slots * ctx_size, n_batch=batch_size, n_seq_max=n_slots, threads=threads,
                       flash_attn="off" if prefix else flash_attn, kv_type=kv_type, kv_unified=kv_unified,
                       swa_full=swa_full)
    if not prefix:
        return Contexts(main, n_slots)
    try:
        cells = n_slots * PREFIX_CELLS
        flash = new_context(model, n_ctx=cells, n_batch=min(batch_size, cells), n_seq_max=n_slots, threads=threads,
                            flash_attn="on", kv_type=kv_type)
    except Exception:
        L.llama_free(main)
        raise
    return Contexts(main, n_slots, flash)


__all__ = ["FLASH", "MAIN", "Contexts", "open_contexts"]
