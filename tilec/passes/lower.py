"""Lower (stage 7): Tile IR + layout plan → thread IR. Pre: verified IR, a complete :class:`LayoutPlan`.
Post: a :class:`~tilec.lower.tir.ThreadKernel` whose every register index is a compile-time constant after
unrolling; barriers are not yet placed (see :mod:`tilec.passes.barriers`).

Block-level statements run on every thread (they are uniform); a block-level store to shared or global
memory is done by thread 0. Each tile op becomes one :class:`~tilec.lower.tir.Group` through its rule in
:data:`~tilec.lower.context.LOWER_RULES`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tilec import dtypes as dt
from tilec.errors import SourceLoc, TilecError, TilecValueError, where
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Expr, Load, Var, binop, const
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import (
    AtomicRMW,
    Copy,
    For,
    Gemm,
    IfThenElse,
    KernelLaunch,
    Parallel,
    SeqStmt,
    Stmt,
    Store,
    TileOp,
    WarpRoles,
)  # fmt: skip
from tilec.ir.visit import loads_in, transform, vars_in, walk
from tilec.lower import gemm, mfma, ops, reduce, stream_k, tma, wgmma  # noqa: F401 - register the lowering rules
from tilec.lower.context import LOWER_RULES, Lowerer
from tilec.lower.ops import coalesced_note, hint_global_accesses
from tilec.lower.parallel import lower_parallel
from tilec.lower.tir import (
    AtomicAddOp,
    Comment,
    Decl,
    FenceProxyAsync,
    Group,
    If,
    LdMatrix,
    Loop,
    Mem,
    MemRef,
    Mma,
    NamedBarrier,
    Seq,
    ThreadKernel,
    TStmt,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
    Write,
    arena,
    overlay_indices,
    seq,
)
from tilec.passes.layout_inference import LayoutPlan
from tilec.target import Target


def block_expr(lw: Lowerer, e: Expr) -> Expr:
    """A block-level (uniform) expression: element reads of private, shared or global buffers."""

    def load(n: Any) -> Any:
        if not isinstance(n, Load):
            return None
        buf, idx = n.buffer, list(n.indices)
        mem = lw.mem_of(buf)
        if buf.scope == "fragment":
            raise TilecError(f"fragment {buf.name!r} can only be read inside T.Parallel (its elements live on "
                             "different threads)", lw.loc)
        if buf.scope == "global":
            return MemRef(mem, lw.global_offset(buf, idx))
        if buf.scope == "shared":
            return MemRef(mem, lw.shared_offset(buf, idx))
        return MemRef(mem, lw.private_offset(buf, idx))

    return transform(e, load)


def _offset_reads(lw: Lowerer, s: Stmt) -> tuple[Stmt, list[TStmt]]:
    """Tile op ``s`` with each element read in its regions' offsets (``A[I[k] * 32, 0]``: an index loaded from a
    tensor) made a scalar declared before the op, and those declarations (none, ``s`` itself, where it reads none)."""
    reads: list[TStmt] = []

    def scalar(n: Any) -> Any:
        if not isinstance(n, Load):
            return None
        v = Var(f"{n.buffer.name}_at", n.dtype)
        reads.append(Decl(v, block_expr(lw, n)))
        return v

    def region(n: Any) -> Any:
        if not isinstance(n, Region) or not any(isinstance(x, Load) for e in n.starts for x in walk(e)):
            return None
        return dataclasses.replace(n, starts=tuple(transform(e, scalar) for e in n.starts))

    return transform(s, region), reads


def _label(s: Stmt) -> str:
    from tilec.ir.printer import print_stmt

    head = print_stmt(s).splitlines()[0].strip() if not isinstance(s, Parallel) else "T.Parallel"
    at = f"{where(s.loc)}: " if s.loc else ""
    return f"{at}{head[:100]}"


def _drain_wgmma(lw: Lowerer, s: Stmt | None) -> list[TStmt]:
    """``wgmma.wait_group 0`` before ``s`` when it touches a buffer of a wgmma group still in flight (before the
    kernel's end for None)."""
    if s is not None and not any(isinstance(n, Buffer) and n in lw.wgmma_pending for n in walk(s)):
        return []
    regs = {id(m): m for ms in lw.wgmma_pending.values() for m in ms}
    lw.wgmma_pending.clear()
    return [WgmmaWait(0, m) for m in regs.values()]  # one per accumulator: each marks its registers defined


def _in_flight_here(body: Stmt) -> bool:
    """Whether a gemm left in flight into the next trip (``Gemm.in_flight``) is a statement of this loop body itself,
    not of a loop inside it."""
    todo = [body]
    while todo:
        n = todo.pop()
        if isinstance(n, Gemm) and n.in_flight:
            return True
        if isinstance(n, SeqStmt):
            todo += n.stmts
        elif isinstance(n, IfThenElse):
            todo += [n.then_body] + ([n.else_body] if n.else_body is not None else [])
    return False


_REGISTER_ONLY = (Seq, Group, Loop, If, Decl, Comment, Write, Mma, LdMatrix, Wgmma, WgmmaFence, WgmmaCommit, WgmmaWait,
                  NamedBarrier)


def settle_wgmma(lw: Lowerer, s: Stmt, code: TStmt) -> list[TStmt]:
    """The waits statement ``s`` (lowered to ``code``) needs for the deferred wgmma groups of its sequence: none
    when its code only computes in registers (reading shared memory, or meeting a named barrier: warpgroups taking
    turns) without touching their registers; the groups up to the newest it touches, by ``wgmma.wait_group n``
    with ``n`` the groups committed after that one; all of them before anything else (shared-memory writes,
    barriers, copies, control flow of its own)."""
    pending = lw.wgmma_deferred
    if not pending:
        return []
    own = all(not isinstance(n, TStmt) or isinstance(n, _REGISTER_ONLY) and
              (not isinstance(n, Write) or n.mem.space == "reg") for n in walk(code))
    if own and not isinstance(s, (For, IfThenElse, WarpRoles, SeqStmt)):
        used = {n for n in walk(s) if isinstance(n, Buffer)}
        k = max((i + 1 for i, (bufs, _) in enumerate(pending) if bufs & used), default=0)
    else:
        k = len(pending)
    retired, lw.wgmma_deferred = pending[:k], pending[k:]
    regs = {id(m): m for _, m in retired}
    return [WgmmaWait(len(lw.wgmma_deferred), m) for m in regs.values()]


def _anchor_register(before: TStmt) -> Mem | None:
    """The float register of ``before`` (a statement waits were deferred past) that can keep them below it, or None
    when it writes none or issued a wgmma itself."""
    if any(isinstance(n, (Wgmma, WgmmaCommit)) for n in walk(before)):
        return None
    regs = [n.mem for n in walk(before) if isinstance(n, Write) and n.mem.space == "reg" and n.mem.dtype is dt.float32]
    return regs[-1] if regs else None


def _anchored(lw: Lowerer, waits: list[TStmt], reg: Mem) -> list[TStmt]:
    """``waits`` kept below the statement that writes ``reg`` (:class:`WgmmaWait`'s ``after``)."""
    if lw.wait_anchor is None:
        lw.wait_anchor = lw.scratch_shared("wait_anchor", dt.uint32, 1)
    first = dataclasses.replace(waits[0], after=MemRef(reg, const(0)), anchor=lw.wait_anchor)
    return [first] + waits[1:]


class _Driver:
    def __init__(self, lw: Lowerer) -> None:
        self.lw = lw

    def stmt(self, s: Stmt) -> TStmt:
        lw = self.lw
        saved = lw.loc
        lw.loc = s.loc or saved
        try:
            return self._stmt(s)
        except TilecError as e:
            if e.loc is None and s.loc is not None:
                from tilec.frontend.parser import attach_loc

                raise attach_loc(e, s.loc) from None
            raise
        finally:
            lw.loc = saved

    def _stmt(self, s: Stmt) -> TStmt:
        lw = self.lw
        if isinstance(s, SeqStmt):
            return self.sequence(s)
        if lw.wgmma_pending and not isinstance(s, (For, IfThenElse)):
            wait = _drain_wgmma(lw, s)
            if wait:
                return seq(wait + [self._stmt(s)])
        if isinstance(s, For):
            ext = block_expr(lw, s.extent)
            lw.ranges[s.var] = (0, int(ext.value) - 1) if hasattr(ext, "value") else None
            lets = [Decl(v, block_expr(lw, e)) for v, e in s.ann("lets", ())]  # bound at the start of each trip
            body = seq(lets + [self.stmt(s.body)])
            if lw.wgmma_pending and not _in_flight_here(s.body):  # a group an inner loop left in flight: the next
                # trip starts by rewriting that loop's operand versions (its multi-buffering covers its own trips only)
                body = seq([body] + _drain_wgmma(lw, None))
            return Loop(s.var, ext, body, unroll=s.kind == "unroll", tiles=bool(s.ann("tiles")),
                        unroll_factor=s.ann("unroll_factor", 0), loc=s.loc)
        if isinstance(s, WarpRoles):
            from tilec.lower.tma import lower_roles

            return lower_roles(lw, s, self.stmt)
        if isinstance(s, IfThenElse):  # each branch waits for the wgmma groups it needs; after it, what either left
            pending = dict(lw.wgmma_pending)
            other = self.stmt(s.else_body) if s.else_body is not None else None
            left, lw.wgmma_pending = lw.wgmma_pending, pending
            then = self.stmt(s.then_body)
            lw.wgmma_pending = {**left, **lw.wgmma_pending}
            return If(block_expr(lw, s.cond), then, other, loc=s.loc)
        if isinstance(s, Parallel):
            return Group(lower_parallel(lw, s), _label(s), loc=s.loc)
        if isinstance(s, Store):
            return self.store(s)
        if isinstance(s, AtomicRMW):
            mem = lw.mem_of(s.buffer)
            off = lw.global_offset(s.buffer, list(s.indices)) if s.buffer.scope == "global" else \
                lw.shared_offset(s.buffer, list(s.indices))
            op = AtomicAddOp(mem, off, block_expr(lw, s.value), loc=s.loc)
            return Group(If(binop("==", lw.tx, 0), op), _label(s), loc=s.loc)
        if isinstance(s, TileOp):
            rule = LOWER_RULES.get(type(s))
            if rule is None:
                raise TilecError(f"T.{s.kind} has no lowering for target {lw.target}", s.loc)
            tile, reads = _offset_reads(lw, s)
            body = rule(lw, tile)
            if reads:
                body = seq(reads + [body])
            if isinstance(s, Copy):
                body = hint_global_accesses(body, tile, lw)
                coalesced_note(lw, s)
            if _needs_proxy_fence(lw, s):
                body = seq([body, FenceProxyAsync()])
            return Group(body, _label(s), loc=s.loc)
        raise TilecError(f"cannot lower {type(s).__name__}", s.loc)

    def sequence(self, s: SeqStmt) -> TStmt:
        """The statements in order; a wgmma gemm's wait waits for the first statement that needs it
        (:func:`settle_wgmma`), and for the sequence's end at the latest."""
        lw = self.lw
        outer, lw.wgmma_deferred = lw.wgmma_deferred, []
        out: list[TStmt] = []
        for c in s.stmts:
            before = len(lw.wgmma_deferred)
            lw.defer_wgmma = isinstance(c, Gemm)
            try:
                code = self.stmt(c)
            finally:
                lw.defer_wgmma = False
            new = lw.wgmma_deferred[before:]
            del lw.wgmma_deferred[before:]
            waits = settle_wgmma(lw, c, code)
            reg = _anchor_register(out[-1]) if waits and out else None
            lw.anchorable = lw.anchorable or reg is not None  # (found whatever the config's value)
            if reg is not None and lw.anchor_waits:
                waits = _anchored(lw, waits, reg)
            out += waits + [code]
            lw.wgmma_deferred += new
        out += settle_wgmma(lw, s, Seq(()))  # everything, at the end
        lw.wgmma_deferred = outer
        return seq(out)

    def store(self, s: Store) -> TStmt:
        lw = self.lw
        buf = s.buffer
        mem = lw.mem_of(buf)
        value = block_expr(lw, s.value)
        idx = [block_expr(lw, i) for i in s.indices]
        if buf.scope in ("var", "local"):
            return Write(mem, lw.private_offset(buf, idx), value, loc=s.loc)
        if buf.scope == "fragment":
            raise TilecError(f"fragment {buf.name!r} can only be written inside T.Parallel or by tile ops", s.loc)
        off = lw.global_offset(buf, idx) if buf.scope == "global" else lw.shared_offset(buf, idx)
        return Group(If(binop("==", lw.tx, 0), Write(mem, off, value, loc=s.loc)), _label(s), loc=s.loc)


def _needs_proxy_fence(lw: Lowerer, s: Stmt) -> bool:
    """In a kernel with wgmma, shared memory written by ordinary stores (or landed by ``cp.async.wait_group``)
    must be fenced to the async proxy by the writing threads before the barrier that orders the wgmma's reads; so
    must a tile a TMA store reads."""
    from tilec.ir.stmt import AsyncCopy, AsyncWait, BarrierInit, BarrierWait, TmaCopy, TmaStore
    from tilec.lower.wgmma import uses_wgmma

    if isinstance(s, (AsyncCopy, TmaCopy, TmaStore, BarrierInit)):
        return False
    if not uses_wgmma(lw):
        return any(lw.tma_stored(r.buffer) for r in s.writes())
    if isinstance(s, BarrierWait):  # the wait that lands a TMA pipeline stage's cp.async copies (each thread its own)
        return any(isinstance(n, AsyncCopy) and n.barrier is not None and n.barrier.buffer is s.barrier.buffer
                   for n in walk(lw.func.launch.body))
    return isinstance(s, AsyncWait) or any(r.buffer.scope == "shared" for r in s.writes())


def _raster(launch: KernelLaunch, hw: list[Var]) -> list[TStmt]:
    """Declare the kernel's block variables from the hardware block indices (rasterized with T.use_swizzle)."""
    if launch.swizzle is None or len(launch.grid) < 2:
        return [Decl(v, h) for v, h in zip(launch.block_vars, hw)]
    from tilec.passes.raster import panel_order

    panel, order = launch.swizzle
    b = binop("+", binop("*", hw[1], launch.grid[0]), hw[0])
    new_x, new_y = panel_order(b, launch.grid[0], launch.grid[1], panel, order)
    out = [Decl(launch.block_vars[0], new_x), Decl(launch.block_vars[1], new_y)]
    return out + [Decl(v, h) for v, h in zip(launch.block_vars[2:], hw[2:])]


def _place_shared(shared: list[Mem], launch: KernelLaunch) -> tuple[tuple[tuple[Mem, int], ...], int]:
    """Byte offsets in the shared arena (see :func:`~tilec.lower.tir.arena`), overlays over the mems they may
    take (``KernelLaunch.overlays``)."""
    overlays = overlay_indices([m.buffer for m in shared], launch.overlays)
    offsets, total = arena([int(m.size) * m.dtype.bits // 8 for m in shared], overlays)
    return tuple(sorted(zip(shared, offsets), key=lambda x: x[1])), total


def _min_blocks(target: Target, smem: int, threads: int, producer: bool) -> int:
    """The blocks per SM ``__launch_bounds__`` promises ptxas (0: none). 1 for warp-specialized kernels
    (``setmaxnreg`` needs it). Otherwise, on NVIDIA targets, the count shared memory allows when that is 2 or more
    and still leaves every thread 255 registers: ptxas then schedules for that occupancy rather than for the fewest
    registers (perf notes T: flash attention with 64x64 tiles, 130 registers and 237 TFLOP/s without, 170 and
    279 with)."""
    if producer:
        return 1
    if not target.arch.startswith("sm_") or not smem:
        return 0
    from tilec.arch import table_model

    m = table_model(target.arch)
    blocks = min(m.smem_per_sm // (smem + m.smem_reserved_per_block), m.max_threads_per_sm // threads)
    return blocks if blocks >= 2 and blocks * threads * m.regs_per_thread <= m.regs_per_sm else 0


def _check_shared(nbytes: int, target: Target, launch: KernelLaunch, shared: tuple[tuple[Mem, int], ...],
                  scratch_for: dict[Mem, SourceLoc], staged: dict[Buffer, str]) -> None:
    """A kernel needing more shared memory than the target's block may have is refused here, on the CPU too (the
    thread interpreter would run it; the GPU would not load it). The error names the largest buffers: those the
    passes add (a second copy of the consumers' tiles, the stages of a pipeline) show there, and lowering's scratch
    (``scratch_for``: a layout conversion's, a reduction's) with the line of the statement it serves; the staged
    operands of scalar-path gemms (``staged``) always, with what they serve."""
    if not target.arch:
        return
    from tilec.arch import table_model

    limit = table_model(target.arch).smem_per_block
    if nbytes > limit:
        sizes = sorted(((int(m.size) * m.dtype.bits // 8, m.name, m) for m, _ in shared), reverse=True,
                       key=lambda x: x[:2])
        shown = sizes[:6] + [x for x in sizes[6:] if x[2].buffer in staged]
        largest = ", ".join(f"{name} {size}" + (f" (tilec's scratch for {where(scratch_for[m])})"
                                                if m in scratch_for else f" ({staged[m.buffer]})"
                                                if m.buffer in staged else "") for size, name, m in shown)
        raise TilecValueError(f"the kernel needs {nbytes} bytes of shared memory; a block on {target.arch} may have "
                              f"at most {limit} (largest buffers, bytes: {largest}): use smaller tiles or fewer "
                              "pipeline stages (num_stages), or drop a pass config that adds buffers (consumers)",
                              launch.loc)


def _check_grid(func: PrimFunc) -> None:
    """A GPU launch computes its grid on the host from the symbolic sizes alone (the lowered kernel's ``grid`` is
    in terms of ``dyn_vars``): a grid of a scalar parameter or of a tensor's element is refused here (the CUDA
    launch failed on it with a bare NameError; the CPU tile interpreter runs it)."""
    launch = func.launch
    for g in launch.grid:
        other = [v.name for v in vars_in(g) if v not in func.dyn_vars] + [ld.buffer.name for ld in loads_in(g)]
        if other:
            raise TilecValueError(f"T.Kernel's grid extent {g} reads {', '.join(dict.fromkeys(other))}: a GPU launch "
                                  "computes its grid from the tensors' shapes (constants and T.dynamic sizes) "
                                  "only; make the extent one of those", launch.loc)


def lower_kernel(func: PrimFunc, plan: LayoutPlan, target: Target, options: dict | None = None,
                 staged: dict[Buffer, str] | None = None) -> ThreadKernel:
    """The thread-level kernel of ``func``. ``staged``: the shared buffers a pass added, with what each serves (named
    in the error of a kernel needing too much shared memory, :mod:`tilec.passes.stage_operands`)."""
    _check_grid(func)
    lw = Lowerer(func, plan, target)
    lw.anchor_waits = (options or {}).get("wgmma_wait_anchor", False)
    lw.store_exchange = (options or {}).get("store_exchange", True)
    lw.producer_regs = (options or {}).get("producer_regs", lw.producer_regs)
    launch = func.launch
    hw = [Var(f"block_{c}") for c in "xyz"[: len(launch.grid)]]
    for v, h, g in zip(launch.block_vars, hw, launch.grid):
        n = getattr(g, "value", None)
        lw.ranges[v] = (0, n - 1) if isinstance(n, int) else None
        lw.ranges[h] = lw.ranges[v]
    params = tuple(lw.mem_of(p) if hasattr(p, "scope") else p for p in func.params)
    body = seq(_raster(launch, hw) + [_Driver(lw).stmt(launch.body)] + _drain_wgmma(lw, None))
    shared, nbytes = _place_shared(lw.shared, launch)
    _check_shared(nbytes, target, launch, shared, lw.scratch_for, staged or {})
    align = tuple((i, lw.align[p]) for i, p in enumerate(func.params) if p in lw.align)
    threads = launch.num_threads * lw.copies + lw.producer_threads
    cluster = [1, 1, 1]
    if launch.cluster is not None:
        cluster[launch.cluster[0]] = launch.cluster[1]
    statics = tuple(m for b, m in lw.mems.items() if m.space == "global" and b not in func.params)
    if "wgmma_wait_anchor" in (options or {}) and not lw.anchorable and target.arch == "sm_90a" and \
            (options or {}).get("wgmma"):  # (off the wgmma path configs.target_inert says so)
        lw.notes.append(f"T.Kernel at {where(launch.loc)}: pass config 'wgmma_wait_anchor' has no effect: it keeps a "
                        "wgmma wait deferred past register-only statements below them, and no wait of the kernel is "
                        "deferred past such a statement")
    if "store_exchange" in (options or {}) and not lw.exchangeable:
        lw.notes.append(f"T.Kernel at {where(launch.loc)}: pass config 'store_exchange' has no effect: it has the "
                        "threads of a quad exchange accumulator pairs by shuffles before they store them to global "
                        "memory, and the kernel stores no such pairs from registers (an accumulator staged by pass "
                        "config 'stage_epilogue' goes out through shared memory)")
    dependent = target.kind == "cuda" and target.sm >= 90 and (options or {}).get("pdl", True)
    if dependent:
        lw.notes.append("launched as a programmatic dependent (PDL): waits for the stream's previous kernel before "
                        "its first statement, and lets the next one launch while it runs")
    return ThreadKernel(func.name, params, func.dyn_vars, launch.grid, tuple(hw), threads, lw.tx, shared,
                        tuple(lw.regs), body, nbytes, tuple(lw.notes), align, target.warp_size, tuple(lw.tensor_maps),
                        _min_blocks(target, nbytes, threads, bool(lw.producer_threads)), tuple(cluster), statics,
                        dependent)
