"""Block-level GEMM fragments against independently written loops over warps, atoms, lanes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pytest

from tilec.layout import (
    Fragment,
    make_mfma_c_fragment,
    make_mma_a_fragment,
    make_mma_b_fragment,
    make_mma_c_fragment,
    make_wgmma_a_fragment,
    make_wgmma_c_fragment,
)

from .test_tensorcore import ptx_a, ptx_b, ptx_c, ptx_wgmma_d

Entry = tuple[tuple[int, int], int, int]  # ((row, col), thread, local)


def slots(frag: Fragment) -> np.ndarray:
    """Sorted ``thread * num_locals + local`` codes per element (replica order ignored)."""
    t, loc = frag.eval_tables()
    return np.sort(t * frag.num_locals + loc, axis=-1)


def expected(shape: tuple[int, int], copies: int, num_locals: int, entries: Iterable[Entry]) -> np.ndarray:
    codes: list[list[list[int]]] = [[[] for _ in range(shape[1])] for _ in range(shape[0])]
    for (row, col), thread, local in entries:
        codes[row][col].append(thread * num_locals + local)
    out = np.array(codes, dtype=np.int64)
    assert out.shape == shape + (copies,)
    return np.sort(out, axis=-1)


@pytest.mark.parametrize(("bm", "bn", "wm", "wn"), [(16, 8, 1, 1), (64, 64, 2, 2), (128, 64, 4, 1), (32, 128, 1, 4)])
def test_mma_c_fragment(bm: int, bn: int, wm: int, wn: int) -> None:
    frag = make_mma_c_fragment(bm, bn, wm, wn)
    tm, tn = bm // wm, bn // wn
    am, an = tm // 16, tn // 8
    assert (frag.num_threads, frag.num_locals, frag.replicate) == (32 * wm * wn, am * an * 4, 1)
    assert frag.is_valid()

    def entries() -> Iterator[Entry]:
        for w_m in range(wm):
            for w_n in range(wn):
                for mi in range(am):
                    for ni in range(an):
                        for lane in range(32):
                            for r in range(4):
                                row, col = ptx_c(lane, r)
                                pos = (w_m * tm + mi * 16 + row, w_n * tn + ni * 8 + col)
                                yield pos, (w_m * wn + w_n) * 32 + lane, (mi * an + ni) * 4 + r

    np.testing.assert_array_equal(slots(frag), expected((bm, bn), 1, frag.num_locals, entries()))


@pytest.mark.parametrize(("bm", "bk", "wm", "wn"), [(16, 16, 1, 1), (64, 32, 2, 2), (128, 16, 4, 2)])
def test_mma_a_fragment(bm: int, bk: int, wm: int, wn: int) -> None:
    frag = make_mma_a_fragment(bm, bk, wm, wn)
    tm = bm // wm
    am, ak = tm // 16, bk // 16
    assert (frag.num_threads, frag.num_locals, frag.replicate) == (32 * wm * wn, am * ak * 8, wn)
    assert frag.is_valid()

    def entries() -> Iterator[Entry]:
        for w_m in range(wm):
            for w_n in range(wn):
                for mi in range(am):
                    for ki in range(ak):
                        for lane in range(32):
                            for r in range(8):
                                row, col = ptx_a(lane, r)
                                pos = (w_m * tm + mi * 16 + row, ki * 16 + col)
                                yield pos, (w_m * wn + w_n) * 32 + lane, (mi * ak + ki) * 8 + r

    np.testing.assert_array_equal(slots(frag), expected((bm, bk), wn, frag.num_locals, entries()))


@pytest.mark.parametrize(("bk", "bn", "wm", "wn"), [(16, 8, 1, 1), (32, 64, 2, 2), (16, 128, 2, 4)])
def test_mma_b_fragment(bk: int, bn: int, wm: int, wn: int) -> None:
    frag = make_mma_b_fragment(bk, bn, wm, wn)
    tn = bn // wn
    ak, an = bk // 16, tn // 8
    assert (frag.num_threads, frag.num_locals, frag.replicate) == (32 * wm * wn, ak * an * 4, wm)
    assert frag.is_valid()

    def entries() -> Iterator[Entry]:
        for w_m in range(wm):
            for w_n in range(wn):
                for ki in range(ak):
                    for ni in range(an):
                        for lane in range(32):
                            for r in range(4):
                                row, col = ptx_b(lane, r)
                                pos = (ki * 16 + row, w_n * tn + ni * 8 + col)
                                yield pos, (w_m * wn + w_n) * 32 + lane, (ki * an + ni) * 4 + r

    np.testing.assert_array_equal(slots(frag), expected((bk, bn), wm, frag.num_locals, entries()))


@pytest.mark.parametrize(("bm", "bk", "gm"), [(64, 64, 1), (128, 32, 1), (256, 16, 2), (192, 64, 3), (192, 32, 1)])
def test_wgmma_a_fragment(bm: int, bk: int, gm: int) -> None:
    """Register A of wgmma: in 64-row step ``mi`` warp ``w`` of a warpgroup holds rows ``64 mi + 16 w ..`` (the rows
    of its accumulator), in the mma.sync A layout; locals ``(mi * ks + ki) * 8 + r``."""
    frag = make_wgmma_a_fragment(bm, bk, gm)
    tm, ks = bm // gm, bk // 16
    assert (frag.num_threads, frag.num_locals) == (128 * gm, tm // 64 * ks * 8)

    def entries() -> Iterator[Entry]:
        for g in range(gm):
            for mi in range(tm // 64):
                for ki in range(ks):
                    for w in range(4):
                        for lane in range(32):
                            for r in range(8):
                                row, col = ptx_a(lane, r)
                                yield ((g * tm + mi * 64 + 16 * w + row, ki * 16 + col), g * 128 + w * 32 + lane,
                                       (mi * ks + ki) * 8 + r)

    np.testing.assert_array_equal(slots(frag), expected((bm, bk), 1, frag.num_locals, entries()))
    if tm == 64:  # one step a warpgroup: the mma.sync A fragment over its warps
        assert frag.equals(make_mma_a_fragment(bm, bk, 4 * gm, 1))


@pytest.mark.parametrize(("bm", "bn", "gm", "gn"), [(64, 64, 1, 1), (128, 256, 2, 1), (64, 512, 1, 1), (128, 64, 1, 2)])
def test_wgmma_c_fragment(bm: int, bn: int, gm: int, gn: int) -> None:
    frag = make_wgmma_c_fragment(bm, bn, gm, gn)
    tm, tn = bm // gm, bn // gn
    n_atom = min(tn, 256)
    am, an = tm // 64, tn // n_atom
    assert (frag.num_threads, frag.num_locals) == (128 * gm * gn, am * an * n_atom // 2)
    assert frag.is_valid()

    def entries() -> Iterator[Entry]:
        for g_m in range(gm):
            for g_n in range(gn):
                for mi in range(am):
                    for ni in range(an):
                        for tid in range(128):
                            for r in range(n_atom // 2):
                                row, col = ptx_wgmma_d(tid, r)
                                pos = (g_m * tm + mi * 64 + row, g_n * tn + ni * n_atom + col)
                                yield pos, (g_m * gn + g_n) * 128 + tid, (mi * an + ni) * (n_atom // 2) + r

    np.testing.assert_array_equal(slots(frag), expected((bm, bn), 1, frag.num_locals, entries()))


def test_mfma_c_fragment() -> None:
    frag = make_mfma_c_fragment(64, 32, 2, 1)
    assert (frag.num_threads, frag.num_locals) == (128, 16) and frag.is_valid()

    def entries() -> Iterator[Entry]:
        for w_m in range(2):
            for mi in range(2):
                for ni in range(2):
                    for lane in range(64):
                        for v in range(4):
                            pos = (w_m * 32 + mi * 16 + 4 * (lane // 16) + v, ni * 16 + lane % 16)
                            yield pos, w_m * 64 + lane, (mi * 2 + ni) * 4 + v

    np.testing.assert_array_equal(slots(frag), expected((64, 32), 1, 16, entries()))


def test_partition_errors() -> None:
    with pytest.raises(ValueError, match=r"block_m must be a multiple of warp_m \* 16 = 32 \(warp_m=2\); got 48"):
        make_mma_c_fragment(48, 64, 2, 2)
    with pytest.raises(ValueError, match=r"block_n must be a multiple of warp_n \* 8"):
        make_mma_c_fragment(64, 60, 2, 2)
    with pytest.raises(ValueError, match=r"block_k must be a multiple of 16; got 24"):
        make_mma_a_fragment(64, 24, 2, 2)
    with pytest.raises(ValueError, match=r"warp_n must be a positive int; got 0"):
        make_mma_a_fragment(64, 32, 2, 0)
    with pytest.raises(ValueError, match=r"<= 256 or a multiple of 256; got 320"):
        make_wgmma_c_fragment(64, 320, 1, 1)
    with pytest.raises(ValueError, match=r"block_m must be a multiple of warpgroups_m \* 64"):
        make_wgmma_c_fragment(96, 64, 1, 1)
