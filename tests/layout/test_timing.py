"""Timing sanity: rebuilding named layouts and printing them must be cheap (printed, loosely checked)."""

from __future__ import annotations

import time

import tilec.layout as tl
from tilec.layout import Layout

BUILDERS = {
    "row_major": lambda: tl.row_major(64, 32),
    "col_major": lambda: tl.col_major(64, 32),
    "padded": lambda: tl.padded((64, 32), 8),
    "strided": lambda: tl.strided((64, 32), (1, 64)),
    "swizzle128": lambda: tl.swizzle((64, 64), 16, 128),
    "swizzle64": lambda: tl.swizzle((64, 32), 16, 64),
    "swizzle32": lambda: tl.swizzle((64, 16), 16, 32),
    "mma_a": tl.mma_m16n8k16_a,
    "mma_b": tl.mma_m16n8k16_b,
    "mma_c": tl.mma_m16n8k16_c,
    "ldmatrix_x4": lambda: tl.ldmatrix(4).dest,
    "wgmma_c": lambda: tl.wgmma_m64nNk16_c(128),
    "mfma_a": tl.mfma_16x16x16_a,
    "mfma_c": tl.mfma_16x16x16_c,
    "gemm_c": lambda: tl.make_mma_c_fragment(128, 128, 2, 2),
    "gemm_a": lambda: tl.make_mma_a_fragment(128, 32, 2, 2),
    "wgmma_block": lambda: tl.make_wgmma_c_fragment(128, 256, 2, 1),
}


def _to_c(obj: Layout | tl.Fragment) -> object:
    return obj.to_c([f"x{d}" for d in range(obj.ndim)])


def test_second_build_is_cheap() -> None:
    worst = 0.0
    for name, build in BUILDERS.items():
        t0 = time.perf_counter()
        _to_c(build())
        t1 = time.perf_counter()
        _to_c(build())
        t2 = time.perf_counter()
        worst = max(worst, t2 - t1)
        print(f"{name:12s} first {1e3 * (t1 - t0):8.3f} ms   second {1e3 * (t2 - t1):7.4f} ms")
    assert worst < 0.01  # loose: the target is well under 1 ms


def test_user_layout_rebuild_is_cheap() -> None:
    def build() -> Layout:
        return Layout((64, 64), lambda i, j: i * 64 + tl.bitxor(j, (i % 8) * 8))

    build().to_c(["r", "c"])
    t0 = time.perf_counter()
    for _ in range(20):
        build().to_c(["r", "c"])
    per = (time.perf_counter() - t0) / 20
    print(f"user swizzle layout rebuild + to_c: {1e3 * per:.3f} ms")
    assert per < 0.02
