"""Tile ops lowered to the thread IR and run by the thread interpreter (target ``simt:sm_80``) against float64
numpy, at small and ragged shapes; the kernels are those of the tile-interpreter tests where they exist."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, poisoned, randn
from test_interp import _COMBINE, _NP_REDUCE, reduce_kernel

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


@pytest.mark.parametrize("kind", ["max", "sum", "abssum"])
@pytest.mark.parametrize("clear", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("shape", [(24, 40), (16, 64)], ids=["replicated", "spread"])
def test_reductions(rng, kind, clear, dim, shape):
    """24 x 40 does not spread evenly over 128 threads, so the tile is replicated: a sum must count each element
    once however many threads hold it."""
    M, N = shape
    kernel = simt(reduce_kernel(kind, M, N, dim, clear, "float16"))
    x = randn(rng, (M, N), "float16")
    init = randn(rng, (N if dim == 0 else M,), "float32") * 3
    out = poisoned(init.shape, "float32")
    kernel(x, init, out)
    ref = _NP_REDUCE[kind](x.astype(np.float64), dim)
    if not clear:
        ref = _COMBINE[kind](init.astype(np.float64), ref)
    scale = float(np.abs(x.astype(np.float64)).sum(axis=dim).max())
    assert_close(out, ref, "float32", scale=scale)
