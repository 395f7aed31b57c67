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

This module plans each loop and rewrites it into a cp.async pipeline; the rest of the stage lives beside it:
:mod:`.tma_pipeline` (TMA pipelines), :mod:`.warp_specialize` (the producer warpgroup, rotation, turns, preloads),
:mod:`.persistent` (persistent kernels, clusters, tile orders, stream-K) and :mod:`.pipeline_common` (accesses,
hand-schedule checks, guards).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tilec.errors import TilecValueError, where
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Load, Var, binop, const
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import (
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Copy,
    CumSum,
    For,
    IfThenElse,
    KernelLaunch,
    Reduce,
    SeqStmt,
    Stmt,
    Store,
    WarpRoles,
)
from tilec.ir.visit import substitute, transform, walk
from tilec.passes.persistent import (
    cluster_plan,
    copies_refusal,
    drop_what_needs_persistent,
    fewest_blocks,
    make_persistent,
    make_stream_k,
    private_copies,
    sms_of,
    tile_order_inert,
)
from tilec.passes.pipeline_common import (
    check_hand_accesses,
    check_hand_schedule,
    first_use,
    guard,
    is_async_copy,
    merge_guards,
    reads,
    shape_str,
    shared_bytes,
    smem_limit,
    without,
    writes,
)
from tilec.passes.prefetch import prefetch_loop
from tilec.passes.tma_pipeline import by_threads, record_fate, rewrite_tma, tma_refusal
from tilec.passes.warp_specialize import k_serpentine_inert, preload, rewrite_ws, ws_inert, ws_refusal
from tilec.target import Target


def supports_async_copy(target: Target) -> bool:
    return target.backend == "cuda" and (not target.sm or target.sm >= 80)


class Pipeliner:
    """The pipelining pass over one kernel: the pass configs it reads, what it decided so far (the buffers it gave
    versions, the barriers it made, the notes for the report) and the persistent kernel's plan. Its methods plan and
    rewrite a loop; :mod:`.tma_pipeline`, :mod:`.warp_specialize` and :mod:`.persistent` take it as ``p``."""

    def __init__(self, func: PrimFunc, target: Target, options: dict | None = None,
                 fates: dict | None = None) -> None:
        self.func = func
        # copies with disable_tma a TMA path considered: loc -> None where the option kept it off TMA, else why TMA
        # would not have moved it anyway (:func:`.tma_pipeline.record_fate`; the report's note on an option with no
        # effect)
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
        # the tiles :func:`.warp_specialize.preloadable` found that stay the block's threads' copies, and why
        # (:func:`.warp_specialize.ws_inert`)
        self.stayed: list[tuple[str, str]] = []
        # the configs of a specialized pipeline that had something to act on (either value would change the kernel),
        # and whether a loop's second gemm runs one iteration late (:func:`.warp_specialize.ws_inert`)
        self.acted: set[str] = set()
        self.delayed = False
        blocks = opts.get("persistent") if self.ws else None  # True: one block per SM; an int: that many blocks
        self.persistent = 0 if not blocks else (sms_of(target) if blocks is True else int(blocks))
        self.notes: list[str] = _unmet_needs(func, target, opts, self.ws, self.persistent)
        # a persistent block's consumer threads in ``copies`` copies, copy ``copy`` taking every copies-th tile
        self.copies = int(opts.get("consumers", 1))
        self.copy = Var("copy")
        copies_refusal(func.launch, self)
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
        # neighbour along grid dimension ``cluster_dim`` (:func:`.persistent.make_persistent`;
        # :mod:`tilec.passes.cluster`)
        self.cluster_notes: list[str] = []  # why not in clusters: reported only if the kernel is made persistent
        self.cluster, self.cluster_dim = cluster_plan(func, self.persistent, blocks is True, opts.get("cluster"),
                                                      self.cluster_notes)
        # (one block per SM: the SMs, the rounds) where fewer blocks take the tiles in as many rounds
        self.fewer: tuple[int, int] | None = None
        if blocks is True and not self.stream_k:
            self.persistent, self.fewer = fewest_blocks(func, self.persistent, self.cluster)
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
        """``loop`` (a ``T.Pipelined`` loop; ``outside``: the kernel's body without it, ``top``: at its top level)
        rewritten: a register prefetch (no cp.async), a plain loop (fewer than 2 stages), a warp-specialized or plain
        TMA pipeline, or a cp.async pipeline, with a note saying which and why not the faster ones."""
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
            why = tma_refusal(self, loop, body, stages, versions)
            if why is not None:
                self.notes.append(f"T.Pipelined at {here}: cp.async, not TMA: {why}")
            else:
                slow = by_threads(body, stages)
                why = ws_refusal(self, top) if self.ws else ""
                if why is None and slow:
                    why = f"{next(iter(slow.values()))} (a producer warpgroup issues TMA copies only)"
                if why is None:
                    return rewrite_ws(self, loop, body, stages, order, versions)
                if why:
                    self.notes.append(f"T.Pipelined at {here}: not warp-specialized: {why}")
                return rewrite_tma(self, loop, body, stages, order, depth, versions, slow)
        return self.rewrite(loop, body, stages, order, depth, versions)

    def plan(self, loop: For, body: list[Stmt], outside: Stmt) -> tuple[list[int], list[int], dict]:
        """The loop's stages, the order its statements are emitted in, and its multi-buffered tiles; a hand schedule
        (``stage=``/``order=``) checked against the plain loop's order of accesses."""
        stages, order = self.schedule(loop, body, outside)
        if max(stages) < 1:
            return stages, order, {}
        versions = self.versions(body, stages)
        if loop.ann("stage") is not None:
            check_hand_accesses(loop, body, stages, order, versions, outside)
        return stages, order, versions

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
            check_hand_schedule(body, stage, order, here)
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
            return f"it fills {st.dst}, {shape_str(st.dst.extents)} of the {shape_str(x.shape)} tile, from " \
                f"{src.name!r} ({shape_str(src.shape)}); only a whole tile's copy goes ahead"
        load = next((n for e in st.src.starts for n in walk(e) if isinstance(n, Load)), None)
        if load is not None:  # the value to read may be written by the iterations before
            return f"its offset in {src.name!r} is read from memory ({expr_str(load)})"
        # a tensor the loop writes may carry a value from one iteration to the next: its copy keeps its place
        written = [b for b in (src, x) if any(id(b) in writes(o) for o in body if o is not st)]
        if written:
            return f"the loop writes {written[0].name!r}"
        # a statement before it reads the tile of the previous iteration: the copy keeps its place
        if any(id(x) in reads(o) for o in body[:next(i for i, o in enumerate(body) if o is st)]):
            return f"the loop reads {x.name!r} before it (the previous tile)"
        use = first_use(outside, x)  # the statement there needs the last iteration's tile in the one buffer
        return f"{x.name!r} is used outside the loop, at {where(use.loc)}" if use is not None else None

    def versions(self, body: list[Stmt], stages: list[int]) -> dict[int, tuple[Buffer, int, int]]:
        """Shared buffers written in stage a and read in a later stage b: id -> (buffer, a, versions)."""
        out: dict[int, tuple[Buffer, int, int]] = {}
        for i, st in enumerate(body):
            for j, other in enumerate(body):
                if stages[j] <= stages[i]:
                    continue
                for buf in (n for n in walk(st) if isinstance(n, Buffer) and n.scope == "shared"):
                    if id(buf) in writes(st) and id(buf) in reads(other):
                        a, nv = stages[i], stages[j] - stages[i] + 1
                        old = out.get(id(buf))
                        out[id(buf)] = (buf, a, max(nv, old[2] if old else 0))
                for buf in (n for n in walk(st) if isinstance(n, Buffer) and n.scope != "shared"):
                    if id(buf) in writes(st) and id(buf) in reads(other) and buf.scope != "global":
                        raise TilecValueError(f"T.Pipelined: {buf.name!r} is written in stage {stages[i]} and read in "
                                              f"stage {stages[j]}; only shared buffers can be multi-buffered",
                                              other.loc)
        return out

    def ring(self, versions: dict[int, tuple[Buffer, int, int]]) -> int:
        """Multi-buffer the tiles of ``versions``; the producers' number of versions (an mbarrier ring's size)."""
        for _, (buf, _a, v) in versions.items():
            if buf not in self.replaced:
                self.replaced[buf] = Buffer(buf.name, (v,) + tuple(buf.shape), buf.dtype, "shared", loc=buf.loc)
        return next((v for _, a, v in versions.values() if a == 0), 1)

    def rewrite(self, loop: For, body: list[Stmt], stages: list[int], order: list[int], depth: int,
                versions: dict[int, tuple[Buffer, int, int]]) -> Stmt:
        n = loop.extent
        k = Var(loop.var.name)
        self.ring(versions)
        async_ok = supports_async_copy(self.target)
        gaps = [stages[j] - stages[i] for i in range(len(body)) for j in range(len(body))
                if stages[j] > stages[i] and writes(body[i]) & reads(body[j]) & set(versions)]
        top_wait = min(gaps) - 1 if gaps else 0
        out: list[Stmt] = [AsyncWait(top_wait, loc=loop.loc)] if async_ok and gaps else []

        def is_async(i: int) -> bool:  # a copy that only later stages read: the trip's wait covers it (else a plain
            # copy: a tile written in parts, or read in its own stage, would be read before a cp.async landed)
            x = id(body[i].dst.buffer) if is_async_copy(body[i]) else None
            return async_ok and x in versions and not any(
                x in reads(o) and stages[j] <= stages[i] for j, o in enumerate(body) if j != i)

        asynchronous = [pos for pos, i in enumerate(order) if is_async(i)]
        last_async = max(asynchronous, default=-1)  # the trip's async copies are committed as one group
        guarded: list[tuple[Any, Stmt]] = []
        for pos, i in enumerate(order):
            st = stages[i]
            j = binop("-", k, st) if st else k
            cond = guard(k, st, depth, n)
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
        out += merge_guards(guarded)
        here = where(loop.loc)
        self.notes.append(f"T.Pipelined at {here}: {depth} stages, "
                          + ", ".join(f"{b.name} x{nv}" for b, _, nv in versions.values())
                          + (" with cp.async" if async_ok else ""))
        new = For(k, binop("+", n, depth - 1), "serial", SeqStmt(tuple(out)), loc=loop.loc)
        return SeqStmt((new, AsyncWait(0, loc=loop.loc))) if async_ok else new

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
            if any(c in reads(o) | writes(o) for o in body if o is not g):
                continue
            operands = [id(r.buffer) for r in (g.A, g.B) if id(r.buffer) in versions]
            m, n, k = g.mnk
            if not operands or not all(isinstance(x, int) for x in (m, n, k)) or \
                    wgmma_plan(g, m, n, k, self.func.launch.num_threads) is None:
                continue
            # an operand rewritten in the loop in one version (a tile written in parts or in the gemm's own stage,
            # A in registers): the next trip would overwrite it under the group still in flight
            fixed = [r.buffer for r in (g.A, g.B) if id(r.buffer) not in versions
                     and any(id(r.buffer) in writes(o) for o in body if o is not g)]
            if fixed:
                self.notes.append(f"T.Pipelined at {here}: the gemm at {where(g.loc)} waits "
                                  f"for its wgmma group every trip ({fixed[0].name!r} is rewritten in the loop in "
                                  "one version)")
                continue
            extra = {b: (versions[b][0], versions[b][1], versions[b][2] + 1) for b in operands}
            need = shared_bytes(self.func, {**versions, **extra})
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


def _unmet_needs(func: PrimFunc, target: Target, opts: dict, ws: bool, persistent: int) -> list[str]:
    """A note for each of pass configs ``warp_specialize``, ``persistent`` and ``stream_k`` given where what it
    needs is missing."""
    at = f"T.Kernel at {where(func.launch.loc)}"
    notes = []
    if opts.get("warp_specialize") and not ws:
        why = f"{target} has no TMA (sm_90a only)" if target.arch != "sm_90a" else "pass config 'tma' is off"
        notes.append(f"{at}: not warp-specialized: pass config 'warp_specialize' needs a TMA pipeline and {why}")
    if opts.get("persistent") and not ws:
        notes.append(f"{at}: not persistent: pass config 'persistent' needs warp_specialize (a warp-specialized TMA "
                     "pipeline on sm_90a)")
    if opts.get("stream_k") and not persistent:
        notes.append(f"{at}: not stream-K: pass config 'stream_k' needs a persistent kernel")
    return notes


def check_hand_schedules(func: PrimFunc, target: Target, options: dict | None = None) -> tuple[PrimFunc, list[str]]:
    """``func`` unchanged, once every ``stage=``/``order=`` schedule of its pipelined loops passes the checks the GPU
    targets make (the CPU interpreter runs the plain loop, so a schedule that would reorder accesses on a GPU is
    refused there too, not only when the kernel first meets a GPU)."""
    p = Pipeliner(func, target)
    for loop in walk(func.launch.body):
        if isinstance(loop, For) and loop.kind == "pipelined" and loop.ann("stage") is not None:
            body = list(loop.body.stmts) if isinstance(loop.body, SeqStmt) else [loop.body]
            p.plan(loop, body, without(func.launch.body, loop))
    return func, []


def pipeline_loops(func: PrimFunc, target: Target, options: dict | None = None,
                   fates: dict | None = None) -> tuple[PrimFunc, list[str]]:
    """``func`` with its pipelined loops rewritten (the same object when there is nothing to do); ``options`` are
    the pass configs (with ``wgmma``, wgmma groups overlap the next trip unless ``wgmma_overlap`` is False);
    ``fates`` gets what became of the copies with ``disable_tma`` that a TMA path considered
    (:func:`.tma_pipeline.record_fate`)."""
    launch = func.launch
    if not any(isinstance(n, For) and n.kind == "pipelined" for n in walk(launch.body)):
        return func, tile_order_inert(launch, options, None) + ws_inert(launch, options, None)
    p = Pipeliner(func, target, options, fates)

    top = set(map(id, launch.body.stmts if isinstance(launch.body, SeqStmt) else (launch.body,)))

    def rewrite(s: Stmt) -> Stmt:
        if isinstance(s, For) and s.kind == "pipelined":
            return p.loop(s, without(launch.body, s), id(s) in top)
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
        drop_what_needs_persistent(launch, p)
    else:
        p.notes[:0] = p.cluster_notes
    if p.roles:  # the barrier inits, then the producer warpgroup beside the block running everything else
        stmts = list(body.stmts) if isinstance(body, SeqStmt) else [body]
        key = next(i for i, s in enumerate(stmts) if id(s) in p.roles)
        inits, producer = p.roles[id(stmts[key])]
        inits, producer, stmts = preload(p, stmts, key, inits, producer)
        consumer: Stmt = SeqStmt(tuple(stmts))
        if p.persistent:
            shared = make_stream_k(launch, p, producer, stmts, key) if p.stream_k else None
            grid, block_vars, producer, consumer = shared or make_persistent(launch, p, producer, consumer)
            launch = dataclasses.replace(launch, swizzle=None)  # applied to the tiles, not to the blocks
            if p.copies > 1:
                consumer = private_copies(launch, p, producer, consumer)
        body = SeqStmt(tuple(inits) + (WarpRoles(const(True), producer, consumer, loc=producer.loc, copies=p.copies,
                                                 copy=p.copy if p.copies > 1 else None),))
    allocs = tuple(p.replaced.get(b, b) for b in launch.allocs) + tuple(p.new_allocs)
    layout_map = tuple((p.replaced[b], lay.stack(p.replaced[b].shape[0])) if b in p.replaced else (b, lay)
                       for b, lay in launch.layout_map)
    overlays = tuple((b, tuple(p.replaced.get(u, u) for u in under)) for b, under in launch.overlays)
    new_launch: KernelLaunch = dataclasses.replace(launch, body=body, allocs=allocs, layout_map=layout_map, grid=grid,
                                                   block_vars=block_vars, overlays=overlays)
    return dataclasses.replace(func, body=new_launch), p.notes + tile_order_inert(launch, options, p) + \
        k_serpentine_inert(launch, options, p) + ws_inert(launch, options, p)
