"""Per-op rules of the cost model: what one execution of a tile op by one block moves and computes.

A rule is registered for an op class with :func:`cost_rule` and returns an :class:`OpCost`; subclasses find
their base class's rule (``AsyncCopy`` uses ``Copy``'s). Counting conventions:

* bytes by memory level: global loads and stores per tensor, shared-memory reads and writes, register traffic
  (fragment and local buffers; reported, not a bottleneck);
* a global region that overhangs its tensor moves only the part inside: exactly, per block, when its start
  depends only on block indices and sizes; otherwise (a start that moves with a loop) the average fraction
  ``dim / (ceil(dim / extent) * extent)`` of a loop that tiles the dimension;
* ``T.gemm`` on tensor cores: ``2 m n k`` FLOPs of its instruction and dtype, and the ldmatrix traffic of its
  warp partition: each of the ``warp_m x warp_n`` warps reads its ``m / warp_m`` rows of A and ``n / warp_n``
  columns of B, so shared reads are ``warp_n * m * k`` elements of A plus ``warp_m * k * n`` of B (register
  operands read none); on the scalar fallback, ``m n k`` FMAs and two shared loads per FMA;
* element work (``T.Parallel`` bodies, stored values): one lane operation per floating-point arithmetic node,
  comparison, select or conversion (no FMA fusion is assumed); transcendental intrinsics and float division
  use the SFU (see :data:`INTRINSICS`); integer index arithmetic is not counted; both sides of a condition
  inside a body are counted;
* reductions: one combine per source element, then ``log2(replicas)`` shuffle rounds per result register.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tilec import dtypes as dt
from tilec.errors import where
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import BinOp, Call, Cast, Const, Expr, Load, Select, UnOp, Var
from tilec.ir.stmt import (
    AsyncCommit,
    AsyncWait,
    AtomicAdd,
    AtomicRMW,
    BarrierArrive,
    BarrierInit,
    BarrierWait,
    ClusterSync,
    Copy,
    CumSum,
    Fill,
    For,
    Gemm,
    IfThenElse,
    Parallel,
    Print,
    Reduce,
    SeqStmt,
    Stmt,
    Store,
    TmaStoreWait,
    WarpgroupTurn,
)  # fmt: skip
from tilec.ir.visit import walk
from tilec.passes.trip_counts import NotStatic, evaluate

# intrinsic -> (ALU lane ops, SFU ops, FLOPs) per element
INTRINSICS: dict[str, tuple[int, int, int]] = {
    "exp2": (0, 1, 1), "log2": (0, 1, 1), "exp": (1, 1, 2), "log": (1, 1, 2), "sqrt": (0, 1, 1),
    "rsqrt": (0, 1, 1), "tanh": (0, 1, 1), "sin": (0, 1, 1), "cos": (0, 1, 1), "sigmoid": (2, 2, 4),
    "pow": (1, 2, 3), "abs": (1, 0, 0), "floor": (1, 0, 0), "ceil": (1, 0, 0), "round": (1, 0, 0),
    "fma": (1, 0, 2), "isnan": (1, 0, 0), "isinf": (1, 0, 0),
}  # fmt: skip

LIVE_K_STEPS = 3  # k-steps of gemm operands in registers at once (fitted to ptxas, see the cost model)
# GemmPlan.instr -> device model name
INSTRUCTIONS = {"mma": "mma.sync", "mma_tf32": "mma.sync", "wgmma": "wgmma", "mfma": "mfma"}


@dataclass
class OpCost:
    """One execution of one op by one block. Values are numbers or arrays over the grid (clipped regions)."""

    gload: dict[Buffer, Any] = field(default_factory=dict)
    gstore: dict[Buffer, Any] = field(default_factory=dict)
    smem_read: Any = 0.0
    smem_write: Any = 0.0
    reg: Any = 0.0
    tensor: dict[str, Any] = field(default_factory=dict)  # "mma.sync:float16" -> FLOPs
    simt: Any = 0.0  # ALU lane operations (an FMA is one)
    sfu: Any = 0.0  # transcendental lane operations
    flops: Any = 0.0  # FLOPs outside tensor cores (an FMA is two)
    inflight: Any = 0.0  # bytes of global loads the op keeps in flight at once
    asynchronous: bool = False  # its loads overlap the block's compute (cp.async or TMA into >= 2 buffers)
    scratch_regs: int = 0  # registers per thread its lowering adds (gemm operand fragments) ...
    scratch_regs_min: int = 0  # ... and the fewest it can do with (one k-step's operands)
    scratch_smem: int = 0  # bytes of shared scratch its lowering adds (layout conversions, cross-warp partials)
    reject: str | None = None
    note: str | None = None

    def add(self, other: OpCost, times: Any = 1) -> None:
        for mine, theirs in ((self.gload, other.gload), (self.gstore, other.gstore), (self.tensor, other.tensor)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0.0) + v * times
        for f in ("smem_read", "smem_write", "reg", "simt", "sfu", "flops"):
            setattr(self, f, getattr(self, f) + getattr(other, f) * times)


@dataclass
class RuleContext:
    """What the rules may read: the layout plan, the target, and the values of sizes and block indices."""

    plan: Any
    target: Any
    env: dict[Var, Any]
    threads: int


Rule = Callable[[RuleContext, Any], OpCost]
_RULES: dict[type, Rule] = {}


def cost_rule(*classes: type) -> Callable[[Rule], Rule]:
    """Register the decorated function as the cost rule of ``classes`` (and of their subclasses)."""

    def register(fn: Rule) -> Rule:
        for c in classes:
            _RULES[c] = fn
        return fn

    return register


def op_cost(ctx: RuleContext, op: Any) -> OpCost:
    """The cost of one execution of ``op`` (the rule of its class or of its nearest base class)."""
    for cls in type(op).__mro__:
        rule = _RULES.get(cls)
        if rule is not None:
            return rule(ctx, op)
    return OpCost(note=f"no cost rule for {type(op).__name__}; counted as free")


# ------------------------------------------------------------------------------------------------ helpers


def _int(ctx: RuleContext, e: Any) -> int:
    return int(evaluate(e, ctx.env))


def region_elems(ctx: RuleContext, r: Region) -> Any:
    """Elements of ``r`` that exist: all of an on-chip region; the part of a global region inside its tensor."""
    n: Any = 1.0
    for start, ext, dim in zip(r.starts, r.extents, r.buffer.shape):
        e = _int(ctx, ext)
        if r.buffer.scope != "global":
            n = n * e
            continue
        d = _int(ctx, dim)
        try:
            if not all(v in ctx.env for v in walk(start) if isinstance(v, Var)):
                raise NotStatic(str(start))
            s = evaluate(start, ctx.env)
            inside = _clip(s, e, d)
        except NotStatic:  # moves with a loop: the average over a loop tiling the dimension
            inside = e * d / (math.ceil(d / e) * e) if e else 0.0
        n = n * inside
    return n


def _clip(s: Any, e: int, d: int) -> Any:
    import numpy as np

    return np.clip(np.minimum(s + e, d) - np.maximum(s, 0), 0, e).astype(np.float64)


def _move(cost: OpCost, buf: Buffer, nbytes: Any, write: bool) -> None:
    """Record ``nbytes`` read from (or written to) ``buf`` at its memory level."""
    if buf.scope == "global":
        side = cost.gstore if write else cost.gload
        side[buf] = side.get(buf, 0.0) + nbytes
    elif buf.scope == "shared":
        if write:
            cost.smem_write = cost.smem_write + nbytes
        else:
            cost.smem_read = cost.smem_read + nbytes
    else:
        cost.reg = cost.reg + nbytes


# ---------------------------------------------------------------------------------------------- tile ops


@cost_rule(Copy)
def _copy(ctx: RuleContext, c: Copy) -> OpCost:
    cost = OpCost()
    n_src, n_dst = region_elems(ctx, c.src), region_elems(ctx, c.dst)
    n = n_src if c.src.buffer.scope == "global" else n_dst
    _move(cost, c.src.buffer, n * c.src.dtype.bytes, write=False)
    _move(cost, c.dst.buffer, n * c.dst.dtype.bytes, write=True)
    if c.src.dtype is not c.dst.dtype:
        cost.simt = n_dst
    _conversion(ctx, c, cost)
    if c.src.buffer.scope == "global":
        cost.inflight = n * c.src.dtype.bytes
        dst = c.dst
        versions = int(dst.buffer.shape[0]) if dst.ndim > 1 and dst.extents[0] == 1 else 1
        if c.kind in ("async_copy", "tma_copy") and versions > 1:  # a pipelined producer: versions - 1 trips in flight
            cost.inflight = cost.inflight * (versions - 1)
            cost.asynchronous = True
    return cost


def _conversion(ctx: RuleContext, c: Copy, cost: OpCost) -> None:
    """A copy between two fragments of different layouts goes through a shared scratch tile."""
    s, d = c.src.buffer, c.dst.buffer
    if s.scope != "fragment" or d.scope != "fragment":
        return
    fs, fd = ctx.plan.fragments.get(s), ctx.plan.fragments.get(d)
    if fs is None or fd is None or fs is fd or fs.equals(fd):
        return
    nbytes = int(math.prod(fs.shape) * s.dtype.bytes)
    cost.scratch_smem = nbytes
    cost.smem_write = cost.smem_write + nbytes
    cost.smem_read = cost.smem_read + nbytes * fd.replicate


@cost_rule(Gemm)
def _gemm(ctx: RuleContext, g: Gemm) -> OpCost:
    m, n, k = (_int(ctx, x) for x in g.mnk)
    plan = ctx.plan.gemms[g]
    cost = OpCost()
    a, b = g.A.buffer, g.B.buffer
    if plan.instr == "simt":
        cost.simt = m * n * k
        cost.flops = 2.0 * m * n * k
        for buf, r in ((a, g.A), (b, g.B)):
            _move(cost, buf, m * n * k * r.dtype.bytes, write=False)
        if _tensor_core_eligible(g, ctx.target):
            warps = ctx.threads // 32
            cost.reject = (f"T.gemm at {where(g.loc)} ({m}x{n}x{k}, {warps} warps) does not tile into "
                           f"{'mma.m16n8k8 TF32' if g.A.dtype is dt.float32 else 'mma.m16n8k16'} atoms {plan.why}")
        else:
            cost.note = f"T.gemm at {where(g.loc)} runs on scalar FMAs {plan.why}"
        return cost
    instr = INSTRUCTIONS.get(plan.instr, plan.instr)
    cost.tensor[f"{instr}:{g.A.dtype.name}"] = 2.0 * m * n * k
    tm, tn = m // plan.warp_m, n // plan.warp_n
    _move(cost, a, plan.warp_n * m * k * g.A.dtype.bytes, write=False)
    _move(cost, b, plan.warp_m * k * n * g.B.dtype.bytes, write=False)
    # ldmatrix destinations per k-step (A: 8 halves per 16-row atom, B: 4 halves per 8-column atom), of up to
    # LIVE_K_STEPS k-steps at once (ptxas hoists the loads of the unrolled k-steps); wgmma reads shared operands
    # through descriptors, into no registers
    per_step = 0 if plan.instr == "wgmma" else \
        (tm // 16 * 4 if a.scope == "shared" else 0) + (tn // 8 * 2 if b.scope == "shared" else 0)
    cost.scratch_regs = per_step * min(k // (8 if plan.instr == "mma_tf32" else 16), LIVE_K_STEPS)
    cost.scratch_regs_min = per_step
    return cost


def _tensor_core_eligible(g: Gemm, target: Any) -> bool:
    """Tensor cores would run this gemm but for its tile shape or warp count."""
    ok_target = target.backend == "cuda" and (not target.sm or target.sm >= 80)
    ok_types = (g.A.dtype in (dt.float16, dt.bfloat16) or (g.allow_tf32 and g.A.dtype is dt.float32)) and \
        g.B.dtype is g.A.dtype and g.C.dtype is dt.float32
    return ok_target and ok_types and g.C.buffer.scope == "fragment"


@cost_rule(Reduce)
def _reduce(ctx: RuleContext, r: Reduce) -> OpCost:
    cost = OpCost()
    n = region_elems(ctx, r.src)
    _move(cost, r.src.buffer, n * r.src.dtype.bytes, write=False)
    _move(cost, r.dst.buffer, region_elems(ctx, r.dst) * r.dst.dtype.bytes, write=True)
    cost.simt = n * (2 if r.red.startswith("abs") else 1)
    frag = ctx.plan.fragments.get(r.dst.buffer)
    if frag is not None and frag.replicate > 1:
        rounds = int(math.log2(frag.replicate))
        cost.simt = cost.simt + 2.0 * rounds * frag.num_locals * frag.num_threads
        warps = _warps_holding(frag)
        if warps > 1:  # the per-warp partials meet in a shared scratch buffer, one slot per warp
            nbytes = int(math.prod(frag.shape) * warps * max(4, r.dst.dtype.bytes))
            cost.scratch_smem = nbytes
            cost.smem_write = cost.smem_write + nbytes
            cost.smem_read = cost.smem_read + nbytes * frag.replicate
    return cost


def _warps_holding(frag: Any) -> int:
    """How many warps hold the replicas of one element of ``frag`` (the first element's, as for all)."""
    threads, _ = frag.eval_tables()
    first = threads.reshape(-1, threads.shape[-1])[0]
    return len({int(t) // 32 for t in first})


@cost_rule(CumSum)
def _cumsum(ctx: RuleContext, c: CumSum) -> OpCost:
    cost = OpCost()
    n = region_elems(ctx, c.src)
    _move(cost, c.src.buffer, n * c.src.dtype.bytes, write=False)
    _move(cost, c.dst.buffer, n * c.dst.dtype.bytes, write=True)
    if c.src.buffer.scope == "fragment":  # through a shared scratch tile
        cost.smem_write = cost.smem_write + n * c.src.dtype.bytes
        cost.smem_read = cost.smem_read + n * c.src.dtype.bytes
    cost.simt = n
    cost.flops = n
    return cost


@cost_rule(Fill)
def _fill(ctx: RuleContext, f: Fill) -> OpCost:
    cost = OpCost()
    n = region_elems(ctx, f.dst)
    _move(cost, f.dst.buffer, n * f.dst.dtype.bytes, write=True)
    cost.simt = n if f.dst.buffer.scope in ("fragment", "local") else 0.0
    return cost


@cost_rule(AtomicAdd)
def _atomic_add(ctx: RuleContext, a: AtomicAdd) -> OpCost:
    cost = OpCost()
    n = region_elems(ctx, a.src)
    _move(cost, a.src.buffer, n * a.src.dtype.bytes, write=False)
    _move(cost, a.dst.buffer, n * a.dst.dtype.bytes, write=True)
    cost.simt = cost.flops = n
    return cost


@cost_rule(AsyncCommit, AsyncWait, BarrierInit, BarrierArrive, BarrierWait, ClusterSync, Print, TmaStoreWait,
           WarpgroupTurn)
def _free(ctx: RuleContext, op: Any) -> OpCost:
    return OpCost()


@cost_rule(Parallel)
def _parallel(ctx: RuleContext, p: Parallel) -> OpCost:
    n = 1
    for e in p.extents:
        n *= _int(ctx, e)
    per = OpCost()
    _stmt_work(ctx, p.body, per, 1)
    cost = OpCost()
    cost.add(per, n)
    cost.inflight = sum(cost.gload.values(), 0.0)
    return cost


@cost_rule(Store, AtomicRMW)
def _element_store(ctx: RuleContext, s: Any) -> OpCost:
    cost = OpCost()
    _stmt_work(ctx, s, cost, 1)
    return cost


# ----------------------------------------------------------------------------------------- element work


def _stmt_work(ctx: RuleContext, s: Stmt, cost: OpCost, times: Any) -> None:
    """Add the work of running ``s`` ``times`` times (inside a parallel body, or a block-level store)."""
    if isinstance(s, SeqStmt):
        for c in s.stmts:
            _stmt_work(ctx, c, cost, times)
    elif isinstance(s, For):
        try:
            ext = _int(ctx, s.extent)
        except NotStatic:
            ext, cost.note = 1, f"loop {s.var.name!r} inside a parallel body has no static extent: counted once"
        _stmt_work(ctx, s.body, cost, times * ext)
    elif isinstance(s, IfThenElse):
        _expr_work(s.cond, cost, times)
        _stmt_work(ctx, s.then_body, cost, times)
        if s.else_body is not None:
            _stmt_work(ctx, s.else_body, cost, times)
    elif isinstance(s, (Store, AtomicRMW)):
        _expr_work(s.value, cost, times)
        for i in s.indices:
            _expr_work(i, cost, times)
        _move(cost, s.buffer, s.buffer.dtype.bytes * times, write=True)
        if isinstance(s, AtomicRMW):
            cost.simt = cost.simt + times


def _expr_work(e: Expr, cost: OpCost, times: Any) -> None:
    for node in walk(e):
        if isinstance(node, Load):
            _move(cost, node.buffer, node.buffer.dtype.bytes * times, write=False)
            continue
        alu, sfu, flops = _node_work(node)
        if alu or sfu or flops:
            cost.simt = cost.simt + alu * times
            cost.sfu = cost.sfu + sfu * times
            cost.flops = cost.flops + flops * times


def _node_work(node: Any) -> tuple[int, int, int]:
    """(ALU ops, SFU ops, FLOPs) of one expression node, not counting its operands."""
    if isinstance(node, (Const, Var)) or not isinstance(node, Expr):
        return 0, 0, 0
    if isinstance(node, Call):
        return INTRINSICS.get(node.name, (1, 0, 1))
    if isinstance(node, BinOp):
        floats = node.a.dtype.is_float or node.b.dtype.is_float
        if not floats:
            return 0, 0, 0
        if node.op == "/":
            return 1, 1, 1
        if node.op in ("//", "%"):
            return 2, 0, 2
        return 1, 0, 1
    if isinstance(node, UnOp):
        return (1, 0, 1) if node.dtype.is_float else (0, 0, 0)
    if isinstance(node, Cast):
        return (1, 0, 0) if node.dtype.is_float or node.value.dtype.is_float else (0, 0, 0)
    if isinstance(node, Select):
        return (1, 0, 0) if node.dtype.is_float else (0, 0, 0)
    return 0, 0, 0
