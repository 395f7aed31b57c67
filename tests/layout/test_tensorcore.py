"""Tensor-core register layouts against formulas transcribed from the PTX ISA and AMD docs.

The expected tables are written directly from the documented row/column formulas (per lane and
register), independently of how the constructors build the fragments.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tilec.layout import (
    Fragment,
    ldmatrix,
    mfma_16x16x16_a,
    mfma_16x16x16_b,
    mfma_16x16x16_c,
    mma_m16n8k16_a,
    mma_m16n8k16_b,
    mma_m16n8k16_c,
    wgmma_m64nNk16_c,
)

Where = Callable[[int, int], tuple[int, ...]]  # (thread, register) -> element index


def ptx_a(lane: int, i: int) -> tuple[int, int]:
    """PTX ISA, mma.m16n8k16 .f16/.bf16 A fragment: element a_i of lane -> (row, col)."""
    group, tig = lane >> 2, lane % 4
    row = group if (i < 2 or 4 <= i < 6) else group + 8
    col = tig * 2 + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def ptx_b(lane: int, i: int) -> tuple[int, int]:
    """PTX ISA, mma.m16n8k16 .f16/.bf16 B fragment: b_i -> (row k, col n)."""
    group, tig = lane >> 2, lane % 4
    row = tig * 2 + (i & 1) + (8 if i >= 2 else 0)
    return row, group


def ptx_c(lane: int, i: int) -> tuple[int, int]:
    """PTX ISA, mma.m16n8k16 .f32 C/D fragment: c_i -> (row, col)."""
    group, tig = lane >> 2, lane % 4
    row = group if i < 2 else group + 8
    return row, tig * 2 + (i & 1)


def ptx_wgmma_d(tid: int, i: int) -> tuple[int, int]:
    """PTX ISA, wgmma .m64nNk16 accumulator D: d_i of thread tid of the warpgroup -> (row, col)."""
    warp, lane = divmod(tid, 32)
    group, tig = lane >> 2, lane % 4
    row = warp * 16 + group + (8 if i % 4 >= 2 else 0)
    col = (i // 4) * 8 + tig * 2 + (i & 1)
    return row, col


def expected_tables(shape: tuple[int, ...], threads: int, regs: int, where: Where) -> tuple[np.ndarray, np.ndarray]:
    t = np.full(shape, -1, dtype=np.int64)
    loc = np.full(shape, -1, dtype=np.int64)
    for tid in range(threads):
        for r in range(regs):
            pos = where(tid, r)
            assert t[pos] == -1, f"{pos} assigned twice"
            t[pos], loc[pos] = tid, r
    assert (t >= 0).all()
    return t, loc


def assert_fragment(frag: Fragment, threads: int, regs: int, where: Where) -> None:
    assert (frag.num_threads, frag.num_locals, frag.replicate) == (threads, regs, 1)
    assert frag.is_valid()
    want_t, want_l = expected_tables(frag.shape, threads, regs, where)
    t, loc = frag.eval_tables()
    np.testing.assert_array_equal(t[..., 0], want_t)
    np.testing.assert_array_equal(loc[..., 0], want_l)


def test_mma_m16n8k16_a() -> None:
    assert mma_m16n8k16_a().shape == (16, 16)
    assert_fragment(mma_m16n8k16_a(), 32, 8, ptx_a)


def test_mma_m16n8k16_b() -> None:
    assert mma_m16n8k16_b().shape == (16, 8)
    assert_fragment(mma_m16n8k16_b(), 32, 4, ptx_b)


def test_mma_m16n8k16_c() -> None:
    assert mma_m16n8k16_c().shape == (16, 8)
    assert_fragment(mma_m16n8k16_c(), 32, 4, ptx_c)


@pytest.mark.parametrize("n", [8, 16, 24, 64, 128, 200, 256])
def test_wgmma_accumulator(n: int) -> None:
    frag = wgmma_m64nNk16_c(n)
    assert frag.shape == (64, n)
    assert_fragment(frag, 128, n // 2, ptx_wgmma_d)


@pytest.mark.parametrize("n", [0, 4, 12, 264, 8.0])
def test_wgmma_bad_n(n: object) -> None:
    with pytest.raises(ValueError, match="n must be"):
        wgmma_m64nNk16_c(n)  # type: ignore[arg-type]


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix(num: int, trans: bool) -> None:
    ld = ldmatrix(num, trans)
    # PTX: threads 0-7 give the row addresses of matrix 0, 8-15 of matrix 1, ...
    assert ld.address.shape == (8 * num,) and ld.address.out_shape == (num, 8)
    assert ld.address.is_bijective()
    for lane in range(8 * num):
        assert ld.address(lane) == (lane // 8, lane % 8)

    # PTX: each thread receives 2 consecutive elements of a row: row lane/4, cols 2*(lane%4)+{0,1};
    # .trans delivers the transposed matrix.
    def where(lane: int, r: int) -> tuple[int, int, int]:
        m, e = divmod(r, 2)
        row, col = lane // 4, 2 * (lane % 4) + e
        return (m, col, row) if trans else (m, row, col)

    assert ld.dest.shape == (num, 8, 8)
    assert_fragment(ld.dest, 32, 2 * num, where)


def test_ldmatrix_feeds_mma_operands() -> None:
    """x4 over (rows 0-7 | 8-15) x (cols 0-7 | 8-15), matrix m = 2*col_block + row_block, gives A;
    x2.trans over a row-major K x N tile (k 0-7 | 8-15) gives B."""
    a, dest = mma_m16n8k16_a(), ldmatrix(4).dest
    for m in range(4):
        for r in range(8):
            for c in range(8):
                assert dest(m, r, c) == a(r + 8 * (m % 2), c + 8 * (m // 2))
    b, dest_t = mma_m16n8k16_b(), ldmatrix(2, trans=True).dest
    for m in range(2):
        for r in range(8):
            for c in range(8):
                assert dest_t(m, r, c) == b(r + 8 * m, c)


def test_ldmatrix_bad_num() -> None:
    with pytest.raises(ValueError, match=r"num must be one of \(1, 2, 4\); got 3"):
        ldmatrix(3)


# AMD CDNA v_mfma_f32_16x16x16f16 (64 lanes): A: lane l, value v -> (row l%16, k 4*(l//16)+v);
# B: (k 4*(l//16)+v, col l%16); C/D: (row 4*(l//16)+v, col l%16).


def test_mfma_a() -> None:
    assert_fragment(mfma_16x16x16_a(), 64, 4, lambda lane, v: (lane % 16, 4 * (lane // 16) + v))


def test_mfma_b() -> None:
    assert_fragment(mfma_16x16x16_b(), 64, 4, lambda lane, v: (4 * (lane // 16) + v, lane % 16))


def test_mfma_c() -> None:
    assert_fragment(mfma_16x16x16_c(), 64, 4, lambda lane, v: (4 * (lane // 16) + v, lane % 16))


def test_register_order_in_c_source() -> None:
    a = mma_m16n8k16_a()
    assert a.to_c(["row", "col"]) == (
        "(row & 7) * 4 + ((col >> 1) & 3)",
        "(col >> 3) * 4 + (row >> 3) * 2 + (col & 1)",
    )
    assert mma_m16n8k16_c().index_to_c("lane", "r") == ("(r >> 1) * 8 + (lane >> 2)", "(lane & 3) * 2 + (r & 1)")


def test_ldmatrix_x4_feeds_transposed_operands() -> None:
    """The other two ways tensor-core operands are loaded: A stored K x M with x4.trans (lane l addresses k row
    ``l % 8 + 8 * (l // 16)``, m columns from ``8 * ((l // 8) % 2)``), and B stored N x K with x4 (lane l addresses n
    row ``l % 8 + 8 * (l // 16)``, k columns from ``8 * ((l // 8) % 2)``, two n-atoms). Per lane and register, the
    loaded element must be the one the PTX A / B fragment puts there."""
    ld_t, ld = ldmatrix(4, trans=True), ldmatrix(4)
    for lane in range(32):
        for r in range(8):
            m, e = divmod(r, 2)
            addr_lane = next(x for x in range(32) if ld_t.address(x) == (m, 0))  # the lane giving row 0 of matrix m
            k0, m0 = addr_lane % 8 + 8 * (addr_lane // 16), 8 * ((addr_lane // 8) % 2)
            mm, row, col = _dest_index(ld_t.dest, lane, r)
            assert mm == m
            k_idx, m_idx = k0 + row, m0 + col  # element (row, col) of the matrix as stored: (k, m)
            assert ptx_a(lane, r) == (m_idx, k_idx), (lane, r)
            addr_lane = next(x for x in range(32) if ld.address(x) == (m, 0))
            n0, kb = addr_lane % 8 + 8 * (addr_lane // 16), 8 * ((addr_lane // 8) % 2)
            mm, row, col = _dest_index(ld.dest, lane, r)
            n_idx, k_idx = n0 + row, kb + col  # stored N x K
            atom, b = divmod(r, 4)  # registers 0-3: n-atom 0 (b0..b3), 4-7: n-atom 1
            k_want, n_want = ptx_b(lane, b)
            assert (n_idx - 8 * atom, k_idx) == (n_want, k_want), (lane, r)


def _dest_index(dest: Fragment, lane: int, reg: int) -> tuple[int, int, int]:
    """The (matrix, row, col) that ``dest`` puts in register ``reg`` of ``lane``."""
    t, loc = dest.eval_tables()
    hit = np.argwhere((t[..., 0] == lane) & (loc[..., 0] == reg))
    assert len(hit) == 1
    return tuple(int(x) for x in hit[0])  # type: ignore[return-value]
