"""The schedule rules that keep CPU flash attention exact, decided from plain data.

ggml-cpu's flash-attention kernel (`ggml_compute_forward_flash_attn_ext_f16` in the vendored
ops.cpp) takes one of three paths for a micro-batch over an f16 or f32 cache, and each sums a query
row's attention in another order:

- the tiled kernel, for a sequence's rows in a micro-batch holding at least `TILE_ROWS` of them
  (`GGML_FA_TILE_Q`): f32 accumulators over 64-cell tiles;
- the one-row kernel, for fewer rows: f16 accumulators, cell by cell;
- a split of the cells between the threads, for a micro-batch holding one row of one sequence over
  `SPLIT_CELLS` cells or more: per-thread partial sums, combined, so the result also depends on the
  thread count.

Each path computes a row alone (masked cells add nothing), so an answer is the same alone and beside
other requests when every row takes the same path in both: a prompt of `TILE_ROWS` tokens or more
is evaluated in pieces of at least that many rows (a shorter one takes the one-row kernel in pieces
of any size); a decoded token never sits alone in its micro-batch once its stream's padded cells
reach `SPLIT_CELLS`: it gets a second row, a one-token draft the verification keeps when the model
agrees (`drafts.guess_next`); and a speculative draft stays under a tile (`RowRules.max_draft`), in
the one-row kernel as plain decoding. A quantized cache takes the one-row kernel for every row;
without flash attention the lone-row rule is `scheduler.MIN_PREFILL`.

What the rules do not cover is the prefix cache's old limit, one case wider: cells a prompt reuses
were computed for another request, a reply's tokens and a prompt under `TILE_ROWS` tokens one row at
a time, where the same prompt sent cold computes them tiled.

**Flash attention for a sequence's first cells only** (`RowRules.prefix`): the kernel is fastest
where the cache is short, and over a long cache loses to attention without it on some CPUs (the
split path's alternative, the second row, doubles a lone row's cost). So the engine can compute a
sequence's first `PREFIX_CELLS` cells in a context with flash attention whose streams hold no more,
so that no row ever reaches the split path, and every later cell in a context without it
(`engine/contexts.py`). Whether a cell is computed with flash attention then depends on its
position alone: a prompt's pieces never cross the boundary, and pieces before it keep the tile rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from localrun.config import PREFIX_CELLS
from localrun.engine.decodecalls import KV_PAD

TILE_ROWS = 64  # ggml-cpu's GGML_FA_TILE_Q
SPLIT_CELLS = 512  # a lone row over this many cells is split between the threads
UNQUANTIZED = ("f16", "f32")


@dataclass(frozen=True, slots=True)
class RowRules:
    """`least_rows`: the fewest rows a piece of a prompt that long may have (0: no rule beyond
    MIN_PREFILL). `lone_from`: the position from which a lone decode token gets a second row (None: never).
    `prefix`: the cells computed with flash attention, positions below it (0: all of them, or none,
    as the context says); `least_rows` holds before it, and no chunk crosses it."""

    least_rows: int = 0
    lone_from: int | None = None
    prefix: int = 0

    def max_draft(self, n: int) -> int:
        """At most `n` drafted tokens, fewer where a draft's chunk would reach a tile: drafts then
        take the one-row kernel, as plain decoding does, and verify exactly."""
        return min(n, self.least_rows - 2) if self.least_rows else n

    def flash(self, start: int) -> bool:
        """Whether a chunk starting at this position goes to the flash-attention context (prefix mode)."""
        return start < self.prefix

    def room(self, start: int, n: int) -> int:
        """At most `n` tokens from `start` on, fewer where they would cross the prefix's end."""
        return min(n, self.prefix - start) if self.flash(start) else n

    def least_rows_at(self, start: int, n_prompt: int) -> int:
        """The tile rule for a prompt piece starting here: `least_rows` for a prompt whose part on this
        side of the prefix's end is that long; beyond the prefix none (0)."""
        if self.prefix and not self.flash(start):
            return 0
        part = min(n_prompt, self.prefix) if self.prefix else n_prompt
        return self.least_rows if self.least_rows and part >= self.least_rows else 0


def row_rules(cpu_flash_attn: bool, kv_type: str, prefix: bool = False) -> RowRules:
    """The rules for a context: only the CPU kernel over an unquantized cache needs them. A token at
    position p is the (p + 1)th cell of its stream, which llama.cpp pads to a multiple of KV_PAD.
    `prefix`: flash attention for the first PREFIX_CELLS cells only: llama.cpp's fewest attended cells
    (KV_PAD), so a lone row there never reaches SPLIT_CELLS and stays on the one-row kernel."""
    if prefix:
        return RowRules(least_rows=TILE_ROWS, prefix=PREFIX_CELLS)
    if not cpu_flash_attn or kv_type not in UNQUANTIZED:
        return RowRules()
    return RowRules(least_rows=TILE_ROWS, lone_from=SPLIT_CELLS - KV_PAD)


__all__ = ["PREFIX_CELLS", "RowRules", "SPLIT_CELLS", "TILE_ROWS", "row_rules"]
