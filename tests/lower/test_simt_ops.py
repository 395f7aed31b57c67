"""Tile ops lowered to the thread IR and run by the thread interpreter (target ``simt:sm_80``) against float64
numpy, at small and ragged shapes; the kernels are those of the tile-interpreter tests where they exist."""

from __future__ import annotations

import numpy as np
from conftest import assert_close, poisoned, randn

import tilec.language as T

from .helpers import simt


def test_one_dimensional_parallel_loop_with_a_free_layout(rng):
    N, blk = 100, 32

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, blk), threads=32) as bx:
            for i in T.Parallel(blk):
                C[bx * blk + i] = A[bx * blk + i] * 2.0 + B[bx * blk + i + 3]  # B reads past N are 0

    a, b = randn(rng, (N,), "float32"), randn(rng, (N,), "float32")
    c = poisoned((N,), "float32")
    simt(main)(a, b, c)
    b_shift = np.concatenate([b[3:], np.zeros(3)]).astype(np.float64)
    assert_close(c, a.astype(np.float64) * 2 + b_shift, "float32")
