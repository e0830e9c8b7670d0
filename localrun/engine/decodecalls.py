"""Which decode tokens share a `llama_decode` call, decided from plain data.

With a KV stream per slot, llama.cpp attends every decode row of a micro-batch over the same number
of cells: its longest stream's, rounded up to a multiple of 256 and never fewer
(`llama_kv_cache::get_n_kv`). Without flash attention each row reads the keys and values of all
those cells of its own stream, masked or not, so seven short chats decoding beside one 1.4k-token
conversation each read 1536 cells instead of 256. Another call reads every weight once more (and
builds another compute graph), so a stream decodes apart only when the cells it spares the others
hold more bytes than the weights. Splitting changes no result: a row's attention adds exact zeros
for the masked cells, however many there are.

llama.cpp puts only consecutive sequence ids into one micro-batch, so rows whose slots are not
neighbours are evaluated apart whatever the calls; only a run of neighbours is worth cutting. Where
a gap's streams can take a cell that lengthens nobody's attention (prefix mode's flash-attention
context), a throwaway row in each joins the run again (`bridges`).
"""

from __future__ import annotations

from typing import Callable

KV_PAD = 256  # llama.cpp pads the cells a micro-batch attends over to a multiple of this, and never fewer


def call_cost(weight_bytes: int, cell_bytes: int) -> float:
    """One more `llama_decode` call's cost in cells one row reads: the weights' bytes over a cell's
    keys and values in every layer. Decoding on a CPU waits on memory more than on arithmetic. With
    SmolLM2-135M on 2 cores (4192 cells), cuts that spared 7 rows 7168 and 8960 cells made decoding
    1.09x and 1.41x faster, and cuts that spared them 3584 and 1792 made it 0.97x and 0.94x as fast
    (`scripts/bench_decode_calls.py`, docs/benchmarks.md)."""
    return weight_bytes / cell_bytes


def attended(cells: int, cap: int) -> int:
    """The cells a micro-batch attends over when its longest stream holds `cells` (`cap`: a stream's size)."""
    return min(cap, max(KV_PAD, -(-cells // KV_PAD) * KV_PAD))


def split_points(rows: list[tuple[int, int]], cost: float, cap: int) -> list[int]:
    """Where a step's decode rows should start another call: the indices of the rows that begin one.

    `rows` are (slot, cells its stream holds with this token) in slot order; `cost` is `call_cost`'s.
    Each run of neighbouring slots is cut where the rows' attended cells plus `cost` per call are
    least (dynamic programming over the run's cut points: a step has at most a few dozen rows).
    """
    points: list[int] = []
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i][0] != rows[i - 1][0] + 1:
            cells = [n for _, n in rows[start:i]]
            if attended(max(cells), cap) > attended(min(cells), cap):  # else no cut spares anything
                points += _best_cuts(cells, cost, cap, start)
            start = i
    return points


def _best_cuts(cells: list[int], cost: float, cap: int, offset: int) -> list[int]:
    """The cheapest cut of one run of neighbours into calls: the indices (plus `offset`) where calls begin."""
    best = [0.0] + [float("inf")] * len(cells)  # best[j]: cheapest way to evaluate the first j rows
    begin = [0] * (len(cells) + 1)  # where the last call of that way begins
    for j in range(1, len(cells) + 1):
        longest = 0
        for i in range(j - 1, -1, -1):  # the last call takes rows i..j-1
            longest = max(longest, cells[i])
            total = best[i] + cost + (j - i) * attended(longest, cap)
            if total < best[j]:
                best[j], begin[j] = total, i
    cuts, j = [], len(cells)
    while j:
        j = begin[j]
        if j:
            cuts.append(j + offset)
    return sorted(cuts)


def bridges(slots: list[int], room: Callable[[int], int | None]) -> list[tuple[int, int]]:
    """Throwaway rows that join a decode call's slots into one run of neighbours: (slot, position).

    `slots`: the call's slots; `room(g)`: where slot g's stream in the call's context can take one
    more cell (None: it cannot). llama.cpp evaluates each run of neighbouring slots apart, a pass
    over the weights each: seven short chats beside a long conversation in slot 3 (its row in another
    call) took two passes, 45-60 ms a step on 2 cores against 34 with the conversation in slot 0. A
    gap is bridged only whole: a row in part of it would join nothing.
    """
    rows, taken = [], sorted(set(slots))
    for below, above in zip(taken, taken[1:]):
        gap = [(g, room(g)) for g in range(below + 1, above)]
        if gap and all(pos is not None for _, pos in gap):
            rows += gap
    return rows


__all__ = ["KV_PAD", "attended", "bridges", "call_cost", "split_points"]
