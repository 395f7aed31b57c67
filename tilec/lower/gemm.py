"""Lowering of ``T.gemm``: one rule per instruction in :data:`GEMM_INSTRS` (``mfma`` registers from
:mod:`tilec.lower.mfma`).

``mma``: each warp of the ``warp_m x warp_n`` grid computes its ``tile_m x tile_n`` part of C with
``mma.sync.m16n8k16`` (fp16/bf16) or ``mma.sync.m16n8k32`` (fp8, sm_89+); per k-step, operands come from shared
memory through ``ldmatrix`` (``.trans`` where a 16-bit tile is stored the other way round) or straight from a
register fragment. An fp8 atom is the 16-bit one with every 16-bit element two fp8 values adjacent along K, so
both use the same ldmatrix addressing in 16-byte rows; fp8 operands must be K-major (A stored M x K, B stored
N x K), since ldmatrix transposes only 16-bit elements. ``mma_tf32`` (``T.gemm(..., allow_tf32=True)`` on float32
operands): the same warp grid and accumulator layout with ``mma.sync.m16n8k8`` on TF32 operands, each thread loading
its 4 A and 2 B elements of an atom from shared memory by 32- or 64-bit loads (ldmatrix moves 16-bit elements) and
rounding them with ``cvt.rna.tf32.f32``; any stored orientation. ``simt``: every thread accumulates its elements of C
with scalar multiply-adds (the fallback for other dtypes, reported).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tilec import dtypes as dt
from tilec.errors import TilecError
from tilec.ir.buffer import Region
from tilec.ir.expr import Expr, Load, Var, binop, cast, const, const_value
from tilec.ir.stmt import Gemm, Parallel, Store
from tilec.layout import Fragment
from tilec.lower.context import Lowerer, lower_rule
from tilec.lower.layouts import inverse_table
from tilec.lower.parallel import lower_parallel
from tilec.lower.symbolic import NotTabulable, eval_np, to_ir
from tilec.lower.tir import Decl, LdMatrix, Loop, Mem, MemRef, Mma, TCall, TStmt, Write, seq

GEMM_INSTRS: dict[str, Callable[[Lowerer, Gemm, int, int], TStmt]] = {}
# ldmatrix instructions of a whole gemm (k-steps x loads per step) up to which its k-loop is unrolled: beyond, the
# unrolled loads' distinct swizzled addresses stay live across the enclosing loop and spill (MLA decode: 96 and 68)
UNROLLED_LOADS = 48
# operand registers of a whole TF32 gemm's k-steps (4 a 16-row atom, 2 an 8-column one) up to which its k-loop is
# unrolled: past that ptxas hoists the unrolled steps' loads and spills accumulators
TF32_UNROLLED_REGS = 64
# 32-bit operand values the scalar FMA gemm's unrolled k-steps may load at once (see simt_k_unroll)
SIMT_OPERAND_REGS = 64
# (placements of an operand tile x threads x k-steps x elements a thread) up to which _operand_bases enumerates
SIMT_ENUMERATED = 1 << 24
# accumulator elements a thread up to which _simt_step writes a k-step element by element: past the registers a
# thread has, the accumulator is in local memory anyway and the k-step stays a loop (one statement, not thousands)
SIMT_STEP_ELEMENTS = 256


def gemm_instr(name: str) -> Callable:
    """Register the lowering of ``T.gemm`` with instruction ``name``: ``fn(lowerer, gemm, warp_m, warp_n)``."""

    def deco(fn: Callable) -> Callable:
        GEMM_INSTRS[name] = fn
        return fn

    return deco


@lower_rule(Gemm)
def lower_gemm(lw: Lowerer, g: Gemm) -> TStmt:
    plan = lw.plan.gemms[g]
    rule = GEMM_INSTRS.get(plan.instr)
    if rule is not None:
        return rule(lw, g, plan.warp_m, plan.warp_n)
    return _simt(lw, g, plan.why)  # layout inference's note names the scalar FMA path and why


class Warp:
    """This thread's lane, and its warp's place ``(wm, wn)`` in the warp grid (``target.warp_size`` lanes)."""

    def __init__(self, lw: Lowerer, warp_n: int) -> None:
        tx, ws = lw.tx, lw.target.warp_size
        self.lane = binop("%", tx, ws)
        warp = binop("//", tx, ws)
        self.wm = binop("//", warp, warp_n)
        self.wn = binop("%", warp, warp_n)


def _accumulator_and_k(lw: Lowerer, g: Gemm, ks: int) -> tuple[Mem, list[TStmt], Var]:
    """A tensor-core gemm's accumulator registers, the statements zeroing them (``clear_accum``), and the variable
    of its ``ks`` k-steps."""
    c = lw.mem_of(g.C.buffer)
    parts: list[TStmt] = []
    if g.clear_accum:
        parts += [Write(c, const(i), const(0.0)) for i in range(c.size)]  # type: ignore[arg-type]
    kk = Var(lw.fresh("kk"))
    lw.ranges[kk] = (0, ks - 1)
    return c, parts, kk


@gemm_instr("mma")
def _mma(lw: Lowerer, g: Gemm, warp_m: int, warp_n: int) -> TStmt:
    m, n, k = (int(x) for x in g.mnk)
    tm, tn = m // warp_m, n // warp_n
    e = 16 // g.A.dtype.bits  # elements per 16-bit slot: 1 (fp16, bf16) or 2 (fp8)
    am, an, ks = tm // 16, tn // 8, k // (16 * e)
    w = Warp(lw, warp_n)
    c, parts, kk = _accumulator_and_k(lw, g, ks)
    step: list[TStmt] = []
    a_regs, a_base = _operand_a(lw, g, w, am, kk, k, step)
    b_regs, b_base = _operand_b(lw, g, w, an, kk, tn, step)
    for mi in range(am):
        for ni in range(an):
            a_off = binop("+", a_base, mi * ((k // 16) * 8 if g.A.buffer.scope == "fragment" else 8 * e))
            b_off = binop("+", b_base, ni * 4 * e)
            step.append(Mma(a_regs, a_off, b_regs, b_off, c, const((mi * an + ni) * 4)))
    body = seq(step)
    loads = sum(isinstance(x, LdMatrix) for x in step)
    fragment = "fragment" in (g.A.buffer.scope, g.B.buffer.scope)  # register operands need constant offsets
    unroll = fragment or ks * loads <= UNROLLED_LOADS
    parts.append(Loop(kk, const(ks), body, unroll=unroll) if ks > 1 else at(body, kk))
    return seq(parts)


@gemm_instr("mma_tf32")
def _mma_tf32(lw: Lowerer, g: Gemm, warp_m: int, warp_n: int) -> TStmt:
    """``mma.sync.m16n8k8`` TF32 atoms, 8-deep k-steps. PTX register order, with ``g = lane / 4``, ``t = lane % 4``:
    A (16 x 8) a0..a3 at (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B (8 x 8) b0, b1 at (k, n) = (t, g),
    (t + 4, g); C as m16n8k16's. The instruction's k ``t`` and ``t + 4`` read the tile's k ``2t`` and ``2t + 1``
    (the same permutation for A and B: the same products): an operand stored with K innermost then reads its two
    values of a row as one 64-bit load (:func:`_tf32_pair`), and one stored with K as its rows reads four k rows a
    load that the swizzle puts in distinct banks (with ``t`` and ``t + 4``, two of them share banks)."""
    m, n, k = (int(x) for x in g.mnk)
    tm, tn = m // warp_m, n // warp_n
    am, an, ks = tm // 16, tn // 8, k // 8
    w = Warp(lw, warp_n)
    grp, tig = binop("//", w.lane, 4), binop("%", w.lane, 4)
    c, parts, kk = _accumulator_and_k(lw, g, ks)
    k0 = binop("*", kk, 8)
    a_regs, b_regs = lw.scratch_reg("a_frag", dt.float32, am * 4), lw.scratch_reg("b_frag", dt.float32, an * 2)
    kt = binop("+", k0, binop("*", tig, 2))  # the tile's k of the instruction's k t (t + 4: kt + 1)
    # a 64-bit load's two values, where an operand stores K innermost (A M x K, B N x K)
    pair = lw.scratch_reg("tf32_pair", dt.float32, 2) if not g.transpose_A or g.transpose_B else None
    step: list[TStmt] = []
    for mi in range(am):
        m0 = binop("+", binop("*", w.wm, tm), mi * 16)
        for r, dm in enumerate((0, 8)):  # registers r (k t) and r + 2 (k t + 4) of row g + dm
            row = binop("+", m0, binop("+", grp, dm))
            step.append(_tf32_pair(lw, g.A, row, kt, not g.transpose_A, a_regs, (mi * 4 + r, mi * 4 + r + 2), pair))
    for ni in range(an):
        col = binop("+", binop("+", binop("*", w.wn, tn), ni * 8), grp)
        step.append(_tf32_pair(lw, g.B, col, kt, g.transpose_B, b_regs, (ni * 2, ni * 2 + 1), pair))
    for mi in range(am):
        for ni in range(an):
            step.append(Mma(a_regs, const(mi * 4), b_regs, const(ni * 2), c, const((mi * an + ni) * 4)))
    body = seq(step)
    unroll = ks * (am * 4 + an * 2) <= TF32_UNROLLED_REGS
    parts.append(Loop(kk, const(ks), body, unroll=unroll) if ks > 1 else at(body, kk))
    return seq(parts)


def _tf32_pair(lw: Lowerer, r: Region, other: Expr, kt: Expr, k_inner: bool, regs: Mem, offs: tuple[int, int],
               pair: Mem | None) -> TStmt:
    """``regs[offs[0]]``, ``regs[offs[1]]`` = the elements of shared operand ``r`` at k ``kt`` and ``kt + 1`` (and
    ``other``: the row of A or column of B), rounded to TF32. ``k_inner``: the tile stores K innermost; the two
    values are then one 64-bit load into ``pair`` where the layout keeps every even k's element 8-byte aligned beside
    the next."""
    at = [(other, kt), (other, binop("+", kt, 1))] if k_inner else [(kt, other), (binop("+", kt, 1), other)]
    mem = lw.mem_of(r.buffer)
    refs = [MemRef(mem, lw.shared_offset(r.buffer, r.index_at(list(c)))) for c in at]
    if k_inner and pair is not None and _pairs_aligned(lw, r):
        return seq([Write(pair, const(0), MemRef(mem, refs[0].offset, lanes=2), lanes=2),
                    *(Write(regs, const(o), TCall("cvt_tf32", (MemRef(pair, const(i)),), dt.float32))
                      for i, o in enumerate(offs))])
    return seq([Write(regs, const(o), TCall("cvt_tf32", (ref,), dt.float32)) for o, ref in zip(offs, refs)])


def _pairs_aligned(lw: Lowerer, r: Region) -> bool:
    """Whether shared operand ``r``'s layout puts each element at an even innermost index at an even offset with
    the next element beside it, and the region starts at an even innermost index."""
    start = const_value(r.starts[-1])
    table = lw.shared_layout(r.buffer).eval_table()
    even, odd = table[..., 0::2], table[..., 1::2]
    return start is not None and start % 2 == 0 and table.shape[-1] % 2 == 0 and bool(
        np.all(even % 2 == 0) and np.all(odd == even + 1))


def at(stmt: TStmt, v: Var) -> TStmt:
    """``stmt`` with ``v`` replaced by 0 (a loop of one trip)."""
    from tilec.ir.visit import substitute

    return substitute(stmt, {v: const(0)})


def _operand_a(lw: Lowerer, g: Gemm, w: Warp, am: int, kk: Var, k: int, out: list[TStmt]) -> tuple[Mem, Expr]:
    """Registers holding A's atoms for this k-step (loading them from shared memory into ``out``)."""
    if g.A.buffer.scope == "fragment":
        return lw.mem_of(g.A.buffer), binop("*", kk, 8)
    e = 16 // g.A.dtype.bits
    regs = lw.scratch_reg("a_frag", g.A.dtype, am * 8 * e)
    lane, tm = w.lane, am * 16
    for mi in range(am):
        m0 = binop("+", binop("*", w.wm, tm), mi * 16)
        if not g.transpose_A:  # A stored M x K: matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15), a0..a7 order
            row = binop("+", m0, binop("+", binop("%", lane, 8), binop("*", binop("%", binop("//", lane, 8), 2), 8)))
            col = binop("+", binop("*", kk, 16 * e), binop("*", binop("//", lane, 16), 8 * e))
            _ldmatrix(lw, g.A, [row, col], 4, False, regs, mi * 8 * e, out)
        else:  # A stored K x M: .trans
            krow = binop("+", binop("*", kk, 16), binop("+", binop("%", lane, 8), binop("*", binop("//", lane, 16), 8)))
            mcol = binop("+", m0, binop("*", binop("%", binop("//", lane, 8), 2), 8))
            _ldmatrix(lw, g.A, [krow, mcol], 4, True, regs, mi * 8, out)
    return regs, const(0)


def _operand_b(lw: Lowerer, g: Gemm, w: Warp, an: int, kk: Var, tn: int, out: list[TStmt]) -> tuple[Mem, Expr]:
    if g.B.buffer.scope == "fragment":
        return lw.mem_of(g.B.buffer), binop("*", kk, an * 4)
    e = 16 // g.B.dtype.bits
    regs = lw.scratch_reg("b_frag", g.B.dtype, an * 4 * e)
    lane = w.lane
    for ni in range(0, an, 2):
        num = 4 if ni + 1 < an else 2
        n0 = binop("+", binop("*", w.wn, tn), ni * 8)
        if not g.transpose_B:  # B stored K x N: .trans; matrices (k 0-7, k 8-15) per n-atom
            krow = binop("+", binop("*", kk, 16), binop("+", binop("%", lane, 8),
                                                         binop("*", binop("%", binop("//", lane, 8), 2), 8)))
            ncol = binop("+", n0, binop("*", binop("//", lane, 16), 8))
            _ldmatrix(lw, g.B, [krow, ncol], num, True, regs, ni * 4, out)
        else:  # B stored N x K (e.g. K^T in attention)
            nrow = binop("+", n0, binop("+", binop("%", lane, 8), binop("*", binop("//", lane, 16), 8)))
            kcol = binop("+", binop("*", kk, 16 * e), binop("*", binop("%", binop("//", lane, 8), 2), 8 * e))
            _ldmatrix(lw, g.B, [nrow, kcol], num, False, regs, ni * 4 * e, out)
    return regs, const(0)


def _ldmatrix(lw: Lowerer, r: Region, local: list[Expr], num: int, trans: bool, regs: Mem, off: int,
              out: list[TStmt]) -> None:
    """``ldmatrix`` of the 16-byte rows at ``local`` (tile coordinates of the region) into ``regs[off:]``."""
    buf = r.buffer
    if r.dtype.bits not in (8, 16) or (trans and r.dtype.bits != 16) or not _rows_contiguous(lw, r):
        raise TilecError(f"T.gemm operand {buf.name!r}: its shared layout does not keep 16-byte rows contiguous "
                         "and aligned, which ldmatrix needs", lw.loc)
    out.append(LdMatrix(num, trans, regs, const(off), lw.mem_of(buf), lw.shared_offset(buf, r.index_at(local))))


def _rows_contiguous(lw: Lowerer, r: Region) -> bool:
    table = lw.shared_layout(r.buffer).eval_table()
    rows = table.reshape(-1, table.shape[-1] if table.ndim > 1 else table.shape[0])
    per = 128 // r.dtype.bits  # elements of a 16-byte ldmatrix row
    if rows.shape[-1] % per:
        return False
    b = rows.reshape(rows.shape[0], -1, per)
    return bool(np.all(b[:, :, 1:] - b[:, :, :-1] == 1) and np.all(b[:, :, 0] % per == 0))


def _simt(lw: Lowerer, g: Gemm, why: str = "") -> TStmt:
    """C[i, j] += sum_k A[i, k] * B[k, j] by the threads holding C[i, j], accumulating in C's dtype: a loop over k
    around this thread's elements (each k-step loads the A values of its rows and the B values of its columns once,
    for all its elements), unrolled by :func:`simt_k_unroll` trips."""
    if g.A.buffer.scope == "fragment" or g.B.buffer.scope == "fragment":
        because = why.removeprefix("(fallback: ").removesuffix(")")
        raise TilecError("T.gemm with a register (fragment) operand needs tensor cores, which this gemm cannot use"
                         + (f" ({because})" if because else "") + "; copy the operand to shared memory", g.loc)
    if not g.C.is_full():
        raise TilecError("T.gemm: C must be a whole fragment", g.loc)
    m, n, k = (int(x) for x in g.mnk)
    i, j, kv = Var("i"), Var("j"), Var(lw.fresh("k"))
    acc, layout = g.C.dtype, lw.fragment(g.C.buffer)
    a_idx = g.A.index_at([kv, i] if g.transpose_A else [i, kv])
    b_idx = g.B.index_at([j, kv] if g.transpose_B else [kv, j])
    c_idx = g.C.index_at([i, j])
    prod = binop("*", cast(acc, Load(g.A.buffer, tuple(a_idx))), cast(acc, Load(g.B.buffer, tuple(b_idx))))
    update = Store(g.C.buffer, tuple(c_idx), binop("+", Load(g.C.buffer, tuple(c_idx)), prod))
    parts: list[TStmt] = []
    if g.clear_accum:
        parts.append(lower_parallel(lw, Parallel((i, j), (m, n), Store(g.C.buffer, tuple(c_idx), cast(acc, 0)),
                                                 loc=g.loc), layout))
    lw.ranges[kv] = (0, k - 1)
    step = (_simt_step(lw, g, kv, k, layout) if layout.num_locals <= SIMT_STEP_ELEMENTS else None) or \
        lower_parallel(lw, Parallel((i, j), (m, n), update, loc=g.loc), layout)
    factor = simt_k_unroll(layout, k)
    parts.append(Loop(kv, const(k), step, unroll=True, unroll_factor=0 if factor >= k else factor)
                 if k > 1 else at(step, kv))
    return seq(parts)


def simt_operands(layout: Fragment) -> int:
    """Operand values a thread loads per k-step of a scalar gemm whose C has ``layout``: one A value per row and one
    B value per column of the C elements it holds (the most over the threads)."""
    table = inverse_table(layout)
    rows, cols = (np.sort(table[:, :, d], axis=1) for d in (0, 1))
    distinct = [1 + (np.diff(x, axis=1) != 0).sum(axis=1) for x in (rows, cols)]
    return int((distinct[0] + distinct[1]).max())


def simt_k_unroll(layout: Fragment, k: int) -> int:
    """The k-steps of a scalar gemm unrolled together: the most (a power of two, or all ``k``) whose operand values
    fit :data:`SIMT_OPERAND_REGS`. The compiler hoists the loads of the unrolled steps; unrolled over a whole 64-deep
    k, a 64 x 64 float32 attention tile at 128 threads kept 256 values of B live and spilled 1.7 KB (nvcc 13.0)."""
    per_step = simt_operands(layout)
    if k * per_step <= SIMT_OPERAND_REGS:
        return k
    return 1 << max(0, (SIMT_OPERAND_REGS // per_step).bit_length() - 1)


def _simt_step(lw: Lowerer, g: Gemm, kv: Var, k: int, layout: Fragment) -> TStmt | None:
    """One k-step of a scalar gemm, element by element, each operand's shared-memory offsets written as one of a few
    bases (a ``const int`` each) plus a compile-time constant (None where :func:`_operand_bases` finds no such
    split). Written as an unrolled loop, the offset of each of the thread's rows (columns) is an expression the CUDA
    compiler hoists out of the k loop, one register each where the rows are not an arithmetic progression of the
    thread id (a 128 x 224 tile at 128 threads: 56 rows; a swizzled one: 60), spilling accumulators."""
    inv, lvar, acc = layout.inverse(), Var(lw.fresh("l")), g.C.dtype

    def operands(slot: Expr) -> tuple[list[Expr], list[Expr]]:  # the tile coordinates of A and B for element slot
        i, j = (to_ir(e, {inv.symbols[0]: lw.tx, inv.symbols[1]: slot}) for e in inv.exprs[:2])
        return [kv, i] if g.transpose_A else [i, kv], [j, kv] if g.transpose_B else [kv, j]

    splits = [_operand_bases(lw, r, local, kv, k, lvar, layout.num_locals) for r, local in
              zip((g.A, g.B), operands(lvar))]
    if None in splits:
        return None
    out: list[TStmt] = []
    refs: list[list[Expr]] = []
    for x, (r, (classes, deltas)) in enumerate(zip((g.A, g.B), splits)):  # type: ignore[misc]
        mem, bases = lw.mem_of(r.buffer), {}
        for first in sorted(set(classes.values())):
            var = Var(lw.fresh(f"{r.buffer.name}_at"))
            out.append(Decl(var, lw.shared_offset(r.buffer, r.index_at(operands(const(first))[x]))))
            bases[first] = var
        refs.append([MemRef(mem, binop("+", bases[classes[l]], deltas[l])) for l in range(layout.num_locals)])
    c = lw.mem_of(g.C.buffer)
    for l, (a, b) in enumerate(zip(*refs)):
        out.append(Write(c, const(l), binop("+", MemRef(c, const(l)), binop("*", cast(acc, a), cast(acc, b))),
                         loc=g.loc))
    return seq(out)


def _operand_bases(lw: Lowerer, r: Region, local: list[Expr], kv: Var, k: int, lvar: Var,
                   n: int) -> tuple[dict[int, int], list[int]] | None:
    """Group a thread's elements ``l`` (``local``: the operand's tile coordinates for element ``lvar`` at k-step
    ``kv``) so that within a group the shared offsets differ by constants: ({element: first element of its group},
    [offset of each element from its group's first]). Checked by enumeration over the threads, k-steps, elements and
    every in-bounds start of the region where its start is not a constant (a pipeline stage); None where that is
    too many values or the offsets depend on anything else."""
    buf, placements, idx, rels = r.buffer, [{}], [], iter(local)
    for d, (s, e) in enumerate(zip(r.starts, r.extents)):
        rel = next(rels) if not (isinstance(e, int) and e == 1) else const(0)
        if const_value(s) is not None:
            idx.append(binop("+", s, rel))
            continue
        top = buf.shape[d] - e if isinstance(buf.shape[d], int) and isinstance(e, int) else -1
        if top < 0:
            return None
        sv = Var(f"start{d}")
        placements = [{**p, sv: x} for p in placements for x in range(top + 1)]
        idx.append(binop("+", sv, rel))
    if len(placements) * lw.T * k * n > SIMT_ENUMERATED:
        return None
    off = lw.shared_offset(buf, idx)
    env = {lw.tx: np.arange(lw.T)[:, None, None], kv: np.arange(k)[None, :, None], lvar: np.arange(n)[None, None, :]}
    try:
        vals = np.stack([np.broadcast_to(eval_np(off, {**env, **p}), (lw.T, k, n)) for p in placements])
    except NotTabulable:
        return None
    vals = vals.reshape(-1, n).astype(np.int64)
    shape_of = (vals - vals[:1]).T  # each element's offsets relative to its own at the first point
    first: dict[bytes, int] = {}
    classes = {l: first.setdefault(np.ascontiguousarray(shape_of[l]).tobytes(), l) for l in range(n)}
    return classes, [int(vals[0, l] - vals[0, classes[l]]) for l in range(n)]
