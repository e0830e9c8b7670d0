"""Which decode tokens share a llama_decode call: the cost model, decided from plain data."""

from __future__ import annotations

from localrun.engine.decodecalls import attended, bridges, call_cost, split_points
from localrun.engine.scheduler import Scheduler
from localrun.engine.sequence import Sequence

COST = 4192  # SmolLM2-135M's own: 96.6 MB of weights, 30 layers x 3 KV heads x (64 + 64) x 2 bytes a cell


def test_a_call_attends_over_its_longest_stream_rounded_up_to_256_cells():
    assert [attended(n, 4096) for n in (1, 200, 256, 257, 1400)] == [256, 256, 256, 512, 1536]
    assert attended(1400, 1024) == 1024  # never more than a stream holds


def test_a_call_costs_the_weights_bytes_in_cells():
    assert round(call_cost(96_576_768, 30 * 3 * 128 * 2)) == COST
    assert call_cost(4_000_000_000, 32 * 8 * 256 * 2) > 7 * COST  # a 7B model with grouped queries cuts later


def test_short_streams_share_one_call():
    assert split_points([(s, 60 + s) for s in range(8)], COST, 2048) == []


def test_one_long_cache_decodes_apart_from_its_neighbours():
    rows = [(0, 1400)] + [(s, 40) for s in range(1, 8)]
    assert split_points(rows, COST, 2048) == [1]
    middle = [(s, 1400 if s == 3 else 40) for s in range(8)]
    assert split_points(middle, COST, 2048) == [4]  # slots 0-2 read its cells; 4-7 are spared them


def test_a_cut_must_spare_more_cells_than_a_call_costs():
    assert split_points([(0, 1400), (1, 40), (2, 40)], COST, 2048) == []  # spares 2560 cells for 4192
    assert split_points([(0, 1400), (1, 40), (2, 40)], 2000, 2048) == [1]
    assert split_points([(s, 600 if s == 0 else 40) for s in range(8)], COST, 2048) == []  # 7 x 512 < 4192
    assert split_points([(s, 1000 if s == 0 else 40) for s in range(8)], COST, 2048) == [1]  # 7 x 768 > 4192


def test_slots_that_are_not_neighbours_are_apart_already():
    """llama.cpp evaluates only consecutive sequence ids together: a gap is never a cut of ours."""
    assert split_points([(0, 40), (1, 40), (5, 40), (6, 40)], COST, 2048) == []
    assert split_points([(0, 40), (1, 40), (5, 1400), (6, 40), (7, 40), (8, 40), (9, 40)], COST, 2048) == [3]


def test_a_plan_splits_its_decode_tokens_where_the_cost_model_says():
    s = Scheduler(n_slots=4, batch_size=2048, call_cost=500)
    for name, n in (("long", 600), ("a", 3), ("b", 3), ("c", 3)):
        s.add(Sequence(name, list(range(100, 100 + n)), n, None))
    plan = s.schedule()
    s.commit(plan.chunks)
    for c in plan.chunks:
        c.seq.tokens.append(7)
    calls = s.schedule().batches()
    assert [[c.seq.id for c in call] for call in calls] == [["long"], ["a", "b", "c"]]


def test_bridges_fill_every_gap_that_can_take_a_cell_whole():
    """A long conversation's row in another context leaves slot 3 empty between seven short chats."""
    assert bridges([0, 1, 2, 4, 5, 6, 7], {3: 0}.get) == [(3, 0)]
    assert bridges([0, 1, 5, 6], {2: 0, 3: 40, 4: 12}.get) == [(2, 0), (3, 40), (4, 12)]
    assert bridges([0, 1, 5, 6], {2: 0, 3: None, 4: 12}.get) == []  # a part of a gap would join nothing
    assert bridges([0, 3, 5], {1: 7, 2: 7, 4: None}.get) == [(1, 7), (2, 7)]  # each gap on its own


def test_neighbours_need_no_bridge():
    assert bridges([2, 3, 4], {}.get) == [] and bridges([5], {}.get) == [] and bridges([], {}.get) == []
