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


def test_a_fresh_nan_argument_hits_the_kernel_memo(rng):
    """NaN != NaN, so every call with a fresh ``float('nan')`` missed the memo: it parsed and compiled the kernel
    again and kept one more (lazy and eager forms alike). NaNs with the same bits now key the same kernel."""

    @tilec.jit(out_idx=[-1], target="cpu")
    def add(N, s, shift=(0.0,)):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(N):
                    B[i] = A[i] + s + shift[-1]

        return main

    @tilec.jit(target="cpu")
    def add_eager(A, s: float):
        N = T.const("N")
        A: T.Tensor[[N], T.float32]
        B = T.empty((N,), "float32")
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(N):
                B[i] = A[i] + s
        return B

    a = randn(rng, 64, "float32")
    for make in (lambda: float("nan"), lambda: np.float32("nan")):
        first = add.get_kernel(64, make())
        assert add.get_kernel(64, make()) is first and add.get_kernel(64, s=make()) is add.get_kernel(64, s=make())
    assert add.get_kernel(64, 1.0, (float("nan"),)) is add.get_kernel(64, 1.0, (float("nan"),))  # in a tuple
    assert len(add._kernels) == 5  # float NaN, float32 NaN (by position and keyword each), the tuple
    assert np.isnan(add(64, float("nan"))(a)).all()
    for _ in range(3):
        assert np.isnan(add_eager(a, float("nan"))).all()
    assert len(add_eager._kernels) == 1
    np.testing.assert_allclose(add(64, 1.5)(a), a.astype(np.float64) + 1.5, rtol=1e-6)
    assert add.get_kernel(64, float("-nan")) is not add.get_kernel(64, float("nan"))  # other bits: its own kernel


SCALE = 2.0
DTYPE = "float32"


@tilec.jit(out_idx=[-1], target="cpu")
def _scaled(N):
    @T.prim_func
    def main(A: T.Tensor((N,), DTYPE), B: T.Tensor((N,), DTYPE)):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(N):
                B[i] = A[i] * SCALE

    return main


@tilec.jit(target="cpu")
def _scaled_eager(A):
    N = T.const("N")
    A: T.Tensor[[N], DTYPE]
    B = T.empty((N,), DTYPE)
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(N):
            B[i] = A[i] * SCALE
    return B


def test_a_global_the_kernel_reads_rebound_makes_a_new_kernel(rng, monkeypatch):
    """The memo was keyed by the call's arguments alone: after ``SCALE = 3.0`` (a notebook cell run again, a sweep
    over a module constant) the same call got the kernel built for the old value, in both forms, and an eager
    kernel's annotation ``T.Tensor[[N], DTYPE]`` kept the old dtype. A global the kernel names is now checked at
    each call: rebound, a new kernel is made; rebound to an equal value, the kernel is kept."""
    a = randn(rng, 64, "float32")
    for scale in (2.0, 3.0, -0.5):
        monkeypatch.setitem(globals(), "SCALE", scale)
        kernel = _scaled(64)
        np.testing.assert_allclose(kernel(a), a.astype(np.float64) * scale, rtol=1e-6)
        np.testing.assert_allclose(_scaled_eager(a), a.astype(np.float64) * scale, rtol=1e-6)
    monkeypatch.setitem(globals(), "SCALE", float("-0.5"))  # another float object, the same value
    assert _scaled(64) is kernel
    monkeypatch.setitem(globals(), "DTYPE", "float64")
    x = a.astype(np.float64)
    assert _scaled_eager(x).dtype == np.float64 and _scaled(64)(x).dtype == np.float64
    np.testing.assert_allclose(_scaled_eager(x), x * -0.5, rtol=1e-12)


def test_a_closure_variable_rebound_makes_a_new_kernel(rng):
    """A variable of the enclosing function, rebound after the kernel was made, is checked as a global is."""
    a = randn(rng, 64, "float32")
    offset = 1.0

    @tilec.jit(out_idx=[-1], target="cpu")
    def shifted(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(N):
                    B[i] = A[i] + offset

        return main

    np.testing.assert_allclose(shifted(64)(a), a.astype(np.float64) + 1.0, rtol=1e-6)
    offset = 5.0  # noqa: F841 - read by the kernel through its closure
    np.testing.assert_allclose(shifted(64)(a), a.astype(np.float64) + 5.0, rtol=1e-6)
