"""Software pipelining (stage 5): ``T.Pipelined`` loops become multi-stage asynchronous copy pipelines.
Pre: verified Tile IR (before layout inference). Post: Tile IR where each pipelined loop with something to
overlap is rewritten; the result still runs on the tile interpreter (async copies have copy semantics there).

Each top-level statement of the loop body gets a stage: with ``num_stages=s``, the global→shared copies
whose destination and source nothing else in the loop writes (the producers) are stage 0 and everything else
stage ``s - 1``; ``stage=[...]`` / ``order=[...]`` give each statement's stage and place in a trip by hand. With
``D = max(stage) + 1`` the loop runs ``n + D - 1`` times; in trip ``k'`` a statement of stage ``st`` works on
logical iteration ``k' - st`` (guarded to ``0 <= k' - st < n``). A shared buffer produced in stage ``a`` and
consumed in stage ``b > a`` gets ``b - a + 1`` versions, version ``j % versions`` for iteration ``j``.
Producers become asynchronous copies (cp.async) committed as one group per trip; each trip starts by
waiting for the group its consumers need. Barriers are placed later, by the barrier pass.

On sm_90a with the ``tma`` pass config, a loop with the default schedule whose producers all feed ``T.gemm``
operands, from contiguous global tensors of compile-time shape, becomes a TMA pipeline instead: one mbarrier per
operand version (a shared ``uint64`` buffer initialised before the loop), and in trip ``k`` one thread arrives on
barrier ``k % v`` expecting the bytes of the trip's tiles and issues their :class:`TmaCopy` copies (guarded by
``k < n``: every arrival is waited for); the consumers of iteration ``j`` start by waiting for phase parity
``(j // v) % 2`` of barrier ``j % v``. Tiles past the tensor's end arrive as zeros (TMA's out-of-bounds fill).
A first-stage copy TMA cannot do (``disable_tma``, a strided tensor, a conversion, a box outside TMA's limits) is
an :class:`AsyncCopy` by the block's threads into the same stage, each thread arriving on the stage's barrier once
its copies complete (the barrier's count: one plus the block's threads per such copy); the loop stays a cp.async
pipeline only when no first-stage copy can be a TMA copy, and is not warp-specialized when some cannot.
With ``warp_specialize`` as well, a loop at the kernel's top level is split between a producer warpgroup (the
copies, after waiting for a free stage on an ``empty`` ring) and the block's threads (everything else, waiting on
the ``full`` ring and releasing stages): :class:`WarpRoles`. There a loop with two wgmma gemms whose second one's
accumulator only later statements touch (flash attention's ``O``) is rotated (``rotate``): the second gemm and its
statements run one iteration late, after the next iteration's first gemm, and with two or more consumer warpgroups
these take turns issuing their gemms (``pingpong``, :class:`WarpgroupTurn`). A persistent kernel (``persistent``)
loops both roles over its tiles; with ``consumers=2`` its consumer side runs in two copies of the block's threads,
copy c taking the block's tiles c, c + 2, ... (its own shared tiles, the copies taking turns at their main loops:
:class:`WarpRoles` ``copies``). Each refusal is a note naming its reason.

Targets without asynchronous copies (HIP) get the register prefetch of :mod:`tilec.passes.prefetch` instead
(the next tile loaded into registers during the compute, stored to shared memory after it), unless the loop
gives ``stage=[...]`` by hand, which keeps the multi-buffered schedule above with synchronous copies.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from tilec import dtypes as dt
from tilec.errors import TilecValueError, where
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Const, Load, Table, Var, binop, const
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import (
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    BarrierArrive,
    BarrierInit,
    BarrierWait,
    Copy,
    CumSum,
    For,
    IfThenElse,
    KernelLaunch,
    Reduce,
    SeqStmt,
    Stmt,
    Store,
    TmaCopy,
    WarpgroupTurn,
    WarpRoles,
)  # fmt: skip
from tilec.ir.visit import children, substitute, transform, vars_in, walk
from tilec.passes.prefetch import prefetch_loop
from tilec.target import Target


def supports_async_copy(target: Target) -> bool:
    return target.backend == "cuda" and (not target.sm or target.sm >= 80)


@functools.lru_cache(maxsize=4096)  # statements hash by identity; the pass asks about each pair of them
def _reads(s: Stmt) -> frozenset[int]:
    from tilec.ir.stmt import TileOp

    out: set[int] = set()
    for n in walk(s):
        if isinstance(n, Load):
            out.add(id(n.buffer))
        if isinstance(n, TileOp):
            out |= {id(r.buffer) for r in n.reads()}
    return frozenset(out)


@functools.lru_cache(maxsize=4096)
def _writes(s: Stmt) -> frozenset[int]:
    from tilec.ir.stmt import AtomicRMW, TileOp

    out: set[int] = set()
    for n in walk(s):
        if isinstance(n, (Store, AtomicRMW)):
            out.add(id(n.buffer))
        if isinstance(n, TileOp):
            out |= {id(r.buffer) for r in n.writes()}
    return frozenset(out)



def _check_hand_schedule(body: list[Stmt], stage: list[int], order: list[int], here: str) -> None:
    """An iteration's statement may not run before one it reads from: in an earlier stage, or earlier in the order
    of the same stage (it would read what the iteration has not written yet)."""
    when = {i: (stage[i], p) for p, i in enumerate(order)}
    for j, reader in enumerate(body):
        for i, writer in enumerate(body[:j]):
            if _writes(writer) & _reads(reader) and when[j] < when[i]:
                at = [where(s.loc) for s in (reader, writer)]
                raise TilecValueError(f"T.Pipelined at {here}: the statement at {at[0]} (stage {stage[j]}) "
                                      f"reads what the one at {at[1]} (stage {stage[i]}) writes, but runs before "
                                      "it; give it a later stage or place", reader.loc)


def _check_hand_accesses(loop: For, body: list[Stmt], stage: list[int], order: list[int],
                         versions: dict[int, tuple[Buffer, int, int]], outside: Stmt) -> None:
    """Statement ``a`` of iteration k runs in trip k + stage[a]: two statements touching one buffer (one writing it)
    must reach it in the order of the plain loop, within an iteration and between iterations that share it (every
    iteration, or every ``v``-th of a buffer in ``v`` versions). A multi-buffered tile carries no value from one
    iteration to the next (none is read before it is written) and is not used outside the loop."""
    here = where(loop.loc)
    pos = {i: p for p, i in enumerate(order)}
    at = [where(s.loc) for s in body]
    for x, (buf, a0, nv) in versions.items():
        first = next(i for i, s in enumerate(body) if x in _writes(s))
        early = next((i for i, s in enumerate(body[: first + 1]) if x in _reads(s)), None)
        why = f"it is written in stage {a0} and read in a later one, so it has {nv} versions"
        if early is not None:
            raise TilecValueError(f"T.Pipelined at {here}: the statement at {at[early]} reads {buf.name!r} "
                                  f"before the loop writes it (the previous iteration's value), but {why}, one per "
                                  "iteration in flight; give its statements the same stage", body[early].loc)
        if any(n is buf for n in walk(outside)):
            raise TilecValueError(f"T.Pipelined at {here}: {buf.name!r} is used outside the loop, but {why}, "
                                  "one per iteration in flight; give its statements the same stage", loop.loc)
    for b, later in enumerate(body):
        for a, earlier in enumerate(body[: b + 1]):
            shared = (_writes(earlier) & (_reads(later) | _writes(later))) | (_reads(earlier) & _writes(later))
            for x in shared:
                m = versions[x][2] if x in versions else 1
                run = [(stage[a], pos[a]), (stage[b] + m, pos[b]), (stage[b], pos[b]), (stage[a] + m, pos[a])]
                # iteration k's a before its b; iteration k's a before k+m's b; k's b before k+m's a
                if (a != b and not run[0] < run[2]) or not run[0] < run[1] or not run[2] < run[3]:
                    name = next(n.name for s in (earlier, later) for n in walk(s) if isinstance(n, Buffer)
                                and id(n) == x)
                    raise TilecValueError(f"T.Pipelined at {here}: the statements at {at[a]} (stage "
                                          f"{stage[a]}) and {at[b]} (stage {stage[b]}) both use {name!r} (one "
                                          "writes it), and the schedule changes which runs first (in one iteration "
                                          "or between iterations); give them the same stage, in loop order",
                                          later.loc)


class _Pipeliner:
    def __init__(self, func: PrimFunc, target: Target, options: dict | None = None,
                 fates: dict | None = None) -> None:
        self.func = func
        # copies with disable_tma a TMA path considered: loc -> None where the option kept it off TMA, else why TMA
        # would not have moved it anyway (:func:`record_fate`; the report's note on an option with no effect)
        self.fates: dict = {} if fates is None else fates
        self.target = target
        opts = options or {}
        self.overlap = bool(opts.get("wgmma")) and opts.get("wgmma_overlap", True) and target.arch == "sm_90a"
        self.tma = bool(opts.get("tma")) and target.arch == "sm_90a"
        self.ws = self.tma and bool(opts.get("warp_specialize"))
        self.rotate = opts.get("rotate", True)
        self.pingpong = opts.get("pingpong", True)
        self.split_rings = opts.get("split_rings", True)
        self.preload_on = opts.get("preload", True)
        self.k_serpentine = bool(opts.get("k_serpentine", False))
        # the tiles :meth:`preloadable` found that stay the block's threads' copies, and why (:func:`_ws_inert`)
        self.stayed: list[tuple[str, str]] = []
        self.notes: list[str] = []
        # the configs of a specialized pipeline that had something to act on (either value would change the kernel),
        # and whether a loop's second gemm runs one iteration late (:func:`_ws_inert`)
        self.acted: set[str] = set()
        self.delayed = False
        blocks = opts.get("persistent") if self.ws else None  # True: one block per SM; an int: that many blocks
        self.persistent = 0 if not blocks else (_sms(target) if blocks is True else int(blocks))
        at = f"T.Kernel at {where(func.launch.loc)}"
        if opts.get("warp_specialize") and not self.ws:
            why = f"{target} has no TMA (sm_90a only)" if target.arch != "sm_90a" else "pass config 'tma' is off"
            self.notes.append(f"{at}: not warp-specialized: pass config 'warp_specialize' needs a TMA pipeline and "
                              f"{why}")
        if opts.get("persistent") and not self.ws:
            self.notes.append(f"{at}: not persistent: pass config 'persistent' needs warp_specialize (a warp-"
                              "specialized TMA pipeline on sm_90a)")
        if opts.get("stream_k") and not self.persistent:
            self.notes.append(f"{at}: not stream-K: pass config 'stream_k' needs a persistent kernel")
        # a persistent block's consumer threads in ``copies`` copies, copy ``copy`` taking every copies-th tile
        self.copies = int(opts.get("consumers", 1))
        self.copy = Var("copy")
        _copies_refusal(func.launch, self)
        self.tile = Var("tile")  # a persistent block's tile counter (its global pipeline iteration: tile * n + k)
        # stream-K (pass config, with persistent): the ring's iteration is ring0 + k, ring0 set by each phase's loop;
        # the producer's and consumers' loops of the one specialized loop that may be shared out, and its gemms
        self.stream_k = bool(opts.get("stream_k")) and self.persistent > 0
        self.ring0 = Var("ring0")
        self.ring0_whole: Any = None  # ring0 where tiles go whole: tile * n
        self.shareable: tuple[For, For, list[Stmt]] | None = None
        self.preloaded = False
        self.pid = Var("pid")  # a persistent block's index
        # a persistent kernel's blocks in clusters of ``cluster`` (pass config): consecutive blocks take tiles that
        # neighbour along grid dimension ``cluster_dim`` (:func:`_persistent`; :mod:`tilec.passes.cluster`)
        self.cluster_notes: list[str] = []  # why not in clusters: reported only if the kernel is made persistent
        self.cluster, self.cluster_dim = _cluster_plan(func, self.persistent, blocks is True, opts.get("cluster"),
                                                       self.cluster_notes)
        # (one block per SM: the SMs, the rounds) where fewer blocks take the tiles in as many rounds
        self.fewer: tuple[int, int] | None = None
        if blocks is True and not self.stream_k:
            self.persistent, self.fewer = _fewest_blocks(func, self.persistent, self.cluster)
        # a persistent block's pipeline iterations before this tile, when the loop's trip count depends on the tile:
        # (the Var each tile loop binds, the register counter it is read from)
        self.base: tuple[Var, Buffer] | None = None
        # with ``base``: the blocks' order of tiles (:mod:`.tile_order`), indexed by round * blocks + block, or None
        # for the serpentine order (pass config ``tile_order``)
        self.balanced = opts.get("tile_order", "balanced") == "balanced"
        self.order: tuple[int, ...] | None = None
        self.order_blocks = 0  # the blocks the order is for (its table's row length)
        # consumer loop -> (barrier inits, producer loop) of a warp-specialized pipeline, for pipeline_loops
        self.roles: dict[int, tuple[list[Stmt], Stmt]] = {}
        # rotated consumer loop -> the index of its part before which all its first gemms have completed
        self.head_done: dict[int, int] = {}
        self.replaced: dict[Buffer, Buffer] = {}
        self.new_allocs: list[Buffer] = []

    def loop(self, loop: For, outside: Stmt, top: bool = False) -> Stmt:
        body = list(loop.body.stmts) if isinstance(loop.body, SeqStmt) else [loop.body]
        if not supports_async_copy(self.target) and loop.ann("stage") is None and (loop.ann("num_stages") or 0) >= 2:
            producers = [st for st in body if self.is_producer(st, body, outside)]
            if producers:
                return prefetch_loop(loop, body, producers, self.new_allocs, self.notes)
        stages, order, versions = self.plan(loop, body, outside)
        depth = max(stages) + 1
        if depth < 2:
            if self.tma:  # a first-stage copy of a pipelined loop would have gone by TMA
                why = "stages given by hand" if loop.ann("stage") is not None else \
                    f"num_stages={loop.ann('num_stages') or 0}, a plain loop (TMA needs 2 stages or more)"
                for st in body:
                    if self.is_producer(st, body, outside):
                        record_fate(self.fates, st, f"the T.Pipelined loop at {where(loop.loc)} is not a TMA "
                                    f"pipeline: {why}")
            return dataclasses.replace(loop, kind="serial")
        if self.overlap and supports_async_copy(self.target):
            body = self.overlap_wgmma(loop, body, stages, versions)
        if self.tma:
            here = where(loop.loc)
            why = self.tma_refusal(loop, body, stages, versions)
            if why is not None:
                self.notes.append(f"T.Pipelined at {here}: cp.async, not TMA: {why}")
            else:
                slow = _by_threads(body, stages)
                why = self.ws_refusal(top) if self.ws else ""
                if why is None and slow:
                    why = f"{next(iter(slow.values()))} (a producer warpgroup issues TMA copies only)"
                if why is None:
                    return self.rewrite_ws(loop, body, stages, order, versions)
                if why:
                    self.notes.append(f"T.Pipelined at {here}: not warp-specialized: {why}")
                return self.rewrite_tma(loop, body, stages, order, depth, versions, slow)
        return self.rewrite(loop, body, stages, order, depth, versions)

    def plan(self, loop: For, body: list[Stmt], outside: Stmt) -> tuple[list[int], list[int], dict]:
        """The loop's stages, the order its statements are emitted in, and its multi-buffered tiles; a hand schedule
        (``stage=``/``order=``) checked against the plain loop's order of accesses."""
        stages, order = self.schedule(loop, body, outside)
        if max(stages) < 1:
            return stages, order, {}
        versions = self.versions(body, stages)
        if loop.ann("stage") is not None:
            _check_hand_accesses(loop, body, stages, order, versions, outside)
        return stages, order, versions

    def tma_refusal(self, loop: For, body: list[Stmt], stages: list[int],
                    versions: dict[int, tuple[Buffer, int, int]]) -> str | None:
        """Why the loop cannot be a TMA pipeline, or None when it can."""
        producers = [st for st, g in zip(body, stages) if g == 0]
        why = self.ring_refusal(loop, body, producers, versions)
        for p in producers:
            record_fate(self.fates, p, f"the T.Pipelined loop at {where(loop.loc)} is not a TMA pipeline: {why}"
                        if why else tma_box_why(p))
        if why is not None:
            return why
        whys = [tma_box_refusal(p) for p in producers]
        return whys[0] if all(whys) else None  # some by TMA: the others by cp.async on the same ring

    def ring_refusal(self, loop: For, body: list[Stmt], producers: list[Stmt],
                     versions: dict[int, tuple[Buffer, int, int]]) -> str | None:
        """Why the loop cannot be a TMA pipeline whatever its copies' tiles, or None."""
        from tilec.ir.stmt import Gemm

        if loop.ann("stage") is not None:
            return "stages given by hand"
        if not producers or any(not self.is_async(p) for p in producers):
            return "a first-stage statement is not a global->shared copy"
        counts = {versions[id(p.dst.buffer)][2] for p in producers if id(p.dst.buffer) in versions}
        if len(counts) != 1 or any(id(p.dst.buffer) not in versions for p in producers):
            return "its tiles have different numbers of versions"
        for p in producers:
            x = id(p.dst.buffer)
            users = [o for o in body if o is not p and x in _reads(o)]
            if not users or any(type(o) is not Gemm or x not in (id(o.A.buffer), id(o.B.buffer)) for o in users):
                return f"{p.dst.buffer.name!r} is read by something other than T.gemm"
        return None

    def ws_refusal(self, top: bool) -> str | None:
        """Why a TMA pipeline cannot be warp-specialized, or None when it can."""
        if not top:
            return "the loop is not at the kernel's top level"
        if self.func.launch.num_threads % 128:
            return f"{self.func.launch.num_threads} threads are not whole warpgroups"
        if self.roles:
            return "another loop of the kernel is specialized"
        return None

    def ring(self, versions: dict[int, tuple[Buffer, int, int]]) -> int:
        """Multi-buffer the tiles of ``versions``; the producers' number of versions (an mbarrier ring's size)."""
        for _, (buf, _a, v) in versions.items():
            if buf not in self.replaced:
                self.replaced[buf] = Buffer(buf.name, (v,) + tuple(buf.shape), buf.dtype, "shared", loc=buf.loc)
        return next((v for _, a, v in versions.values() if a == 0), 1)

    def rewrite_tma(self, loop: For, body: list[Stmt], stages: list[int], order: list[int], depth: int,
                    versions: dict[int, tuple[Buffer, int, int]], slow: dict[int, str] | None = None) -> Stmt:
        """The TMA pipeline; the first-stage copies of ``slow`` (id -> why TMA cannot do them) are the block's
        cp.async copies into the same stage, each thread arriving on the stage's mbarrier once its copies complete."""
        slow = slow or {}
        n = loop.extent
        k = Var(loop.var.name)
        nv = self.ring(versions)
        bar = Buffer(f"{loop.var.name}_full", (nv,), dt.uint64, "shared", loc=loop.loc)
        self.new_allocs.append(bar)

        def slot(i: Any) -> Region:
            return Region(bar, (binop("%", i, nv),), (1,))

        producers = [body[i] for i in order if stages[i] == 0]
        tx = sum(_numel(p.dst) * p.dst.dtype.bits // 8 for p in producers if id(p) not in slow)
        items: list[tuple[Any, Stmt]] = [(binop("<", k, n), BarrierArrive(slot(k), tx, loc=loop.loc))]
        for i in order:
            j = binop("-", k, stages[i]) if stages[i] else k
            s = self.remap(substitute(body[i], {loop.var: j}), j, versions)
            if stages[i] == 0 and id(body[i]) in slow:
                s = AsyncCopy(s.src, s.dst, loc=s.loc, barrier=slot(k), **s.options())
            elif stages[i] == 0:
                s = TmaCopy(s.src, s.dst, slot(k), loc=s.loc, **s.options())
            elif not any(isinstance(x, BarrierWait) for _, x in items):
                items.append((_guard(k, stages[i], depth, n), BarrierWait(slot(j), binop("%", binop("//", j, nv), 2),
                                                                         loc=loop.loc)))
            items.append((_guard(k, stages[i], depth, n), s))
        here = where(loop.loc)
        self.notes.append(f"T.Pipelined at {here}: {depth} stages, "
                          + ", ".join(f"{b.name} x{v}" for b, _, v in versions.values())
                          + f" with TMA on {nv} mbarriers ({tx} bytes a trip)")
        for p in producers:
            if id(p) in slow:
                self.notes.append(f"T.Pipelined at {here}: {p.dst.buffer.name} by cp.async, each thread arriving on "
                                  f"the stage's mbarrier: {slow[id(p)]}")
        new = For(k, binop("+", n, depth - 1), "serial", SeqStmt(tuple(_merge_guards(items))), loc=loop.loc)
        count = 1 + len(slow) * self.func.launch.num_threads  # the TMA arrival and each thread's per cp.async copy
        return SeqStmt((BarrierInit(Region(bar, (const(0),), (nv,)), count, loc=loop.loc), new))

    def overlap_wgmma(self, loop: For, body: list[Stmt], stages: list[int],
                      versions: dict[int, tuple[Buffer, int, int]]) -> list[Stmt]:
        """Let a wgmma gemm's group run on into the next trip: a consumer gemm that wgmma can run, whose accumulator
        nothing else in the loop touches and whose operands are multi-buffered here, gets ``in_flight=1`` and its
        operands one more version. Then the copies of trip k+1 write the version trip k-1's group read, which every
        warpgroup's ``wgmma.wait_group 1`` at the end of trip k retired before the barrier that starts trip k+1."""
        from tilec.ir.stmt import Gemm
        from tilec.lower.wgmma import wgmma_plan

        here = where(loop.loc)
        out = list(body)
        for i, g in enumerate(body):
            if type(g) is not Gemm or stages[i] == 0 or g.C.buffer.scope != "fragment":
                continue
            c = id(g.C.buffer)
            if any(c in _reads(o) | _writes(o) for o in body if o is not g):
                continue
            operands = [id(r.buffer) for r in (g.A, g.B) if id(r.buffer) in versions]
            m, n, k = g.mnk
            if not operands or not all(isinstance(x, int) for x in (m, n, k)) or \
                    wgmma_plan(g, m, n, k, self.func.launch.num_threads) is None:
                continue
            # an operand rewritten in the loop in one version (a tile written in parts or in the gemm's own stage,
            # A in registers): the next trip would overwrite it under the group still in flight
            fixed = [r.buffer for r in (g.A, g.B) if id(r.buffer) not in versions
                     and any(id(r.buffer) in _writes(o) for o in body if o is not g)]
            if fixed:
                self.notes.append(f"T.Pipelined at {here}: the gemm at {where(g.loc)} waits "
                                  f"for its wgmma group every trip ({fixed[0].name!r} is rewritten in the loop in "
                                  "one version)")
                continue
            extra = {b: (versions[b][0], versions[b][1], versions[b][2] + 1) for b in operands}
            need = _shared_bytes(self.func, {**versions, **extra})
            limit = smem_limit(self.target)
            if need > limit:
                self.notes.append(f"T.Pipelined at {here}: the gemm at {where(g.loc)} waits "
                                  f"for its wgmma group every trip (one more operand version needs {need} bytes of "
                                  f"shared memory, over {limit})")
                continue
            versions.update(extra)
            out[i] = dataclasses.replace(g, in_flight=1)
            self.notes.append(f"T.Pipelined at {here}: the wgmma group of the gemm at "
                              f"{where(g.loc)} overlaps the next trip's copies")
        return out

    def schedule(self, loop: For, body: list[Stmt], outside: Stmt) -> tuple[list[int], list[int]]:
        here = where(loop.loc)
        stage, given = loop.ann("stage"), loop.ann("order")
        if given is not None and stage is None:
            raise TilecValueError(f"T.Pipelined at {here}: order= needs stage= (a stage for each statement)",
                                  loop.loc)
        if stage is not None:
            stage = list(stage)
            given = list(given) if given is not None else list(range(len(body)))
            if len(stage) != len(body) or len(given) != len(body):
                raise TilecValueError(f"T.Pipelined at {here}: stage and order need one entry per statement "
                                      f"of the loop body ({len(body)}), got stage={stage} order={given}", loop.loc)
            if sorted(given) != list(range(len(body))):
                raise TilecValueError(f"T.Pipelined at {here}: order must give each statement of the loop body "
                                      f"its own place, 0 to {len(body) - 1} (a permutation), got order={given}",
                                      loop.loc)
            # order[i] is statement i's place in a trip (as TileLang's and TVM's software_pipeline_order); the
            # pass works with the statements in the order they are emitted
            order = sorted(range(len(body)), key=given.__getitem__)
            _check_hand_schedule(body, stage, order, here)
            return stage, order
        s = loop.ann("num_stages") or 0
        producers = [i for i, st in enumerate(body) if self.is_producer(st, body, outside)]
        if s >= 2:
            for st in body:
                why = self.stay_reason(st, body, outside)
                if why is not None:
                    self.notes.append(f"T.Pipelined at {here}: the copy at {where(st.loc)} stays in its iteration: "
                                      f"{why}")
                    record_fate(self.fates, st, f"it stays in its iteration of the T.Pipelined loop at {here}: {why}")
        if s < 2 or not producers:
            if s >= 2:
                self.notes.append(f"T.Pipelined at {here}: no global->shared copy to overlap; a plain loop")
            elif producers and self.tma:
                self.notes.append(f"T.Pipelined at {here}: num_stages={s}: a plain loop, not a TMA pipeline (its "
                                  "copies overlap nothing; TMA and warp specialization need 2 stages or more)")
            return [0] * len(body), list(range(len(body)))
        stages = [0 if i in producers else s - 1 for i in range(len(body))]
        order = producers + [i for i in range(len(body)) if i not in producers]
        return stages, order

    def is_producer(self, st: Stmt, body: list[Stmt], outside: Stmt) -> bool:
        return type(st) is Copy and st.src.buffer.scope == "global" and st.dst.buffer.scope == "shared" and \
            self.stay_reason(st, body, outside) is None

    @staticmethod
    def stay_reason(st: Stmt, body: list[Stmt], outside: Stmt) -> str | None:
        """Why global->shared copy ``st`` of a loop's ``body`` keeps its place in its iteration rather than being
        issued stages ahead (None: it can be, and so can any statement that is not such a copy). ``outside``: the
        kernel's body without the loop."""
        from tilec.ir.printer import expr_str

        if type(st) is not Copy or st.src.buffer.scope != "global" or st.dst.buffer.scope != "shared":
            return None
        x, src = st.dst.buffer, st.src.buffer
        if not st.dst.is_full():
            return f"it fills {st.dst}, {_shape(st.dst.extents)} of the {_shape(x.shape)} tile, from {src.name!r} " \
                f"({_shape(src.shape)}); only a whole tile's copy goes ahead"
        load = next((n for e in st.src.starts for n in walk(e) if isinstance(n, Load)), None)
        if load is not None:  # the value to read may be written by the iterations before
            return f"its offset in {src.name!r} is read from memory ({expr_str(load)})"
        # a tensor the loop writes may carry a value from one iteration to the next: its copy keeps its place
        written = [b for b in (src, x) if any(id(b) in _writes(o) for o in body if o is not st)]
        if written:
            return f"the loop writes {written[0].name!r}"
        # a statement before it reads the tile of the previous iteration: the copy keeps its place
        if any(id(x) in _reads(o) for o in body[:next(i for i, o in enumerate(body) if o is st)]):
            return f"the loop reads {x.name!r} before it (the previous tile)"
        use = _first_use(outside, x)  # the statement there needs the last iteration's tile in the one buffer
        return f"{x.name!r} is used outside the loop, at {where(use.loc)}" if use is not None else None

    def versions(self, body: list[Stmt], stages: list[int]) -> dict[int, tuple[Buffer, int, int]]:
        """Shared buffers written in stage a and read in a later stage b: id -> (buffer, a, versions)."""
        out: dict[int, tuple[Buffer, int, int]] = {}
        for i, st in enumerate(body):
            for j, other in enumerate(body):
                if stages[j] <= stages[i]:
                    continue
                for buf in (n for n in walk(st) if isinstance(n, Buffer) and n.scope == "shared"):
                    if id(buf) in _writes(st) and id(buf) in _reads(other):
                        a, nv = stages[i], stages[j] - stages[i] + 1
                        old = out.get(id(buf))
                        out[id(buf)] = (buf, a, max(nv, old[2] if old else 0))
                for buf in (n for n in walk(st) if isinstance(n, Buffer) and n.scope != "shared"):
                    if id(buf) in _writes(st) and id(buf) in _reads(other) and buf.scope != "global":
                        raise TilecValueError(f"T.Pipelined: {buf.name!r} is written in stage {stages[i]} and read in "
                                              f"stage {stages[j]}; only shared buffers can be multi-buffered",
                                              other.loc)
        return out

    def rewrite(self, loop: For, body: list[Stmt], stages: list[int], order: list[int], depth: int,
                versions: dict[int, tuple[Buffer, int, int]]) -> Stmt:
        n = loop.extent
        k = Var(loop.var.name)
        self.ring(versions)
        async_ok = supports_async_copy(self.target)
        gaps = [stages[j] - stages[i] for i in range(len(body)) for j in range(len(body))
                if stages[j] > stages[i] and _writes(body[i]) & _reads(body[j]) & set(versions)]
        top_wait = min(gaps) - 1 if gaps else 0
        out: list[Stmt] = [AsyncWait(top_wait, loc=loop.loc)] if async_ok and gaps else []

        def is_async(i: int) -> bool:  # a copy that only later stages read: the trip's wait covers it (else a plain
            # copy: a tile written in parts, or read in its own stage, would be read before a cp.async landed)
            x = id(body[i].dst.buffer) if self.is_async(body[i]) else None
            return async_ok and x in versions and not any(
                x in _reads(o) and stages[j] <= stages[i] for j, o in enumerate(body) if j != i)

        asynchronous = [pos for pos, i in enumerate(order) if is_async(i)]
        last_async = max(asynchronous, default=-1)  # the trip's async copies are committed as one group
        guarded: list[tuple[Any, Stmt]] = []
        for pos, i in enumerate(order):
            st = stages[i]
            j = binop("-", k, st) if st else k
            cond = _guard(k, st, depth, n)
            src = j
            if pos in asynchronous and st == 0:
                # Issued every trip, guard-free (one barrier per trip serves all stages); past the end it reloads
                # the last tile into a version nobody reads, which keeps every address inside the tensor.
                src, cond = binop("min", k, binop("-", n, 1)), None
            s = self.remap(substitute(body[i], {loop.var: src}), j, versions)
            if pos in asynchronous:
                s = AsyncCopy(s.src, s.dst, loc=s.loc, **s.options())
            guarded.append((cond, s))
            if pos == last_async:
                guarded.append((None, AsyncCommit(loc=loop.loc)))
        out += _merge_guards(guarded)
        here = where(loop.loc)
        self.notes.append(f"T.Pipelined at {here}: {depth} stages, "
                          + ", ".join(f"{b.name} x{nv}" for b, _, nv in versions.values())
                          + (" with cp.async" if async_ok else ""))
        new = For(k, binop("+", n, depth - 1), "serial", SeqStmt(tuple(out)), loc=loop.loc)
        return SeqStmt((new, AsyncWait(0, loc=loop.loc))) if async_ok else new

    def rotation(self, loop: For, consumers: list[Stmt], producers: list[Stmt],
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
        from tilec.ir.stmt import Gemm
        from tilec.lower.wgmma import wgmma_plan

        threads = self.func.launch.num_threads

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
        late = [c for c in consumers[gemms[0] + 1:] if acc in _reads(c) | _writes(c)]
        rest = [c for c in consumers[gemms[0] + 1:] if acc not in _reads(c) | _writes(c)]
        if any(acc in _reads(c) | _writes(c) for c in head) or id(first.C.buffer) == acc or not rest:
            return None
        self.acted.add("rotate")
        if not self.rotate:
            return None
        local = ("fragment", "local", "var")
        for c in late + rest:
            if any(b.scope not in local for b in (n for n in walk(c) if isinstance(n, Buffer)) if id(b) in _writes(c)):
                self.notes.append(f"{what}: {where(c.loc)} writes memory, not only registers")
                return None
        written_late = set().union(*map(_writes, late))
        if written_late & set().union(*(_reads(c) | _writes(c) for c in head + rest)) or \
                set().union(*map(_reads, late)) & set().union(*map(_writes, head)):
            self.notes.append(f"{what}: its statements share buffers with the rest of the loop")
            return None
        only_late = set().union(*map(_reads, late)) - set().union(*(_reads(c) for c in head + rest))
        split = {id(p.dst.buffer) for p in producers if id(p.dst.buffer) in only_late}
        if split and len(split) < len(producers):
            self.acted.add("split_rings")
        if not (self.split_rings and split and len(split) < len(producers)):
            split = set()
            extra = {b: (buf, a, v + 1) for b, (buf, a, v) in versions.items()}
            need, limit = _shared_bytes(self.func, extra), smem_limit(self.target)
            if need > limit:
                self.notes.append(f"{what}: running it one iteration late needs one more stage, {need} bytes of "
                                  f"shared memory, over {limit}")
                return None
            versions.update(extra)
        self.notes.append(f"T.Pipelined at {here}: the gemm at {where(second.loc)} runs "
                          f"one iteration late, beside the next iteration's gemm at "
                          f"{where(first.loc)} and the statements after it"
                          + ("; its tiles have an mbarrier ring of their own" if split else ""))
        self.delayed = True
        return head, late, rest, split

    def rewrite_ws(self, loop: For, body: list[Stmt], stages: list[int], order: list[int],
                   versions: dict[int, tuple[Buffer, int, int]]) -> Stmt:
        """A producer warpgroup issues the TMA copies of iteration k once the consumers released its stage (the
        ``empty`` ring); the block's threads run the rest, waiting for each stage on the ``full`` ring and releasing
        it when done (one iteration later for a gemm whose wgmma group runs on into the next one, or that runs one
        iteration late: :meth:`rotation`)."""
        from tilec.ir.stmt import Gemm

        n = loop.extent
        k = Var(loop.var.name)
        if self.persistent and {id(v) for v in vars_in(n)} & {id(v) for v in self.func.launch.block_vars}:
            self.count_trips(loop)

        def g(i: Any) -> Any:  # the ring's iteration
            if self.base is not None:
                return binop("+", self.base[0], i)
            if self.stream_k:
                self.ring0_whole = binop("*", self.tile, n)
                return binop("+", self.ring0, i)
            return binop("+", binop("*", self.tile, n), i) if self.persistent else i

        producers = [body[i] for i in order if stages[i] == 0]
        consumers = [body[i] for i in order if stages[i] > 0]
        rotated = self.rotation(loop, consumers, producers, versions)
        split = rotated[3] if rotated is not None else set()
        nv = self.ring(versions)
        # the rings: (full, empty, its copies); a rotated loop's late tiles may have one of their own (split)
        rings: list[tuple[Buffer, Buffer, list[Stmt]]] = []
        for name, mine in (("", [p for p in producers if id(p.dst.buffer) not in split]),
                           ("_late", [p for p in producers if id(p.dst.buffer) in split])):
            if mine:
                rings.append((Buffer(f"{loop.var.name}{name}_full", (nv,), dt.uint64, "shared", loc=loop.loc),
                              Buffer(f"{loop.var.name}{name}_empty", (nv,), dt.uint64, "shared", loc=loop.loc), mine))
        self.new_allocs += [b for full, empty, _ in rings for b in (full, empty)]

        def slot(bar: Buffer, i: Any) -> Region:  # iteration i's
            return Region(bar, (binop("%", g(i), nv),), (1,))

        def phase(i: Any) -> Any:
            return binop("%", binop("//", g(i), nv), 2)

        def at(stmts: list[Stmt], i: Any) -> list[Stmt]:  # the statements of iteration i
            return [self.remap(substitute(c, {loop.var: i}), g(i), versions) for c in stmts]

        def wait(i: Any, r: int = 0) -> Stmt:
            return BarrierWait(slot(rings[r][0], i), phase(i), loc=loop.loc)

        def release(i: Any, r: int = 0, after: tuple[Buffer, ...] = ()) -> Stmt:
            return _release(slot(rings[r][1], i), loop.loc, after)

        def nbytes(copies: list[Stmt]) -> int:
            return sum(_numel(p.dst) * p.dst.dtype.bits // 8 for p in copies)

        tx = nbytes(producers)
        src_k = self.serpentine_k(loop, k, consumers, rotated is None)
        prod: list[Stmt] = []
        for full, empty, mine in rings:
            prod += [BarrierWait(slot(empty, k), binop("-", 1, phase(k)), loc=loop.loc),
                     BarrierArrive(slot(full, k), nbytes(mine), loc=loop.loc)]
            prod += [TmaCopy(substitute(s.src, {loop.var: src_k}), d.dst, slot(full, k), loc=s.loc, **s.options())
                     for s, d in zip(mine, at(mine, k))]
        lag = 1 if any(isinstance(c, Gemm) and c.in_flight for c in consumers) else 0
        groups = self.func.launch.num_threads // 128
        copies = self.copies > 1  # (persistent: _copies_refusal)
        if rotated is None:  # (mma.sync warps of a warpgroup do not run in step; wgmma warps are at wait_group)
            cons = [wait(k)] + at(consumers, k)
            # a stage released one iteration late, the last of a tile by the next tile's first; with copies of the
            # consumers the next tile is another copy's, so each releases its last stage once its gemms are done
            cons.append(IfThenElse(binop(">=", k if copies else g(k), lag), release(binop("-", k, lag)), loc=loop.loc)
                        if lag else release(k))
            # the stage of a tile's last iteration stays the consumers' until the next tile's first (the epilogue
            # pass may stage the tile's stores in it: tilec.passes.epilogue); with stream-K, the next loop's first,
            # a whole tile's or a part's (the parts' loops are copies of this one)
            held = lag and self.persistent and not copies and self.base is None
            consumer: Stmt = For(k, n, "serial", SeqStmt(tuple(cons)), (("held_last", True),) if held else (),
                                 loc=loop.loc)
            if copies:  # the copies take turns at their main loops (the next one's waits lap the ring at most once)
                last = binop("-", n, 1)
                stage = tuple(p.dst.buffer for p in at(producers, last))
                done = [_when(binop(">", n, 0), release(last, 0, stage), loop)] if lag else []
                consumer = SeqStmt(tuple(self.copy_turns(consumer, loop)) + tuple(done))
            if self.base is not None:
                consumer = SeqStmt((consumer,) + self.advance(n, loop))
        else:  # iteration 0's first part; k's first part, k-1's second, k's rest; the last iteration's second
            head, late, rest, _ = rotated
            k1, last, zero = binop("+", k, 1), binop("-", n, 1), const(0)
            turns = groups > 1 and self.pingpong
            if groups > 1:
                self.acted.add("pingpong")

            def turn(give: bool, edge: bool = False) -> list[Stmt]:  # the gemms' issue, warpgroup after warpgroup
                if edge and self.persistent:  # the turns go on from tile to tile: left out on the first and last
                    edge = self.last_tile() if give else self.first_tile()
                return [WarpgroupTurn(give, groups, edge, loc=loop.loc)] if turns else []

            def issue(stmts: list[Stmt], i: Any, edge: bool = False) -> list[Stmt]:  # head: its gemm on a turn
                return at(stmts[:-1], i) + turn(False, edge) + at(stmts[-1:], i)

            # one ring: stage k holds k-1's late tiles too, released after k's trip; split rings (the late ring's
            # stage k waited for with k+1's first one, each released once its gemm is done)
            steady = [wait(k1)] + ([wait(k, 1)] if split else []) + issue(head, k1) + at(late, k) + turn(True) + \
                at(rest, k1) + ([release(k1), release(k, 1)] if split else [release(k)])
            first = SeqStmt(tuple([wait(zero)] + issue(head, zero, True) + turn(True) + at(rest, zero)
                                  + ([release(zero)] if split else [])))
            final = SeqStmt(tuple(([wait(last, 1)] if split else []) + turn(False) + at(late, last)
                                  + turn(True, True) + [release(last, 1 if split else 0)]))
            if turns:
                self.notes.append(f"T.Pipelined at {where(loop.loc)}: the {groups} consumer "
                                  f"warpgroups take turns issuing their gemms (named barriers), one's statements "
                                  f"between them beside the others' gemms")
            steady_loop = For(k, last, "serial", SeqStmt(tuple(steady)), (("rotated", True),), loc=loop.loc)
            consumer = SeqStmt((_when(binop(">", n, 0), first, loop), steady_loop, _when(binop(">", n, 0), final, loop))
                               + self.advance(n, loop))
            if copies:
                consumer = SeqStmt(tuple(self.copy_turns(consumer, loop)))
            self.head_done[id(consumer)] = 2  # every first gemm has completed before the last part
        inits = [i for full, empty, _ in rings for i in self.ring_inits(full, empty, loop.loc)]
        producer: Stmt = For(k, n, "serial", SeqStmt(tuple(prod)), loc=loop.loc)
        if isinstance(consumer, For) and self.stream_k:
            self.shareable = (producer, consumer, consumers)
        if self.base is not None:
            producer = SeqStmt((producer,) + self.advance(n, loop))
        self.roles[id(consumer)] = (inits, producer)
        here = where(loop.loc)
        late_release = "once its gemm is done" if split else "one iteration late" if lag or rotated else "after it"
        pairs = f"{nv} full/empty mbarrier pairs"
        if len(rings) > 1:
            pairs += f" for each of {len(rings)} rings (" + ", then ".join(f"{nbytes(m)} bytes a stage"
                                                                           for *_, m in rings) + ")"
        self.notes.append(f"T.Pipelined at {here}: warp-specialized, a producer warpgroup issues TMA copies "
                          f"into " + ", ".join(f"{b.name} x{v}" for b, _, v in versions.values())
                          + f" ({tx} bytes a stage) on {pairs}; {groups} consumer "
                          f"warpgroup(s), whose warps release each stage {late_release}")
        return consumer

    def serpentine_k(self, loop: For, k: Var, consumers: list[Stmt], plain: bool) -> Any:
        """The k-tile the producer loads at iteration k: k, or with pass config ``k_serpentine`` in a persistent
        kernel's odd rounds ``n - 1 - k``, so that a round starts on the k-tiles the one before it used last (which L2
        still holds for the operand tiles the two rounds share). Only where the loop's consumers are gemms adding
        into their accumulators that never read k: they then add the same products in another order."""
        if not self.k_serpentine or not self.persistent:
            return k
        from tilec.ir.expr import select

        at = f"T.Pipelined at {where(loop.loc)}"
        why = _k_serpentine_refusal(self, loop, consumers, plain)
        if why is not None:
            self.notes.append(f"{at}: k-tiles in ascending order in every round (pass config 'k_serpentine' "
                              f"acts only on loops of gemms that add into their accumulators): {why}")
            return k
        self.notes.append(f"{at}: the producer loads odd rounds' k-tiles in descending order (pass config "
                          "'k_serpentine'): a round starts on the k-tiles its predecessor used last")
        return select(binop("==", binop("%", self.tile, 2), 1), binop("-", binop("-", loop.extent, 1), k), k)

    def copy_turns(self, main: Stmt, loop: For) -> list[Stmt]:
        """A copy of the consumers' main loop ``main`` between its wait for its turn and its handing the turn on to
        the next copy: a copy may wait for its first stage only once the one before it has waited for its last, so
        no wait is for a phase a lap ahead (an mbarrier's parity names a phase up to one lap). The block's first tile
        has no wait, its last no handing on."""
        wait = WarpgroupTurn(False, self.copies, self.first_tile(), self.copy, loc=loop.loc)
        give = WarpgroupTurn(True, self.copies, self.last_tile(), self.copy, loc=loop.loc)
        return [wait, main, give]

    def count_trips(self, loop: For) -> None:
        """A persistent block whose pipelined loop runs a number of trips that depends on the tile (causal
        attention) counts its ring's iterations in a register (:attr:`base`, advanced after each tile) and takes
        its tiles in a balanced order (:meth:`balanced_order`) or in serpentine order (:meth:`tile_at`); refused
        with a note unless every tile runs a trip (a tile without one would leave the warpgroups' turns
        unpaired)."""
        from tilec.ir.arith import bounds

        launch = self.func.launch
        ranges = {v: (0, int(d.value) - 1) for v, d in zip(launch.block_vars, launch.grid) if isinstance(d, Const)}
        low = bounds(loop.extent, ranges)
        if low is None or low[0] < 1:
            # what needs a persistent kernel goes too (its ring counter and tile loop are never made)
            self.persistent = 0
            self.notes.append(f"T.Kernel at {where(launch.loc)}: not persistent: the trip count of the T.Pipelined "
                              f"loop at {where(loop.loc)} depends on the tile and may be zero")
            _drop_what_needs_persistent(launch, self)
            return
        if self.cluster > 1:
            self.cluster, self.cluster_dim = 1, None
            self.notes.append(f"T.Kernel at {where(launch.loc)}: persistent blocks not in clusters: the trip count of "
                              f"the T.Pipelined loop at {where(loop.loc)} depends on the tile (a cluster's blocks "
                              "would run different numbers of trips over the stages they share)")
        if self.copies > 1:
            self.copies = 1
            self.notes.append(f"T.Kernel at {where(launch.loc)}: one copy of the consumer threads: the trip count of "
                              f"the T.Pipelined loop at {where(loop.loc)} depends on the tile (each copy would have to "
                              "count the other's trips)")
        ring = Buffer("ring_base", (), dt.int32, "var", loc=loop.loc)
        self.new_allocs.append(ring)
        self.base = (Var("base"), ring)
        if self.balanced:
            self.order = self.balanced_order(loop)

    def balanced_order(self, loop: For) -> tuple[int, ...] | None:
        """The table of :func:`.tile_order.order_table` for the tiles' trip counts of ``loop``, or None (with a
        note) where they are not known at compile time or the table would be too large."""
        from tilec.passes import tile_order
        from tilec.passes.trip_counts import NotStatic, evaluate

        launch = self.func.launch
        here = where(loop.loc)
        lin = Var("t")
        try:
            tiles = int(evaluate(_product(launch.grid), {}))
            trips = evaluate(substitute(loop.extent, _tile_coords(launch, list(launch.grid), lin)),
                             {lin: np.arange(tiles)}) if tiles <= tile_order.MAX_ENTRIES else None
        except NotStatic as e:
            self.notes.append(f"T.Kernel at {where(launch.loc)}: persistent blocks take tiles in serpentine order: the "
                              f"trip counts of the T.Pipelined loop at {here} are not known at compile time ({e})")
            return None
        blocks = min(tiles, self.persistent)
        if trips is not None:
            trips = [int(x) for x in np.broadcast_to(trips, (tiles,))]
            schedule = tile_order.balanced_schedule(trips, blocks)
            table = tile_order.order_table(schedule, tiles)
        if trips is None or len(table) > tile_order.MAX_ENTRIES:
            self.notes.append(f"T.Kernel at {where(launch.loc)}: persistent blocks take tiles in serpentine order: a "
                              f"table of {tiles} tiles on {blocks} blocks would pass {tile_order.MAX_ENTRIES} entries")
            return None
        top, mean = tile_order.busiest(trips, schedule)
        self.notes.append(f"T.Kernel at {where(launch.loc)}: persistent blocks take tiles in a balanced order "
                          f"(longest first within windows of {tile_order.WINDOW_ROUNDS} rounds, each to the least "
                          f"busy block; a table in constant memory): the busiest block has {top:g} trips of the "
                          f"T.Pipelined loop at {here} against a mean of {mean:.1f}, counting "
                          f"{tile_order.TILE_OVERHEAD:g} a tile")
        self.order_blocks = blocks
        return table

    def tile_at(self, r: Any) -> Any:
        """The tile block ``pid`` takes in round ``r`` when the trip count depends on the tile (``tiles``: none)."""
        if self.order is None:
            return _serpentine(r, self.pid, self.persistent)
        return Table(self.order, binop("+", binop("*", r, self.order_blocks), self.pid))

    def rounds(self) -> Any:
        """The number of rounds of :meth:`tile_at` (the last may have no tile for some blocks)."""
        from tilec.ir.expr import ceildiv

        if self.order is None:
            return ceildiv(_product(self.func.launch.grid), self.persistent)
        return const(len(self.order) // self.order_blocks - 1)

    def advance(self, n: Any, loop: For) -> tuple[Stmt, ...]:
        """The counter of :meth:`count_trips` moved past this tile's ``n`` iterations (nothing without one)."""
        if self.base is None:
            return ()
        ring = self.base[1]
        return (Store(ring, (), binop("+", Load(ring, ()), n), loc=loop.loc),)

    def cluster_index(self) -> Any:
        """The index of a persistent block's cluster (of :attr:`cluster` blocks, which take a group of that many
        tiles at a time; the block's own index without clusters)."""
        return self.pid if self.cluster == 1 else binop("//", self.pid, self.cluster)

    def ring_inits(self, full: Buffer, empty: Buffer | None, loc: Any) -> list[Stmt]:
        """The inits of an mbarrier ring: ``full`` completed by the producer's one arrival (with its copies' bytes),
        ``empty`` by one arrival of each consumer warp (:func:`_release`)."""
        whole = (const(0),), (int(full.shape[0]),)
        inits: list[Stmt] = [BarrierInit(Region(full, *whole), 1, loc=loc)]
        if empty is not None:
            inits.append(BarrierInit(Region(empty, *whole), self.func.launch.num_threads // 32, loc=loc))
        return inits

    def first_tile(self) -> Any:
        """Whether a persistent block is at its first tile."""
        return binop("==", self.tile, 0) if self.base is None else binop("==", self.base[0], 0)

    def last_tile(self) -> Any:
        """Whether a persistent block's tile counter is at its last tile (the order of :func:`_persistent`)."""
        P, tiles = self.persistent, _product(self.func.launch.grid)
        if self.base is None:  # the P // n clusters take one of the tiles // n groups each a round
            n = self.cluster
            groups = tiles if n == 1 else binop("//", tiles, n)
            return binop(">=", binop("+", self.cluster_index(), binop("*", binop("+", self.tile, 1), P // n)), groups)
        if self.order is not None:  # the table's next round has no tile for the block
            return binop(">=", self.tile_at(binop("+", self.tile, 1)), tiles)
        last = binop("-", self.rounds(), 1)
        at_last = _serpentine(last, self.pid, P)  # the block's tile of the last round, if below ``tiles``
        return binop("or", binop("and", binop("<", at_last, tiles), binop("==", self.tile, last)),
                      binop("and", binop(">=", at_last, tiles), binop("==", self.tile, binop("-", last, 1))))

    def preloadable(self, stmts: list[Stmt], key: int, notes: list[str],
                    off: str | None) -> tuple[list[Copy], list[Copy], bool]:
        """The tile copies before the specialized loop ``stmts[key]`` that :meth:`preload` moves to the producer, the
        copies of those tiles into fragments before the loop, and whether gemms in the loop read them; why a copy
        stays with the block's threads goes to ``notes``. ``off``: why :meth:`preload` moves none (None where it
        does), the fate of a copy with disable_tma that TMA could move."""
        from tilec.ir.stmt import Gemm

        loop = stmts[key]
        block_vars = {id(v) for v in self.func.launch.block_vars}
        moved: list[Copy] = []
        early: list[Copy] = []  # the copies of moved tiles into fragments before the loop
        in_loop = False  # whether gemms in the loop read a moved tile
        for i, c in enumerate(stmts[:key]):
            if type(c) is not Copy or c.src.buffer.scope != "global" or c.dst.buffer.scope != "shared" or \
                    not c.dst.is_full() or c.dst.buffer in self.replaced:
                continue
            x = c.dst.buffer
            if any(id(v) not in block_vars for e in c.src.starts for v in vars_in(e)) or \
                    any(id(x) in _writes(o) for o in stmts if o is not c):
                continue
            readers = [g for g in walk(loop) if isinstance(g, Stmt) and id(x) in _reads(g)
                       and not isinstance(g, (SeqStmt, For, IfThenElse))]
            before = [o for o in stmts if o is not loop and id(x) in _reads(o)]
            if not readers and not before or \
                    any(type(g) is not Gemm or x not in (g.A.buffer, g.B.buffer) for g in readers) or \
                    any(not _into_fragment(o, x) or not any(o is b for b in stmts[i + 1:key]) for o in before):
                continue
            why = tma_box_why(c)
            if why is not None or c.disable_tma:
                notes.append(f"T.copy at {where(c.loc)}: the block's threads load {x.name!r}, not the producer "
                             f"warpgroup by TMA: {why or 'disable_tma=True'}")
                record_fate(self.fates, c, why or off)
                self.stayed.append((x.name, why or "disable_tma=True"))
                continue
            moved.append(c)
            early += [o for o in before if all(o is not e for e in early)]
            in_loop = in_loop or bool(readers)
        return moved, early, in_loop

    def preload(self, stmts: list[Stmt], key: int, inits: list[Stmt],
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
        off = f"the consumers run in {self.copies} copies (pass config 'consumers'), for which the producer " \
            "warpgroup loads no tile copied before the loop" if self.copies > 1 else \
            "pass config 'preload' is off" if not self.preload_on else None
        moved, early, in_loop = self.preloadable(stmts, key, [] if off else self.notes, off)
        if moved and self.copies == 1:
            self.acted.add("preload")
        if off or not moved:
            return inits, producer, stmts
        self.preloaded = True
        loc = moved[0].loc
        tx = sum(_numel(c.dst) * c.dst.dtype.bits // 8 for c in moved)
        # a persistent block loads the next tile's into a second version while the consumers' gemms read this one's
        current = {id(b): (b, 0, int(nb.shape[0])) for b, nb in self.replaced.items()}
        nv = 2 if self.persistent and in_loop and \
            _shared_bytes(self.func, current) + tx <= smem_limit(self.target) else 1
        originals, swap = list(moved), {id(o): o for o in early}
        if nv > 1:
            versions = {id(c.dst.buffer): (c.dst.buffer, 0, nv) for c in moved}
            self.ring(versions)
            moved = [self.remap(c, self.tile, versions) for c in moved]
            loop = self.remap(loop, self.tile, versions)
            swap = {id(o): self.remap(o, self.tile, versions) for o in early}
        full = Buffer("pre_full", (nv,), dt.uint64, "shared", loc=loc)
        empty = Buffer("pre_empty", (nv,), dt.uint64, "shared", loc=loc)
        at, one = (binop("%", self.tile, nv) if nv > 1 else const(0),), (1,)
        parity: Any = binop("%", binop("//", self.tile, nv), 2) if self.persistent else const(0)
        pre: list[Stmt] = [BarrierWait(Region(empty, at, one), binop("-", 1, parity), loc=loc)] \
            if self.persistent else []
        pre += [BarrierArrive(Region(full, at, one), tx, loc=loc)]
        pre += [TmaCopy(c.src, c.dst, Region(full, at, one), loc=c.loc, **c.options()) for c in moved]
        wait = BarrierWait(Region(full, at, one), parity, loc=loc)
        free = _release(Region(empty, at, one), loc) if self.persistent else None
        kept = [s for s in stmts[:key] if all(s is not c for c in originals)]
        reads = [i for i, s in enumerate(kept) if id(s) in swap]  # the copies into fragments
        consumer = [swap.get(id(s), s) for s in kept]
        if free is not None and not in_loop:  # only the copies into fragments read it: free once they are done
            consumer.insert(reads[-1] + 1, free)
        consumer.insert(reads[0] if reads else len(consumer), wait)  # before the first read, or else the loop
        if free is not None and in_loop:  # freed once the gemms reading it are done (a rotated loop's late part after)
            parts = list(loop.stmts) if id(stmts[key]) in self.head_done else [loop]
            cut = self.head_done.get(id(stmts[key]), 1)
            consumer.append(SeqStmt(tuple(parts[:cut]) + (free,) + tuple(parts[cut:])))
        else:
            consumer.append(loop)
        consumer += stmts[key + 1:]
        self.new_allocs += [full] + ([empty] if self.persistent else [])
        inits = list(inits) + self.ring_inits(full, empty if self.persistent else None, loc)
        names = ", ".join(repr(c.dst.buffer.name) for c in moved)
        when = "before the loop" + ("" if not early else ", read into " + ", ".join(
            repr(e.dst.buffer.name) for e in early) + " there")
        self.notes.append(f"T.copy at {where(loc)}: the producer warpgroup loads {names} by TMA "
                          f"({tx} bytes) {when}"
                          + ("" if not self.persistent else ", the next tile's beside this one's (two versions)"
                             if nv > 1 else ", again once the consumers are done with it"))
        return inits, SeqStmt(tuple(pre) + (producer,)), consumer

    @staticmethod
    def is_async(s: Stmt) -> bool:
        return type(s) is Copy and s.src.buffer.scope == "global" and s.dst.buffer.scope == "shared"

    def remap(self, s: Stmt, j: Any, versions: dict[int, tuple[Buffer, int, int]]) -> Stmt:
        staged: list[Region] = []  # the regions given the version dimension in front by this call

        def fn(node: Any) -> Any:
            if isinstance(node, (Reduce, CumSum)) and any(node.src is r for r in staged):
                # the reduced / scanned dim counts the source region's dims, which gained the version in front
                return dataclasses.replace(node, dim=node.dim + 1)
            if isinstance(node, Region) and id(node.buffer) in versions:
                _, _, nv = versions[id(node.buffer)]
                ver = binop("%", j, nv)
                staged.append(Region(self.replaced[node.buffer], (ver,) + node.starts, (1,) + node.extents))
                return staged[-1]
            if isinstance(node, (Load, Store)) and id(node.buffer) in versions:
                _, _, nv = versions[id(node.buffer)]
                idx = (binop("%", j, nv),) + node.indices
                return dataclasses.replace(node, buffer=self.replaced[node.buffer], indices=idx)
            return None

        return transform(s, fn)


def tma_box_refusal(c: Copy) -> str | None:
    """Why TMA does not do copy ``c`` (a global->shared tile), or None: :func:`tma_box_why`, else its
    ``disable_tma``."""
    why = tma_box_why(c)
    return why if why is not None or not c.disable_tma else f"the T.copy at {where(c.loc)} has disable_tma=True"


def record_fate(fates: dict, c: Stmt, why: str | None) -> None:
    """Record in ``fates`` (loc -> why) what became of copy ``c`` on a TMA path that considered it, where ``c`` has
    ``disable_tma``: ``why`` TMA would not have moved it anyway, None where the option decided (which stays). A
    ``T.macro``'s line called twice has two locs (:attr:`tilec.errors.SourceLoc.site`), one fate for each use."""
    if isinstance(c, Copy) and c.disable_tma and fates.get(c.loc, "") is not None:
        fates[c.loc] = why


def tma_box_why(c: Copy) -> str | None:
    """Why TMA cannot do copy ``c`` (a global->shared tile) whatever its options, or None: the source a contiguous
    tensor of compile-time shape (rank <= 5, no size 0, 16-byte row strides), the tile 2-D with the tensor's
    innermost dimension as its columns, boxes of at most 256 rows, each 16-byte-multiple panel (or row) one box."""
    from tilec.lower.layouts import swizzle_bytes

    src, dst = c.src.buffer, c.dst.buffer
    if src.dtype is not dst.dtype or src.dtype.bits not in (8, 16, 32):
        return f"{src.name!r}: TMA copies 8-, 16- or 32-bit elements without conversion"
    shape = src.shape
    if src.strides is not None or not all(isinstance(d, int) for d in shape) or not 1 <= len(shape) <= 5:
        return f"{src.name!r}: TMA here needs a contiguous tensor of rank 1-5 with compile-time sizes"
    if 0 in shape:
        return f"{src.name!r}: it has a dimension of size 0 (a tensor map's sizes start at 1)"
    eb = src.dtype.bits // 8
    if len(shape) > 1 and int(shape[-1]) * eb % 16:  # every row stride is a multiple of the innermost one
        return f"{src.name!r}: its rows of {int(shape[-1]) * eb} bytes are not a multiple of 16"
    tile = c.dst.squeezed_extents()
    ext = c.src.extents
    if len(dst.shape) != 2 or len(tile) != 2 or not all(isinstance(e, int) for e in ext) or ext[-1] != tile[-1]:
        return f"{dst.name!r}: TMA here copies 2-D tiles whose columns are the tensor's innermost dimension"
    rows, cols = int(dst.shape[0]), int(dst.shape[1])
    if [e for e in ext if e != 1] != [rows, cols]:
        return f"{dst.name!r}: the source region's extents {tuple(ext)} do not match the tile {rows}x{cols}"
    sw = swizzle_bytes((rows, cols), dst.dtype)
    width = sw // eb if sw else cols
    if rows > 256 or width > 256 or width * eb % 16:
        return f"{dst.name!r}: a {rows}x{width} box is outside TMA's limits (256 per side, rows of 16-byte multiples)"
    return None


def _by_threads(body: list[Stmt], stages: list[int]) -> dict[int, str]:
    """The first-stage copies of a TMA pipeline that TMA cannot do (id -> why, naming the copy's line): the block's
    threads move them by cp.async into the same stage."""
    out = {}
    for p in (st for st, g in zip(body, stages) if g == 0):
        why = tma_box_refusal(p)
        if why is not None:
            out[id(p)] = why if why.startswith("the T.copy at") else \
                f"the T.copy at {where(p.loc)} cannot be a TMA copy ({why})"
    return out


def _numel(r: Region) -> int:
    return functools.reduce(lambda x, y: x * y, (int(e) for e in r.extents), 1)


def _shared_bytes(func: PrimFunc, versions: dict[int, tuple[Buffer, int, int]]) -> int:
    """Shared memory of the kernel's buffers with ``versions`` copies of the multi-buffered ones."""
    total = 0
    over = {b for b, _ in func.launch.overlays}  # placed over other buffers' memory
    for b in func.launch.allocs:
        if b.scope != "shared" or not all(isinstance(d, int) for d in b.shape) or b in over:
            continue
        size = b.dtype.bits // 8 * functools.reduce(lambda x, y: x * y, b.shape, 1)
        total += size * (versions[id(b)][2] if id(b) in versions else 1)
    return total


def smem_limit(target: Target) -> int:
    """Shared memory a block may have: the table's figure for the target's architecture (as every pass reads it, so
    the code does not depend on which GPU is present)."""
    from tilec.arch import table_model

    return table_model(target.arch).smem_per_block


def _into_fragment(s: Stmt, x: Buffer) -> bool:
    """Whether ``s`` copies all of shared tile ``x`` into a fragment (Q taken into registers before the loop)."""
    return type(s) is Copy and s.src.buffer is x and s.src.is_full() and s.dst.buffer.scope == "fragment"


def _release(slot: Region, loc: Any, after: tuple[Buffer, ...] = ()) -> Stmt:
    """Every consumer warp releases a stage (an ``empty`` barrier) once its own reads of it are done, and those of
    the wgmma groups still reading ``after``."""
    return BarrierArrive(slot, 0, per_warp=True, after=after, loc=loc)


def _merge_guards(items: list[tuple[Any, Stmt]]) -> list[Stmt]:
    """Consecutive statements under the same stage guard share one ``if``."""
    out: list[Stmt] = []
    run: list[Stmt] = []
    key: Any = None
    for cond, s in items + [(object(), None)]:
        same = run and (cond is None and key is None or cond is not None and key is not None
                        and str(cond) == str(key))
        if not same and run:
            body = run[0] if len(run) == 1 else SeqStmt(tuple(run))
            out.append(body if key is None else IfThenElse(key, body, loc=run[0].loc))
            run = []
        if s is None:
            break
        run.append(s)
        key = cond
    return out


def _when(cond: Any, body: Stmt, loop: For) -> Stmt:
    """``body`` under ``cond``, or alone where ``cond`` is a true constant."""
    if isinstance(cond, Const):
        return body if cond.value else SeqStmt(())
    return IfThenElse(cond, body, loc=loop.loc)


def _guard(k: Var, st: int, depth: int, n: Any) -> Any:
    cond = None
    if st > 0:
        cond = binop(">=", k, st)
    if st < depth - 1:
        c = binop("<", binop("-", k, st) if st else k, n)
        cond = c if cond is None else binop("and", cond, c)
    return cond


def check_hand_schedules(func: PrimFunc, target: Target, options: dict | None = None) -> tuple[PrimFunc, list[str]]:
    """``func`` unchanged, once every ``stage=``/``order=`` schedule of its pipelined loops passes the checks the GPU
    targets make (the CPU interpreter runs the plain loop, so a schedule that would reorder accesses on a GPU is
    refused there too, not only when the kernel first meets a GPU)."""
    p = _Pipeliner(func, target)
    for loop in walk(func.launch.body):
        if isinstance(loop, For) and loop.kind == "pipelined" and loop.ann("stage") is not None:
            body = list(loop.body.stmts) if isinstance(loop.body, SeqStmt) else [loop.body]
            p.plan(loop, body, _without(func.launch.body, loop))
    return func, []


def pipeline_loops(func: PrimFunc, target: Target, options: dict | None = None,
                   fates: dict | None = None) -> tuple[PrimFunc, list[str]]:
    """``func`` with its pipelined loops rewritten (the same object when there is nothing to do); ``options`` are
    the pass configs (with ``wgmma``, wgmma groups overlap the next trip unless ``wgmma_overlap`` is False);
    ``fates`` gets what became of the copies with ``disable_tma`` that a TMA path considered (:func:`record_fate`)."""
    launch = func.launch
    if not any(isinstance(n, For) and n.kind == "pipelined" for n in walk(launch.body)):
        return func, _tile_order_inert(launch, options, None) + _ws_inert(launch, options, None)
    p = _Pipeliner(func, target, options, fates)

    top = set(map(id, launch.body.stmts if isinstance(launch.body, SeqStmt) else (launch.body,)))

    def rewrite(s: Stmt) -> Stmt:
        if isinstance(s, For) and s.kind == "pipelined":
            return p.loop(s, _without(launch.body, s), id(s) in top)
        if isinstance(s, SeqStmt):
            return dataclasses.replace(s, stmts=tuple(rewrite(c) for c in s.stmts))
        if isinstance(s, For):
            return dataclasses.replace(s, body=rewrite(s.body))
        if isinstance(s, IfThenElse):
            other = rewrite(s.else_body) if s.else_body is not None else None
            return dataclasses.replace(s, then_body=rewrite(s.then_body), else_body=other)
        return s

    body = rewrite(launch.body)
    grid, block_vars = launch.grid, launch.block_vars
    if p.persistent and not p.roles:
        p.notes.append(f"T.Kernel at {where(launch.loc)}: not persistent: that needs a warp-specialized TMA pipeline "
                       "(see the notes above)")
        _drop_what_needs_persistent(launch, p)
    else:
        p.notes[:0] = p.cluster_notes
    if p.roles:  # the barrier inits, then the producer warpgroup beside the block running everything else
        stmts = list(body.stmts) if isinstance(body, SeqStmt) else [body]
        key = next(i for i, s in enumerate(stmts) if id(s) in p.roles)
        inits, producer = p.roles[id(stmts[key])]
        inits, producer, stmts = p.preload(stmts, key, inits, producer)
        consumer: Stmt = SeqStmt(tuple(stmts))
        if p.persistent:
            shared = _stream_k(launch, p, producer, stmts, key) if p.stream_k else None
            grid, block_vars, producer, consumer = shared or _persistent(launch, p, producer, consumer)
            launch = dataclasses.replace(launch, swizzle=None)  # applied to the tiles, not to the blocks
            if p.copies > 1:
                consumer = _private_copies(launch, p, producer, consumer)
        body = SeqStmt(tuple(inits) + (WarpRoles(const(True), producer, consumer, loc=producer.loc, copies=p.copies,
                                                 copy=p.copy if p.copies > 1 else None),))
    allocs = tuple(p.replaced.get(b, b) for b in launch.allocs) + tuple(p.new_allocs)
    layout_map = tuple((p.replaced[b], lay.stack(p.replaced[b].shape[0])) if b in p.replaced else (b, lay)
                       for b, lay in launch.layout_map)
    overlays = tuple((b, tuple(p.replaced.get(u, u) for u in under)) for b, under in launch.overlays)
    new_launch: KernelLaunch = dataclasses.replace(launch, body=body, allocs=allocs, layout_map=layout_map, grid=grid,
                                                   block_vars=block_vars, overlays=overlays)
    return dataclasses.replace(func, body=new_launch), p.notes + _tile_order_inert(launch, options, p) + \
        _k_serpentine_inert(launch, options, p) + _ws_inert(launch, options, p)


def _tile_order_inert(launch: KernelLaunch, options: dict | None, p: _Pipeliner | None) -> list[str]:
    """A note when the user gave pass config ``tile_order`` and no tile loop counts its trips (:meth:`_Pipeliner.
    count_trips`): the kernel is not persistent, or its loop's trip count does not depend on the tile."""
    if "tile_order" not in (options or {}) or (p is not None and p.persistent and p.roles and p.base is not None):
        return []
    why = "the kernel is not persistent" if p is None or not (p.persistent and p.roles) else \
        "the trip count of no T.Pipelined loop depends on the tile"
    return [f"T.Kernel at {where(launch.loc)}: pass config 'tile_order' has no effect: it orders the tiles of a "
            f"persistent kernel whose T.Pipelined loop's trip count depends on the tile, and {why}"]


def _k_serpentine_refusal(p: _Pipeliner, loop: For, consumers: list[Stmt], plain: bool) -> str | None:
    """Why the loop's k-tiles may not be taken in another order (pass config ``k_serpentine``), or None."""
    from tilec.ir.stmt import Gemm

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


def _k_serpentine_inert(launch: KernelLaunch, options: dict | None, p: _Pipeliner | None) -> list[str]:
    """A note when the user asked for pass config ``k_serpentine`` and the kernel is not persistent (it has no
    rounds to alternate)."""
    if not (options or {}).get("k_serpentine") or (p is not None and p.persistent and p.roles):
        return []
    return [f"T.Kernel at {where(launch.loc)}: pass config 'k_serpentine' has no effect: it alternates the order of "
            "the k-tiles of a persistent kernel's rounds, and the kernel is not persistent"]


_WS_ONLY = ("rotate", "split_rings", "pingpong", "preload", "producer_regs")  # configs of a specialized pipeline


def _ws_inert(launch: KernelLaunch, options: dict | None, p: _Pipeliner | None) -> list[str]:
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
    (name, why: :meth:`_Pipeliner.preloadable`), or the kernel has none."""
    if not stayed:
        return "the kernel has none"
    if len(stayed) == 1:
        return f"the kernel's only such tile, {stayed[0][0]!r}, stays the block's threads' copy: {stayed[0][1]}"
    return "the kernel's such tiles all stay the block's threads' copies: " + \
        ", ".join(f"{name!r} ({why})" for name, why in stayed)


# what each config of a specialized pipeline acts on, and why a pipeline gave it nothing (``p.acted`` lacks it)
_SHAPES: dict[str, tuple[str, Callable[[_Pipeliner], str]]] = {
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


def _persistent(launch: KernelLaunch, p: _Pipeliner, producer: Stmt, consumer: Stmt) -> tuple:
    """A persistent kernel: ``p.persistent`` blocks (at most one per tile), block ``b`` taking tiles ``b, b + P,
    ...`` in row-major order of the original grid, or in the panels of its ``T.use_swizzle`` (:mod:`.raster`);
    both roles loop over the block's tiles, so the producer loads the next tile's first stages while the consumers
    finish the last one. In clusters of ``n`` (:func:`_cluster_plan`) the same order runs over the grid of ``n``-tile
    groups along ``p.cluster_dim``, cluster ``c`` (blocks ``c*n .. c*n+n-1``) taking group ``c, c + P/n, ...`` and
    its block of rank ``r`` that group's tile ``r``; the copies those tiles share become multicast. (grid, block
    vars, producer, consumer)."""
    from tilec.ir.expr import ceildiv

    P, n, dim = p.persistent, p.cluster, p.cluster_dim
    dims = list(launch.grid)
    if n > 1:  # a cluster's blocks take neighbouring tiles: the grid of clusters' tiles, n at a time along dim
        dims[dim] = const(int(dims[dim].value) // n)
        producer = transform(producer, functools.partial(_multicast, launch.block_vars[dim], n))
    tiles = _product(dims)  # the grid's tiles, or groups of n tiles
    pid, cid = p.pid, p.cluster_index()
    t = binop("+", cid, binop("*", p.tile, P // n)) if p.base is None else p.tile_at(p.tile)
    sub = _tile_coords(launch, dims, t)
    if p.ring0_whole is not None:  # stream-K asked for, not done (a note says why)
        sub[p.ring0] = p.ring0_whole
    if n > 1:
        v = launch.block_vars[dim]
        sub[v] = binop("+", binop("*", sub[v], n), binop("%", pid, n))
    here = where(launch.loc)
    order = "" if launch.swizzle is None or len(dims) < 2 else \
        f" in {_panels(launch.swizzle)} (T.use_swizzle)"
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
                         For(p.tile, p.rounds(), "serial", IfThenElse(binop("<", t, tiles), substitute(s, sub),
                                                                              loc=s.loc),
                             (("tiles", True), ("lets", ((var, Load(ring, ())),))), loc=s.loc)), loc=s.loc)
                for s in (producer, consumer)]
    blocks = binop("min", tiles, P) if n == 1 else binop("*", binop("min", tiles, P // n), n)
    launched = blocks.value if isinstance(blocks, Const) else P  # one block a tile where tiles are fewer
    if launched < P:
        tiles_all = int(_product(list(launch.grid)).value)
        order += f" (the grid has {tiles_all} tile{'s' * (tiles_all != 1)}, fewer than the {P} blocks of pass " \
                 "config 'persistent')"
    who = "1 block loops" if launched == 1 else f"{launched} blocks loop"
    if p.fewer is not None:
        order += f" ({launched} of {p.fewer[0]} SMs: the {int(tiles.value) * n} tiles take {p.fewer[1]} rounds " \
                 f"either way, none of them partial on {launched})"
    p.notes.append(f"T.Kernel at {here}: persistent, {who} over the tiles of the grid{order}")
    return (blocks,), (pid,), wrap[0], wrap[1]


def _stream_k(launch: KernelLaunch, p: _Pipeliner, producer: Stmt, stmts: list[Stmt], key: int) -> tuple | None:
    """A persistent kernel whose last round's tiles are shared out by iterations (:mod:`.stream_k`): both roles
    loop over the block's whole tiles, then over its parts of the shared ones; the consumers save a part's partial
    sums or add the earlier parts' before the epilogue. (grid, block vars, producer, consumer), or None with a note
    saying why not."""
    from tilec.ir.stmt import PartialAdd, PartialSave
    from tilec.passes import stream_k

    here = where(launch.loc)
    loop, dims = stmts[key], list(launch.grid)
    why = _stream_k_refusal(p, stmts, key)
    if why is None:
        tiles, n = int(_product(dims).value), int(loop.extent.value)
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
    whole = {**_tile_coords(launch, dims, binop("+", p.pid, binop("*", p.tile, P))), p.ring0: binop("*", p.tile, n)}
    j = Var("part")
    part = stream_k.part(schedule, p.pid, j)
    # each part's tile, first iteration, trip count and ring count, bound once at its start
    at = {f: Var(f"part_{f}") for f in ("tile", "k_lo", "trips", "ring0")}
    lets = (("lets", tuple((v, getattr(part, f)) for f, v in at.items())),)
    shared = {**_tile_coords(launch, dims, at["tile"]), p.ring0: at["ring0"]}
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
    order = "" if launch.swizzle is None else f" in {_panels(launch.swizzle)} (T.use_swizzle)"
    def count(n: int, what: str) -> str:
        return f"{n} {what}{'s' * (n != 1)}"

    p.notes.append(f"T.Kernel at {here}: persistent, {P} blocks loop over the tiles of the grid{order}: "
                   f"{count(schedule.dp_rounds, 'round')} of whole tiles, then the last "
                   f"{count(schedule.sk_tiles, 'tile')} shared out by iterations of the T.Pipelined loop at "
                   f"{where(loop.loc)} (stream-K: {schedule.span / P:.1f} k-iterations a block, of {n} a tile; a "
                   f"block's partial sums of {acc.name!r} go through a workspace of {P * acc.numel * 4 // 1024} KB the "
                   "module owns, so launches of this kernel must not overlap)")
    return (const(P),), (p.pid,), roles[0], roles[1]


def _stream_k_refusal(p: _Pipeliner, stmts: list[Stmt], key: int) -> str | None:
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
    if not cleared or any(id(acc) in _writes(c) for c in stmts[cleared[-1] + 1:key]):
        return f"{acc.name!r} is not cleared right before the T.Pipelined loop"
    if not isinstance(loop.extent, Const) or not all(isinstance(d, Const) for d in p.func.launch.grid):
        return "the tiles or the T.Pipelined loop's trip count are not compile-time constants"
    return None


def _copies_refusal(launch: KernelLaunch, p: _Pipeliner) -> None:
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


def _panels(swizzle: tuple[int, str]) -> str:
    """``T.use_swizzle``'s panels in words: "panels of 4 rows", "panels of 1 column"."""
    size, order = swizzle
    return f"panels of {size} {'column' if order == 'column' else 'row'}{'s' * (size != 1)}"


def _drop_what_needs_persistent(launch: KernelLaunch, p: _Pipeliner) -> None:
    """Turns off the pass configs that need a persistent kernel (stream_k, consumers) once it is refused, with a
    note for each that was on."""
    at = f"T.Kernel at {where(launch.loc)}"
    if p.stream_k:
        p.notes.append(f"{at}: not stream-K: pass config 'stream_k' needs a persistent kernel")
    if p.copies > 1:
        p.notes.append(f"{at}: one copy of the consumer threads, not {p.copies}: pass config 'consumers' needs a "
                       "persistent kernel")
    p.stream_k, p.copies = False, 1


def _private_copies(launch: KernelLaunch, p: _Pipeliner, producer: Stmt, consumer: Stmt) -> Stmt:
    """``consumer`` with each shared buffer the producer never touches (its own staging tiles) in a version per
    copy of the consumer threads, copy ``p.copy`` using its own."""
    in_producer = {id(n) for n in walk(producer) if isinstance(n, Buffer)}
    private = {id(b): (b, 0, p.copies) for b in launch.allocs if b.scope == "shared" and b not in p.replaced
               and id(b) not in in_producer and any(n is b for n in walk(consumer))}
    if not private:
        return consumer
    p.ring(private)
    return p.remap(consumer, p.copy, private)


PERSISTENT_CLUSTER_LIMIT = ("clusters of 4 blocks, one per SM, do not all fit on the GPU at once (a cluster lies in "
                            "one GPC; on an H200, 33 such clusters ran at 0.65x the speed of 66 clusters of 2: perf "
                            "notes AI)")


def _cluster_plan(func: PrimFunc, persistent: int, per_sm: bool, n: Any, notes: list[str]) -> tuple[int, int | None]:
    """(blocks per cluster, grid dimension along which a cluster's blocks take neighbouring tiles) for a persistent
    kernel of ``persistent`` blocks (``per_sm``: one per SM) with pass config ``cluster``
    (:mod:`tilec.passes.cluster`), or (1, None) with a note saying why not: the dimension along which ``n``
    neighbouring tiles share the most bytes of their global→shared copies."""
    from tilec.passes.cluster import SIZES, shared_copies

    if not persistent or n not in SIZES:
        return 1, None
    launch = func.launch
    copies = [c for c in walk(launch.body) if _Pipeliner.is_async(c)]
    plan = shared_copies(launch.grid, launch.block_vars, copies, n)
    why = f"{persistent} blocks are not a multiple of {n}" if persistent % n else \
        PERSISTENT_CLUSTER_LIMIT if n > 2 and per_sm else \
        None if plan else f"no grid dimension that is a multiple of {n} shares a tile between neighbouring tiles"
    if why is not None:
        notes.append(f"T.Kernel at {where(launch.loc)}: persistent blocks not in clusters: "
                     f"{why}")
        return 1, None
    return n, plan[0]


def _multicast(var: Var, n: int, node: Any) -> Any:
    """A TMA copy whose tile is the same for the ``n`` tiles of a cluster (neighbours along ``var``), multicast."""
    from tilec.passes.cluster import shareable

    if isinstance(node, TmaCopy) and shareable(node, var, n):
        return dataclasses.replace(node, multicast=True)
    return None


def _tile_coords(launch: KernelLaunch, dims: list, t: Any) -> dict[Var, Any]:
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


def _serpentine(r: Any, pid: Any, P: int) -> Any:
    """The tile of round ``r`` for block ``pid`` of ``P``: ``r * P + pid`` in even rounds, ``r * P + P - 1 - pid`` in
    odd ones (tiles that come in order of decreasing work, as causal attention's row blocks, then even out)."""
    flip = binop("*", binop("%", r, 2), binop("-", P - 1, binop("*", 2, pid)))  # odd rounds: P-1-pid = pid + flip
    return binop("+", binop("*", r, P), binop("+", pid, flip))


def _product(dims: Any) -> Any:
    """The product of a grid's extents (a persistent kernel's tiles), as an expression."""
    return functools.reduce(lambda a, b: binop("*", a, b), dims)


def _fewest_blocks(func: PrimFunc, sms: int, n: int) -> tuple[int, tuple[int, int] | None]:
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


def _sms(target: Target) -> int:
    from tilec.arch import device_model

    return device_model(target).sms


def _shape(dims: tuple) -> str:
    return "x".join(str(d) for d in dims)


def _first_use(s: Stmt, x: Buffer) -> Stmt | None:
    """The first innermost statement of ``s`` that uses buffer ``x``, or None."""
    if not any(n is x for n in walk(s)):
        return None
    inner = (_first_use(c, x) for c in children(s) if isinstance(c, Stmt))
    return next((u for u in inner if u is not None), s)


def _without(body: Stmt, loop: Stmt) -> Stmt:
    """The kernel body with ``loop`` removed (to see whether a buffer is used outside the loop)."""
    return transform(body, lambda n: SeqStmt(()) if n is loop else None)

