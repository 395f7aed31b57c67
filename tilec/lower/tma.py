"""TMA tile copies and mbarriers (sm_90a; made by software pipelining with the ``tma`` pass config).

A :class:`~tilec.ir.stmt.TmaCopy` of a ``rows x cols`` tile becomes one ``cp.async.bulk.tensor`` per panel of the
tile's shared layout, issued by one thread (thread 0, or the producer warpgroup's first): with an S-byte swizzle
(:func:`~tilec.lower.layouts.operand_layout`) each panel of S bytes per row is a box of ``S / elem_bytes`` columns
by ``rows`` that TMA writes with the same swizzle (the buffer and each panel start 1024-byte aligned); a row-major
tile is one box. The box's bytes complete on the copy's mbarrier. The tensor map of each (tensor, box, swizzle) is
a kernel parameter the host encodes (:mod:`tilec.runtime.tensor_map`).

Barrier ops: ``mbarrier.init`` by that thread, then the init fence and a barrier; ``mbarrier.arrive.expect_tx`` by
that thread, or by the first lane of every warp after a ``__syncwarp`` (consumers releasing a stage);
``mbarrier.try_wait.parity`` by every thread; ``cp.async.mbarrier.arrive.noinc`` by every thread after its cp.async
copies of a TMA pipeline's stage (the copies TMA cannot do). :class:`~tilec.ir.stmt.WarpRoles` becomes
:class:`~tilec.lower.tir.Roles`: the producer warpgroup after the block's threads, registers handed to the consumers
with ``setmaxnreg``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tilec.arch import table_model
from tilec.backends.cemit import EMIT_RULES, CEmitter, asm_rule, emit_rule
from tilec.errors import TilecError
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Const, Expr, Select, Var, binop, const, select, unop
from tilec.ir.stmt import (
    BarrierArrive,
    BarrierInit,
    BarrierWait,
    ClusterSync,
    StageHandoff,
    Stmt,
    TmaCopy,
    TmaStore,
    TmaStoreWait,
    WarpgroupTurn,
    WarpRoles,
)  # fmt: skip
from tilec.lower.context import Lowerer, lower_rule
from tilec.lower.layouts import operand_layout, swizzle_bytes
from tilec.lower.tir import (
    BulkCommit,
    BulkWait,
    ClusterBarrier,
    CpAsyncMbarArrive,
    FenceMbarInit,
    HandoffBarrier,
    If,
    MbarArriveTx,
    MbarInit,
    MbarWait,
    NamedBarrier,
    Roles,
    Sync,
    SyncWarp,
    TensorMap,
    TmaLoad,
    TmaStoreBox,
    TStmt,
    seq,
)  # fmt: skip


def tensor_map(lw: Lowerer, src: Buffer, box: tuple[int, ...], sw: int) -> TensorMap:
    """The kernel's tensor map of ``src`` with boxes ``box`` (innermost first) and swizzle ``sw`` (one per such)."""
    param = next(i for i, p in enumerate(lw.func.params) if p is src)
    for t in lw.tensor_maps:
        if t.param == param and t.box == box and t.swizzle == sw:
            return t
    eb = src.dtype.bits // 8
    dims = tuple(int(d) for d in reversed(src.shape))
    strides, acc = [], eb
    for d in dims[:-1]:
        acc *= d
        strides.append(acc)
    t = TensorMap(f"{src.name}_tmap{len(lw.tensor_maps)}", param, src.dtype, dims, tuple(strides), box, sw)
    lw.tensor_maps.append(t)
    lw.align[src] = max(lw.align.get(src, 1), 16)  # TMA needs the tensor's start 16-byte aligned
    return t


def _panels(lw: Lowerer, tile: Buffer, tensor_tile: Region, what: str, loc: Any
            ) -> tuple[int, int, int, int, list[int]]:
    """(rows, panel width, swizzle bytes, the rows' box index, box) of a shared ``tile`` moved to or from the region
    ``tensor_tile`` of a global tensor: one box per swizzle panel (innermost first), as the tile's layout is the
    tensor-core operand layout TMA writes and reads."""
    rows, cols = (int(d) for d in tile.shape[-2:])
    if not lw.shared_layout(tile).equals(operand_layout(tuple(int(d) for d in tile.shape), tile.dtype)):
        raise TilecError(f"{what} {tile.name!r}: its shared layout is not a tensor-core operand layout", loc)
    sw = swizzle_bytes((rows, cols), tile.dtype) or 0
    width = sw // (tile.dtype.bits // 8) if sw else cols
    dim = next(d for d, e in enumerate(tensor_tile.extents) if e != 1)  # the tile's row dimension in the tensor
    row = tensor_tile.ndim - 1 - dim  # ... as a box / coordinate index (innermost first)
    box = [1] * tensor_tile.ndim
    box[0], box[row] = width, rows
    return rows, width, sw, row, box


@lower_rule(TmaCopy)
def lower_tma_copy(lw: Lowerer, c: TmaCopy) -> TStmt:
    src, dst = c.src.buffer, c.dst.buffer
    cols = int(dst.shape[-1])
    rows, width, sw, row, box = _panels(lw, dst, c.src, "TMA copy into", c.loc)
    version: Expr = c.dst.starts[0] if dst.ndim == 3 else const(0)
    base = binop("*", version, rows * cols)
    bar, bar_off = lw.mem_of(c.barrier.buffer), c.barrier.starts[0]
    mem = lw.mem_of(dst)
    panels: list[Expr] = [const(p) for p in range(cols // width)]
    first: Expr = const(0)  # the first row of the boxes this block issues
    mask = 0
    if c.multicast:  # this block's share of the boxes, written into every block of the cluster (tilec.passes.cluster)
        n, rank = cluster_rank(lw)
        mask = (1 << n) - 1
        if len(panels) % n == 0:  # whole panels: rank, rank + n, ...
            panels = [binop("+", rank, i * n) for i in range(len(panels) // n)]
        else:  # a 1/n band of rows of every panel (the swizzle follows the address: bands of 8k rows line up)
            rows_each = rows // n
            box[row] = rows_each
            first = binop("*", rank, rows_each)
    tmap = tensor_map(lw, src, tuple(box), sw)
    loads: list[TStmt] = []
    for p in panels:
        coords = list(reversed(c.src.starts))
        coords[0] = binop("+", coords[0], binop("*", p, width))
        coords[row] = binop("+", coords[row], first)
        off = binop("+", base, binop("+", binop("*", p, rows * width), binop("*", first, width)))
        loads.append(TmaLoad(tmap, tuple(coords), mem, off, bar, bar_off, mask))
    return If(binop("==", lw.tx, lw.issuer), seq(loads))


@lower_rule(TmaStore)
def lower_tma_store(lw: Lowerer, c: TmaStore) -> TStmt:
    """One box per swizzle panel of the shared tile, issued by the first thread once the block's writes of the tile
    are fenced to the async proxy (``_needs_proxy_fence`` in the lowering pass) and ordered by the barrier the
    barrier pass places before this op, then committed; with ``wait`` that thread then waits until the boxes have
    been read (else a :class:`TmaStoreWait` does)."""
    src, dst = c.src.buffer, c.dst.buffer
    cols = int(src.shape[-1])
    rows, width, sw, _, box = _panels(lw, src, c.dst, "TMA store from", c.loc)
    tmap = tensor_map(lw, dst, tuple(box), sw)
    mem, gmem = lw.mem_of(src), lw.mem_of(dst)
    stores: list[TStmt] = []
    for p in range(cols // width):
        coords = list(reversed(c.dst.starts))
        coords[0] = binop("+", coords[0], const(p * width))
        off: Expr = const(p * rows * width)
        if src.ndim == 3:  # one of a stack of tiles (a consumer copy's own)
            off = binop("+", binop("*", c.src.starts[0], rows * cols), off)
        stores.append(TmaStoreBox(tmap, tuple(coords), mem, off, gmem))
    return If(binop("==", lw.tx, _store_issuer(lw, c.by)),
              seq(stores + [BulkCommit()] + ([BulkWait()] if c.wait else [])))


def _store_issuer(lw: Lowerer, by: int | None) -> Any:
    from tilec.lower.wgmma import WARPGROUP

    return lw.issuer if by is None else by * WARPGROUP


@lower_rule(TmaStoreWait)
def lower_tma_store_wait(lw: Lowerer, w: TmaStoreWait) -> TStmt:
    return If(binop("==", lw.tx, _store_issuer(lw, w.by)), BulkWait(w.pending))


HANDOFF_BARRIERS = 8  # named barrier ids of StageHandoff: the tile freed (8), written (9), the last warpgroup's (10)


@lower_rule(StageHandoff)
def lower_stage_handoff(lw: Lowerer, h: StageHandoff) -> TStmt:
    """Named barriers between the last warpgroup (``L``, the stores' issuer) and the others: "freed" has ``L`` meet
    its own threads (after its issuing thread's wait) and arrive on barrier 8; "wait_free" has the others wait there;
    "written" has the others arrive on barrier 9 and ``L`` wait there."""
    from tilec.lower.wgmma import WARPGROUP

    last = binop("==", binop("//", lw.tx, WARPGROUP), h.groups - 1)
    every = WARPGROUP * h.groups
    if h.step == "freed":  # (under a condition: not a barrier of the block for the barrier pass)
        return If(last, seq([HandoffBarrier(WARPGROUP, id=HANDOFF_BARRIERS + 2, mode=const(1)),
                             HandoffBarrier(every, id=HANDOFF_BARRIERS, mode=const(2))]))
    if h.step == "wait_free":
        return HandoffBarrier(every, id=HANDOFF_BARRIERS, mode=select(last, 0, 1))
    if h.step == "written":
        return HandoffBarrier(every, id=HANDOFF_BARRIERS + 1, mode=select(last, 1, 2))
    raise TilecError(f"stage handoff step {h.step!r} (expected freed, wait_free or written)", h.loc)


@emit_rule(HandoffBarrier)
def _emit_handoff(e: CEmitter, s: HandoffBarrier, d: int) -> None:
    ops = {1: f'asm volatile("bar.sync {s.id}, {s.threads};" ::: "memory");',
           2: f'asm volatile("bar.arrive {s.id}, {s.threads};" ::: "memory");'}
    if isinstance(s.mode, Const):
        e.emit(d, ops[int(s.mode.value)])
        return
    assert isinstance(s.mode, Select) and isinstance(s.mode.a, Const) and isinstance(s.mode.b, Const), s.mode
    a, b = int(s.mode.a.value), int(s.mode.b.value)
    cond = e.e(s.mode.cond) if a else e.e(unop("not", s.mode.cond))
    e.emit(d, f"if ({cond}) {{")
    e.emit(d + 1, ops[a or b])
    if a and b:
        e.emit(d, "} else {")
        e.emit(d + 1, ops[b])
    e.emit(d, "}")


def cluster_rank(lw: Lowerer) -> tuple[int, Expr]:
    """(blocks per cluster, this block's rank in it): clusters run along one grid dimension (tilec.passes.cluster),
    whose hardware and kernel block indices agree (clustered grids are not rasterized)."""
    dim, n = lw.func.launch.cluster
    return n, binop("%", lw.func.launch.block_vars[dim], n)


@lower_rule(BarrierInit)
def lower_barrier_init(lw: Lowerer, b: BarrierInit) -> TStmt:
    mem = lw.mem_of(b.barriers.buffer)
    inits: list[TStmt] = [MbarInit(mem, const(i), b.count) for i in range(int(b.barriers.extents[0]))]
    return seq([If(binop("==", lw.tx, lw.issuer), seq(inits + [FenceMbarInit()])), Sync()])


@lower_rule(BarrierArrive)
def lower_barrier_arrive(lw: Lowerer, b: BarrierArrive) -> TStmt:
    arrive = MbarArriveTx(lw.mem_of(b.barrier.buffer), b.barrier.starts[0], b.tx_bytes)
    lane = binop("%", lw.tx, lw.target.warp_size)
    if b.every_block:  # lane r of every warp arrives for its warp on the barrier of the block of rank r
        n, _ = cluster_rank(lw)
        return seq([SyncWarp(), If(binop("<", lane, n), dataclasses.replace(arrive, cta=lane))])
    if b.per_warp:  # the first lane arrives for its warp, whose threads synchronize first
        return seq([SyncWarp(), If(binop("==", lane, 0), arrive)])
    return If(binop("==", lw.tx, lw.issuer), arrive)


@lower_rule(ClusterSync)
def lower_cluster_sync(lw: Lowerer, s: ClusterSync) -> TStmt:
    return ClusterBarrier()


@lower_rule(BarrierWait)
def lower_barrier_wait(lw: Lowerer, b: BarrierWait) -> TStmt:
    return MbarWait(lw.mem_of(b.barrier.buffer), b.barrier.starts[0], b.parity)


# named barrier ids (0 is __syncthreads): the consumers' barrier, copy c of the consumers meeting its threads on
# CONSUMER_BARRIER + c (at most 2 copies); warpgroup w waiting for its turn on TURN_BARRIERS + w, copy c on
# COPY_TURNS + c; the stage handoff's three from HANDOFF_BARRIERS (above)
CONSUMER_BARRIER = 1
TURN_BARRIERS = 2
COPY_TURNS = 3


@lower_rule(WarpgroupTurn)
def lower_warpgroup_turn(lw: Lowerer, t: WarpgroupTurn) -> TStmt:
    """Warpgroup w waits on barrier ``TURN_BARRIERS + w`` with the 128 threads of the warpgroup before it, which
    arrive there (``bar.arrive``) when they hand the turn on."""
    from tilec.lower.wgmma import WARPGROUP

    if t.copy is not None:  # copies of the consumers (one warpgroup each) take turns at their main loops
        to = binop("%", binop("+", t.copy, 1), t.groups) if t.give else t.copy
        bar = NamedBarrier(binop("+", to, COPY_TURNS), 2 * WARPGROUP, arrive=t.give)
        return bar if t.edge is False else If(unop("not", t.edge), bar)
    wg = binop("//", lw.tx, WARPGROUP)
    if t.give:
        bar = NamedBarrier(binop("+", binop("%", binop("+", wg, 1), t.groups), TURN_BARRIERS), 2 * WARPGROUP,
                           arrive=True)
        keep = binop("!=", wg, t.groups - 1)
    else:
        bar = NamedBarrier(binop("+", wg, TURN_BARRIERS), 2 * WARPGROUP)
        keep = binop("!=", wg, 0)
    if t.edge is False:
        return bar
    return If(keep if t.edge is True else binop("or", keep, unop("not", t.edge)), bar)


PRODUCER_REGS = 40  # a TMA-issuing warpgroup needs few registers (24 measured no faster with two consumers, perf AU)
PRODUCER_REGS_WIDE = 24  # with three consumer warpgroups or more (512+ threads: 128 at launch, 160 for consumers)


def producer_registers(consumer_threads: int) -> int:
    """The producer warpgroup's registers after ``setmaxnreg`` when pass config ``producer_regs`` is not given: 24
    where the consumers are three warpgroups or more (flash attention at D=64 in 192-row tiles spills 48 bytes with
    the producer at 40, none at 24; nvcc 13.0), else 40."""
    return PRODUCER_REGS_WIDE if consumer_threads > 256 else PRODUCER_REGS


def consumer_registers(model: Any, consumers: int, producer_threads: int, producer_regs: int = 0) -> int:
    """The consumer threads' registers after ``setmaxnreg``: what the producer warpgroup leaves of the register file
    (at most 240). ptxas allocates the consumers' code to this count, not to the launch's (nvcc 13.0)."""
    regs = producer_regs or producer_registers(consumers)
    return min(240, (model.regs_per_sm - regs * producer_threads) // consumers // 8 * 8)


def lower_roles(lw: Lowerer, s: WarpRoles, lower: Callable[[Stmt], TStmt]) -> TStmt:
    """The producer warpgroup after the block's threads; registers moved to the consumers with setmaxnreg when the
    block is alone on its SM (launch bounds ask for that)."""
    consumers = lw.T * s.copies
    threads = consumers + s.producer_threads
    model = table_model(lw.target.arch)
    at_launch = model.regs_at_launch(threads)
    regs = lw.producer_regs or producer_registers(consumers)  # pass config producer_regs; the consumers the rest
    consumer = consumer_registers(model, consumers, s.producer_threads, regs)
    lw.issuer = consumers
    try:
        producer = lower(s.then_body)
    finally:
        lw.issuer = 0
    body = lower(s.else_body)
    local = None
    if s.copies > 1:  # the consumer code was lowered for one copy: its thread index is the thread's in its copy
        from tilec.ir.visit import substitute

        local = Var(f"{lw.tx.name}_copy", lw.tx.dtype)
        body = substitute(body, {lw.tx: local})
    lw.producer_threads, lw.copies = s.producer_threads, s.copies
    return Roles(producer, body, consumers, s.producer_threads, regs if at_launch > regs else 0,
                 consumer if consumer > at_launch else 0, s.copies, s.copy, local)


# ------------------------------------------------------------------------------------------------- emission

_SMEM = "static_cast<unsigned>(__cvta_generic_to_shared({}))"


def tma_desc_struct(e: CEmitter) -> str:
    """The C type of a tensor-map parameter (the driver's 128-byte, 64-byte aligned CUtensorMap)."""
    return e.helper("TmaDesc", "struct alignas(64) TmaDesc { unsigned long long opaque[16]; };\n")


def _coord_operands(rank: int, first: int) -> tuple[str, str, str]:
    """A TMA helper's box coordinates: the asm operand list (``%first, ...``), the C parameters and the asm inputs."""
    return (", ".join(f"%{i + first}" for i in range(rank)), ", ".join(f"int c{i}" for i in range(rank)),
            ", ".join(f'"r"(c{i})' for i in range(rank)))


@emit_rule(TmaLoad)
def _emit_tma_load(e: CEmitter, s: TmaLoad, d: int) -> None:
    rank = len(s.coords)
    cs, params, ins = _coord_operands(rank, 3)
    mc, name = (".multicast::cluster", f"tma_load_{rank}d_multicast") if s.multicast else ("", f"tma_load_{rank}d")
    hint, pol = _hint_operand(s.hint, rank + 3 + bool(s.multicast))
    name += "_hint" if s.hint else ""
    op = f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes{mc}{hint}"
    fn = e.helper(name, (
        f"__device__ __forceinline__ void {name}(const void* map, void* dst, void* bar, {params}"
        + (", unsigned short mask" if s.multicast else "") + (", unsigned long long pol" if s.hint else "") + ") {\n"
        f'  asm volatile("{op} "\n'
        f'               "[%0], [%1, {{{cs}}}], [%2]' + (f", %{rank + 3}" if s.multicast else "") + pol[0] + ';"\n'
        f'               :: "r"({_SMEM.format("dst")}), "l"(map), "r"({_SMEM.format("bar")}), {ins}'
        + (', "h"(mask)' if s.multicast else "") + pol[1] + ' : "memory");\n'
        "}\n"))
    coords = ", ".join(e.e(c) for c in s.coords)
    mask = f", {s.multicast}" if s.multicast else ""
    e.emit(d, f"{fn}(&{e.names(s.tmap)}, {e.names(s.dst)} + {e.e(s.dst_off)}, {e.names(s.bar)} + {e.e(s.bar_off)}, "
              f"{coords}{mask}{_policy_arg(e, s.hint)});")


def _hint_operand(hint: str | None, index: int) -> tuple[str, tuple[str, str]]:
    """A TMA helper's L2 cache hint: the qualifier, and the asm operand text and input of its policy (``%index``)."""
    if hint is None:
        return "", ("", "")
    return ".L2::cache_hint", (f", %{index}", ', "l"(pol)')


def _policy_arg(e: CEmitter, hint: str | None) -> str:
    if hint is None:
        return ""
    from tilec.backends.cuda.cache_hints import policy

    return f", {policy(e, hint)}"


@emit_rule(TmaStoreBox)
def _emit_tma_store(e: CEmitter, s: TmaStoreBox, d: int) -> None:
    rank = len(s.coords)
    cs, params, ins = _coord_operands(rank, 2)
    hint, pol = _hint_operand(s.hint, rank + 2)
    name = f"tma_store_{rank}d" + ("_hint" if s.hint else "")
    fn = e.helper(name, (
        f"__device__ __forceinline__ void {name}(const void* map, const void* src, {params}"
        + (", unsigned long long pol" if s.hint else "") + ") {\n"
        f'  asm volatile("cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group{hint} [%0, {{{cs}}}], [%1]'
        + pol[0] + ';"\n'
        f'               :: "l"(map), "r"({_SMEM.format("src")}), {ins}' + pol[1] + ' : "memory");\n'
        "}\n"))
    coords = ", ".join(e.e(c) for c in s.coords)
    e.emit(d, f"{fn}(&{e.names(s.tmap)}, {e.names(s.src)} + {e.e(s.src_off)}, {coords}{_policy_arg(e, s.hint)});")


asm_rule(BulkCommit, "cp.async.bulk.commit_group;")
EMIT_RULES[BulkWait] = lambda e, s, d: e.emit(d, f'asm volatile("cp.async.bulk.wait_group.read {s.pending};" ::: '
                                                  '"memory");')
asm_rule(FenceMbarInit, "fence.mbarrier_init.release.cluster;")
asm_rule(ClusterBarrier, r"barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n")


@emit_rule(NamedBarrier)
def _emit_named_barrier(e: CEmitter, s: NamedBarrier, d: int) -> None:
    op = "bar.arrive" if s.arrive else "bar.sync"
    e.emit(d, f'asm volatile("{op} %0, %1;" :: "r"({e.e(s.id)}), "n"({s.threads}) : "memory");')


@emit_rule(MbarInit)
def _emit_init(e: CEmitter, s: MbarInit, d: int) -> None:
    fn = e.helper("mbar_init", (
        "__device__ __forceinline__ void mbar_init(void* bar, unsigned count) {\n"
        f'  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"({_SMEM.format("bar")}), "r"(count) '
        ': "memory");\n}\n'))
    e.emit(d, f"{fn}({e.names(s.bar)} + {e.e(s.off)}, {s.count});")


@emit_rule(MbarArriveTx)
def _emit_arrive(e: CEmitter, s: MbarArriveTx, d: int) -> None:
    if s.cta is not None:  # on the barrier at the same place in the cluster's block of rank cta
        fn = e.helper("mbar_arrive_cta", (
            "__device__ __forceinline__ void mbar_arrive_cta(void* bar, unsigned cta) {\n"
            "  unsigned remote;\n"
            f'  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"({_SMEM.format("bar")}), '
            '"r"(cta));\n'
            '  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");\n}\n'))
        e.emit(d, f"{fn}({e.names(s.bar)} + {e.e(s.off)}, {e.e(s.cta)});")
        return
    fn = e.helper("mbar_arrive_tx", (
        "__device__ __forceinline__ void mbar_arrive_tx(void* bar, unsigned tx) {\n"
        '  asm volatile("{\\n.reg .b64 state;\\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\\n}\\n"\n'
        f'               :: "r"({_SMEM.format("bar")}), "r"(tx) : "memory");\n}}\n'))
    e.emit(d, f"{fn}({e.names(s.bar)} + {e.e(s.off)}, {s.tx});")


@emit_rule(CpAsyncMbarArrive)
def _emit_cp_async_arrive(e: CEmitter, s: CpAsyncMbarArrive, d: int) -> None:
    fn = e.helper("mbar_arrive_cp_async", (
        "__device__ __forceinline__ void mbar_arrive_cp_async(void* bar) {\n"
        f'  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"({_SMEM.format("bar")}) '
        ': "memory");\n}\n'))
    e.emit(d, f"{fn}({e.names(s.bar)} + {e.e(s.off)});")


@emit_rule(MbarWait)
def _emit_wait(e: CEmitter, s: MbarWait, d: int) -> None:
    fn = e.helper("mbar_wait", (
        "__device__ __forceinline__ void mbar_wait(void* bar, unsigned parity) {\n"
        "  unsigned done;\n"
        "  do {\n"
        '    asm volatile("{\\n.reg .pred p;\\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\n"\n'
        '                 "selp.u32 %0, 1, 0, p;\\n}\\n"\n'
        f'                 : "=r"(done) : "r"({_SMEM.format("bar")}), "r"(parity) : "memory");\n'
        "  } while (!done);\n}\n"))
    e.emit(d, f"{fn}({e.names(s.bar)} + {e.e(s.off)}, {e.e(s.parity)});")


@emit_rule(Roles)
def _emit_roles(e: CEmitter, s: Roles, d: int) -> None:
    tx = e.names(e.tx)
    e.emit(d, f"if ({tx} >= {s.threads}) {{  // the producer warpgroup")
    if s.producer_regs:
        e.emit(d + 1, f'asm volatile("setmaxnreg.dec.sync.aligned.u32 {s.producer_regs};\\n");')
    e.emit(d + 1, f"if ({tx} == {s.threads}) {{")
    e.stmt(s.producer, d + 2)
    e.emit(d + 1, "}")
    e.emit(d, f"}} else {{  // the {s.threads // 128} consumer warpgroup(s)"
              + (f" in {s.copies} copies" if s.copies > 1 else ""))
    if s.consumer_regs:
        e.emit(d + 1, f'asm volatile("setmaxnreg.inc.sync.aligned.u32 {s.consumer_regs};\\n");')
    if s.copies > 1:
        e.emit(d + 1, f"const int {e.names(s.copy)} = {tx} / {s.threads // s.copies};")
        e.emit(d + 1, f"const int {e.names(s.tx)} = {tx} % {s.threads // s.copies};")
    e.stmt(s.consumer, d + 1)
    e.emit(d, "}")
