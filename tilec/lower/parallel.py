"""Lower a ``T.Parallel`` nest along its loop layout (a Fragment over the iteration space).

Thread ``tx`` runs the iterations it holds, one per local ``l``: the loop variables become the layout's
inverse at ``(tx, l)``. Fragment elements resolve to registers of the running thread: which register is
found by enumeration over all threads (it must not depend on the thread, or the layouts disagree) and
written as a formula of ``l`` when it is bit-linear in ``l``, so the loop stays a loop (unrolled by the
compiler); otherwise the loop is unrolled here. Global accesses are predicated on the tensor bounds where
those are not provable; in a replicated layout only replica 0 writes memory that other threads see.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tilec.errors import TilecError, where
from tilec.ir.buffer import Buffer
from tilec.ir.expr import Const, Expr, Load, Var, as_expr, binop, cast, const, select
from tilec.ir.stmt import AtomicRMW, For, IfThenElse, Parallel, SeqStmt, Stmt, Store
from tilec.ir.visit import substitute, transform
from tilec.layout import Fragment
from tilec.lower.context import Lowerer
from tilec.lower.layouts import common_registers, held_twice, inverse_table
from tilec.lower.symbolic import NotTabulable, eval_np, to_ir
from tilec.lower.tir import AtomicAddOp, If, Loop, MemRef, TStmt, Write, seq


class _Unroll(Exception):  # noqa: N818 - control flow: this loop must be unrolled by lowering
    pass


def fit_bitlinear(values: np.ndarray, var: Expr) -> Expr | None:
    """An expression of ``var`` equal to ``values[var]`` for every index, as a sum of bit fields of ``var``
    times weights (how register indices of tensor-core layouts depend on the local index); None if none."""
    n = len(values)
    c0 = int(values[0])
    bits = max(1, (n - 1).bit_length())
    w = [int(values[1 << b]) - c0 if (1 << b) < n else 0 for b in range(bits)]
    ls = np.arange(n)
    pred = c0 + sum(((ls >> b) & 1) * w[b] for b in range(bits))
    if not np.array_equal(pred, values):
        return None
    out: Expr = const(c0)
    b = 0
    while b < bits:
        if w[b] == 0:
            b += 1
            continue
        e = b
        while e + 1 < bits and w[e + 1] == 2 * w[e]:
            e += 1
        field_ = binop(">>", var, b) if b else var
        if e + 1 < bits:
            field_ = binop("&", field_, (1 << (e - b + 1)) - 1)
        out = binop("+", out, binop("*", field_, w[b]))
        b = e + 1
    return out


class ParallelLowering:
    """Lowers one parallel nest (``loop`` its layout) in the symbolic mode (``l`` a loop variable) or the
    explicit mode (``l`` one constant at a time)."""

    def __init__(self, lw: Lowerer, p: Parallel, loop: Fragment) -> None:
        self.lw = lw
        self.p = p
        self.F = loop
        self.T = lw.T
        shape = tuple(p.extents)
        if not all(isinstance(e, int) for e in shape):
            raise TilecError("T.Parallel extents must be compile-time constants on the GPU targets", p.loc)
        if tuple(loop.shape) != shape or loop.num_threads != self.T:
            raise TilecError(f"loop layout of shape {loop.shape} for threads {loop.num_threads} does not fit the "
                             f"loop {shape} over {self.T} threads", p.loc)
        inv = loop.inverse()
        self.inv = inv
        self.nd = len(shape)
        self.L = loop.num_locals
        self.lvar = Var(lw.fresh("l"))
        self.table = inverse_table(loop)  # (T, L, nd [+ rep])

    def run(self) -> TStmt:
        try:
            body = self.lower_for(None)
            return Loop(self.lvar, const(self.L), body, unroll=True) if self.L > 1 else substitute(
                body, {self.lvar: const(0)})
        except _Unroll:
            return seq([self.lower_for(l) for l in range(self.L)])

    def lower_for(self, l: int | None) -> TStmt:
        self.l = l
        lv = self.lvar if l is None else const(l)
        env = {self.inv.symbols[0]: self.lw.tx, self.inv.symbols[1]: lv}
        self.idx = [to_ir(e, env) for e in self.inv.exprs]
        self.rep = self.idx[self.nd] if len(self.idx) > self.nd else None
        self.vals = {id(v): self.table[:, :, d] if l is None else self.table[:, l : l + 1, d]
                     for d, v in enumerate(self.p.vars)}
        self.lw.ranges[self.lvar] = (0, self.L - 1)
        self.lw.ranges[self.lw.tx] = (0, self.T - 1)
        return self.stmt(substitute(self.p.body, dict(zip(self.p.vars, self.idx[: self.nd]))))

    # ------------------------------------------------------------------------------------------ statements

    def stmt(self, s: Stmt) -> TStmt:
        saved = self.lw.loc
        self.lw.loc = s.loc or saved
        try:
            return self._stmt(s)
        finally:
            self.lw.loc = saved

    def _stmt(self, s: Stmt) -> TStmt:
        if isinstance(s, SeqStmt):
            return seq([self.stmt(c) for c in s.stmts])
        if isinstance(s, IfThenElse):
            other = self.stmt(s.else_body) if s.else_body is not None else None
            return If(self.expr(s.cond), self.stmt(s.then_body), other, loc=s.loc)
        if isinstance(s, For):
            self.lw.ranges[s.var] = (0, int(s.extent.value) - 1) if isinstance(s.extent, Const) else None
            return Loop(s.var, self.expr(s.extent), self.stmt(s.body), unroll=s.kind == "unroll",
                        unroll_factor=s.ann("unroll_factor", 0), loc=s.loc)
        if isinstance(s, Store):
            return self.store(s.buffer, list(s.indices), self.expr(s.value), s)
        if isinstance(s, AtomicRMW):
            return self.atomic(s)
        raise TilecError(f"{type(s).__name__} is not supported inside T.Parallel", s.loc)

    def store(self, buf: Buffer, idx: list[Expr], value: Expr, s: Stmt) -> TStmt:
        lw = self.lw
        mem = lw.mem_of(buf)
        idx = [self.expr(i) for i in idx]
        if buf.scope == "fragment":
            return Write(mem, self.register(buf, idx, write=True), value, loc=s.loc)
        if buf.scope in ("local", "var"):
            return Write(mem, lw.private_offset(buf, idx), value, loc=s.loc)
        pred = self.rep_zero()
        if buf.scope == "global":
            bound = lw.in_bounds(buf, idx)
            pred = bound if pred is None else (pred if bound is None else binop("and", pred, bound))
            off = lw.global_offset(buf, idx)
        else:
            off = lw.shared_offset(buf, idx)
        w = Write(mem, off, value, loc=s.loc)
        return w if pred is None else If(pred, w, loc=s.loc)

    def atomic(self, s: AtomicRMW) -> TStmt:
        lw = self.lw
        idx = [self.expr(i) for i in s.indices]
        mem = lw.mem_of(s.buffer)
        if s.buffer.scope not in ("global", "shared"):
            raise TilecError("T.atomic_add needs a global or shared destination", s.loc)
        pred = self.rep_zero()
        if s.buffer.scope == "global":
            b = lw.in_bounds(s.buffer, idx)
            pred = b if pred is None else (pred if b is None else binop("and", pred, b))
            off = lw.global_offset(s.buffer, idx)
        else:
            off = lw.shared_offset(s.buffer, idx)
        op = AtomicAddOp(mem, off, self.expr(s.value), loc=s.loc)
        return op if pred is None else If(pred, op, loc=s.loc)

    def rep_zero(self) -> Expr | None:
        return None if self.rep is None else binop("==", self.rep, 0)

    # ----------------------------------------------------------------------------------------- expressions

    def expr(self, e: Any) -> Expr:
        e = as_expr(e)
        return transform(e, lambda n: self.load(n) if isinstance(n, Load) else None)

    def load(self, ld: Load) -> Expr:
        lw = self.lw
        buf, idx = ld.buffer, list(ld.indices)
        mem = lw.mem_of(buf)
        if buf.scope == "fragment":
            return MemRef(mem, self.register(buf, idx))
        if buf.scope in ("local", "var"):
            return MemRef(mem, lw.private_offset(buf, idx))
        if buf.scope == "shared":
            return MemRef(mem, lw.shared_offset(buf, idx))
        pred = lw.in_bounds(buf, idx)
        off = lw.global_offset(buf, idx)
        if pred is None:
            return MemRef(mem, off)
        return select(pred, MemRef(mem, select(pred, off, 0)), cast(buf.dtype, 0))

    def register(self, buf: Buffer, idx: list[Expr], write: bool = False) -> Expr:
        """This thread's register holding ``buf[idx]`` in the current iteration. Where a thread holds an element in
        several registers, a write must be the loop's own register (the loop runs an iteration for each of them)."""
        frag = self.lw.fragment(buf)
        T = self.T
        cols = self.L if self.l is None else 1
        env: dict[Var, Any] = {self.lw.tx: np.arange(T)[:, None],
                               self.lvar: np.arange(cols)[None, :] if self.l is None else self.l}
        try:
            vals = [np.broadcast_to(np.asarray(eval_np(i, env), np.int64), (T, cols)) for i in idx]
        except NotTabulable as e:
            raise TilecError(f"the index of fragment {buf.name!r} depends on {e} (a run-time value); fragment "
                             "indices must follow the loop variables (unroll inner loops with T.unroll)",
                             self.lw.loc) from None
        shape = frag.shape
        for v, n in zip(vals, shape):
            if v.min() < 0 or v.max() >= n:
                raise TilecError(f"fragment {buf.name!r} indexed outside its shape {tuple(shape)}", self.lw.loc)
        threads = frag.eval_tables()[0]
        holders = threads[tuple(vals)]  # (T, cols, R)
        match = holders == np.arange(T)[:, None, None]
        self.lw.check_frag_owner(buf, bool(match.any(axis=-1).all()),
                                 f"an iteration of the loop at {where(self.p.loc)} runs on a thread not holding "
                                 f"{buf.name}[{', '.join(str(i) for i in idx)}]")
        own = np.arange(cols) if self.l is None else np.array([self.l])
        per_l = common_registers(frag, tuple(vals), own)
        if per_l is None:
            raise self._conflict(buf)
        if write and held_twice(frag) and not (per_l == own).all():
            from tilec.errors import LayoutConflictError

            raise LayoutConflictError(f"fragment {buf.name!r} holds each element in several registers of a thread "
                                      f"(laid out as a loop over a larger tile reads it), and the loop at "
                                      f"{where(self.p.loc)} would write only one of them: write it in a loop over "
                                      f"{buf.name!r} alone", self.lw.loc)
        if self.l is not None:
            return const(int(per_l[0]))
        fitted = fit_bitlinear(per_l, self.lvar)
        if fitted is None:
            raise _Unroll()
        return fitted

    def _conflict(self, buf: Buffer) -> Exception:
        from tilec.errors import LayoutConflictError

        return LayoutConflictError(f"fragment {buf.name!r} is held in different registers by different threads for "
                                   f"one iteration of the loop at {where(self.p.loc)}: its layout and the loop's "
                                   "are incompatible", self.lw.loc)


def lower_parallel(lw: Lowerer, p: Parallel, loop: Fragment | None = None) -> TStmt:
    loop = loop if loop is not None else lw.plan.loops[p]
    return ParallelLowering(lw, p, loop).run()
