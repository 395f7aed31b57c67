"""Persistent kernels (part of the pipelining stage, :mod:`.pipelining`; pass config ``persistent``, with a
warp-specialized pipeline): one block per SM, or the fewest that take the tiles in as many rounds, both roles looping
over the block's tiles, in row-major order, in ``T.use_swizzle``'s panels, in clusters sharing tiles by TMA multicast,
in a balanced or serpentine order where the trip count depends on the tile, or with the last round shared out by
iterations (``stream_k``)."""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from tilec import dtypes as dt
from tilec.errors import where
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Const, Load, Table, Var, binop, const
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import For, IfThenElse, KernelLaunch, SeqStmt, Stmt, Store, TmaCopy
from tilec.ir.visit import substitute, transform, vars_in, walk
from tilec.passes.pipeline_common import is_async_copy, writes
from tilec.target import Target

if TYPE_CHECKING:
    from tilec.passes.pipelining import Pipeliner


def copies_refusal(launch: KernelLaunch, p: Pipeliner) -> None:
    """Keeps ``p.copies`` (pass config ``consumers``) or sets it to 1 with a note saying why."""
    if p.copies == 1:
        return
    why = "pass config 'consumers' needs a persistent kernel" if not p.persistent else \
        f"{p.copies} x {launch.num_threads} consumer threads leave too few registers for each (at most 256)" \
        if launch.num_threads * p.copies > 256 else None
    if why is not None:
        p.notes.append(f"T.Kernel at {where(launch.loc)}: one copy of the consumer threads, "
                       f"not {p.copies}: {why}")
        p.copies = 1


PERSISTENT_CLUSTER_LIMIT = ("clusters of 4 blocks, one per SM, do not all fit on the GPU at once (a cluster lies in "
                            "one GPC; on an H200, 33 such clusters ran at 0.65x the speed of 66 clusters of 2: perf "
                            "notes AI)")


def cluster_plan(func: PrimFunc, persistent: int, per_sm: bool, n: Any, notes: list[str]) -> tuple[int, int | None]:
    """(blocks per cluster, grid dimension along which a cluster's blocks take neighbouring tiles) for a persistent
    kernel of ``persistent`` blocks (``per_sm``: one per SM) with pass config ``cluster``
    (:mod:`tilec.passes.cluster`), or (1, None) with a note saying why not: the dimension along which ``n``
    neighbouring tiles share the most bytes of their global→shared copies."""
    from tilec.passes.cluster import SIZES, shared_copies

    if not persistent or n not in SIZES:
        return 1, None
    launch = func.launch
    copies = [c for c in walk(launch.body) if is_async_copy(c)]
    plan = shared_copies(launch.grid, launch.block_vars, copies, n)
    why = f"{persistent} blocks are not a multiple of {n}" if persistent % n else \
        PERSISTENT_CLUSTER_LIMIT if n > 2 and per_sm else \
        None if plan else f"no grid dimension that is a multiple of {n} shares a tile between neighbouring tiles"
    if why is not None:
        notes.append(f"T.Kernel at {where(launch.loc)}: persistent blocks not in clusters: "
                     f"{why}")
        return 1, None
    return n, plan[0]


def fewest_blocks(func: PrimFunc, sms: int, n: int) -> tuple[int, tuple[int, int] | None]:
    """The blocks of pass config ``persistent=True`` (one per SM, ``sms``): the fewest, a multiple of the cluster
    size ``n``, that take the grid's tiles in as many rounds, where that is fewer (``sms`` and the rounds beside
    it). A 4096³ GEMM in 128x256 tiles has 512 tiles: 4 rounds on 132 SMs, the last with 16 blocks idle, or 4 whole
    rounds on 128 blocks, whose 4 idle SMs leave the others more L2 bandwidth and power (0.5-1.2 % faster, perf
    notes, twenty-fifth session). One block per SM where the grid is not known at compile time, where one round
    takes all tiles (one block a tile), or where the tiles' trip counts differ (causal attention: fewer blocks would
    each take more of the work)."""
    launch = func.launch
    if not all(isinstance(d, Const) for d in launch.grid):
        return sms, None
    block_vars = {id(v) for v in launch.block_vars}
    if any(isinstance(s, For) and s.kind == "pipelined" and {id(v) for v in vars_in(s.extent)} & block_vars
           for s in walk(launch.body)):
        return sms, None
    tiles = functools.reduce(lambda a, b: a * b, (int(d.value) for d in launch.grid))
    rounds = -(-tiles // sms)
    fewest = -(-tiles // rounds)
    blocks = -(-fewest // n) * n
    return (blocks, (sms, rounds)) if rounds > 1 and blocks < sms else (sms, None)


def sms_of(target: Target) -> int:
    from tilec.arch import device_model

    return device_model(target).sms


def count_trips(p: Pipeliner, loop: For) -> None:
    """A persistent block whose pipelined loop runs a number of trips that depends on the tile (causal
    attention) counts its ring's iterations in a register (``p.base``, advanced after each tile) and takes
    its tiles in a balanced order (:func:`balanced_order`) or in serpentine order (:func:`tile_at`); refused
    with a note unless every tile runs a trip (a tile without one would leave the warpgroups' turns
    unpaired)."""
    from tilec.ir.arith import bounds

    launch = p.func.launch
    ranges = {v: (0, int(d.value) - 1) for v, d in zip(launch.block_vars, launch.grid) if isinstance(d, Const)}
    low = bounds(loop.extent, ranges)
    if low is None or low[0] < 1:
        # what needs a persistent kernel goes too (its ring counter and tile loop are never made)
        p.persistent = 0
        p.notes.append(f"T.Kernel at {where(launch.loc)}: not persistent: the trip count of the T.Pipelined "
                       f"loop at {where(loop.loc)} depends on the tile and may be zero")
        drop_what_needs_persistent(launch, p)
        return
    if p.cluster > 1:
        p.cluster, p.cluster_dim = 1, None
        p.notes.append(f"T.Kernel at {where(launch.loc)}: persistent blocks not in clusters: the trip count of "
                       f"the T.Pipelined loop at {where(loop.loc)} depends on the tile (a cluster's blocks "
                       "would run different numbers of trips over the stages they share)")
    if p.copies > 1:
        p.copies = 1
        p.notes.append(f"T.Kernel at {where(launch.loc)}: one copy of the consumer threads: the trip count of "
                       f"the T.Pipelined loop at {where(loop.loc)} depends on the tile (each copy would have to "
                       "count the other's trips)")
    ring = Buffer("ring_base", (), dt.int32, "var", loc=loop.loc)
    p.new_allocs.append(ring)
    p.base = (Var("base"), ring)
    if p.balanced:
        p.order = balanced_order(p, loop)


def balanced_order(p: Pipeliner, loop: For) -> tuple[int, ...] | None:
    """The table of :func:`.tile_order.order_table` for the tiles' trip counts of ``loop``, or None (with a
    note) where they are not known at compile time or the table would be too large."""
    from tilec.passes import tile_order
    from tilec.passes.trip_counts import NotStatic, evaluate

    launch = p.func.launch
    here = where(loop.loc)
    lin = Var("t")
    try:
        tiles = int(evaluate(product(launch.grid), {}))
        trips = evaluate(substitute(loop.extent, tile_coords(launch, list(launch.grid), lin)),
                         {lin: np.arange(tiles)}) if tiles <= tile_order.MAX_ENTRIES else None
    except NotStatic as e:
        p.notes.append(f"T.Kernel at {where(launch.loc)}: persistent blocks take tiles in serpentine order: the "
                       f"trip counts of the T.Pipelined loop at {here} are not known at compile time ({e})")
        return None
    blocks = min(tiles, p.persistent)
    if trips is not None:
        trips = [int(x) for x in np.broadcast_to(trips, (tiles,))]
        schedule = tile_order.balanced_schedule(trips, blocks)
        table = tile_order.order_table(schedule, tiles)
    if trips is None or len(table) > tile_order.MAX_ENTRIES:
        p.notes.append(f"T.Kernel at {where(launch.loc)}: persistent blocks take tiles in serpentine order: a "
                       f"table of {tiles} tiles on {blocks} blocks would pass {tile_order.MAX_ENTRIES} entries")
        return None
    top, mean = tile_order.busiest(trips, schedule)
    p.notes.append(f"T.Kernel at {where(launch.loc)}: persistent blocks take tiles in a balanced order "
                   f"(longest first within windows of {tile_order.WINDOW_ROUNDS} rounds, each to the least "
                   f"busy block; a table in constant memory): the busiest block has {top:g} trips of the "
                   f"T.Pipelined loop at {here} against a mean of {mean:.1f}, counting "
                   f"{tile_order.TILE_OVERHEAD:g} a tile")
    p.order_blocks = blocks
    return table


def tile_at(p: Pipeliner, r: Any) -> Any:
    """The tile block ``pid`` takes in round ``r`` when the trip count depends on the tile (``tiles``: none)."""
    if p.order is None:
        return serpentine(r, p.pid, p.persistent)
    return Table(p.order, binop("+", binop("*", r, p.order_blocks), p.pid))


def tile_rounds(p: Pipeliner) -> Any:
    """The number of rounds of :func:`tile_at` (the last may have no tile for some blocks)."""
    from tilec.ir.expr import ceildiv

    if p.order is None:
        return ceildiv(product(p.func.launch.grid), p.persistent)
    return const(len(p.order) // p.order_blocks - 1)


def advance_base(p: Pipeliner, n: Any, loop: For) -> tuple[Stmt, ...]:
    """The counter of :func:`count_trips` moved past this tile's ``n`` iterations (nothing without one)."""
    if p.base is None:
        return ()
    ring = p.base[1]
    return (Store(ring, (), binop("+", Load(ring, ()), n), loc=loop.loc),)


def cluster_index(p: Pipeliner) -> Any:
    """The index of a persistent block's cluster (of ``p.cluster`` blocks, which take a group of that many
    tiles at a time; the block's own index without clusters)."""
    return p.pid if p.cluster == 1 else binop("//", p.pid, p.cluster)


def first_tile(p: Pipeliner) -> Any:
    """Whether a persistent block is at its first tile."""
    return binop("==", p.tile, 0) if p.base is None else binop("==", p.base[0], 0)


def last_tile(p: Pipeliner) -> Any:
    """Whether a persistent block's tile counter is at its last tile (the order of :func:`make_persistent`)."""
    P, tiles = p.persistent, product(p.func.launch.grid)
    if p.base is None:  # the P // n clusters take one of the tiles // n groups each a round
        n = p.cluster
        groups = tiles if n == 1 else binop("//", tiles, n)
        return binop(">=", binop("+", cluster_index(p), binop("*", binop("+", p.tile, 1), P // n)), groups)
    if p.order is not None:  # the table's next round has no tile for the block
        return binop(">=", tile_at(p, binop("+", p.tile, 1)), tiles)
    last = binop("-", tile_rounds(p), 1)
    at_last = serpentine(last, p.pid, P)  # the block's tile of the last round, if below ``tiles``
    return binop("or", binop("and", binop("<", at_last, tiles), binop("==", p.tile, last)),
                 binop("and", binop(">=", at_last, tiles), binop("==", p.tile, binop("-", last, 1))))


def make_persistent(launch: KernelLaunch, p: Pipeliner, producer: Stmt, consumer: Stmt) -> tuple:
    """A persistent kernel: ``p.persistent`` blocks (at most one per tile), block ``b`` taking tiles ``b, b + P,
    ...`` in row-major order of the original grid, or in the panels of its ``T.use_swizzle`` (:mod:`.raster`);
    both roles loop over the block's tiles, so the producer loads the next tile's first stages while the consumers
    finish the last one. In clusters of ``n`` (:func:`cluster_plan`) the same order runs over the grid of ``n``-tile
    groups along ``p.cluster_dim``, cluster ``c`` (blocks ``c*n .. c*n+n-1``) taking group ``c, c + P/n, ...`` and
    its block of rank ``r`` that group's tile ``r``; the copies those tiles share become multicast. (grid, block
    vars, producer, consumer)."""
    from tilec.ir.expr import ceildiv

    P, n, dim = p.persistent, p.cluster, p.cluster_dim
    dims = list(launch.grid)
    if n > 1:  # a cluster's blocks take neighbouring tiles: the grid of clusters' tiles, n at a time along dim
        dims[dim] = const(int(dims[dim].value) // n)
        producer = transform(producer, functools.partial(multicast, launch.block_vars[dim], n))
    tiles = product(dims)  # the grid's tiles, or groups of n tiles
    pid, cid = p.pid, cluster_index(p)
    t = binop("+", cid, binop("*", p.tile, P // n)) if p.base is None else tile_at(p, p.tile)
    sub = tile_coords(launch, dims, t)
    if p.ring0_whole is not None:  # stream-K asked for, not done (a note says why)
        sub[p.ring0] = p.ring0_whole
    if n > 1:
        v = launch.block_vars[dim]
        sub[v] = binop("+", binop("*", sub[v], n), binop("%", pid, n))
    here = where(launch.loc)
    order = "" if launch.swizzle is None or len(dims) < 2 else \
        f" in {panels_text(launch.swizzle)} (T.use_swizzle)"
    if n > 1:
        order += f", in clusters of {n} blocks whose tiles neighbour along grid dimension {dim} ({'xyz'[dim]})"
    if p.base is None:
        trips = ceildiv(binop("-", tiles, cid), P // n)
        mine = binop("==", binop("%", p.tile, p.copies), p.copy)  # a copy of the consumers: every copies-th tile
        wrap = [For(p.tile, trips, "serial", substitute(s, sub) if s is producer or p.copies == 1 else
                    IfThenElse(mine, substitute(s, sub), loc=s.loc), (("tiles", True),), loc=s.loc)
                for s in (producer, consumer)]
        if p.copies > 1:
            order += f", dealt out in turn to {p.copies} copies of the block's {launch.num_threads} consumer threads " \
                     "(one's epilogue beside another's main loop)"
    else:  # every block loops over the rounds; the last round may have no tile for it
        var, ring = p.base
        order += ", in the balanced order noted above" if p.order is not None else ", in serpentine order (block b " \
            "takes the b-th tile of even rounds, the b-th from the end of odd ones)"
        order += ", counting their pipeline iterations as they go"
        wrap = [SeqStmt((Store(ring, (), const(0), loc=s.loc),
                         For(p.tile, tile_rounds(p), "serial", IfThenElse(binop("<", t, tiles), substitute(s, sub),
                                                                          loc=s.loc),
                             (("tiles", True), ("lets", ((var, Load(ring, ())),))), loc=s.loc)), loc=s.loc)
                for s in (producer, consumer)]
    blocks = binop("min", tiles, P) if n == 1 else binop("*", binop("min", tiles, P // n), n)
    launched = blocks.value if isinstance(blocks, Const) else P  # one block a tile where tiles are fewer
    if launched < P:
        tiles_all = int(product(list(launch.grid)).value)
        order += f" (the grid has {tiles_all} tile{'s' * (tiles_all != 1)}, fewer than the {P} blocks of pass " \
                 "config 'persistent')"
    who = "1 block loops" if launched == 1 else f"{launched} blocks loop"
    if p.fewer is not None:
        order += f" ({launched} of {p.fewer[0]} SMs: the {int(tiles.value) * n} tiles take {p.fewer[1]} rounds " \
                 f"either way, none of them partial on {launched})"
    p.notes.append(f"T.Kernel at {here}: persistent, {who} over the tiles of the grid{order}")
    return (blocks,), (pid,), wrap[0], wrap[1]


def make_stream_k(launch: KernelLaunch, p: Pipeliner, producer: Stmt, stmts: list[Stmt], key: int) -> tuple | None:
    """A persistent kernel whose last round's tiles are shared out by iterations (:mod:`.stream_k`): both roles
    loop over the block's whole tiles, then over its parts of the shared ones; the consumers save a part's partial
    sums or add the earlier parts' before the epilogue. (grid, block vars, producer, consumer), or None with a note
    saying why not."""
    from tilec.ir.stmt import PartialAdd, PartialSave
    from tilec.passes import stream_k

    here = where(launch.loc)
    loop, dims = stmts[key], list(launch.grid)
    why = stream_k_refusal(p, stmts, key)
    if why is None:
        tiles, n = int(product(dims).value), int(loop.extent.value)
        schedule = stream_k.plan(tiles, n, min(tiles, p.persistent))
        why = schedule if isinstance(schedule, str) else None
        if tiles < p.persistent:  # a block a tile: the plan saw whole rounds of as many blocks
            why = f"{tiles} tile{'s' * (tiles != 1)} in the grid, fewer than the {p.persistent} blocks of pass " \
                  "config 'persistent' (one tile a block, none to share out)"
    if why is not None:
        p.notes.append(f"T.Kernel at {here}: not stream-K: {why}")
        return None
    P, acc = schedule.blocks, p.shareable[2][0].C.buffer
    workspace = Buffer("sk_partials", (P, acc.numel), dt.float32, "global", loc=acc.loc)
    flags = Buffer("sk_flags", (P,), dt.int32, "global", loc=acc.loc)
    whole = {**tile_coords(launch, dims, binop("+", p.pid, binop("*", p.tile, P))), p.ring0: binop("*", p.tile, n)}
    j = Var("part")
    part = stream_k.part(schedule, p.pid, j)
    # each part's tile, first iteration, trip count and ring count, bound once at its start
    at = {f: Var(f"part_{f}") for f in ("tile", "k_lo", "trips", "ring0")}
    lets = (("lets", tuple((v, getattr(part, f)) for f, v in at.items())),)
    shared = {**tile_coords(launch, dims, at["tile"]), p.ring0: at["ring0"]}
    loops = p.shareable[:2]

    def ranged(s: Stmt) -> Stmt:  # the pipelined loops over this part's iterations only
        def fn(node: Any) -> Any:
            if not any(node is x for x in loops):
                return None
            body = substitute(node.body, {node.var: binop("+", node.var, at["k_lo"])})
            return For(node.var, at["trips"], node.kind, body, node.annotations, loc=node.loc)
        return transform(s, fn)

    C = Region(acc, tuple(const(0) for _ in acc.shape), tuple(int(d) for d in acc.shape))
    add = PartialAdd(C, workspace, flags, part.first, p.pid, loc=loop.loc)
    ends = IfThenElse(part.partial, PartialSave(C, workspace, flags, p.pid, loc=loop.loc),
                      SeqStmt((add,) + tuple(stmts[key + 1:])), loc=loop.loc)
    roles = []
    for s, sk in ((producer, ranged(producer)), (SeqStmt(tuple(stmts)), SeqStmt((*stmts[:key], ranged(loop), ends)))):
        rounds = [For(p.tile, const(schedule.dp_rounds), "serial", substitute(s, whole), (("tiles", True),),
                      loc=s.loc)] if schedule.dp_rounds else []
        roles.append(SeqStmt((*rounds, For(j, part.count, "serial", substitute(sk, shared), (("tiles", True),) + lets,
                                           loc=s.loc))))
    order = "" if launch.swizzle is None else f" in {panels_text(launch.swizzle)} (T.use_swizzle)"
    def count(n: int, what: str) -> str:
        return f"{n} {what}{'s' * (n != 1)}"

    p.notes.append(f"T.Kernel at {here}: persistent, {P} blocks loop over the tiles of the grid{order}: "
                   f"{count(schedule.dp_rounds, 'round')} of whole tiles, then the last "
                   f"{count(schedule.sk_tiles, 'tile')} shared out by iterations of the T.Pipelined loop at "
                   f"{where(loop.loc)} (stream-K: {schedule.span / P:.1f} k-iterations a block, of {n} a tile; a "
                   f"block's partial sums of {acc.name!r} go through a workspace of {P * acc.numel * 4 // 1024} KB the "
                   "module owns, so launches of this kernel must not overlap)")
    return (const(P),), (p.pid,), roles[0], roles[1]


def stream_k_refusal(p: Pipeliner, stmts: list[Stmt], key: int) -> str | None:
    """Why the persistent kernel's specialized loop ``stmts[key]`` cannot be shared out by iterations, or None: its
    iterations must be a sum (gemms accumulating into one fragment cleared right before the loop), the same number
    for every tile, and the kernel without clusters, copies of the consumers or a preloaded tile."""
    from tilec.ir.stmt import Fill, Gemm

    loop = stmts[key]
    if p.base is not None:
        return "the trip count of the T.Pipelined loop depends on the tile"
    if p.cluster > 1 or p.copies > 1:
        return "in clusters" if p.cluster > 1 else "with copies of the consumer threads"
    # (a preload moves the loop in ``stmts``: then ``stmts[key]`` is not it, and the refusal below says why)
    if p.delayed or p.shareable is None or not p.preloaded and p.shareable[1] is not loop:
        return "the T.Pipelined loop's second gemm runs an iteration late (rotated)"
    gemms = p.shareable[2]
    acc = gemms[0].C.buffer if isinstance(gemms[0], Gemm) else None
    if acc is None or acc.scope != "fragment" or any(type(c) is not Gemm or c.C.buffer is not acc or c.clear_accum
                                                     for c in gemms):
        return "the T.Pipelined loop does more than accumulate gemms into one fragment"
    if p.preloaded:
        return "tiles are loaded before the loop"
    cleared = [i for i, c in enumerate(stmts[:key]) if isinstance(c, Fill) and c.dst.buffer is acc
               and c.dst.is_full() and getattr(c.value, "value", None) == 0]
    if not cleared or any(id(acc) in writes(c) for c in stmts[cleared[-1] + 1:key]):
        return f"{acc.name!r} is not cleared right before the T.Pipelined loop"
    if not isinstance(loop.extent, Const) or not all(isinstance(d, Const) for d in p.func.launch.grid):
        return "the tiles or the T.Pipelined loop's trip count are not compile-time constants"
    return None


def drop_what_needs_persistent(launch: KernelLaunch, p: Pipeliner) -> None:
    """Turns off the pass configs that need a persistent kernel (stream_k, consumers) once it is refused, with a
    note for each that was on."""
    at = f"T.Kernel at {where(launch.loc)}"
    if p.stream_k:
        p.notes.append(f"{at}: not stream-K: pass config 'stream_k' needs a persistent kernel")
    if p.copies > 1:
        p.notes.append(f"{at}: one copy of the consumer threads, not {p.copies}: pass config 'consumers' needs a "
                       "persistent kernel")
    p.stream_k, p.copies = False, 1


def private_copies(launch: KernelLaunch, p: Pipeliner, producer: Stmt, consumer: Stmt) -> Stmt:
    """``consumer`` with each shared buffer the producer never touches (its own staging tiles) in a version per
    copy of the consumer threads, copy ``p.copy`` using its own."""
    in_producer = {id(n) for n in walk(producer) if isinstance(n, Buffer)}
    private = {id(b): (b, 0, p.copies) for b in launch.allocs if b.scope == "shared" and b not in p.replaced
               and id(b) not in in_producer and any(n is b for n in walk(consumer))}
    if not private:
        return consumer
    p.ring(private)
    return p.remap(consumer, p.copy, private)


def multicast(var: Var, n: int, node: Any) -> Any:
    """A TMA copy whose tile is the same for the ``n`` tiles of a cluster (neighbours along ``var``), multicast."""
    from tilec.passes.cluster import shareable

    if isinstance(node, TmaCopy) and shareable(node, var, n):
        return dataclasses.replace(node, multicast=True)
    return None


def tile_coords(launch: KernelLaunch, dims: list, t: Any) -> dict[Var, Any]:
    """The block variables of tile ``t`` of the grid ``dims``: row-major (the first block variable varies fastest,
    as blockIdx.x), or the first two in the panels of ``T.use_swizzle`` (:mod:`.raster`)."""
    sub: dict[Var, Any] = {}
    rest: Any = t
    for v, d in zip(launch.block_vars, dims):
        sub[v] = binop("%", rest, d)
        rest = binop("//", rest, d)
    if launch.swizzle is not None and len(dims) >= 2:  # the first two in panels, the others as before
        from tilec.passes.raster import panel_order

        plane = binop("*", dims[0], dims[1])
        x, y = panel_order(binop("%", t, plane), dims[0], dims[1], *launch.swizzle)
        sub[launch.block_vars[0]], sub[launch.block_vars[1]] = x, y
    return sub


def serpentine(r: Any, pid: Any, P: int) -> Any:
    """The tile of round ``r`` for block ``pid`` of ``P``: ``r * P + pid`` in even rounds, ``r * P + P - 1 - pid`` in
    odd ones (tiles that come in order of decreasing work, as causal attention's row blocks, then even out)."""
    flip = binop("*", binop("%", r, 2), binop("-", P - 1, binop("*", 2, pid)))  # odd rounds: P-1-pid = pid + flip
    return binop("+", binop("*", r, P), binop("+", pid, flip))


def product(dims: Any) -> Any:
    """The product of a grid's extents (a persistent kernel's tiles), as an expression."""
    return functools.reduce(lambda a, b: binop("*", a, b), dims)


def panels_text(swizzle: tuple[int, str]) -> str:
    """``T.use_swizzle``'s panels in words: "panels of 4 rows", "panels of 1 column"."""
    size, order = swizzle
    return f"panels of {size} {'column' if order == 'column' else 'row'}{'s' * (size != 1)}"


def tile_order_inert(launch: KernelLaunch, options: dict | None, p: Pipeliner | None) -> list[str]:
    """A note when the user gave pass config ``tile_order`` and no tile loop counts its trips (:func:`count_trips`):
    the kernel is not persistent, or its loop's trip count does not depend on the tile."""
    if "tile_order" not in (options or {}) or (p is not None and p.persistent and p.roles and p.base is not None):
        return []
    why = "the kernel is not persistent" if p is None or not (p.persistent and p.roles) else \
        "the trip count of no T.Pipelined loop depends on the tile"
    return [f"T.Kernel at {where(launch.loc)}: pass config 'tile_order' has no effect: it orders the tiles of a "
            f"persistent kernel whose T.Pipelined loop's trip count depends on the tile, and {why}"]
