"""The order in which a persistent kernel's blocks take tiles whose work differs (causal attention's row blocks):
a schedule computed at compile time from each tile's trip count, so that the blocks finish together.

Round-robin orders (:func:`.persistent.serpentine`) give each block every P-th tile, and with lengths that
repeat with a period unrelated to P the blocks' sums differ: for 16 row blocks of 16 .. 1 key blocks on 132 SMs the
busiest block has 136 key blocks against a mean of 131.9 (3 % of the kernel spent waiting for it). Here the tiles
go out in windows of a few rounds' worth, in the grid's order (so the tiles in flight at a time stay close together
and share their operands in L2), the longest first within a window, each to the block with the least work so far
(longest-processing-time list scheduling): the same case then has its busiest block within 1 % of the mean.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

WINDOW_ROUNDS = 4  # tiles sorted within windows of this many rounds (P tiles each)
TILE_OVERHEAD = 1.0  # a tile's prologue and epilogue, in trips of its loop (perf notes AF: ~0.7-2)
MAX_ENTRIES = 8192  # 32 KB of the 64 KB of constant memory; a larger grid keeps the serpentine order


def balanced_schedule(trips: Sequence[int], blocks: int, window: int | None = None) -> list[list[int]]:
    """Each block's tiles, in the order it takes them, for tiles of ``trips[t]`` trips (``t`` in the grid's
    order): windows of ``window`` tiles (:data:`WINDOW_ROUNDS` rounds by default), longest first within one, each
    tile to the block with the least work so far (ties to the lowest block index)."""
    window = window or WINDOW_ROUNDS * blocks
    loads = [(0.0, b) for b in range(blocks)]
    mine: list[list[int]] = [[] for _ in range(blocks)]
    for start in range(0, len(trips), window):
        for t in sorted(range(start, min(start + window, len(trips))), key=lambda t: -trips[t]):
            work, b = heapq.heappop(loads)
            mine[b].append(t)
            heapq.heappush(loads, (work + trips[t] + TILE_OVERHEAD, b))
    return mine


def order_table(schedule: list[list[int]], tiles: int) -> tuple[int, ...]:
    """The schedule as a table indexed by ``round * blocks + block``: a tile, or ``tiles`` where the block has no
    tile that round; one more round than the longest list, all ``tiles``, so that a block can look one round ahead
    (whether this tile is its last)."""
    rounds = max(len(m) for m in schedule) + 1
    return tuple(m[r] if r < len(m) else tiles for r in range(rounds) for m in schedule)


def busiest(trips: Sequence[int], schedule: list[list[int]]) -> tuple[float, float]:
    """(the busiest block's work, the mean work), in trips with :data:`TILE_OVERHEAD` a tile."""
    work = [sum(trips[t] + TILE_OVERHEAD for t in m) for m in schedule]
    return max(work), sum(work) / len(work)
