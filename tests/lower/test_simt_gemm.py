"""The scalar FMA gemm (``T.gemm`` off tensor cores): a loop over k around each thread's elements of C, unrolled by a
bounded number of k-steps (:func:`tilec.lower.gemm.simt_k_unroll`) so the operand values the compiler hoists stay
few. Run by the thread interpreters against float64 numpy: ragged tiles, both operand orientations, a k that is not a
multiple of the unrolled chunk, accumulation over several k-tiles and clear_accum."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import assert_close, poisoned, randn

import tilec
from tilec.lower.gemm import SIMT_OPERAND_REGS, simt_k_unroll, simt_operands

from .helpers import operand_gemm

SHAPES = [  # (M, N, K, block_M, block_N, block_K, threads, transpose_A, transpose_B, unroll of the gemm's k-loop)
    (100, 70, 57, 64, 64, 19, 128, False, False, 4),  # 19 k-steps by 4: a remainder of 3
    (64, 64, 64, 64, 64, 64, 128, False, True, 4),  # attention's Q K^T tile
    (50, 70, 45, 64, 32, 15, 128, True, False, 8),  # 16 elements a thread (4 rows x 4 columns): 15 by 8
    (33, 40, 40, 32, 32, 8, 64, True, True, 8),  # 8 operands a step: the whole k-tile unrolled
    (20, 36, 27, 16, 16, 9, 32, False, False, 9),
    (40, 60, 20, 32, 56, 8, 32, False, False, 1),  # 14 rows a thread, in 7 pairs 16 rows apart, and 7 column
    (40, 60, 20, 32, 56, 8, 32, True, True, 1),  # groups of 4: 7 + 7 offset bases a k-step
]


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(str(x) for x in s[:7]) + f"-{s[7]:d}{s[8]:d}")
def test_scalar_gemm_matches_numpy(rng, target, shape):
    M, N, K, bm, bn, bk, threads, ta, tb, unroll = shape
    func = operand_gemm(M, N, K, bm, bn, bk, threads, ta, tb)
    source = tilec.JITKernel(func, "cuda:sm_80").get_kernel_source()
    pragma = "#pragma unroll" if unroll == bk else f"#pragma unroll {unroll}"
    assert re.search(rf"{pragma}\n\s*for \(int k_\d+ = 0; k_\d+ < {bk}; ", source), source
    kernel = tilec.JITKernel(func, target)
    assert "scalar FMA path" in kernel.report()
    a = randn(rng, (K, M) if ta else (M, K), "float32")
    b = randn(rng, (N, K) if tb else (K, N), "float32")
    c = poisoned((M, N), "float32")
    kernel(a, b, c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert_close(c, (a64.T if ta else a64) @ (b64.T if tb else b64), "float32")


def test_unrolled_k_steps_keep_their_operands_within_the_budget():
    """Attention's 64 x 64 float32 tile over 128 threads: a thread holds 8 rows x 4 columns of S, 12 operand values a
    k-step, so 4 k-steps (48 values) are unrolled together, not all 64 (768 values: ptxas spilled 1.7 KB)."""
    kernel = tilec.JITKernel(operand_gemm(64, 64, 64, 64, 64, 64, 128, False, True), "cuda:sm_80")
    layout = next(f for b, f in kernel.state.artifacts["layout_inference"].fragments.items() if b.name == "C_f")
    assert simt_operands(layout) == 12
    assert simt_k_unroll(layout, 64) == 4 and 4 * 12 <= SIMT_OPERAND_REGS < 8 * 12
    assert simt_k_unroll(layout, 5) == 5  # 60 values: the whole k
