"""The balanced order of a persistent kernel's tiles (:mod:`tilec.passes.tile_order`) and the table it becomes."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import load_example

import tilec
from tilec.ir.expr import Table, const
from tilec.passes import tile_order

WS = {"wgmma": True, "tma": True, "warp_specialize": True, "persistent": True}


def _causal_trips(heads: int, rows: int) -> list[int]:
    """Causal attention's key blocks per tile, the grid's order: each head's row blocks, the longest first."""
    return [rows - t % rows for t in range(heads * rows)]


@pytest.mark.parametrize(("heads", "rows", "blocks"), [(128, 16, 132), (32, 64, 132), (3, 5, 4), (1, 3, 8)])
def test_every_tile_once_and_the_blocks_balanced(heads, rows, blocks):
    trips = _causal_trips(heads, rows)
    schedule = tile_order.balanced_schedule(trips, blocks)
    assert sorted(t for m in schedule for t in m) == list(range(len(trips)))
    top, mean = tile_order.busiest(trips, schedule)
    assert top - mean <= max(trips) + tile_order.TILE_OVERHEAD  # list scheduling's bound: one tile above the mean
    if (heads, rows) == (128, 16):  # the serpentine order's busiest block: 152 against 147.9 (perf notes AO)
        assert top <= 148.5 and mean == pytest.approx((sum(trips) + len(trips)) / blocks)
    for m in schedule:  # within a window the longest first
        w = tile_order.WINDOW_ROUNDS * blocks
        for a, b in zip(m, m[1:]):
            assert a // w < b // w or trips[a] >= trips[b]


def test_the_table_is_rounds_of_blocks_with_a_last_round_of_none():
    schedule = [[0, 3], [1], [2, 4]]
    table = tile_order.order_table(schedule, 5)
    assert table == (0, 1, 2, 3, 5, 4, 5, 5, 5)
    t = Table(table, const(0))
    assert list(t.at(np.arange(9))) == list(table)
    with pytest.raises(IndexError, match="outside 0..8"):
        t.at(np.array([9]))


def test_a_grid_too_large_for_a_table_keeps_the_serpentine_order(monkeypatch):
    monkeypatch.setattr(tile_order, "MAX_ENTRIES", 11)  # 9 tiles on 2 blocks: 5 rounds and one of none, 12
    fa = load_example("03_flash_attention")
    k = tilec.JITKernel(fa.flash_attention(1, 3, 300, 64, True, block_M=128, block_N=64, threads=256,
                                           num_stages=2).prim_func, "simt:sm_90a", [3], pass_configs={**WS,
                                                                                                      "persistent": 2})
    assert "in serpentine order" in k.report()
    assert "a table of 9 tiles on 2 blocks would pass 11 entries" in k.report()


def test_the_cuda_source_declares_the_table_once_in_constant_memory():
    fa = load_example("03_flash_attention")
    jk = tilec.JITKernel(fa.flash_attention(8, 16, 2048, 128, True, block_M=128, block_N=128, num_stages=2,
                                            threads=256).prim_func, "cuda:sm_90a", [3], pass_configs=WS)
    src = jk.get_kernel_source()
    decl = [line for line in src.splitlines() if line.startswith("__constant__ int tl_table")]
    assert len(decl) == 1 and decl[0].startswith("__constant__ int tl_table2244_")  # 16 rounds and one of none
    assert "the busiest block has 148 trips of the T.Pipelined loop at line" in jk.report()
    assert "table<2244 x 0..2048>" in str(jk.state.func)


def test_a_tables_entries_are_data_not_child_nodes():
    from tilec.ir.expr import Var
    from tilec.ir.visit import children, substitute

    r, s = Var("r"), Var("s")
    t = Table((4, 5, 6), r)
    assert list(children(t)) == [r]  # the traversals do not step through the entries
    u = substitute(t, {r: s})
    assert u.values is t.values and u.index is s
