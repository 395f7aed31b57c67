"""Layout conversion of a register tile through shared memory: when two ops need one tile in different
fragment layouts, the holders (replica 0) write it to a shared scratch tile, and after a barrier every
thread reads the elements its new layout gives it. Correct for any two layouts; it costs shared-memory
traffic and a barrier, so lowering reports it."""

from __future__ import annotations

import math

from tilec.dtypes import DType
from tilec.ir.expr import Expr, binop, cast, const
from tilec.layout import Fragment
from tilec.lower.context import Lowerer
from tilec.lower.symbolic import to_ir
from tilec.lower.tir import If, Mem, MemRef, Sync, TStmt, Write, seq


def _flat(lw: Lowerer, frag: Fragment, local: int) -> tuple[Expr, Expr | None]:
    inv = frag.inverse()
    env = {inv.symbols[0]: lw.tx, inv.symbols[1]: const(local)}
    exprs = [to_ir(e, env) for e in inv.exprs]
    flat: Expr = const(0)
    for c, n in zip(exprs[: frag.ndim], frag.shape):
        flat = binop("+", binop("*", flat, n), c)
    rep = exprs[frag.ndim] if len(exprs) > frag.ndim else None
    return flat, rep


def convert(lw: Lowerer, src: Mem, src_frag: Fragment, dst: Mem, dst_frag: Fragment, dtype: DType,
            what: str) -> TStmt:
    """Registers ``src`` (layout ``src_frag``) to registers ``dst`` (layout ``dst_frag``), cast to ``dtype``."""
    n = math.prod(src_frag.shape)
    scratch = lw.scratch_shared("convert", src.dtype, n)
    lw.notes.append(f"{what}: layout conversion through shared memory ({n} elements)")
    out: list[TStmt] = []
    for l in range(src_frag.num_locals):
        flat, rep = _flat(lw, src_frag, l)
        w: TStmt = Write(scratch, flat, MemRef(src, const(l)))
        out.append(w if rep is None else If(binop("==", rep, 0), w))
    out.append(Sync())
    for l in range(dst_frag.num_locals):
        flat, _ = _flat(lw, dst_frag, l)
        out.append(Write(dst, const(l), cast(dtype, MemRef(scratch, flat))))
    return seq(out)
