"""AMD MFMA as the thread interpreter emulates it, and the layouts lowering gives its operands, against register
layouts written here by hand from AMD's CDNA ISA description of ``v_mfma_f32_16x16x16f16`` (64 lanes, one block):

    A (M x K):  lane l, value v  ->  A[l % 16][4 * (l // 16) + v]
    B (K x N):  lane l, value v  ->  B[4 * (l // 16) + v][l % 16]
    D (M x N):  lane l, value v  ->  D[4 * (l // 16) + v][l % 16]
"""

from __future__ import annotations

import numpy as np
import pytest

from tilec import dtypes as dt
from tilec.errors import RaceError, TilecBoundsError
from tilec.interp.mfma import mfma_tables
from tilec.interp.thread import ThreadInterpreter
from tilec.ir.expr import Expr, Var, binop, const
from tilec.layout import (
    make_mfma_a_fragment,
    make_mfma_b_fragment,
    make_mfma_c_fragment,
    mfma_16x16x16_a,
    mfma_16x16x16_b,
    mfma_16x16x16_c,
)
from tilec.lower.tir import If, Mem, MemRef, Mfma, Seq, ThreadKernel, Write

TX = Var("tx")
LANE = binop("%", TX, 64)
WAVE = binop("//", TX, 64)
COL = binop("%", LANE, 16)  # a lane's row of A, column of B and D
BLOCK = binop("//", LANE, 16)  # its group of four along K (A, B) or M (D)


def a_elem(v: int) -> tuple[Expr, Expr]:
    return COL, binop("+", binop("*", BLOCK, 4), v)


def b_elem(v: int) -> tuple[Expr, Expr]:
    return binop("+", binop("*", BLOCK, 4), v), COL


d_elem = b_elem  # D's lane layout is B's


def kernel(body: list, threads: int, regs: tuple, warp_size: int = 64) -> ThreadKernel:
    return ThreadKernel("k", (), (), (const(1),), (Var("block_x"),), threads, TX, (), regs, Seq(tuple(body)), 0,
                        warp_size=warp_size)


def gmem(name: str, arr: np.ndarray) -> tuple[Mem, np.ndarray]:
    a = np.ascontiguousarray(arr).reshape(-1)
    return Mem(name, dt.dtype(a.dtype.name), "global", a.size), a


def element(mem: Mem, base: Expr, rc: tuple[Expr, Expr]) -> MemRef:
    return MemRef(mem, binop("+", base, binop("+", binop("*", rc[0], 16), rc[1])))


@pytest.mark.parametrize("ab", ["float16", "bfloat16"])
def test_mfma_16x16x16_against_numpy(rng, ab):
    waves = 2  # each wave multiplies its own matrices
    a = rng.standard_normal((waves, 16, 16)).astype(dt.dtype(ab).np)
    b = rng.standard_normal((waves, 16, 16)).astype(dt.dtype(ab).np)
    c = rng.standard_normal((waves, 16, 16)).astype(np.float32)
    (ga, av), (gb, bv), (gc, cv) = gmem("A", a), gmem("B", b), gmem("C", c)
    gd, d = gmem("D", np.full((waves, 16, 16), np.nan, np.float32))
    ra, rb, rc = Mem("ra", dt.dtype(ab), "reg", 4), Mem("rb", dt.dtype(ab), "reg", 4), Mem("rc", dt.float32, "reg", 4)
    base = binop("*", WAVE, 256)
    body = []
    for v in range(4):
        body += [Write(ra, const(v), element(ga, base, a_elem(v))), Write(rb, const(v), element(gb, base, b_elem(v))),
                 Write(rc, const(v), element(gc, base, d_elem(v)))]
    body.append(Mfma(ra, const(0), rb, const(0), rc, const(0)))
    for v in range(4):
        r, col = d_elem(v)
        body.append(Write(gd, binop("+", base, binop("+", binop("*", r, 16), col)), MemRef(rc, const(v))))
    ThreadInterpreter(kernel(body, 64 * waves, (ra, rb, rc))).run({ga: av, gb: bv, gc: cv, gd: d}, {})
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(d.reshape(waves, 16, 16), want, rtol=1e-5, atol=1e-5)


def test_mfma_register_offsets_select_the_atoms():
    ra, rb, rc = Mem("ra", dt.float16, "reg", 8), Mem("rb", dt.float16, "reg", 8), Mem("rc", dt.float32, "reg", 8)
    gd, d = gmem("D", np.zeros((64, 8), np.float32))
    body = [Write(ra, const(i), const(1.0 if i < 4 else 2.0, "float16")) for i in range(8)]
    body += [Write(rb, const(i), const(1.0 if i < 4 else 3.0, "float16")) for i in range(8)]
    body += [Write(rc, const(i), const(0.0)) for i in range(8)]
    body += [Mfma(ra, const(4), rb, const(4), rc, const(4)), Mfma(ra, const(0), rb, const(0), rc, const(0))]
    body += [Write(gd, binop("+", binop("*", TX, 8), i), MemRef(rc, const(i))) for i in range(8)]
    ThreadInterpreter(kernel(body, 64, (ra, rb, rc))).run({gd: d}, {})
    d = d.reshape(64, 8)
    np.testing.assert_array_equal(d[:, :4], 16.0)  # all-ones 16x16 @ 16x16: K = 16
    np.testing.assert_array_equal(d[:, 4:], 16 * 2.0 * 3.0)


def test_mfma_needs_a_whole_wavefront():
    ra, rb, rc = Mem("ra", dt.float16, "reg", 4), Mem("rb", dt.float16, "reg", 4), Mem("rc", dt.float32, "reg", 4)
    body = [If(binop("<", TX, 32), Mfma(ra, const(0), rb, const(0), rc, const(0)))]  # a whole NVIDIA warp: not enough
    with pytest.raises(RaceError, match="MFMA reached by only part of a warp \\(all 64 lanes"):
        ThreadInterpreter(kernel(body, 64, (ra, rb, rc))).run({}, {})


def test_mfma_on_a_32_lane_kernel_and_outside_its_registers_are_errors():
    ra, rb, rc = Mem("ra", dt.float16, "reg", 4), Mem("rb", dt.float16, "reg", 4), Mem("rc", dt.float32, "reg", 4)
    with pytest.raises(TilecBoundsError, match="64-lane wavefronts"):
        ThreadInterpreter(kernel([Mfma(ra, const(0), rb, const(0), rc, const(0))], 64, (ra, rb, rc), 32)).run({}, {})
    with pytest.raises(TilecBoundsError, match="outside its 4 registers"):
        ThreadInterpreter(kernel([Mfma(ra, const(2), rb, const(0), rc, const(0))], 64, (ra, rb, rc))).run({}, {})


# ------------------------------------------------------------------------------------- layouts given to lowering


def by_hand(elem) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """(lane, value) of each element of a 16x16 matrix, from a by-hand lane formula ``elem(lane, v) -> (r, c)``."""
    lane, value = np.full((16, 16), -1), np.full((16, 16), -1)
    for ln in range(64):
        for v in range(4):
            r, c = elem(ln, v)
            assert lane[r, c] == -1, "the by-hand layout is not a bijection"
            lane[r, c], value[r, c] = ln, v
    return lane, value


A_HAND = by_hand(lambda ln, v: (ln % 16, 4 * (ln // 16) + v))
B_HAND = by_hand(lambda ln, v: (4 * (ln // 16) + v, ln % 16))
D_HAND = B_HAND


def tables(frag) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    t, loc = frag.eval_tables()
    return t[..., 0], loc[..., 0]


def test_interpreter_tables_are_the_isa_layouts():
    a_lane, a_item, b_lane, b_item, d_lane, d_item = mfma_tables()
    for got, want in (((a_lane, a_item), A_HAND), ((b_lane, b_item), B_HAND), ((d_lane, d_item), D_HAND)):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize(("frag", "hand"), [(mfma_16x16x16_a, A_HAND), (mfma_16x16x16_b, B_HAND),
                                            (mfma_16x16x16_c, D_HAND)], ids=["A", "B", "C"])
def test_named_atoms_are_the_isa_layouts(frag, hand):
    t, loc = tables(frag())
    np.testing.assert_array_equal(t, hand[0])
    np.testing.assert_array_equal(loc, hand[1])


def test_swapped_accumulator_is_the_transposed_product():
    """Lowering gives MFMA B's registers as its A operand and A's as its B: the result is D^T = B^T A^T, so lane l
    holds C[l % 16][4 (l // 16) + v] (the A layout)."""
    t, loc = tables(make_mfma_c_fragment(16, 16, 1, 1, swapped=True))
    np.testing.assert_array_equal(t, A_HAND[0])
    np.testing.assert_array_equal(loc, A_HAND[1])
    t, loc = tables(make_mfma_c_fragment(16, 16, 1, 1))
    np.testing.assert_array_equal(t, D_HAND[0])


def test_block_fragments_place_atoms_and_replicas_on_waves():
    """64 x 32 tile on a 2 x 2 grid of waves: wave (wm, wn) is threads 64 (2 wm + wn) + lane."""
    c = make_mfma_c_fragment(64, 32, 2, 2, swapped=True)  # wave tile 32 x 16: atoms (mi, 0), locals 4 mi + v
    t, loc = c.eval_tables()
    for i, j in ((0, 0), (17, 3), (40, 20), (63, 31)):
        wm, wn, mi = i // 32, j // 16, (i % 32) // 16
        ln = (i % 16) + 16 * ((j % 16) // 4)
        assert (t[i, j, 0], loc[i, j, 0]) == (64 * (2 * wm + wn) + ln, 4 * mi + j % 4)
    a = make_mfma_a_fragment(64, 32, 2, 2)  # rows of wave row wm, all of K, on both waves of the row
    t, loc = a.eval_tables()
    assert a.replicate == 2 and sorted(t[40, 20]) == [64 * 2 + (40 % 16) + 16 * 1, 64 * 3 + (40 % 16) + 16 * 1]
    assert loc[40, 20, 0] == (0 * 2 + 1) * 4 + 0  # atom (mi = 0, ki = 1), value 0
    b = make_mfma_b_fragment(32, 32, 2, 2)  # columns of wave column wn, replicated over the wave rows
    t, loc = b.eval_tables()
    assert b.replicate == 2 and sorted(t[21, 17]) == [64 * 1 + 1 + 16 * 1, 64 * 3 + 1 + 16 * 1]
    assert loc[21, 17, 0] == (1 * 1 + 0) * 4 + 1  # atom (ki = 1, ni = 0), value 21 % 4
