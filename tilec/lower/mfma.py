"""Lowering of ``T.gemm`` to AMD MFMA (``v_mfma_f32_16x16x16f16`` / ``v_mfma_f32_16x16x16bf16_1k``) over 64-lane
wavefronts, and the emission of the :class:`~tilec.lower.tir.Mfma` node.

Each wave of the ``warp_m x warp_n`` grid computes its ``tile_m x tile_n`` part of C in 16x16 atoms. Per k-step of
16, every atom's operands are in registers in the MFMA operand layouts: lane ``l`` holds
``A[m0 + l % 16, k0 + 4 (l // 16) + v]`` and ``B[k0 + 4 (l // 16) + v, n0 + l % 16]`` for ``v < 4``. The instruction
gets them swapped, B's registers as its A operand and A's as its B operand: it then computes ``C^T += B^T A^T`` (B's
registers are exactly B^T in the A layout, and A's exactly A^T in the B layout), so lane ``l`` accumulates
``C[m0 + l % 16, n0 + 4 (l // 16) + v]`` (:func:`~tilec.layout.make_mfma_c_fragment` with ``swapped=True``): four
consecutive columns per lane, which stores as one vector, and the A operand layout, so a result such as flash
attention's P feeds the next MFMA from registers with no conversion.

From shared memory a lane's four values are one 8-byte vector load where they are contiguous and aligned in the
shared layout (A stored M x K, B stored N x K), else four element loads (CDNA has no transposing LDS load like
``ldmatrix.trans``); a register fragment operand is used in place (:func:`~tilec.layout.make_mfma_a_fragment`,
:func:`~tilec.layout.make_mfma_b_fragment`).
"""

from __future__ import annotations

from collections.abc import Callable

from tilec import dtypes as dt
from tilec.backends.cemit import CEmitter, emit_rule
from tilec.ir.buffer import Region
from tilec.ir.expr import Expr, Var, binop, const
from tilec.ir.stmt import Gemm
from tilec.lower.context import Lowerer
from tilec.lower.gemm import Warp, at, gemm_instr
from tilec.lower.tir import Loop, Mem, MemRef, Mfma, TStmt, Write, seq

ATOM = 16  # M = N = K of one MFMA
VALUES = 4  # operand values per lane


@gemm_instr("mfma")
def lower_mfma(lw: Lowerer, g: Gemm, warp_m: int, warp_n: int) -> TStmt:
    m, n, k = (int(x) for x in g.mnk)
    tm, tn = m // warp_m, n // warp_n
    am, an, ks = tm // ATOM, tn // ATOM, k // ATOM
    w = Warp(lw, warp_n)
    c = lw.mem_of(g.C.buffer)
    parts: list[TStmt] = []
    if g.clear_accum:
        parts += [Write(c, const(i), const(0.0)) for i in range(int(c.size))]
    kk = Var(lw.fresh("kk"))
    lw.ranges[kk] = (0, ks - 1)
    step: list[TStmt] = []
    a_regs, a_off = _operand(lw, g, w, True, am, kk, ks, tm, step)
    b_regs, b_off = _operand(lw, g, w, False, an, kk, ks, tn, step)
    for mi in range(am):
        for ni in range(an):  # operands swapped: C^T += B^T A^T leaves C in the A operand layout (see the docstring)
            step.append(Mfma(b_regs, b_off(ni), a_regs, a_off(mi), c, const((mi * an + ni) * VALUES)))
    body = seq(step)
    parts.append(Loop(kk, const(ks), body, unroll=True) if ks > 1 else at(body, kk))
    return seq(parts)


def _operand(lw: Lowerer, g: Gemm, w: Warp, is_a: bool, atoms: int, kk: Var, ks: int, tile: int,
             out: list[TStmt]) -> tuple[Mem, Callable[[int], Expr]]:
    """Registers holding this k-step's A (or B) atoms, and the register offset of atom ``i`` in them; loads from
    shared memory go to ``out``."""
    r = g.A if is_a else g.B
    if r.buffer.scope == "fragment":
        regs = lw.mem_of(r.buffer)
        if is_a:  # locals (mi * ks + ki) * 4 + v
            return regs, lambda i: binop("+", const(i * ks * VALUES), binop("*", kk, VALUES))
        return regs, lambda i: binop("+", binop("*", kk, atoms * VALUES), const(i * VALUES))  # (ki * an + ni) * 4
    regs = lw.scratch_reg("a_frag" if is_a else "b_frag", r.dtype, atoms * VALUES)
    trans = g.transpose_A if is_a else g.transpose_B
    along_k_last = trans != is_a  # A stored M x K or B stored N x K: a lane's four values are contiguous
    vector = along_k_last and _vector_ok(lw, r)
    lane = w.lane
    base = binop("*", w.wm if is_a else w.wn, tile)
    for i in range(atoms):
        mn = binop("+", binop("+", base, i * ATOM), binop("%", lane, ATOM))
        k0 = binop("+", binop("*", kk, ATOM), binop("*", binop("//", lane, ATOM), VALUES))
        for v in range(1 if vector else VALUES):
            kv = binop("+", k0, v) if v else k0
            local = [mn, kv] if along_k_last else [kv, mn]
            off = lw.shared_offset(r.buffer, r.index_at(local))
            smem = lw.mem_of(r.buffer)
            if vector:
                out.append(Write(regs, const(i * VALUES), MemRef(smem, off, VALUES), lanes=VALUES))
            else:
                out.append(Write(regs, const(i * VALUES + v), MemRef(smem, off)))
    return regs, lambda i: const(i * VALUES)


def _vector_ok(lw: Lowerer, r: Region) -> bool:
    from tilec.lower.ops import _contiguous

    return _contiguous(lw, r, VALUES)


@emit_rule(Mfma)
def emit_mfma(em: CEmitter, s: Mfma, d: int) -> None:
    """``tl::mfma_16x16x16_{f16,bf16}(c, a, b)``: the device header's wrapper of the MFMA builtin."""
    fn = "tl::mfma_16x16x16_bf16" if s.a.dtype is dt.bfloat16 else "tl::mfma_16x16x16_f16"
    n = em.names
    em.emit(d, f"{fn}({n(s.c)} + {em.e(s.c_off)}, {n(s.a)} + {em.e(s.a_off)}, {n(s.b)} + {em.e(s.b_off)});")
