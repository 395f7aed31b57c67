"""tilec.jit's memo of compiled kernels (tilec/runtime/jit.py): a call never gets a kernel made for other values."""

from __future__ import annotations

import numpy as np
from conftest import randn

import tilec
import tilec.language as T


def test_zero_and_negative_zero_are_different_kernels(rng):
    """0.0 == -0.0 (and they hash alike), so a call with -0.0 after one with 0.0 got the kernel made for 0.0:
    ``x * s`` came back with the signs of ``x`` where ``x * -0.0`` flips them (lazy and eager forms alike)."""

    @tilec.jit(out_idx=[-1], target="cpu")
    def scale(N, s):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(N):
                    B[i] = A[i] * s

        return main

    @tilec.jit(target="cpu")
    def scale_eager(A, s: float):
        N = T.const("N")
        A: T.Tensor[[N], T.float32]
        B = T.empty((N,), "float32")
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(N):
                B[i] = A[i] * s
        return B

    a = randn(rng, 64, "float32")
    for s in (0.0, -0.0, np.float32(0.0), np.float32(-0.0)):
        ref = a.astype(np.float64) * float(s)
        np.testing.assert_array_equal(np.signbit(scale(64, s)(a)), np.signbit(ref), err_msg=repr(s))
        np.testing.assert_array_equal(np.signbit(scale_eager(a, s)), np.signbit(ref), err_msg=repr(s))
