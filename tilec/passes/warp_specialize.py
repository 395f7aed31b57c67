"""Warp specialization (part of the pipelining stage, :mod:`.pipelining`; sm_90a, pass configs ``tma`` and
``warp_specialize``): a TMA pipeline at the kernel's top level split between a producer warpgroup and the consumer
threads, with ``full``/``empty`` mbarrier rings; a loop's second wgmma gemm run one iteration late (``rotate``) with
the consumer warpgroups taking turns (``pingpong``); tiles copied before the loop loaded by the producer
(``preload``); and the notes on configs of a specialized pipeline that had nothing to act on."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tilec import dtypes as dt
from tilec.errors import where
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Var, binop, const
from tilec.ir.stmt import (
    BarrierArrive,
    BarrierInit,
    BarrierWait,
    Copy,
    For,
    Gemm,
    IfThenElse,
    KernelLaunch,
    SeqStmt,
    Stmt,
    TmaCopy,
    WarpgroupTurn,
)  # fmt: skip
from tilec.ir.visit import substitute, vars_in, walk
from tilec.passes.persistent import advance_base, count_trips, first_tile, last_tile
from tilec.passes.pipeline_common import (
    guarded_by,
    into_fragment,
    numel,
    reads,
    release_stage,
    shared_bytes,
    smem_limit,
    writes,
)
from tilec.passes.tma_pipeline import record_fate, tma_box_why

if TYPE_CHECKING:
    from tilec.passes.pipelining import Pipeliner


def ws_refusal(p: Pipeliner, top: bool) -> str | None:
    """Why a TMA pipeline cannot be warp-specialized, or None when it can."""
    if not top:
        return "the loop is not at the kernel's top level"
    if p.func.launch.num_threads % 128:
        return f"{p.func.launch.num_threads} threads are not whole warpgroups"
    if p.roles:
        return "another loop of the kernel is specialized"
    return None


class _Rings:
    """The mbarrier rings of a warp-specialized loop: ``rings`` holds (full, empty, the copies it carries) for each,
    a rotated loop's late tiles in one of their own where they are split off; ``g(i)`` is iteration ``i``'s place in
    the ring (a persistent block's counts on from tile to tile)."""

    def __init__(self, p: Pipeliner, loop: For, producers: list[Stmt], split: set[int],
                 versions: dict[int, tuple[Buffer, int, int]]) -> None:
        self.p, self.loop, self.versions = p, loop, versions
        self.n, self.k = loop.extent, Var(loop.var.name)
        self.nv = p.ring(versions)
        self.rings: list[tuple[Buffer, Buffer, list[Stmt]]] = []
        for name, mine in (("", [cp for cp in producers if id(cp.dst.buffer) not in split]),
                           ("_late", [cp for cp in producers if id(cp.dst.buffer) in split])):
            if mine:
                self.rings.append((Buffer(f"{loop.var.name}{name}_full", (self.nv,), dt.uint64, "shared",
                                          loc=loop.loc),
                                   Buffer(f"{loop.var.name}{name}_empty", (self.nv,), dt.uint64, "shared",
                                          loc=loop.loc), mine))
        p.new_allocs += [b for full, empty, _ in self.rings for b in (full, empty)]

    def g(self, i: Any) -> Any:  # the ring's iteration
        p = self.p
        if p.base is not None:
            return binop("+", p.base[0], i)
        if p.stream_k:
            p.ring0_whole = binop("*", p.tile, self.n)
            return binop("+", p.ring0, i)
        return binop("+", binop("*", p.tile, self.n), i) if p.persistent else i

    def slot(self, bar: Buffer, i: Any) -> Region:  # iteration i's
        return Region(bar, (binop("%", self.g(i), self.nv),), (1,))

    def phase(self, i: Any) -> Any:
        return binop("%", binop("//", self.g(i), self.nv), 2)

    def at(self, stmts: list[Stmt], i: Any) -> list[Stmt]:  # the statements of iteration i
        return [self.p.remap(substitute(c, {self.loop.var: i}), self.g(i), self.versions) for c in stmts]

    def wait(self, i: Any, r: int = 0) -> Stmt:
        return BarrierWait(self.slot(self.rings[r][0], i), self.phase(i), loc=self.loop.loc)

    def release(self, i: Any, r: int = 0, after: tuple[Buffer, ...] = ()) -> Stmt:
        return release_stage(self.slot(self.rings[r][1], i), self.loop.loc, after)

    @staticmethod
    def nbytes(copies: list[Stmt]) -> int:
        return sum(numel(cp.dst) * cp.dst.dtype.bits // 8 for cp in copies)


def rewrite_ws(p: Pipeliner, loop: For, body: list[Stmt], stages: list[int], order: list[int],
               versions: dict[int, tuple[Buffer, int, int]]) -> Stmt:
    """A producer warpgroup issues the TMA copies of iteration k once the consumers released its stage (the
    ``empty`` ring); the block's threads run the rest, waiting for each stage on the ``full`` ring and releasing
    it when done (one iteration later for a gemm whose wgmma group runs on into the next one, or that runs one
    iteration late: :func:`rotation`)."""
    n = loop.extent
    if p.persistent and {id(v) for v in vars_in(n)} & {id(v) for v in p.func.launch.block_vars}:
        count_trips(p, loop)
    producers = [body[i] for i in order if stages[i] == 0]
    consumers = [body[i] for i in order if stages[i] > 0]
    rotated = rotation(p, loop, consumers, producers, versions)
    split = rotated[3] if rotated is not None else set()
    r = _Rings(p, loop, producers, split, versions)
    k = r.k
    src_k = serpentine_k(p, loop, k, consumers, rotated is None)
    prod: list[Stmt] = []
    for full, empty, mine in r.rings:
        prod += [BarrierWait(r.slot(empty, k), binop("-", 1, r.phase(k)), loc=loop.loc),
                 BarrierArrive(r.slot(full, k), r.nbytes(mine), loc=loop.loc)]
        prod += [TmaCopy(substitute(s.src, {loop.var: src_k}), d.dst, r.slot(full, k), loc=s.loc, **s.options())
                 for s, d in zip(mine, r.at(mine, k))]
    lag = 1 if any(isinstance(c, Gemm) and c.in_flight for c in consumers) else 0
    if rotated is None:  # (mma.sync warps of a warpgroup do not run in step; wgmma warps are at wait_group)
        consumer = _consumer_loop(p, r, consumers, producers, lag)
    else:
        consumer = _rotated_consumers(p, r, rotated)
    inits = [i for full, empty, _ in r.rings for i in ring_inits(p, full, empty, loop.loc)]
    producer: Stmt = For(k, n, "serial", SeqStmt(tuple(prod)), loc=loop.loc)
    if isinstance(consumer, For) and p.stream_k:
        p.shareable = (producer, consumer, consumers)
    if p.base is not None:
        producer = SeqStmt((producer,) + advance_base(p, n, loop))
    p.roles[id(consumer)] = (inits, producer)
    late_release = "once its gemm is done" if split else "one iteration late" if lag or rotated else "after it"
    pairs = f"{r.nv} full/empty mbarrier pairs"
    if len(r.rings) > 1:
        pairs += f" for each of {len(r.rings)} rings (" + ", then ".join(f"{r.nbytes(m)} bytes a stage"
                                                                         for *_, m in r.rings) + ")"
    p.notes.append(f"T.Pipelined at {where(loop.loc)}: warp-specialized, a producer warpgroup issues TMA copies "
                   f"into " + ", ".join(f"{b.name} x{v}" for b, _, v in versions.values())
                   + f" ({r.nbytes(producers)} bytes a stage) on {pairs}; {p.func.launch.num_threads // 128} "
                   f"consumer warpgroup(s), whose warps release each stage {late_release}")
    return consumer


def _consumer_loop(p: Pipeliner, r: _Rings, consumers: list[Stmt], producers: list[Stmt], lag: int) -> Stmt:
    """The consumers of a loop that is not rotated: each iteration waits for its stage, runs, and releases the
    stage (``lag`` iterations later: one where a gemm's wgmma group runs on into the next iteration)."""
    loop, k, n = r.loop, r.k, r.n
    copies = p.copies > 1  # (persistent: copies_refusal)
    cons = [r.wait(k)] + r.at(consumers, k)
    # a stage released one iteration late, the last of a tile by the next tile's first; with copies of the
    # consumers the next tile is another copy's, so each releases its last stage once its gemms are done
    cons.append(IfThenElse(binop(">=", k if copies else r.g(k), lag), r.release(binop("-", k, lag)), loc=loop.loc)
                if lag else r.release(k))
    # the stage of a tile's last iteration stays the consumers' until the next tile's first (the epilogue
    # pass may stage the tile's stores in it: tilec.passes.epilogue); with stream-K, the next loop's first,
    # a whole tile's or a part's (the parts' loops are copies of this one)
    held = lag and p.persistent and not copies and p.base is None
    consumer: Stmt = For(k, n, "serial", SeqStmt(tuple(cons)), (("held_last", True),) if held else (),
                         loc=loop.loc)
    if copies:  # the copies take turns at their main loops (the next one's waits lap the ring at most once)
        last = binop("-", n, 1)
        stage = tuple(cp.dst.buffer for cp in r.at(producers, last))
        done = [guarded_by(binop(">", n, 0), r.release(last, 0, stage), loop)] if lag else []
        consumer = SeqStmt(tuple(copy_turns(p, consumer, loop)) + tuple(done))
    if p.base is not None:
        consumer = SeqStmt((consumer,) + advance_base(p, n, loop))
    return consumer


def _rotated_consumers(p: Pipeliner, r: _Rings, rotated: tuple) -> Stmt:
    """The consumers of a rotated loop (:func:`rotation`): iteration 0's first part; then k's first part, k-1's
    second, k's rest; then the last iteration's second part."""
    head, late, rest, split = rotated
    loop, k, n = r.loop, r.k, r.n
    groups = p.func.launch.num_threads // 128
    k1, last, zero = binop("+", k, 1), binop("-", n, 1), const(0)
    turns = groups > 1 and p.pingpong
    if groups > 1:
        p.acted.add("pingpong")

    def turn(give: bool, edge: bool = False) -> list[Stmt]:  # the gemms' issue, warpgroup after warpgroup
        if edge and p.persistent:  # the turns go on from tile to tile: left out on the first and last
            edge = last_tile(p) if give else first_tile(p)
        return [WarpgroupTurn(give, groups, edge, loc=loop.loc)] if turns else []

    def issue(stmts: list[Stmt], i: Any, edge: bool = False) -> list[Stmt]:  # head: its gemm on a turn
        return r.at(stmts[:-1], i) + turn(False, edge) + r.at(stmts[-1:], i)

    # one ring: stage k holds k-1's late tiles too, released after k's trip; split rings (the late ring's
    # stage k waited for with k+1's first one, each released once its gemm is done)
    steady = [r.wait(k1)] + ([r.wait(k, 1)] if split else []) + issue(head, k1) + r.at(late, k) + turn(True) + \
        r.at(rest, k1) + ([r.release(k1), r.release(k, 1)] if split else [r.release(k)])
    first = SeqStmt(tuple([r.wait(zero)] + issue(head, zero, True) + turn(True) + r.at(rest, zero)
                          + ([r.release(zero)] if split else [])))
    final = SeqStmt(tuple(([r.wait(last, 1)] if split else []) + turn(False) + r.at(late, last)
                          + turn(True, True) + [r.release(last, 1 if split else 0)]))
    if turns:
        p.notes.append(f"T.Pipelined at {where(loop.loc)}: the {groups} consumer "
                       f"warpgroups take turns issuing their gemms (named barriers), one's statements "
                       f"between them beside the others' gemms")
    steady_loop = For(k, last, "serial", SeqStmt(tuple(steady)), (("rotated", True),), loc=loop.loc)
    consumer: Stmt = SeqStmt((guarded_by(binop(">", n, 0), first, loop), steady_loop,
                              guarded_by(binop(">", n, 0), final, loop)) + advance_base(p, n, loop))
    if p.copies > 1:
        consumer = SeqStmt(tuple(copy_turns(p, consumer, loop)))
    p.head_done[id(consumer)] = 2  # every first gemm has completed before the last part
    return consumer


def rotation(p: Pipeliner, loop: For, consumers: list[Stmt], producers: list[Stmt],
             versions: dict[int, tuple[Buffer, int, int]]) -> tuple[list[Stmt], list[Stmt], list[Stmt],
                                                                    set[int]] | None:
    """The consumers split for running a second wgmma gemm one iteration late (FA3's intra-warpgroup overlap):
    (up to the first gemm, the statements of the second gemm's accumulator, the rest, the ids of the tiles only
    those late statements read), or None. Iteration k then issues its first gemm, then iteration k-1's second
    gemm, then runs k's statements in between (a softmax) while that second gemm computes: each waits for its
    wgmma group only where its results are read (:func:`tilec.passes.lower.settle_wgmma`; ptxas may still
    retire the second group early, perf notes Z). Iteration k-1's late tiles are still read in trip k: with
    ``split_rings`` (and tiles that only the late statements read) those get an mbarrier ring of their own, so
    that each ring keeps its stages and is released as soon as its gemm is done; otherwise the stages get one
    more version."""
    from tilec.lower.wgmma import wgmma_plan

    threads = p.func.launch.num_threads

    def wgmma(c: Stmt) -> bool:
        return type(c) is Gemm and c.C.buffer.scope == "fragment" and not c.in_flight and \
            all(isinstance(x, int) for x in c.mnk) and wgmma_plan(c, *c.mnk, threads) is not None

    gemms = [i for i, c in enumerate(consumers) if wgmma(c)]
    if len(gemms) < 2:
        return None
    first, second = consumers[gemms[0]], consumers[gemms[-1]]
    acc = id(second.C.buffer)
    here = where(loop.loc)
    what = f"T.Pipelined at {here}: the gemm at {where(second.loc)} waits for its wgmma group every iteration"
    head = consumers[: gemms[0] + 1]
    late = [c for c in consumers[gemms[0] + 1:] if acc in reads(c) | writes(c)]
    rest = [c for c in consumers[gemms[0] + 1:] if acc not in reads(c) | writes(c)]
    if any(acc in reads(c) | writes(c) for c in head) or id(first.C.buffer) == acc or not rest:
        return None
    p.acted.add("rotate")
    if not p.rotate:
        return None
    local = ("fragment", "local", "var")
    for c in late + rest:
        if any(b.scope not in local for b in (n for n in walk(c) if isinstance(n, Buffer)) if id(b) in writes(c)):
            p.notes.append(f"{what}: {where(c.loc)} writes memory, not only registers")
            return None
    written_late = set().union(*map(writes, late))
    if written_late & set().union(*(reads(c) | writes(c) for c in head + rest)) or \
            set().union(*map(reads, late)) & set().union(*map(writes, head)):
        p.notes.append(f"{what}: its statements share buffers with the rest of the loop")
        return None
    only_late = set().union(*map(reads, late)) - set().union(*(reads(c) for c in head + rest))
    split = {id(cp.dst.buffer) for cp in producers if id(cp.dst.buffer) in only_late}
    if split and len(split) < len(producers):
        p.acted.add("split_rings")
    if not (p.split_rings and split and len(split) < len(producers)):
        split = set()
        extra = {b: (buf, a, v + 1) for b, (buf, a, v) in versions.items()}
        need, limit = shared_bytes(p.func, extra), smem_limit(p.target)
        if need > limit:
            p.notes.append(f"{what}: running it one iteration late needs one more stage, {need} bytes of "
                           f"shared memory, over {limit}")
            return None
        versions.update(extra)
    p.notes.append(f"T.Pipelined at {here}: the gemm at {where(second.loc)} runs "
                   f"one iteration late, beside the next iteration's gemm at "
                   f"{where(first.loc)} and the statements after it"
                   + ("; its tiles have an mbarrier ring of their own" if split else ""))
    p.delayed = True
    return head, late, rest, split


def serpentine_k(p: Pipeliner, loop: For, k: Var, consumers: list[Stmt], plain: bool) -> Any:
    """The k-tile the producer loads at iteration k: k, or with pass config ``k_serpentine`` in a persistent
    kernel's odd rounds ``n - 1 - k``, so that a round starts on the k-tiles the one before it used last (which L2
    still holds for the operand tiles the two rounds share). Only where the loop's consumers are gemms adding
    into their accumulators that never read k: they then add the same products in another order."""
    if not p.k_serpentine or not p.persistent:
        return k
    from tilec.ir.expr import select

    at = f"T.Pipelined at {where(loop.loc)}"
    why = k_serpentine_refusal(p, loop, consumers, plain)
    if why is not None:
        p.notes.append(f"{at}: k-tiles in ascending order in every round (pass config 'k_serpentine' "
                       f"acts only on loops of gemms that add into their accumulators): {why}")
        return k
    p.notes.append(f"{at}: the producer loads odd rounds' k-tiles in descending order (pass config "
                   "'k_serpentine'): a round starts on the k-tiles its predecessor used last")
    return select(binop("==", binop("%", p.tile, 2), 1), binop("-", binop("-", loop.extent, 1), k), k)


def k_serpentine_refusal(p: Pipeliner, loop: For, consumers: list[Stmt], plain: bool) -> str | None:
    """Why the loop's k-tiles may not be taken in another order (pass config ``k_serpentine``), or None."""
    if p.stream_k:
        return "stream-K shares the last round's tiles out by iterations"
    if p.base is not None:
        return "its trip count depends on the tile"
    if not plain:
        return "its consumers' statements are rotated across iterations"
    for c in consumers:
        if not isinstance(c, Gemm) or c.clear_accum:
            return f"{c.kind} at {where(c.loc)} is not a gemm adding into its accumulator"
        if any(v is loop.var for v in vars_in(c)):
            return f"the gemm at {where(c.loc)} reads {loop.var.name}"
    return None


def copy_turns(p: Pipeliner, main: Stmt, loop: For) -> list[Stmt]:
    """A copy of the consumers' main loop ``main`` between its wait for its turn and its handing the turn on to
    the next copy: a copy may wait for its first stage only once the one before it has waited for its last, so
    no wait is for a phase a lap ahead (an mbarrier's parity names a phase up to one lap). The block's first tile
    has no wait, its last no handing on."""
    wait = WarpgroupTurn(False, p.copies, first_tile(p), p.copy, loc=loop.loc)
    give = WarpgroupTurn(True, p.copies, last_tile(p), p.copy, loc=loop.loc)
    return [wait, main, give]


def ring_inits(p: Pipeliner, full: Buffer, empty: Buffer | None, loc: Any) -> list[Stmt]:
    """The inits of an mbarrier ring: ``full`` completed by the producer's one arrival (with its copies' bytes),
    ``empty`` by one arrival of each consumer warp (:func:`release_stage`)."""
    whole = (const(0),), (int(full.shape[0]),)
    inits: list[Stmt] = [BarrierInit(Region(full, *whole), 1, loc=loc)]
    if empty is not None:
        inits.append(BarrierInit(Region(empty, *whole), p.func.launch.num_threads // 32, loc=loc))
    return inits


def preloadable(p: Pipeliner, stmts: list[Stmt], key: int, notes: list[str],
                off: str | None) -> tuple[list[Copy], list[Copy], bool]:
    """The tile copies before the specialized loop ``stmts[key]`` that :func:`preload` moves to the producer, the
    copies of those tiles into fragments before the loop, and whether gemms in the loop read them; why a copy
    stays with the block's threads goes to ``notes``. ``off``: why :func:`preload` moves none (None where it
    does), the fate of a copy with disable_tma that TMA could move."""
    loop = stmts[key]
    block_vars = {id(v) for v in p.func.launch.block_vars}
    moved: list[Copy] = []
    early: list[Copy] = []  # the copies of moved tiles into fragments before the loop
    in_loop = False  # whether gemms in the loop read a moved tile
    for i, c in enumerate(stmts[:key]):
        if type(c) is not Copy or c.src.buffer.scope != "global" or c.dst.buffer.scope != "shared" or \
                not c.dst.is_full() or c.dst.buffer in p.replaced:
            continue
        x = c.dst.buffer
        if any(id(v) not in block_vars for e in c.src.starts for v in vars_in(e)) or \
                any(id(x) in writes(o) for o in stmts if o is not c):
            continue
        readers = [g for g in walk(loop) if isinstance(g, Stmt) and id(x) in reads(g)
                   and not isinstance(g, (SeqStmt, For, IfThenElse))]
        before = [o for o in stmts if o is not loop and id(x) in reads(o)]
        if not readers and not before or \
                any(type(g) is not Gemm or x not in (g.A.buffer, g.B.buffer) for g in readers) or \
                any(not into_fragment(o, x) or not any(o is b for b in stmts[i + 1:key]) for o in before):
            continue
        why = tma_box_why(c)
        if why is not None or c.disable_tma:
            notes.append(f"T.copy at {where(c.loc)}: the block's threads load {x.name!r}, not the producer "
                         f"warpgroup by TMA: {why or 'disable_tma=True'}")
            record_fate(p.fates, c, why or off)
            p.stayed.append((x.name, why or "disable_tma=True"))
            continue
        moved.append(c)
        early += [o for o in before if all(o is not e for e in early)]
        in_loop = in_loop or bool(readers)
    return moved, early, in_loop


def preload(p: Pipeliner, stmts: list[Stmt], key: int, inits: list[Stmt],
            producer: Stmt) -> tuple[list[Stmt], Stmt, list[Stmt]]:
    """Tile copies before the specialized loop ``stmts[key]`` that only its wgmma gemms read, or copies into
    fragments between them and the loop (flash attention's Q, or Q taken into registers), move to the producer
    warpgroup: a TMA copy on an mbarrier of their own, waited for by the consumers just before their first read,
    issued while the block's threads start up. In a persistent kernel the consumers release the tile (an
    ``empty`` barrier) once its reads are done: after the copies into fragments when only those read it, else
    once the gemms reading it are done (before a rotated loop's last part); the producer loads the next tile's
    from then on. Where gemms in the loop read it and shared memory holds two versions, the next tile's goes
    into the other one while this one is read. (inits, producer, consumer statements)."""
    loop = stmts[key]
    # (copies of the consumers: a copy's wait would come before its turn: see copy_turns)
    off = f"the consumers run in {p.copies} copies (pass config 'consumers'), for which the producer " \
        "warpgroup loads no tile copied before the loop" if p.copies > 1 else \
        "pass config 'preload' is off" if not p.preload_on else None
    moved, early, in_loop = preloadable(p, stmts, key, [] if off else p.notes, off)
    if moved and p.copies == 1:
        p.acted.add("preload")
    if off or not moved:
        return inits, producer, stmts
    p.preloaded = True
    loc = moved[0].loc
    tx = sum(numel(c.dst) * c.dst.dtype.bits // 8 for c in moved)
    # a persistent block loads the next tile's into a second version while the consumers' gemms read this one's
    current = {id(b): (b, 0, int(nb.shape[0])) for b, nb in p.replaced.items()}
    nv = 2 if p.persistent and in_loop and \
        shared_bytes(p.func, current) + tx <= smem_limit(p.target) else 1
    originals, swap = list(moved), {id(o): o for o in early}
    if nv > 1:
        versions = {id(c.dst.buffer): (c.dst.buffer, 0, nv) for c in moved}
        p.ring(versions)
        moved = [p.remap(c, p.tile, versions) for c in moved]
        loop = p.remap(loop, p.tile, versions)
        swap = {id(o): p.remap(o, p.tile, versions) for o in early}
    full = Buffer("pre_full", (nv,), dt.uint64, "shared", loc=loc)
    empty = Buffer("pre_empty", (nv,), dt.uint64, "shared", loc=loc)
    at, one = (binop("%", p.tile, nv) if nv > 1 else const(0),), (1,)
    parity: Any = binop("%", binop("//", p.tile, nv), 2) if p.persistent else const(0)
    pre: list[Stmt] = [BarrierWait(Region(empty, at, one), binop("-", 1, parity), loc=loc)] \
        if p.persistent else []
    pre += [BarrierArrive(Region(full, at, one), tx, loc=loc)]
    pre += [TmaCopy(c.src, c.dst, Region(full, at, one), loc=c.loc, **c.options()) for c in moved]
    wait = BarrierWait(Region(full, at, one), parity, loc=loc)
    free = release_stage(Region(empty, at, one), loc) if p.persistent else None
    kept = [s for s in stmts[:key] if all(s is not c for c in originals)]
    fills = [i for i, s in enumerate(kept) if id(s) in swap]  # the copies into fragments
    consumer = [swap.get(id(s), s) for s in kept]
    if free is not None and not in_loop:  # only the copies into fragments read it: free once they are done
        consumer.insert(fills[-1] + 1, free)
    consumer.insert(fills[0] if fills else len(consumer), wait)  # before the first read, or else the loop
    if free is not None and in_loop:  # freed once the gemms reading it are done (a rotated loop's late part after)
        parts = list(loop.stmts) if id(stmts[key]) in p.head_done else [loop]
        cut = p.head_done.get(id(stmts[key]), 1)
        consumer.append(SeqStmt(tuple(parts[:cut]) + (free,) + tuple(parts[cut:])))
    else:
        consumer.append(loop)
    consumer += stmts[key + 1:]
    p.new_allocs += [full] + ([empty] if p.persistent else [])
    inits = list(inits) + ring_inits(p, full, empty if p.persistent else None, loc)
    names = ", ".join(repr(c.dst.buffer.name) for c in moved)
    when = "before the loop" + ("" if not early else ", read into " + ", ".join(
        repr(e.dst.buffer.name) for e in early) + " there")
    p.notes.append(f"T.copy at {where(loc)}: the producer warpgroup loads {names} by TMA "
                   f"({tx} bytes) {when}"
                   + ("" if not p.persistent else ", the next tile's beside this one's (two versions)"
                      if nv > 1 else ", again once the consumers are done with it"))
    return inits, SeqStmt(tuple(pre) + (producer,)), consumer


def k_serpentine_inert(launch: KernelLaunch, options: dict | None, p: Pipeliner | None) -> list[str]:
    """A note when the user asked for pass config ``k_serpentine`` and the kernel is not persistent (it has no
    rounds to alternate)."""
    if not (options or {}).get("k_serpentine") or (p is not None and p.persistent and p.roles):
        return []
    return [f"T.Kernel at {where(launch.loc)}: pass config 'k_serpentine' has no effect: it alternates the order of "
            "the k-tiles of a persistent kernel's rounds, and the kernel is not persistent"]


_WS_ONLY = ("rotate", "split_rings", "pingpong", "preload", "producer_regs")  # configs of a specialized pipeline


def ws_inert(launch: KernelLaunch, options: dict | None, p: Pipeliner | None) -> list[str]:
    """A note for each pass config of :data:`_WS_ONLY` the user gave where no loop became a warp-specialized
    pipeline (no producer warpgroup: nothing for them to shape), or where the specialized pipeline has nothing for
    it to act on (:data:`_SHAPES`)."""
    given = [name for name in _WS_ONLY if name in (options or {})]
    at = f"T.Kernel at {where(launch.loc)}: pass config"
    if p is None or not p.roles:
        return [f"{at} {name!r} has no effect: it shapes a pipeline with a producer warpgroup (pass configs 'tma' and "
                "'warp_specialize' on sm_90a), and the kernel has none" for name in given]
    return [f"{at} {name!r} has no effect: {_SHAPES[name][0]}, and {_SHAPES[name][1](p)}" for name in given
            if name in _SHAPES and name not in p.acted]


def _stayed(stayed: list[tuple[str, str]]) -> str:
    """Why pass config ``preload`` had no tile to move: the tiles it could take stay the block's threads' copies
    (name, why: :func:`preloadable`), or the kernel has none."""
    if not stayed:
        return "the kernel has none"
    if len(stayed) == 1:
        return f"the kernel's only such tile, {stayed[0][0]!r}, stays the block's threads' copy: {stayed[0][1]}"
    return "the kernel's such tiles all stay the block's threads' copies: " + \
        ", ".join(f"{name!r} ({why})" for name, why in stayed)


# what each config of a specialized pipeline acts on, and why a pipeline gave it nothing (``p.acted`` lacks it)
_SHAPES: dict[str, tuple[str, Callable[[Pipeliner], str]]] = {
    "rotate": ("it delays a loop's second wgmma gemm by one iteration, beside the next iteration's first",
               lambda p: "no warp-specialized loop has a second wgmma gemm to delay"),
    "split_rings": ("it gives the tiles that only a delayed gemm reads an mbarrier ring apart",
                    lambda p: "no tile is read by the delayed gemm alone" if p.delayed else
                    "no loop's gemm is delayed"),
    "pingpong": ("it has the consumer warpgroups of a loop with a delayed gemm issue their gemms in turn",
                 lambda p: "the kernel has one consumer warpgroup" if p.delayed else "no loop's gemm is delayed"),
    "preload": ("it has the producer warpgroup load the tiles copied before the loop that only its gemms read, or "
                "that are copied into fragments there",
                lambda p: "the consumers run in copies (pass config 'consumers')" if p.copies > 1 else
                _stayed(p.stayed)),
}
