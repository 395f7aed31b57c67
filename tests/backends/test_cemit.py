"""What the shared C emitter (CUDA and HIP) writes for arithmetic whose spelling is a choice: float32 division."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tilec
import tilec.language as T


def _scale_rows(dtype: str):
    @T.prim_func
    def main(X: T.Tensor((64, 32), dtype), Y: T.Tensor((64,), dtype), Z: T.Tensor((64, 32), dtype)):
        with T.Kernel(1, threads=64) as _:
            x = T.alloc_fragment((64, 32), dtype)
            y = T.alloc_fragment((64,), dtype)
            T.copy(X, x)
            T.copy(Y, y)
            for i, j in T.Parallel(64, 32):
                x[i, j] = x[i, j] / y[i] + 1.0 / y[i]
            T.copy(x, Z)

    return main


@pytest.mark.parametrize("target", ["cuda:sm_90a", "hip:gfx90a"])
def test_float32_division_is_a_multiply_by_the_reciprocal(target):
    source = tilec.JITKernel(_scale_rows("float32"), target, out_idx=[2]).get_kernel_source()
    body = source[source.index('extern "C"'):]
    assert re.search(r"x\[\w+\] \* \(1\.0f / y\[[^\]]+\]\)", body), body
    assert re.search(r"\+ 1\.0f / y\[[^\]]+\]", body), body  # a reciprocal stays one division
    assert not re.search(r"x\[\w+\] / ", body), body


def test_float64_division_stays_a_division():
    body = tilec.JITKernel(_scale_rows("float64"), "cuda:sm_90a", out_idx=[2]).get_kernel_source()
    assert re.search(r"x\[\w+\] / y\[", body[body.index('extern "C"'):])


def test_the_interpreter_divides_as_numpy_does(rng):
    x = rng.standard_normal((64, 32)).astype(np.float32)
    y = (rng.random(64) + 0.5).astype(np.float32)
    z = tilec.JITKernel(_scale_rows("float32"), "cpu", out_idx=[2])(x, y)
    ref = x.astype(np.float64) / y[:, None] + 1.0 / y[:, None]
    np.testing.assert_allclose(z, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("target", "configs", "dependent"), [
    ("cuda:sm_90a", {}, True), ("cuda:sm_90a", {"pdl": False}, False), ("cuda:sm_80", {}, False),
    ("hip:gfx90a", {}, False)])
def test_programmatic_dependent_launch_waits_before_the_first_statement(target, configs, dependent):
    """On sm_90 a kernel is launched as a programmatic dependent of the stream's previous kernel (PDL): its body
    starts by waiting for that kernel (before any memory is touched) and letting the next one launch; the report
    says so. ``pdl=False``, older GPUs and HIP: neither."""
    kernel = tilec.JITKernel(_scale_rows("float32"), target, out_idx=[2], pass_configs=configs)
    body = kernel.get_kernel_source()
    body = body[body.index('extern "C"'):]
    assert ("griddepcontrol" in body) == dependent
    assert ("programmatic dependent (PDL)" in kernel.report()) == dependent
    if dependent:
        lines = [s.strip() for s in body.splitlines()]
        wait = lines.index('asm volatile("griddepcontrol.wait;" ::: "memory");')
        assert lines[wait + 1] == 'asm volatile("griddepcontrol.launch_dependents;");'
        assert not any(re.search(r"\b[XYZ]\[", s) for s in lines[:wait]), lines[:wait]  # no global access before


def test_pdl_pass_config_takes_a_flag():
    with pytest.raises(tilec.errors.TilecValueError, match="pass config 'pdl' takes True or False, got 1"):
        tilec.JITKernel(_scale_rows("float32"), "cuda:sm_90a", out_idx=[2], pass_configs={"pdl": 1})


def test_16_bit_float_max_and_min_are_fmaxf_and_fminf():
    """The header's generic tl::max (a < b ? b : a) kept a NaN first operand and dropped a NaN second one; 16-bit
    floats go through the float overloads (fmaxf / fminf), which skip NaN as the interpreters do."""
    from test_interp import nan_max_min_kernel

    body = tilec.JITKernel(nan_max_min_kernel("float16"), "cuda:sm_80").get_kernel_source()
    for fn in ("max", "min"):
        assert re.search(rf"half\(tl::{fn}\(static_cast<float>\(F\[[^\]]+\]\), static_cast<float>\(G\[", body), body


@pytest.mark.parametrize("target", ["cuda:sm_90a", "hip:gfx90a"])
def test_float32_constant_halfway_between_floats_rounds_as_interpreted(target):
    """A float32 constant halfway between two floats is printed rounded to even, as the interpreters round it: its
    shortest decimal (1 + 2**-24 is 1.0000000596046448, a little above the tie) parsed as 1 + 2**-23 in C."""
    @T.prim_func
    def main(X: T.Tensor((64,), "float32"), Z: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as _:
            for i in T.Parallel(64):
                Z[i] = X[i] * (1 + 2**-24) + 3 * 2**-25

    source = tilec.JITKernel(main, target).get_kernel_source()
    body = source[source.index('extern "C"'):]
    assert "X[tx] * 1.0f + 8.940696716308594e-08f" in body, body  # 3 * 2**-25 is a float: printed as it is
    x, z = np.ones(64, np.float32), np.zeros(64, np.float32)
    tilec.JITKernel(main, "cpu")(x, z)
    assert z[0] == np.float32(1) + np.float32(3 * 2**-25)


def test_float8_constant_is_printed_rounded_as_interpreted():
    """An fp8 constant is printed rounded to fp8 from its exact value: its float literal, rounded to float first,
    can land on a tie of fp8 the exact value is above (1.0625 + 2**-40 gave 1.0 by ties-to-even, not 1.125)."""
    import ml_dtypes

    @T.prim_func
    def main(X: T.Tensor((64,), "float8_e4m3"), Z: T.Tensor((64,), "float8_e4m3")):
        with T.Kernel(1, threads=64) as _:
            for i in T.Parallel(64):
                Z[i] = T.max(X[i], 1.0625 + 2**-40)

    source = tilec.JITKernel(main, "cuda:sm_90a").get_kernel_source()
    assert "__nv_fp8_e4m3(1.125f)" in source[source.index('extern "C"'):]
    x, z = np.zeros(64, ml_dtypes.float8_e4m3fn), np.zeros(64, ml_dtypes.float8_e4m3fn)
    tilec.JITKernel(main, "cpu")(x, z)
    assert float(z[0]) == 1.125


@pytest.mark.parametrize("target", ["cuda:sm_80", "hip:gfx90a"])
def test_invert_of_a_bool_is_the_logical_not_as_interpreted(target):
    """`~(A[i] > 0)` is the logical not on the interpreters (numpy's ~ of a bool); C's `~` promoted the bool to int,
    so the GPU stored -1 / -2 and a bool result was always true: it is emitted as `!`."""

    @T.prim_func
    def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32"), M: T.Tensor((8,), "bool")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                B[i] = ~(A[i] > 0)
                M[i] = ~(A[i] > 0) & (A[i] > -3)

    body = tilec.JITKernel(main, target).get_kernel_source()
    body = body[body.index('extern "C"'):]
    assert "~" not in body and body.count("(!(A[") == 2, body
    a = np.arange(-4, 4, dtype=np.int32)
    b, m = np.full(8, -7, np.int32), np.zeros(8, bool)
    tilec.compile(main, target="cpu")(a, b, m)
    np.testing.assert_array_equal(b, a <= 0)
    np.testing.assert_array_equal(m, (a <= 0) & (a > -3))


@pytest.mark.parametrize("target", ["cuda:sm_80", "hip:gfx90a"])
def test_a_constant_beyond_its_16_bit_type_prints_without_numpy_warnings(target):
    """A float16 or bfloat16 constant beyond the type's range (x + 70000.0 beside a half is inf) made the emitter
    print numpy's 'RuntimeWarning: overflow encountered in cast' from tilec/backends/cemit.py while generating the
    kernel; it prints the constant (as inf, as the interpreters compute it) silently."""
    import warnings

    from tilec.dtypes import bfloat16

    @T.prim_func
    def main(X: T.Tensor((64,), "float16"), Y: T.Tensor((64,), "bfloat16"), Z: T.Tensor((64, 2), "float32")):
        with T.Kernel(1, threads=64) as _:
            for i in T.Parallel(64):
                Z[i, 0] = X[i] + 70000.0
                Z[i, 1] = Y[i] * 1e39

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tilec.JITKernel(main, target).get_kernel_source()
        z = np.zeros((64, 2), np.float32)
        tilec.JITKernel(main, "cpu")(np.ones(64, np.float16), np.ones(64, bfloat16.np), z)
    assert np.isposinf(z).all()
