"""The state of lowering one kernel: its mems, the layout plan, the thread index, and how a Tile IR access
becomes a thread IR access. Per-op rules (in the sibling modules) register in :data:`LOWER_RULES`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tilec import dtypes as dt
from tilec.errors import LayoutConflictError, SourceLoc, TilecError
from tilec.ir import arith
from tilec.ir.buffer import Buffer
from tilec.ir.expr import Expr, Var, as_expr, binop, const
from tilec.ir.kernel import PrimFunc
from tilec.layout import Fragment, Layout, row_major
from tilec.lower.symbolic import to_ir
from tilec.lower.tir import Mem, MemRef, TensorMap, TStmt
from tilec.passes.layout_inference import LayoutPlan
from tilec.target import Target

LOWER_RULES: dict[type, Callable[[Lowerer, Any], TStmt]] = {}


def lower_rule(cls: type) -> Callable:
    """Register the lowering of a tile op class: ``fn(lowerer, op) -> TStmt``."""

    def deco(fn: Callable) -> Callable:
        LOWER_RULES[cls] = fn
        return fn

    return deco


@dataclass
class RegAccess:
    """How the current loop iteration reaches one element of a fragment: this thread's register ``local``."""

    mem: Mem
    local: Expr


@dataclass
class Lowerer:
    func: PrimFunc
    plan: LayoutPlan
    target: Target
    tx: Var = field(default_factory=lambda: Var("tx"))
    mems: dict[Buffer, Mem] = field(default_factory=dict)
    shared: list[Mem] = field(default_factory=list)
    regs: list[Mem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ranges: dict[Var, tuple[int, int]] = field(default_factory=dict)
    align: dict[Buffer, int] = field(default_factory=dict)  # global tensors accessed with vectors: bytes
    # buffers of wgmma groups a gemm left in flight (``in_flight``) -> the accumulator mems to wait for
    wgmma_pending: dict[Buffer, list[Mem]] = field(default_factory=dict)
    # wgmma groups of the statement sequence being lowered whose wait is deferred to the first statement that
    # needs their results (oldest first): (the buffers they touch, their accumulator); see tilec.passes.lower
    wgmma_deferred: list[tuple[frozenset[Buffer], Mem]] = field(default_factory=list)
    wait_anchor: Mem | None = None  # the shared word deferred wgmma waits are anchored on (WgmmaWait.after)
    anchor_waits: bool = False  # pass config wgmma_wait_anchor
    anchorable: bool = False  # whether a wgmma wait was deferred past a statement wgmma_wait_anchor could anchor on
    store_exchange: bool = True  # pass config store_exchange
    exchangeable: bool = False  # whether a global store of a fragment had pairs store_exchange could exchange
    producer_regs: int = 0  # pass config producer_regs (0: the default, see tilec.lower.tma.producer_registers)
    defer_wgmma: bool = False  # the gemm being lowered may leave its group for the sequence to wait for
    tensor_maps: list[TensorMap] = field(default_factory=list)  # TMA descriptors the kernel takes
    issuer: int = 0  # the thread that issues single-thread ops (TMA, mbarrier arrivals): a producer's first
    producer_threads: int = 0  # warp specialization: the producer warpgroup's threads, launched after the block's
    copies: int = 1  # warp specialization: copies of the block's threads running the consumer side (Roles)
    loc: SourceLoc | None = None
    scratch_for: dict[Mem, SourceLoc] = field(default_factory=dict)  # shared scratch -> the statement it serves
    _counter: int = 0
    _stored: frozenset[int] | None = None

    def tma_stored(self, buf: Buffer) -> bool:
        """Whether a TMA store reads ``buf`` (its writers must fence it to the async proxy)."""
        if self._stored is None:
            from tilec.ir.stmt import TmaStore
            from tilec.ir.visit import walk

            self._stored = frozenset(id(n.src.buffer) for n in walk(self.func.body) if isinstance(n, TmaStore))
        return id(buf) in self._stored

    @property
    def T(self) -> int:  # noqa: N802
        return self.func.launch.num_threads

    # ----------------------------------------------------------------------------------------------- mems

    def fresh(self, name: str) -> str:
        self._counter += 1
        return f"{name}_{self._counter}"

    def mem_of(self, buf: Buffer) -> Mem:
        m = self.mems.get(buf)
        if m is not None:
            return m
        if buf.scope == "global":
            m = Mem(buf.name, _storage(buf.dtype), "global", buf.numel, buf)
        elif buf.scope == "shared":
            lay = self.shared_layout(buf)
            m = Mem(buf.name, _storage(buf.dtype), "shared", int(lay.out_shape[0]), buf)
            self.shared.append(m)
        elif buf.scope == "fragment":
            frag = self.fragment(buf)
            m = Mem(buf.name, _storage(buf.dtype), "reg", frag.num_locals, buf)
            self.regs.append(m)
        else:  # local / var: a private array
            m = Mem(buf.name, _storage(buf.dtype), "reg", max(1, math.prod(int(d) for d in buf.shape)), buf)
            self.regs.append(m)
        self.mems[buf] = m
        return m

    def scratch_shared(self, name: str, dtype: dt.DType, size: int) -> Mem:
        """Shared memory of lowering's own (no Tile IR buffer), for the statement being lowered (``loc``)."""
        m = Mem(self.fresh(name), dtype, "shared", size)
        self.shared.append(m)
        if self.loc is not None:
            self.scratch_for[m] = self.loc
        return m

    def scratch_reg(self, name: str, dtype: dt.DType, size: int) -> Mem:
        m = Mem(self.fresh(name), dtype, "reg", size)
        self.regs.append(m)
        return m

    def fragment(self, buf: Buffer) -> Fragment:
        f = self.plan.fragments.get(buf)
        if f is None:
            raise TilecError(f"fragment {buf.name!r} has no layout (it is never used by a tile op)", self.loc)
        return f

    def shared_layout(self, buf: Buffer) -> Layout:
        lay = self.plan.shared.get(buf)
        return lay if lay is not None else row_major(*(int(d) for d in buf.shape))

    # -------------------------------------------------------------------------------------------- offsets

    def strides(self, buf: Buffer) -> list[Expr]:
        if buf.strides is not None:
            return [as_expr(s) for s in buf.strides]
        out: list[Expr] = []
        acc: Expr = const(1)
        for d in reversed(buf.shape):
            out.append(acc)
            acc = binop("*", acc, d)
        return list(reversed(out))

    def global_offset(self, buf: Buffer, idx: list[Expr]) -> Expr:
        off: Expr = const(0)
        for e, s in zip(idx, self.strides(buf)):
            off = binop("+", off, binop("*", e, s))
        return off

    def in_bounds(self, buf: Buffer, idx: list[Expr]) -> Expr | None:
        """The condition that ``idx`` lies inside ``buf``, or None when that is provable at compile time."""
        pred: Expr | None = None
        for e, n in zip(idx, buf.shape):
            b = arith.bounds(e, self.ranges)
            lo_ok = b is not None and b[0] >= 0
            hi_ok = b is not None and isinstance(n, int) and b[1] < n
            if not lo_ok:
                pred = _and(pred, binop(">=", e, 0))
            if not hi_ok:
                pred = _and(pred, binop("<", e, n))
        return pred

    def shared_offset(self, buf: Buffer, idx: list[Expr]) -> Expr:
        lay = self.shared_layout(buf)
        env = dict(zip(lay.symbols, idx))
        return to_ir(lay.exprs[0], env)

    def private_offset(self, buf: Buffer, idx: list[Expr]) -> Expr:
        off: Expr = const(0)
        for e, n in zip(idx, buf.shape):
            off = binop("+", binop("*", off, n), e)
        return off

    def check_frag_owner(self, buf: Buffer, ok: bool, what: str) -> None:
        if not ok:
            raise LayoutConflictError(f"fragment {buf.name!r}: {what}; its layout and the loop's differ, so another "
                                      "thread holds the element (copy it through shared memory with T.copy)",
                                      self.loc)

    def ref(self, mem: Mem, off: Any) -> MemRef:
        return MemRef(mem, as_expr(off))


def _and(a: Expr | None, b: Expr) -> Expr:
    return b if a is None else binop("and", a, b)


def _storage(d: dt.DType) -> dt.DType:
    if d is dt.int4:
        raise TilecError("int4 tensors run on the CPU interpreter only in this version; GPU lowering needs int8")
    return d
