"""Stream-K for persistent kernels (pass config ``stream_k``, with ``persistent``): the tiles of the last, partial
round of blocks are shared out by loop iterations, so that every block finishes at about the same time.

``tiles`` tiles of ``n`` pipelined iterations each on ``P`` blocks: the first ``dp_rounds * P`` tiles go round by
round as in any persistent kernel (block ``b`` takes tile ``b + r * P`` in round ``r``); the remaining ``sk_tiles``
tiles (the last ``tiles % P``, or one round more where those would give each block less than half a tile) are laid
end to end, ``U = sk_tiles * n`` iterations, and block ``b`` takes the iterations ``[b * U // P, (b + 1) * U // P)``.
A block's range covers the end of one tile, whole tiles, then the start of another; it runs its parts of them in
reverse order: first the part that does not reach its tile's last iteration, whose partial sums it saves in its own
slot of a workspace (:class:`~tilec.ir.stmt.PartialSave`), then the parts that do, each of which adds the slots of the
blocks that ran the tile's earlier iterations (:class:`~tilec.ir.stmt.PartialAdd`) and runs the epilogue. So a block
waits only for blocks numbered below it, which ran those parts first: nothing waits on a block the GPU has not
started (blocks are dispatched in order), and the thread interpreter, which runs blocks in order, checks the
schedule. The pipeline's ring counts every block's iterations in order across both phases.

Refused with a note where the pipelined loop does more than accumulate one gemm into a fragment cleared before it
(its iterations would not be a sum), where its trip count is not a compile-time constant that is the same for every
tile, in clusters or with copies of the consumers, or where the tiles fill whole rounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilec.ir.expr import Expr, binop

MIN_TRIPS = 8  # fewer pipelined iterations a tile: a part's pipeline fill and its partial sums cost more than they win


@dataclass(frozen=True)
class Plan:
    blocks: int  # P
    trips: int  # n: pipelined iterations a tile
    dp_rounds: int  # rounds of whole tiles before the shared ones
    sk_tiles: int  # tiles shared out by iterations

    @property
    def span(self) -> int:
        """``U``: the shared tiles' iterations end to end."""
        return self.sk_tiles * self.trips


def plan(tiles: int, trips: int, blocks: int) -> Plan | str:
    """The schedule of ``tiles`` tiles of ``trips`` iterations on ``blocks`` blocks, or why there is none."""
    rounds, rem = divmod(tiles, blocks)
    if rem == 0:
        return f"the {tiles} tiles fill whole rounds of {blocks} blocks"
    if trips < MIN_TRIPS:
        some = f"{trips} iteration of the pipelined loop a tile is" if trips == 1 else \
            f"{trips} iterations of the pipelined loop a tile are"
        return f"{some} too few to share out (at least {MIN_TRIPS})"
    shared = rem if 2 * rem >= blocks else rem + blocks  # each block at least half a tile: at most 3 parts a tile
    return Plan(blocks, trips, (tiles - shared) // blocks, shared)


@dataclass(frozen=True)
class Part:
    """Block ``pid``'s ``j``-th part of a shared tile (in the order it runs them), as expressions."""

    count: Expr  # the block's parts
    tile: Expr  # the tile, counted over all tiles (the persistent kernel's order of them)
    k_lo: Expr  # its first iteration of the tile
    trips: Expr  # its iterations of the tile
    ring0: Expr  # the ring's count of the block's iterations before this part, less k_lo
    partial: Expr  # whether it stops short of the tile's last iteration (saves its sums in slot ``pid``)
    first: Expr  # the block that runs the tile's first iteration (this one adds slots first .. pid - 1)


def part(p: Plan, pid: Expr, j: Expr) -> Part:
    n, U, P = p.trips, p.span, p.blocks
    a = binop("//", binop("*", pid, U), P)
    b = binop("//", binop("*", binop("+", pid, 1), U), P)
    last = binop("//", binop("-", b, 1), n)  # the shared tile holding the block's last iteration
    s = binop("-", last, j)  # parts in reverse order
    start = binop("*", s, n)
    lo = binop("max", a, start)
    hi = binop("min", b, binop("+", start, n))
    k_lo = binop("-", lo, start)
    ring0 = binop("-", binop("+", p.dp_rounds * n, binop("-", b, hi)), k_lo)
    first = binop("//", binop("-", binop("*", binop("+", start, 1), P), 1), U)
    return Part(binop("+", binop("-", last, binop("//", a, n)), 1), binop("+", p.dp_rounds * P, s), k_lo,
                binop("-", hi, lo), ring0, binop("<", hi, binop("+", start, n)), first)
