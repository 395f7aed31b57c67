"""Numerics of the CPU tile interpreter (target="cpu") against float64 numpy references on fresh random inputs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import assert_close, bf16_exact, load_example, poisoned, randn

import tilec
import tilec.language as T
from tilec.backends.cpu import pack_int4, unpack_int4
from tilec.dtypes import dtype as tdtype


def compile_cpu(func, out_idx=None):
    return tilec.compile(func, target="cpu", out_idx=out_idx)


# ------------------------------------------------------------------------------------------------------ GEMM


def gemm_kernel(M, N, K, bm, bn, bk, dtype, out_dtype, accum="float32", trans_a=False, trans_b=False):
    a_shape = (K, M) if trans_a else (M, K)
    b_shape = (N, K) if trans_b else (K, N)

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bk, bm) if trans_a else (bm, bk), dtype)
            B_s = T.alloc_shared((bn, bk) if trans_b else (bk, bn), dtype)
            C_f = T.alloc_fragment((bm, bn), accum)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                if trans_a:
                    T.copy(A[k * bk, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f, transpose_A=trans_a, transpose_B=trans_b)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN"])
@pytest.mark.parametrize("mnk", [(128, 64, 64), (100, 130, 70)], ids=["aligned", "ragged"])
def test_gemm(rng, dtype, layout, mnk):
    M, N, K = mnk
    ta, tb = layout[0] == "T", layout[1] == "T"
    kernel = compile_cpu(gemm_kernel(M, N, K, 64, 64, 32, dtype, dtype, trans_a=ta, trans_b=tb))
    a = randn(rng, (K, M) if ta else (M, K), dtype)
    b = randn(rng, (N, K) if tb else (K, N), dtype)
    c = poisoned((M, N), dtype)
    kernel(a, b, c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = (a64.T if ta else a64) @ (b64.T if tb else b64)
    assert_close(c, ref, dtype)


def test_gemm_example_ragged_with_output_allocation(rng):
    kernel = load_example("01_gemm").matmul(100, 130, 70, block_M=64, block_N=64)
    a, b = randn(rng, (100, 70), "float16"), randn(rng, (70, 130), "float16")
    c = kernel(a, b)
    assert c.dtype == np.float16 and c.shape == (100, 130)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), "float16")


def test_gemm_int8_accumulates_in_int32(rng):
    M, N, K = 70, 40, 96
    kernel = compile_cpu(gemm_kernel(M, N, K, 32, 32, 32, "int8", "int32", accum="int32"))
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    c = poisoned((M, N), "int32")
    kernel(a, b, c)
    ref = a.astype(np.int64) @ b.astype(np.int64)
    assert np.abs(ref).max() > 2**15  # the sums exceed what a 16-bit accumulator holds
    np.testing.assert_array_equal(c, ref)


def test_gemm_clear_accum_and_fp32_output_of_fp16(rng):
    @T.prim_func
    def main(A: T.Tensor((32, 32), "float16"), B: T.Tensor((32, 32), "float16"), C: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_shared((32, 32), "float16")
            b = T.alloc_shared((32, 32), "float16")
            c = T.alloc_fragment((32, 32), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.fill(c, 100.0)
            T.gemm(a, b, c, clear_accum=True)  # overwrites the 100s
            T.gemm(a, b, c, transpose_A=True, transpose_B=True)  # accumulates A^T B^T
            T.copy(c, C)

    a, b = randn(rng, (32, 32), "float16"), randn(rng, (32, 32), "float16")
    c = poisoned((32, 32), "float32")
    compile_cpu(main)(a, b, c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert_close(c, a64 @ b64 + a64.T @ b64.T, "float32")


# --------------------------------------------------------------------------------------------------- softmax


@pytest.mark.parametrize("shape", [(37, 300), (16, 256)])
def test_softmax_example(rng, shape):
    kernel = load_example("02_softmax").softmax(*shape)
    x = (randn(rng, shape, "float32") * 3).astype(np.float16)
    y = kernel(x)
    xd = x.astype(np.float64)
    ref = np.exp(xd - xd.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    assert_close(y, ref, "float16")
    np.testing.assert_allclose(y.astype(np.float64).sum(axis=1), 1.0, atol=3e-2)


# ------------------------------------------------------------------------------------------------ reductions

_NP_REDUCE = {
    "max": lambda x, d: x.max(axis=d), "min": lambda x, d: x.min(axis=d), "sum": lambda x, d: x.sum(axis=d),
    "abssum": lambda x, d: np.abs(x).sum(axis=d), "absmax": lambda x, d: np.abs(x).max(axis=d),
}  # fmt: skip
_COMBINE = {"max": np.maximum, "min": np.minimum, "sum": np.add, "abssum": np.add, "absmax": np.maximum}


def reduce_kernel(kind, M, N, dim, clear, dtype):
    op = getattr(T, f"reduce_{kind}")
    R = N if dim == 0 else M

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Init: T.Tensor((R,), "float32"), Out: T.Tensor((R,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((R,), "float32")
            T.copy(X, x)
            T.copy(Init, r)
            op(x, r, dim=dim, clear=clear)
            T.copy(r, Out)

    return main


@pytest.mark.parametrize("kind", ["max", "min", "sum", "abssum", "absmax"])
@pytest.mark.parametrize("clear", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_reductions(rng, kind, clear, dim):
    M, N = 24, 40
    x = randn(rng, (M, N), "float16")
    init = randn(rng, (N if dim == 0 else M,), "float32") * 3  # wide enough that some entries win with clear=False
    out = poisoned(init.shape, "float32")
    compile_cpu(reduce_kernel(kind, M, N, dim, clear, "float16"))(x, init, out)
    ref = _NP_REDUCE[kind](x.astype(np.float64), dim)
    if not clear:
        ref = _COMBINE[kind](init.astype(np.float64), ref)
    scale = float(np.abs(x.astype(np.float64)).sum(axis=dim).max())  # sums cancel: compare against the terms' size
    assert_close(out, ref, "float32", scale=scale)


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_float_tile_reduced_or_scanned_into_ints_converts_as_the_gpu(target):
    """A float tile reduced or scanned into an int32 buffer has each element converted to int32 as a cast does
    (truncated, saturated, NaN to 0) before it is combined: the cpu target converted by numpy's cast (inf, 3e9 and NaN
    were INT_MIN), so a max of inf was 0 and a sum INT_MIN where the GPU gives INT_MAX."""

    @T.prim_func
    def main(X: T.Tensor((4, 8), "float32"), Y: T.Tensor((4,), "int32"), Z: T.Tensor((4,), "int32"),
             C: T.Tensor((4, 8), "int32")):
        with T.Kernel(1, threads=32) as bx:
            t = T.alloc_shared((4, 8), "float32")
            r = T.alloc_fragment((4,), "int32")
            s = T.alloc_fragment((4,), "int32")
            c = T.alloc_shared((4, 8), "int32")
            T.copy(X, t)
            T.reduce_max(t, r, dim=1)
            T.reduce_sum(t, s, dim=1)
            T.cumsum(t, c, dim=1)
            T.copy(r, Y)
            T.copy(s, Z)
            T.copy(c, C)

    x = np.zeros((4, 8), np.float32)
    x[0, 0], x[1, 1], x[2, 2] = np.inf, 3e9, np.nan
    x[3] = np.random.default_rng().uniform(-3, 3, 8).astype(np.float32)
    y, z, c = poisoned((4,), "int32"), poisoned((4,), "int32"), poisoned((4, 8), "int32")
    tilec.JITKernel(main, target)(x, y, z, c)
    big = 2**31 - 1
    xi = np.trunc(x[3]).astype(np.int64)
    np.testing.assert_array_equal(y, [big, big, 0, xi.max()])
    np.testing.assert_array_equal(z, [big, big, 0, xi.sum()])
    np.testing.assert_array_equal(c[:2], [[big] * 8, [0] + [big] * 7])
    np.testing.assert_array_equal(c[3], np.cumsum(xi))


def test_reduce_into_a_sub_region_of_a_3d_tile(rng):
    @T.prim_func
    def main(X: T.Tensor((2, 8, 16), "float32"), Out: T.Tensor((2, 8), "float32")):
        with T.Kernel(1, threads=64) as bx:
            x = T.alloc_fragment((2, 8, 16), "float32")
            r = T.alloc_fragment((2, 8), "float32")
            T.copy(X, x)
            T.reduce_sum(x, r, dim=2)
            T.copy(r, Out)

    x = randn(rng, (2, 8, 16), "float32")
    out = poisoned((2, 8), "float32")
    compile_cpu(main)(x, out)
    assert_close(out, x.astype(np.float64).sum(axis=2), "float32", scale=float(np.abs(x).sum(axis=2).max()))


# ---------------------------------------------------------------------------------------------------- cumsum


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("in_place", [False, True])
def test_cumsum_ragged(rng, reverse, dim, in_place):
    M, N, bm, bn = 20, 50, 16, 64  # M, N not multiples of the tile; each block scans its own tile

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, bn), "float32")
            y = T.alloc_fragment((bm, bn), "float32")
            T.copy(X[bx * bm, 0], x)
            if in_place:
                T.cumsum(x, dim=dim, reverse=reverse)
                T.copy(x, Y[bx * bm, 0])
            else:
                T.cumsum(x, y, dim=dim, reverse=reverse)
                T.copy(y, Y[bx * bm, 0])

    x = randn(rng, (M, N), "float32")
    y = poisoned((M, N), "float32")
    compile_cpu(main)(x, y)
    ref = np.zeros((M, N))
    for b in range(0, M, bm):
        tile = np.zeros((bm, bn))
        rows = x[b : b + bm].astype(np.float64)
        tile[: rows.shape[0], :N] = rows  # reads outside the tensor are zeros
        t = np.flip(np.cumsum(np.flip(tile, dim), dim), dim) if reverse else np.cumsum(tile, dim)
        ref[b : b + bm] = t[: rows.shape[0], :N]
    assert_close(y, ref, "float32", scale=float(np.abs(x).sum()))


# ---------------------------------------------------------------------------------------------- fill, clear


def test_fill_clear_regions(rng):
    @T.prim_func
    def main(Y: T.Tensor((8, 16), "float16"), v: T.float32):
        with T.Kernel(1, threads=32) as bx:
            f = T.alloc_fragment((8, 16), "float16")
            T.fill(f, v)
            T.clear(f[2:4, :])
            T.fill(f[5, 3:7], -1.5)
            T.copy(f, Y)

    v = float(rng.standard_normal())
    y = poisoned((8, 16), "float16")
    compile_cpu(main)(y, v)
    ref = np.full((8, 16), np.float16(v), dtype=np.float64)
    ref[2:4] = 0
    ref[5, 3:7] = -1.5
    np.testing.assert_array_equal(y.astype(np.float64), ref)


# -------------------------------------------------------------------------------------------------- atomics


def test_atomic_add_tile_and_element_forms_from_many_blocks(rng):
    nb, M, N = 5, 8, 16

    @T.prim_func
    def main(X: T.Tensor((nb, M, N), "float32"), Acc: T.Tensor((M, N), "float32"), Rows: T.Tensor((M,), "float32"),
             Count: T.Tensor((1,), "int32")):
        with T.Kernel(nb, threads=128) as bx:
            x = T.alloc_fragment((M, N), "float32")
            T.copy(X[bx, 0, 0], x)
            T.atomic_add(Acc, x)  # tile form
            for i, j in T.Parallel(M, N):
                T.atomic_add(Rows[i], x[i, j])  # element form: many iterations add into one element
            T.atomic_add(Count[0], 1)  # element form at block level

    x = randn(rng, (nb, M, N), "float32")
    acc0, rows0 = randn(rng, (M, N), "float32"), randn(rng, (M,), "float32")
    acc, rows, count = acc0.copy(), rows0.copy(), np.array([7], np.int32)
    compile_cpu(main)(x, acc, rows, count)
    x64 = x.astype(np.float64)
    assert_close(acc, acc0 + x64.sum(axis=0), "float32", scale=float(np.abs(x64).sum(axis=0).max()))
    assert_close(rows, rows0 + x64.sum(axis=(0, 2)), "float32", scale=float(np.abs(x64).sum(axis=(0, 2)).max()))
    assert count[0] == 7 + nb


def atomic16_kernel(n, dtype):
    """Each iteration adds its X into its own element of Acc and 1.0 into Acc[n] (n adds into one element)."""

    @T.prim_func
    def main(X: T.Tensor((n,), dtype), Acc: T.Tensor((n + 1,), dtype)):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(n):
                T.atomic_add(Acc[i], X[i])
                T.atomic_add(Acc[n], T.cast(1.0, dtype))

    return main


def atomic16_inputs(rng, n, dtype):
    """(x, acc, expected acc): acc[n] starts where a 16-bit float's spacing is 2, so each add of 1.0 rounds back to
    it (ties to even), as the GPU rounds each atomic add; one rounding of the whole sum would give start + n."""
    start = {"float16": 2048.0, "bfloat16": 256.0}[dtype]
    npdt = tdtype(dtype).np
    x, acc = randn(rng, (n,), dtype), randn(rng, (n + 1,), dtype)
    acc[n] = start
    ref = np.append((acc[:n].astype(np.float64) + x.astype(np.float64)).astype(npdt), npdt.type(start))
    return x, acc, ref


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_float_atomic_adds_round_each_add(rng, dtype, target):
    n = 64
    x, acc, ref = atomic16_inputs(rng, n, dtype)
    tilec.JITKernel(atomic16_kernel(n, dtype), target)(x, acc)
    np.testing.assert_array_equal(acc.astype(np.float64), ref.astype(np.float64))


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_tile_atomic_add_converts_the_tile_to_the_destinations_type_first(target):
    """The tile form of T.atomic_add converts each value to the destination's type before adding it, as the GPU's
    atomicAdd takes it: a float tile into int32 saturates (inf was INT_MIN on cpu, numpy's conversion) and a float32
    tile into float16 is rounded to float16 and then once more by the add (the cpu added in float32 and rounded once:
    1 + (2^-11 + 2^-22) gave 1 + 2^-10, not 1)."""

    @T.prim_func
    def main(X: T.Tensor((8,), "float32"), Y: T.Tensor((8,), "int32"), H: T.Tensor((8,), "float16")):
        with T.Kernel(1, threads=32) as bx:
            t = T.alloc_shared((8,), "float32")
            T.copy(X, t)
            T.atomic_add(Y, t)
            T.atomic_add(H, t)

    x = np.array([np.inf, 3e9, -3e9, np.nan, 2.75, -2.75, 2.0**-11 + 2.0**-22, 0.5], np.float32)
    y = np.array([5, 5, -5, 5, 5, 5, 5, 5], np.int32)
    h = np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float16)
    tilec.JITKernel(main, target)(x, y, h)
    np.testing.assert_array_equal(y, np.array([2**31 - 1 + 5 - 2**32, 2**31 - 1 + 5 - 2**32, 2**31 - 5, 5, 7, 3, 5,
                                               5]).astype(np.int32))
    np.testing.assert_array_equal(h[4:], np.array([3.75, -1.75, 1.0, 1.5], np.float16))


# ------------------------------------------------------------------------------------------------ elementwise


def test_parallel_elementwise_ragged_edges_are_predicated(rng):
    N, blk = 100, 32

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, blk), threads=32) as bx:
            for i in T.Parallel(blk):
                C[bx * blk + i] = A[bx * blk + i] * 2.0 + B[bx * blk + i + 3]  # B reads past N are 0

    a, b = randn(rng, (N,), "float32"), randn(rng, (N,), "float32")
    c = poisoned((N,), "float32")
    compile_cpu(main)(a, b, c)
    b_shift = np.concatenate([b[3:], np.zeros(3)]).astype(np.float64)
    assert_close(c, a.astype(np.float64) * 2 + b_shift, "float32")


def tail_scaled(n, blk):
    """n * 2 by whole blocks of blk, then a T.Parallel over the n % blk left: of no iteration when blk divides n."""
    body, tail = n - n % blk, n % blk

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for k in T.serial(body // blk):
                for i in T.Parallel(blk):
                    B[k * blk + i] = A[k * blk + i] * 2.0
            for _i, j in T.Parallel(1, tail):
                B[body + j] = A[body + j] * 2.0
            for i in T.Parallel(tail - blk):  # never positive here: no iteration
                B[i] = A[i]

    return main


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
@pytest.mark.parametrize("n", [64, 70])
def test_parallel_of_no_iteration_runs_nothing(rng, target, n):
    """A T.Parallel whose static extent is 0 (or below, as range()) runs no iteration: the thread interpreter (simt
    targets) raised a bare ValueError from the layout code ('shape must be a nonempty tuple of positive ints; got
    (1, 0)'), naming no line."""
    a = randn(rng, (n,), "float32")
    b = poisoned((n,), "float32")
    tilec.compile(tail_scaled(n, 32), target=target)(a, b)
    assert_close(b, a.astype(np.float64) * 2, "float32")


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_tile_sizes_of_numpy_integers(rng, target):
    """Tile sizes read from numpy (np.int64 from an array of configs): T.Tensor, T.alloc_* and T.Kernel took them, but
    T.Parallel refused its extents ('extents must be ints, got np.int64(16)')."""
    M, N, bm, bn = 21, 19, np.int64(16), np.int32(16)

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=64) as (bx, by):
            f = T.alloc_fragment((bm, bn), "float32")
            T.copy(A[by * bm, bx * bn], f)
            for i, j in T.Parallel(bm, bn):
                f[i, j] = f[i, j] * 2.0
            T.copy(f, B[by * bm, bx * bn])

    a = randn(rng, (M, N), "float32")
    b = tilec.compile(main, target=target, out_idx=[-1])(a)
    assert_close(b, a.astype(np.float64) * 2, "float32")


def test_parallel_with_conditions_selects_and_math(rng):
    @T.prim_func
    def main(A: T.Tensor((16, 24), "float16"), B: T.Tensor((16, 24), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((16, 24), "float16")
            T.copy(A, s)
            for i, j in T.Parallel(16, 24):
                if (i + j) % 3 == 0:
                    B[i, j] = T.exp2(T.cast(s[i, j], "float32")) - T.sqrt(T.abs(T.cast(s[i, j], "float32")))
                else:
                    B[i, j] = T.if_then_else(j < 12, T.tanh(T.cast(s[i, j], "float32")), T.max(s[i, j], 0.0))

    a = randn(rng, (16, 24), "float16")
    b = poisoned((16, 24), "float32")
    compile_cpu(main)(a, b)
    x = a.astype(np.float64)
    i, j = np.meshgrid(np.arange(16), np.arange(24), indexing="ij")
    ref = np.where((i + j) % 3 == 0, np.exp2(x) - np.sqrt(np.abs(x)), np.where(j < 12, np.tanh(x), np.maximum(x, 0)))
    # T.max(s, 0.0) is computed in float16: round the reference the same way where it applies
    ref = np.where(((i + j) % 3 != 0) & (j >= 12), np.maximum(x, 0).astype(np.float16), ref)
    assert_close(b, ref, "float32", scale=1.0)


def test_serial_loop_with_alloc_var_accumulator(rng):
    @T.prim_func
    def main(A: T.Tensor((4, 10), "float32"), S: T.Tensor((4,), "float32")):
        with T.Kernel(4, threads=32) as bx:
            acc = T.alloc_var("float32", init=0.0)
            for k in T.serial(10):
                acc += A[bx, k]
            S[bx] = acc

    a = randn(rng, (4, 10), "float32")
    s = poisoned((4,), "float32")
    compile_cpu(main)(a, s)
    assert_close(s, a.astype(np.float64).sum(axis=1), "float32", scale=float(np.abs(a).sum(axis=1).max()))


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_an_ellipsis_index_takes_the_remaining_dimensions_whole(rng, target):
    """`T.copy(A[bx, ...], s)` was refused ('indexed with 1'): `...` now means what it does in numpy."""
    @T.prim_func
    def main(A: T.Tensor((4, 8, 16), "float32"), B: T.Tensor((4, 8, 16), "float32"),
             C: T.Tensor((4, 8), "float32")):
        with T.Kernel(4, threads=128) as bx:
            s = T.alloc_shared((8, 16), "float32")
            T.copy(A[bx, ...], s)
            T.copy(s[...], B[bx, ...])
            T.copy(s[..., 3], C[bx, ...])

    a = randn(rng, (4, 8, 16), "float32")
    b, c = poisoned((4, 8, 16), "float32"), poisoned((4, 8), "float32")
    tilec.compile(main, target=target)(a, b, c)
    np.testing.assert_array_equal(b, a)
    np.testing.assert_array_equal(c, a[..., 3])


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_a_0d_tensor_read_by_name_is_its_element(rng, target):
    """A 0-d array passed to an eager kernel is a 0-d tensor, and `x[i] * alpha` said "`*` on the tile alpha:
    arithmetic in a kernel is on elements (alpha[i] * ...)" (before: 'got Buffer alpha'), which a 0-d array has
    none of; like numpy's 0-d arrays (and a T.alloc_var), a 0-d tensor read by name is now its element, read when
    the kernel runs (one kernel for every value)."""
    @tilec.jit(target=target)
    def scale(x, alpha):
        N = T.const("N")
        x: T.Tensor[[N], T.float32]
        y = T.empty((N,), "float32")
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(N):
                y[i] = T.if_then_else(alpha > 0, x[i] * alpha, T.exp(alpha) + x[i]) + (alpha if i < 2 else 0.0)
        return y

    x = randn(rng, (64,), "float32")
    x64 = x.astype(np.float64)
    for value in (2.5, -0.5):
        a = np.array(value, np.float32)
        head = np.where(np.arange(64) < 2, value, 0.0)
        want = (x64 * value if value > 0 else np.exp(np.float64(value)) + x64) + head
        assert_close(scale(x, a), want, "float32", scale=8.0)
    assert len(scale._kernels) == 1 and len({id(k) for k in scale._kernels.values()}) == 1

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), s: T.Tensor((), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                B[i] = A[i] * s + s[()]

    b = poisoned((64,), "float32")
    tilec.compile(main, target=target)(x, np.array(3.0, np.float32), b)
    assert_close(b, x64 * 3 + 3, "float32", scale=8.0)


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_scalar_parameters_left_out_of_a_call_take_their_defaults(rng, target):
    """`n: T.int32 = 3` on a @T.prim_func parameter was ignored: every call still had to pass n ('takes 3
    argument(s) (A, n, alpha), got 1')."""
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32"), n: T.int32 = 3,
             alpha: T.float32 = 0.5):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                B[i] = A[i] * alpha + n

    assert "n: T.int32 = 3," in str(main) and "alpha: T.float32 = 0.5," in str(main)
    kernel = tilec.compile(main, target=target, out_idx=[1])
    a = randn(rng, (64,), "float32")
    ref = a.astype(np.float64)
    for args, kwargs, want in [((a,), {}, ref * 0.5 + 3), ((a, 5), {}, ref * 0.5 + 5),
                               ((a,), {"alpha": 2.0}, ref * 2 + 3), ((), {"A": a, "n": -1}, ref * 0.5 - 1),
                               ((a, 7, -1.0), {}, -ref + 7)]:
        assert_close(kernel(*args, **kwargs), want, "float32", scale=8.0)
    b = poisoned((64,), "float32")
    tilec.compile(main, target=target)(a, b)  # without out_idx: B is passed, n and alpha left out
    assert_close(b, ref * 0.5 + 3, "float32", scale=8.0)


# ---------------------------------------------------------------------------------------------- flash attention


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention(rng, causal):
    fa = load_example("03_flash_attention")
    b, h, n, d = 1, 2, 100, 32  # seq_len 100 is not a multiple of the 64-row tile
    kernel = fa.flash_attention(b, h, n, d, causal)
    q, k, v = (randn(rng, (b, h, n, d), "float16") for _ in range(3))
    o = kernel(q, k, v)
    assert_close(o, fa.reference(q, k, v, causal), "float16", scale=float(np.abs(v.astype(np.float64)).max()))


# ------------------------------------------------------------------------------------------------ fp8, int4


@pytest.mark.parametrize("dtype", ["float8_e4m3", "float8_e5m2"])
def test_fp8_round_trip(rng, dtype):
    @T.prim_func
    def main(A: T.Tensor((16, 32), dtype), B: T.Tensor((16, 32), dtype), C: T.Tensor((16, 32), "float32")):
        with T.Kernel(1, threads=64) as bx:
            f = T.alloc_fragment((16, 32), "float32")
            T.copy(A, f)  # fp8 -> fp32
            T.copy(f, C)
            for i, j in T.Parallel(16, 32):
                f[i, j] = f[i, j] * 0.75
            T.copy(f, B)  # fp32 -> fp8, rounding

    npd = T.dtype.np.fget(getattr(T, dtype))
    a = (rng.standard_normal((16, 32)) * 4).astype(npd)
    b = np.zeros((16, 32), npd)
    c = poisoned((16, 32), "float32")
    compile_cpu(main)(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.float32))
    want = (a.astype(np.float32) * np.float32(0.75)).astype(npd)
    np.testing.assert_array_equal(b.astype(np.float32), want.astype(np.float32))
    assert npd == np.dtype(ml_dtypes.float8_e4m3fn if dtype == "float8_e4m3" else ml_dtypes.float8_e5m2)


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
@pytest.mark.parametrize("dtype", ["float8_e4m3", "float8_e5m2"])
def test_fp8_conversion_saturates_like_cuda(rng, dtype, target):
    """CUDA converts to fp8 with ``__NV_SATFINITE`` (checked on the host with nvcc's cuda_fp8.h): a value beyond the
    largest finite one, infinity included, becomes that value (e4m3: 448, e5m2: 57344); NaN stays NaN. The
    interpreters made it NaN (e4m3) or infinity (e5m2), as numpy's ml_dtypes cast does."""
    top = 448.0 if dtype == "float8_e4m3" else 57344.0

    @T.prim_func
    def main(A: T.Tensor((8, 32), "float32"), B: T.Tensor((8, 32), dtype), C: T.Tensor((8, 32), dtype)):
        with T.Kernel(1, threads=64) as bx:
            f = T.alloc_fragment((8, 32), "float32")
            T.copy(A, f)
            T.copy(f, B)  # a tile copy converting to fp8
            for i, j in T.Parallel(8, 32):
                C[i, j] = f[i, j] * 2.0  # an element store converting to fp8

    a = (rng.standard_normal((8, 32)) * top).astype(np.float32)  # about a third beyond the range
    a[0, :4] = [np.inf, -np.inf, 1e30, -1e30]
    a[1, 0] = np.nan
    npd = T.dtype.np.fget(getattr(T, dtype))
    b, c = np.zeros((8, 32), npd), np.zeros((8, 32), npd)
    tilec.compile(main, target=target)(a, b, c)

    def ref(x):  # saturate, then round to nearest even (the in-range conversion is ml_dtypes')
        return np.clip(x, -top, top).astype(npd).astype(np.float64)

    assert (np.abs(a[np.isfinite(a)]) > top).sum() > 20
    for got, x in ((b, a), (c, a * np.float32(2))):
        g = got.astype(np.float64)
        assert np.isnan(g[1, 0]) and np.isnan(g).sum() == 1
        np.testing.assert_array_equal(g, ref(x))
        assert np.nanmax(g) == top and np.nanmin(g) == -top


@pytest.mark.parametrize("n", [32, 7])
def test_int4_packed_round_trip(rng, n):
    @T.prim_func
    def main(A: T.Tensor((4, n), "int4"), B: T.Tensor((4, n), "int4"), C: T.Tensor((4, n), "int32")):
        with T.Kernel(1, threads=32) as bx:
            f = T.alloc_fragment((4, n), "int32")
            T.copy(A, f)
            T.copy(f, C)
            for i, j in T.Parallel(4, n):
                f[i, j] = f[i, j] + 3  # may leave [-8, 7]: the int4 store wraps
            T.copy(f, B)

    vals = rng.integers(-8, 8, (4, n)).astype(np.int8)
    a = np.zeros((4, (n + 1) // 2), np.int8)
    pack_int4(vals, a)
    np.testing.assert_array_equal(unpack_int4(a, n), vals)
    b = np.zeros_like(a)
    c = poisoned((4, n), "int32")
    compile_cpu(main)(a, b, c)
    np.testing.assert_array_equal(c, vals)
    want = ((vals.astype(np.int16) + 3 + 8) % 16 - 8).astype(np.int8)
    np.testing.assert_array_equal(unpack_int4(b, n), want)


def test_int4_inputs_are_left_as_they_are():
    """The CPU interpreter packed every int4 argument back after the run, inputs included: a read-only input failed
    (numpy's 'assignment destination is read-only') and an odd row's spare nibble was zeroed in the caller's input."""
    @T.prim_func
    def main(A: T.Tensor((2, 3), "int4"), C: T.Tensor((2, 3), "int32")):
        with T.Kernel(1, threads=32) as bx:
            for i, j in T.Parallel(2, 3):
                C[i, j] = T.cast(A[i, j], "int32")

    a = np.array([[0x21, 0x53], [0x7F, 0xE8 - 256]], np.int8)  # the high nibble of each row's last byte is spare
    a.setflags(write=False)
    c = compile_cpu(main, out_idx=[-1])(a)
    np.testing.assert_array_equal(c, [[1, 2, 3], [-1, 7, -8]])
    np.testing.assert_array_equal(a, [[0x21, 0x53], [0x7F, 0xE8 - 256]])


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_numpy_subclasses_run_as_plain_arrays(rng, target):
    """An np.matrix stays two-dimensional when flattened: the thread interpreter's flat view of an np.matrix output
    was (1, n) and its stores failed ('shape mismatch: value array ... could not be broadcast')."""
    @T.prim_func
    def main(A: T.Tensor((6, 4), "float32"), B: T.Tensor((6, 4), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i, j in T.Parallel(6, 4):
                B[i, j] = A[i, j] * 2.0 + 1.0

    a = randn(rng, (6, 4), "float32")
    b = np.asmatrix(poisoned((6, 4), "float32"))
    tilec.compile(main, target=target)(np.asmatrix(a), b)
    np.testing.assert_array_equal(np.asarray(b), a * 2 + 1)


# --------------------------------------------------------------------------------------------------- torch


def test_torch_cpu_tensors(rng):
    torch = pytest.importorskip("torch")
    kernel = load_example("01_gemm").matmul(64, 48, 32, block_M=32, block_N=32)
    a = torch.from_numpy(randn(rng, (64, 32), "float16"))
    b = torch.from_numpy(randn(rng, (32, 48), "float16"))
    c = kernel(a, b)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.float16
    assert_close(c.numpy(), a.double().numpy() @ b.double().numpy(), "float16")
    bf = compile_cpu(gemm_kernel(32, 32, 32, 32, 32, 32, "bfloat16", "bfloat16"))
    x = torch.randn(32, 32, dtype=torch.bfloat16)
    y = torch.randn(32, 32, dtype=torch.bfloat16)
    out = torch.full((32, 32), float("nan"), dtype=torch.bfloat16)
    bf(x, y, out)
    assert_close(out.float().numpy(), x.double().numpy() @ y.double().numpy(), "bfloat16")


# ------------------------------------------------------------------------------------------------ dynamic sizes


@tilec.jit(target="cpu", out_idx=[1])
def rows_scaled(block=128):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, 64), "float32"), Y: T.Tensor((M, 64), "float32")):
        with T.Kernel(T.ceildiv(M, block), threads=128) as bx:
            for i, j in T.Parallel(block, 64):
                if bx * block + i < M:
                    Y[bx * block + i, j] = X[bx * block + i, j] * 3.0 + j

    return main


@pytest.mark.parametrize("m", [300, 1, 0])
def test_dynamic_rows_including_an_empty_array(m, rng):
    k = rows_scaled()
    x = randn(rng, (m, 64), "float32")
    y = k(x)
    assert y.shape == (m, 64)
    np.testing.assert_allclose(y, x.astype(np.float64) * 3 + np.arange(64), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_ceildiv_of_a_size_near_the_int32_limit(rng, target):
    """T.ceildiv(M, b) was built as (M + b - 1) // b, which wraps in int32 for M > 2**31 - b: with M = 2**31 - 1 a
    loop over T.ceildiv(M, 2**30) tiles ran no trip (as the GPU's would), and the output, sized 2 on the host,
    came back unwritten. It is now M // b + (M % b + b - 1) // b, which never leaves int32. (A stride-0 view
    gives the 2**31 - 1 elements without their memory.)"""

    @tilec.jit(target=target)
    def tile_heads(X):
        M, S = T.dynamic("M"), T.dynamic("S")
        X: T.StridedTensor[[M], [S], T.int32]
        Y = T.empty((T.ceildiv(M, 2**30),), "int32")
        with T.Kernel(1, threads=32) as bx:
            for t in T.serial(T.ceildiv(M, 2**30)):
                Y[t] = X[M - 1 - t * 2**30] + t
        return Y

    for m in (2**31 - 1, 2**30 + 1, 2**30, 5):
        v = int(rng.integers(-1000, 1000))
        x = np.broadcast_to(np.int32(v), (m,))
        np.testing.assert_array_equal(tile_heads(x), v + np.arange(-(-m // 2**30)), err_msg=str(m))


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_strided_tensors_take_an_empty_array_whatever_its_strides(rng, target):
    """numpy 2 gives a new empty array zero strides (np.empty((0, 64)).strides == (0, 0)): a T.StridedTensor refused
    it ('stride 1 must be 1, got 0') though it has no element to address. A stride symbol takes its value from a
    non-empty argument when one binds it."""
    M, S = T.dynamic("M"), T.dynamic("S")

    @T.prim_func
    def main(X: T.StridedTensor((M, 64), (S, 1), "float32"), W: T.StridedTensor((M, 64), (128, 1), "float32"),
             Y: T.Tensor((M, 64), "float32")):
        with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
            for i, j in T.Parallel(32, 64):
                if bx * 32 + i < M:
                    Y[bx * 32 + i, j] = X[bx * 32 + i, j] * 3.0 + W[bx * 32 + i, j]

    kernel = tilec.compile(main, target=target, out_idx=[-1])
    empty = np.empty((0, 64), np.float32)
    assert kernel(empty, empty).shape == (0, 64)
    x, w = randn(rng, (40, 96), "float32"), randn(rng, (40, 128), "float32")
    y = kernel(x[:, :64], w[:, :64])
    np.testing.assert_allclose(y, x[:, :64].astype(np.float64) * 3 + w[:, :64], rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:sm_90a"])
@pytest.mark.parametrize("num_stages", [1, 2, 3])
def test_pipelined_k_loop_over_empty_operands(rng, target, num_stages):
    """K = 0: the K loop runs no iteration, yet a pipeline's trips still issue their copies, guarded to read
    nothing; the thread interpreter evaluated both sides of the guard's ``c ? A[i] : 0`` and named a read of A[0],
    which C never makes (A has no elements)."""
    M, K = T.dynamic("M"), T.dynamic("K")

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, 72), "float16"), C: T.Tensor((M, 72), "float32")):
        with T.Kernel(2, T.ceildiv(M, 64), threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=num_stages):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[k * 32, bx * 64], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 64, bx * 64])

    kernel = tilec.compile(main, target=target)
    for k in (0, 40):
        a, b, c = randn(rng, (70, k), "float16"), randn(rng, (k, 72), "float16"), poisoned((70, 72), "float32")
        kernel(a, b, c)
        assert_close(c, a.astype(np.float64) @ b.astype(np.float64), "float16", scale=1.0)


NARROW_INTS = ("int8", "uint8", "int16", "uint16")


def narrow_int_atomic_kernel():
    """256 int32 values added into 16 elements of each 8/16-bit int type (16 adds an element, wrapping)."""

    @T.prim_func
    def main(X: T.Tensor((256,), "int32"), A: T.Tensor((16,), NARROW_INTS[0]), B: T.Tensor((16,), NARROW_INTS[1]),
             C: T.Tensor((16,), NARROW_INTS[2]), D: T.Tensor((16,), NARROW_INTS[3])):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(256):
                T.atomic_add(A[i % 16], X[i])
                T.atomic_add(B[i % 16], X[i])
                T.atomic_add(C[i % 16], X[i])
                T.atomic_add(D[i % 16], X[i])

    return main


def narrow_int_atomic_inputs(rng):
    """(x, the four accumulators, their expected values: numpy's wrapping sums)."""
    x = rng.integers(-40000, 40000, 256).astype(np.int32)
    accs = [rng.integers(np.iinfo(d).min, np.iinfo(d).max, 16).astype(d) for d in NARROW_INTS]
    sums = x.astype(np.int64).reshape(16, 16).sum(axis=0)
    refs = [((a.astype(np.int64) + sums) % 2 ** (8 * a.itemsize)).astype(np.dtype(d).str[1:].replace("i", "u"))
            .view(d) for a, d in zip(accs, NARROW_INTS)]
    return x, accs, refs


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_atomic_adds_of_8_and_16_bit_ints_wrap(rng, target):
    x, accs, refs = narrow_int_atomic_inputs(rng)
    tilec.JITKernel(narrow_int_atomic_kernel(), target)(x, *accs)
    for a, r in zip(accs, refs):
        np.testing.assert_array_equal(a, r)


def int_to_bf16_kernel(n):
    @T.prim_func
    def main(X: T.Tensor((n,), "int32"), Y: T.Tensor((n,), "int64"), Z: T.Tensor((n,), "float64"),
             O: T.Tensor((n,), "bfloat16"), P: T.Tensor((n,), "bfloat16"), Q: T.Tensor((n,), "bfloat16")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(n):
                O[i] = T.cast(X[i], "bfloat16")
                P[i] = T.cast(Y[i], "bfloat16")
                Q[i] = T.cast(Z[i], "bfloat16")

    return main


def int_to_bf16_inputs(rng, n):
    """Ints of up to 31 / 52 bits and doubles, with ties that rounding through float32 gets wrong (2^24 + 2^16 + 1:
    float32 rounds it to the tie 2^24 + 2^16, which then goes to even, 2^24; once rounded it is 2^24 + 2^17); the
    three inputs and the three results, each the nearest bfloat16 looked up, not converted (some ml_dtypes versions
    round ints through float32, twice)."""
    x = (rng.integers(-(2**31), 2**31, n) >> rng.integers(0, 31, n)).astype(np.int32)
    y = rng.integers(-(2**52), 2**52, n) >> rng.integers(0, 52, n)
    ties = [2**24 + 2**16 + 1, -(2**24 + 2**16 + 1), 2**24 + 3 * 2**16 - 1, 2**30 + 2**22 + 1]
    x[:4] = ties
    y[:4] = ties
    y[4] = 2**40 + 2**32 + 1
    z = rng.standard_normal(n) * 10.0 ** rng.integers(-20, 20, n)
    z[:6] = [1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30), 3 * 2**-9 + 2**-40, 1e-39 * (1 + 2**-9), 3.3961e38, -np.inf]
    return (x, y, z), tuple(bf16_exact(v) for v in (x, y, z))


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_int_and_double_to_bfloat16_round_once(rng, target):
    n = 64
    ins, refs = int_to_bf16_inputs(rng, n)
    assert float(refs[0][0]) == 2**24 + 2**17 and float(refs[2][0]) == 1 + 2**-7  # the reference rounds once
    outs = [poisoned((n,), "bfloat16") for _ in refs]
    tilec.JITKernel(int_to_bf16_kernel(n), target)(*ins, *outs)
    for out, ref in zip(outs, refs):
        np.testing.assert_array_equal(out.view(np.uint16), ref.view(np.uint16))


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
@pytest.mark.parametrize("src", ["float32", "bfloat16"])
def test_float_to_int_cast_saturates_to_32_bits_like_the_gpu(target, src):
    """Float to int conversions run as cvt.rzi.s32.f32 (v_cvt_i32_f32 on AMD): beyond int32's range they saturate
    and NaN is 0; a narrower int keeps the low bits of that (numpy gave INT_MIN for all three)."""
    @T.prim_func
    def main(X: T.Tensor((64,), src), O: T.Tensor((64,), "int8"), P: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64) as bx:
            f = T.alloc_fragment((64,), src)
            T.copy(X, f)
            for i in T.Parallel(64):
                O[i] = T.cast(f[i], "int8")
                P[i] = T.cast(f[i], "int32")

    x = np.full(64, 1.5, np.float32)
    x[:8] = [1e10, -1e10, np.nan, 3e9, -300.0, -129.0, 127.75, -2.5]
    x = x.astype(tdtype(src).np)
    p_ref = np.trunc(np.nan_to_num(x.astype(np.float64))).clip(-(2**31), 2**31 - 1).astype(np.int64)
    o, p = np.zeros(64, np.int8), np.zeros(64, np.int32)
    tilec.JITKernel(main, target)(x, o, p)
    np.testing.assert_array_equal(p, p_ref)
    np.testing.assert_array_equal(o, ((p_ref + 128) % 256 - 128).astype(np.int8))


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_float_to_64_bit_int_cast_saturates_like_the_gpu(target):
    """To int64 / uint64 a float converts as cvt.rzi.s64.f64 (and the HIP header's tl::f2i): saturated to 64 bits,
    NaN to 0 (numpy's conversion gave the int64 minimum for 1e30, inf and NaN alike)."""
    @T.prim_func
    def main(X: T.Tensor((64,), "float64"), O: T.Tensor((64,), "int64"), P: T.Tensor((64,), "uint64")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                O[i] = T.cast(X[i], "int64")
                P[i] = T.cast(X[i], "uint64")

    x = np.full(64, -2.5)
    x[:9] = [1e30, -1e30, np.nan, np.inf, -np.inf, 2.0**63, 2.0**64, 3e18, 1.5e19]
    o, p = np.zeros(64, np.int64), np.zeros(64, np.uint64)
    tilec.JITKernel(main, target)(x, o, p)
    top, bottom = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    np.testing.assert_array_equal(o[:10], [top, bottom, 0, top, bottom, top, top, 3 * 10**18, top, -2])
    np.testing.assert_array_equal(p[:10], np.array([2**64 - 1, 0, 0, 2**64 - 1, 0, 2**63, 2**64 - 1, 3 * 10**18,
                                                    15 * 10**18, 0], np.uint64))


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_a_constant_cast_folds_as_the_same_cast_runs(target):
    """T.cast of a constant is folded when the kernel is built: to fp8 and from a float to an int it gave what numpy
    or Python give (1000.0 to float8_e4m3 NaN, 3e9 to int32 -1294967296 wrapped, -1.0 to uint32 4294967295), where
    the same cast of a value read at run time saturates (448, 2147483647, 0) on every target."""
    fp8 = ["float8_e4m3", "float8_e5m2"] if target != "simt:gfx90a" else []  # (HIP has no fp8 type)
    ints = ["int32", "uint32", "int8", "int64", "uint64"]
    values = [1000.0, 1e6, -1e6, 3e9, -1.0, -3e9, 2e19, -2e19, 300.7]

    @T.prim_func
    def main(X: T.Tensor((len(values),), "float32"), F: T.Tensor((2, 2, len(values)), "float32"),
             I: T.Tensor((2, len(ints), len(values)), "int64")):
        with T.Kernel(1, threads=32) as bx:
            for j in list(range(len(values))):
                for d in list(range(len(fp8))):
                    F[0, d, j] = T.cast(T.cast(values[j], fp8[d]), "float32")
                    F[1, d, j] = T.cast(T.cast(X[j], fp8[d]), "float32")
                for d in list(range(len(ints))):
                    I[0, d, j] = T.cast(T.cast(values[j], ints[d]), "int64")
                    I[1, d, j] = T.cast(T.cast(X[j], ints[d]), "int64")

    x = np.array(values, np.float32)
    f, i = np.zeros((2, 2, len(values)), np.float32), np.zeros((2, len(ints), len(values)), np.int64)
    tilec.JITKernel(main, target)(x, f, i)
    np.testing.assert_array_equal(f[0], f[1])
    np.testing.assert_array_equal(i[0], i[1])
    if fp8:
        assert f[0, 0, 0] == 448 and f[0, 1, 1] == 57344
    assert i[0, 0, 3] == 2**31 - 1 and i[0, 1, 4] == 0 and i[0, 2, 3] == -1


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_arithmetic_on_float_constants_folds_with_their_typed_values(target):
    """Arithmetic on two float constants is folded when the kernel is built: it computed with the Python floats
    written (T.float32(2**24 + 1) - T.float32(2**24) gave 1.0), where the kernel's float32 values are 2**24 and 2**24,
    whose difference every target computes as 0; the folded result is now the same as the run-time one."""
    dtype, a, b = "float32", 2.0**24 + 1, 2.0**24

    @T.prim_func
    def main(X: T.Tensor((2,), dtype), O: T.Tensor((2, 3), dtype)):
        with T.Kernel(1, threads=32) as bx:
            O[0, 0] = T.cast(a, dtype) - T.cast(b, dtype)
            O[0, 1] = T.cast(a, dtype) * T.cast(0.5, dtype)
            O[0, 2] = T.if_then_else(T.cast(a, dtype) == T.cast(b, dtype), 1.0, 0.0)
            O[1, 0] = X[0] - X[1]
            O[1, 1] = X[0] * T.cast(0.5, dtype)
            O[1, 2] = T.if_then_else(X[0] == X[1], 1.0, 0.0)

    o = poisoned((2, 3), dtype)
    tilec.JITKernel(main, target)(np.array([a, b], dtype), o)
    np.testing.assert_array_equal(o[0], o[1])
    np.testing.assert_array_equal(o[0], [0.0, b / 2, 1.0])


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_min_max_of_constants_skip_nan_as_at_run_time(target):
    """T.max / T.min of two constants is folded with Python's max / min, which kept a NaN first operand (T.max(T.nan(),
    1.0) gave NaN); every target's max and min are fmaxf / fminf, which take the other operand."""

    @T.prim_func
    def main(X: T.Tensor((2,), "float32"), O: T.Tensor((2, 4), "float32")):
        with T.Kernel(1, threads=32) as bx:
            O[0, 0] = T.max(T.nan("float32"), T.float32(1.0))
            O[0, 1] = T.min(T.nan("float32"), T.float32(1.0))
            O[0, 2] = T.max(T.float32(1.0), T.nan("float32"))
            O[0, 3] = T.min(T.float32(1.0), T.nan("float32"))
            O[1, 0] = T.max(X[0], X[1])
            O[1, 1] = T.min(X[0], X[1])
            O[1, 2] = T.max(X[1], X[0])
            O[1, 3] = T.min(X[1], X[0])

    o = poisoned((2, 4), "float32")
    tilec.JITKernel(main, target)(np.array([np.nan, 1.0], np.float32), o)
    np.testing.assert_array_equal(o, np.ones((2, 4), np.float32))


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_float_constant_divided_by_zero_folds_to_inf(target):
    """T.float32(1.0) / T.float32(0.0), folded when the kernel is built, failed with Python's ZeroDivisionError (no
    kernel line); it is inf (and 0.0 / 0.0 NaN), as the same division at run time gives."""

    @T.prim_func
    def main(X: T.Tensor((3,), "float32"), O: T.Tensor((2, 3), "float32")):
        with T.Kernel(1, threads=32) as bx:
            O[0, 0] = T.float32(1.0) / T.float32(0.0)
            O[0, 1] = T.float32(-1.0) / T.float32(0.0)
            O[0, 2] = T.float32(0.0) / T.float32(0.0)
            O[1, 0] = X[0] / X[2]
            O[1, 1] = -X[0] / X[2]
            O[1, 2] = X[2] / X[2]

    o = poisoned((2, 3), "float32")
    tilec.JITKernel(main, target)(np.array([1.0, -1.0, 0.0], np.float32), o)
    np.testing.assert_array_equal(o[0], o[1])
    np.testing.assert_array_equal(o[0], [np.inf, -np.inf, np.nan])


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_int_and_float_constants_fold_in_their_common_type(target):
    """An int constant with a float one is computed in the float type (the int converted first) on every target; when
    both were constants the fold compared the Python values: T.int32(2**24 + 1) == T.float32(2**24) was False, where
    the float32 2**24 + 1 is 2**24 (True), and T.int32(2**24 + 1) - T.float32(2**24) gave 1, not 0."""

    @T.prim_func
    def main(I: T.Tensor((1,), "int32"), F: T.Tensor((1,), "float32"), O: T.Tensor((2, 2), "float32")):
        with T.Kernel(1, threads=32) as bx:
            O[0, 0] = T.if_then_else(T.int32(2**24 + 1) == T.float32(2.0**24), 1.0, 0.0)
            O[0, 1] = T.int32(2**24 + 1) - T.float32(2.0**24)
            O[1, 0] = T.if_then_else(I[0] == F[0], 1.0, 0.0)
            O[1, 1] = I[0] - F[0]

    o = poisoned((2, 2), "float32")
    tilec.JITKernel(main, target)(np.array([2**24 + 1], np.int32), np.array([2.0**24], np.float32), o)
    np.testing.assert_array_equal(o[0], o[1])
    np.testing.assert_array_equal(o[0], [1.0, 0.0])


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_not_of_a_constant_bool_folds_to_its_logical_not(target):
    """~ of a bool is its logical not on every target; of a constant bool (a comparison of constants) it folded to
    ~1 = -2 stored as a bool, True: ~(T.int32(3) > 2) selected the first branch."""

    @T.prim_func
    def main(X: T.Tensor((1,), "int32"), O: T.Tensor((2, 2), "int32")):
        with T.Kernel(1, threads=32) as bx:
            O[0, 0] = T.if_then_else(~(T.int32(3) > 2), 1, 0)
            O[0, 1] = T.if_then_else(~(T.int32(1) > 2), 1, 0)
            O[1, 0] = T.if_then_else(~(X[0] > 2), 1, 0)
            O[1, 1] = T.if_then_else(~(X[0] > 4), 1, 0)

    o = poisoned((2, 2), "int32")
    tilec.JITKernel(main, target)(np.array([3], np.int32), o)
    np.testing.assert_array_equal(o, [[0, 1], [0, 1]])


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_a_python_int_above_int64_is_a_uint64_constant(target):
    """A Python int of [2**63, 2**64) in a kernel was wrapped into int64: T.cast(2**63 + 2**40, "float32") gave
    -9.2e18. It is a uint64 constant (converted as a uint64 value read at run time is), and one no 64-bit type holds
    is an error at its line."""
    big = 2**63 + 2**40

    @T.prim_func
    def main(U: T.Tensor((1,), "uint64"), O: T.Tensor((2, 2), "float32")):
        with T.Kernel(1, threads=32) as bx:
            O[0, 0] = T.cast(big, "float32")
            O[0, 1] = T.float32(big + 1)
            O[1, 0] = T.cast(U[0], "float32")
            O[1, 1] = T.cast(U[0] + 1, "float32")

    o = poisoned((2, 2), "float32")
    tilec.JITKernel(main, target)(np.array([big], np.uint64), o)
    np.testing.assert_array_equal(o[0], o[1])
    assert o[0, 0] == np.float32(big)

    def too_big():
        @T.prim_func
        def main(O: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                O[0] = T.cast(2**64, "float32")

    with pytest.raises(tilec.TilecError, match=r"test_interp.py:\d+.*constant 18446744073709551616 does not fit"):
        too_big()


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_t_max_min_select_and_floordiv_widen_a_python_int_the_kernel_int_cannot_hold(target):
    """A Python int beside an int8 value that int8 cannot hold was wrapped into int8 by T.max, T.min,
    T.if_then_else, T.floordiv and T.floormod (T.max(A[i], 1000) was max(A[i], -24)), where `a + 1000`,
    `max(a, 1000)` and `a if c else 1000` widen the operation to int64: they widen too."""

    @T.prim_func
    def main(A: T.Tensor((64,), "int8"), O: T.Tensor((64, 6), "int64")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                O[i, 0] = T.max(A[i], 1000)
                O[i, 1] = T.min(A[i], -1000)
                O[i, 2] = T.if_then_else(A[i] > 0, A[i], 1000)
                O[i, 3] = T.floordiv(A[i], 1000)
                O[i, 4] = T.floormod(A[i], 1000)
                O[i, 5] = T.truncdiv(A[i] // 2, -1000) + T.max(A[i], 300 - 1000)

    a = np.random.default_rng().integers(-128, 128, 64).astype(np.int8)
    o = poisoned((64, 6), "int64")
    tilec.JITKernel(main, target)(a, o)
    x = a.astype(np.int64)
    want = np.stack([np.maximum(x, 1000), np.minimum(x, -1000), np.where(x > 0, x, 1000), x // 1000, x % 1000,
                     np.maximum(x, -700)], axis=1)
    np.testing.assert_array_equal(o, want)


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_truncdiv_of_a_types_minimum_and_of_alloc_vars(target):
    """T.truncdiv divided the operands' absolute values, which wraps for a type's minimum (int8 -128 // 3 gave 43, not
    -42); and a T.alloc_var passed to T.max (or any T.* math function) failed ("'>' not supported between instances of
    'int' and 'Buffer'"): it is read as its value, as in `v + 1`."""

    @T.prim_func
    def main(A: T.Tensor((64,), "int8"), D: T.Tensor((64,), "int8"), O: T.Tensor((64, 3), "int32"),
             F: T.Tensor((64,), "float32"), G: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            v = T.alloc_var("int8")
            for i in T.serial(64):
                v = A[i]
                O[i, 0] = T.truncdiv(A[i], D[i])
                O[i, 1] = T.max(v, 1000) + T.min(v, T.int8(5))
                O[i, 2] = T.truncdiv(T.int32(-2147483648) + A[i] * 0, T.cast(D[i], "int32"))
                G[i] = T.truncdiv(F[i], 0.75)

    rng = np.random.default_rng()
    a = rng.integers(-128, 128, 64).astype(np.int8)
    a[:4] = -128
    d = rng.choice([-7, -3, -2, -1, 1, 2, 3, 5, 127], 64).astype(np.int8)
    d[0] = -1  # -128 / -1 leaves int8: it wraps to -128, as the C division of the type does
    f = rng.standard_normal(64).astype(np.float32) * 10
    o, g = poisoned((64, 3), "int32"), poisoned((64,), "float32")
    tilec.JITKernel(main, target)(a, d, o, f, g)
    x, y = a.astype(np.int64), d.astype(np.int64)
    q = np.trunc(x / y).astype(np.int64)
    np.testing.assert_array_equal(o[:, 0], ((q + 128) % 256) - 128)
    np.testing.assert_array_equal(o[:, 1], 1000 + np.minimum(x, 5))
    q32 = np.trunc(-2147483648 / y).astype(np.int64)
    np.testing.assert_array_equal(o[:, 2], ((q32 + 2**31) % 2**32) - 2**31)
    np.testing.assert_array_equal(g, np.trunc(f.astype(np.float32) / np.float32(0.75)))


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_truncdiv_by_a_python_int_keeps_the_kernel_values_type(target):
    """T.truncdiv(A[i], 9) of a uint8 (or int8) value is of A's type, as A[i] // 9 is: the Python int was made an
    int32 constant, so the quotient was an int32 (~q was negative, q * 8 did not wrap)."""

    @T.prim_func
    def main(A: T.Tensor((64,), "uint8"), B: T.Tensor((64,), "int8"), O: T.Tensor((64, 4), "int32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                O[i, 0] = (~T.truncdiv(A[i], 9)) >> 1
                O[i, 1] = T.truncdiv(B[i], 3) * 8
                O[i, 2] = T.truncdiv(-100, B[i] | 1) * 8
                O[i, 3] = (~(A[i] // 9)) >> 1

    rng = np.random.default_rng()
    a = rng.integers(0, 256, 64).astype(np.uint8)
    b = rng.integers(-128, 128, 64).astype(np.int8)
    o = poisoned((64, 4), "int32")
    tilec.JITKernel(main, target)(a, b, o)
    x, y = a.astype(np.int64), b.astype(np.int64)
    wrap8 = lambda v: ((v + 128) % 256) - 128  # noqa: E731
    want = np.stack([(255 - x // 9) >> 1, wrap8(np.trunc(y / 3).astype(np.int64) * 8),
                     wrap8(np.trunc(-100 / (y | 1)).astype(np.int64) * 8), (255 - x // 9) >> 1], axis=1)
    np.testing.assert_array_equal(o, want)


def narrow_int_arithmetic_kernel(dtype):
    """8/16-bit int sums, products, shifts and negations read by a wider cast, a comparison and a max: the IR's
    result type is the operands', so each wraps before it is read (C computes them in int)."""

    @T.prim_func
    def main(A: T.Tensor((8,), dtype), B: T.Tensor((8,), dtype), O: T.Tensor((8, 6), "int32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(8):
                O[i, 0] = T.cast(A[i] + B[i], "int32")
                O[i, 1] = T.if_then_else(A[i] * B[i] > 0, 1, 0)
                O[i, 2] = T.cast(T.max(A[i] - B[i], A[i]), "int32")
                O[i, 3] = T.cast(-A[i], "int32")
                O[i, 4] = T.cast(A[i] << 4, "int32") // 16
                O[i, 5] = T.cast(T.abs(A[i]), "int32")

    return main


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
@pytest.mark.parametrize("dtype", ["int8", "uint16"])
def test_narrow_int_arithmetic_wraps_to_its_type(target, dtype):
    info = np.iinfo(dtype)
    a = np.array([100, info.min, info.max, 1, 64, 5, 3, info.max // 2 + 1]).astype(dtype)
    b = np.array([100, 1, 1, 1, 2, 5, 3, 2]).astype(dtype)
    o = np.zeros((8, 6), np.int32)
    tilec.JITKernel(narrow_int_arithmetic_kernel(dtype), target)(a, b, o)
    with np.errstate(over="ignore"):
        ref = [a + b, (a * b > 0).astype(dtype), np.maximum(a - b, a), -a, (a << 4).astype(np.int32) // 16, np.abs(a)]
    np.testing.assert_array_equal(o, np.stack([r.astype(np.int32) for r in ref], axis=1))


def nan_max_min_kernel(dtype):
    @T.prim_func
    def main(F: T.Tensor((8,), dtype), G: T.Tensor((8,), dtype), P: T.Tensor((8, 2), dtype), R: T.Tensor((2,), dtype)):
        with T.Kernel(1, threads=64) as bx:
            f = T.alloc_fragment((1, 8), dtype)
            r = T.alloc_fragment((1,), dtype)
            for i in T.Parallel(8):
                P[i, 0] = T.max(F[i], G[i])
                P[i, 1] = T.min(F[i], G[i])
                f[0, i] = F[i]
            T.reduce_max(f, r, dim=1)
            T.copy(r, R[0:1])
            T.reduce_min(f, r, dim=1)
            T.copy(r, R[1:2])

    return main


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_max_and_min_skip_nan_like_fmaxf(target, dtype):
    """T.max / T.min and max / min reductions are fmaxf / fminf on the GPU (the header's tl::max / tl::min): a NaN
    operand gives the other one, NaN only where both are (numpy's maximum propagated it)."""
    f = np.array([np.nan, 1, 0.5, 2, np.nan, 0, 2, -3], dtype)
    g = np.array([1, np.nan, 0.25, 0, np.nan, np.nan, -1, 3], dtype)
    p, r = np.zeros((8, 2), dtype), np.zeros(2, dtype)
    tilec.JITKernel(nan_max_min_kernel(dtype), target)(f, g, p, r)
    np.testing.assert_array_equal(p, np.stack([np.fmax(f, g), np.fmin(f, g)], axis=1))
    np.testing.assert_array_equal(r, np.array([2, -3], dtype))


def fma_kernel(dtype: str, n: int = 256):
    @T.prim_func
    def main(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), C: T.Tensor((n,), dtype), O: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(n):
                O[i] = T.fma(A[i], B[i], C[i])

    return main


def exact_fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` rounded once to ``a``'s type (in rationals; finite inputs)."""
    from fractions import Fraction

    return np.array([float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))) for x, y, z in zip(a, b, c)]
                    ).astype(a.dtype)


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fma_rounds_once(rng, target, dtype):
    """T.fma is fmaf / fma on the GPU: one rounding of a * b + c (the interpreters rounded the product first: for
    a = 1 + 2**-12, a * a - 1 gave 2**-11, not 2**-11 + 2**-24). Products near -c make the two roundings differ."""
    n = 256
    a = (1 + rng.integers(1, 2**12, n) * 2.0**-12 * rng.choice([-1, 1], n)).astype(dtype)
    b = (rng.standard_normal(n) * 4).astype(dtype)
    c = -(a.astype(np.float64) * b.astype(np.float64)).astype(dtype) + (rng.standard_normal(n) * 2.0**-20).astype(dtype)
    a[0], b[0], c[0] = 1 + 2**-12, 1 + 2**-12, -1
    o = np.full(n, np.nan, dtype)
    tilec.JITKernel(fma_kernel(dtype), target)(a, b, c, o)
    want = exact_fma(a, b, c)
    assert want[0] == 2**-11 + 2**-24
    np.testing.assert_array_equal(o, want)
    assert np.any(want != (a * b + c)), "no case where one rounding differs from two"


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_round_is_half_away_from_zero_exactly(rng, target, dtype):
    """T.round is roundf / round: the nearest whole number, halves away from zero. The interpreters computed
    floor(|x| + 0.5), whose sum rounds first: the float just below 0.5 gave 1 and 2**23 + 1 (float32) gave 2**23 + 2."""
    from fractions import Fraction

    @T.prim_func
    def main(X: T.Tensor((128,), dtype), O: T.Tensor((128,), dtype)):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                O[i] = T.round(X[i])

    mant = 24 if dtype == "float32" else 53
    x = (rng.standard_normal(128) * 10.0 ** rng.integers(0, 8, 128)).astype(dtype)
    below_half = np.nextafter(np.array(0.5, dtype), 0)
    top = 2 ** (mant - 1)
    x[:8] = [below_half, -below_half, top + 1, -(top + 1), 0.5, -2.5, top - 0.5, 1.5]
    want = np.array([float(np.sign(v)) * float(int(abs(Fraction(float(v))) + Fraction(1, 2))) for v in x], dtype)
    o = poisoned((128,), dtype)
    tilec.JITKernel(main, target)(x, o)
    np.testing.assert_array_equal(o, want)
    assert want[0] == 0 and want[2] == top + 1 and want[6] == top


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_the_side_a_uniform_condition_does_not_take_is_not_evaluated(rng, target):
    """`A[i + 1] if i < 7 else 0` and `i < 7 and A[i + 1] > 0` in a serial loop read A[8] on the interpreters, which
    reported an out-of-bounds read: C's ?:, && and || (the CUDA emitted) evaluate only the side they take."""

    @T.prim_func
    def main(A: T.Tensor((8,), "int32"), C: T.Tensor((8, 3), "int32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.serial(8):
                C[i, 0] = A[i + 1] if i < 7 else -1
                C[i, 1] = T.if_then_else(i < 7 and A[i + 1] > 0, 1, 0)
                C[i, 2] = T.if_then_else(i == 0 or A[i - 1] > 0, 1, 0)

    a = rng.integers(-9, 9, 8).astype(np.int32)
    out = poisoned((8, 3), "int32")
    tilec.compile(main, target=target)(a, out)
    want = [np.append(a[1:], -1), np.append(a[1:] > 0, False), np.insert(a[:-1] > 0, 0, True)]
    np.testing.assert_array_equal(out, np.stack(want, axis=1).astype(np.int32))


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_constant_shifts_and_float_divisions_by_zero_fold_as_they_run(target):
    """Two constant operands fold as the same operation runs on values read at run time: a shift by a negative count
    raised Python's ValueError ('negative shift count', a bare exception at compile time), and float // or % by a
    zero constant was 'division by zero in a constant expression' where run time gives inf / NaN."""

    @T.prim_func
    def folded(O: T.Tensor((6,), "int32"), F: T.Tensor((3,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            O[0] = T.int32(8) >> T.int32(-1)
            O[1] = T.int32(8) << T.int32(-1)
            O[2] = T.int32(-8) >> T.int32(40)
            O[3] = T.int32(1) << T.int32(31)
            O[4] = T.int32(3) << T.int32(33)
            O[5] = T.int32(-8) >> T.int32(2)
            F[0] = T.float32(1.0) // T.float32(0.0)
            F[1] = T.float32(1.0) % T.float32(0.0)
            F[2] = T.float32(-7.5) % T.float32(2.0)

    @T.prim_func
    def read(A: T.Tensor((6, 2), "int32"), O: T.Tensor((6,), "int32"), X: T.Tensor((3, 2), "float32"),
             F: T.Tensor((3,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            O[0] = A[0, 0] >> A[0, 1]
            O[1] = A[1, 0] << A[1, 1]
            O[2] = A[2, 0] >> A[2, 1]
            O[3] = A[3, 0] << A[3, 1]
            O[4] = A[4, 0] << A[4, 1]
            O[5] = A[5, 0] >> A[5, 1]
            F[0] = X[0, 0] // X[0, 1]
            F[1] = X[1, 0] % X[1, 1]
            F[2] = X[2, 0] % X[2, 1]

    a = np.array([[8, -1], [8, -1], [-8, 40], [1, 31], [3, 33], [-8, 2]], np.int32)
    x = np.array([[1, 0], [1, 0], [-7.5, 2]], np.float32)
    o, f = poisoned((6,), "int32"), poisoned((3,), "float32")
    tilec.JITKernel(folded, target)(o, f)
    o2, f2 = poisoned((6,), "int32"), poisoned((3,), "float32")
    tilec.JITKernel(read, target)(a, o2, x, f2)
    np.testing.assert_array_equal(o, [0, 0, -1, -(2**31), 0, -2])
    np.testing.assert_array_equal(o2, o)
    np.testing.assert_array_equal(f, [np.inf, np.nan, 0.5])
    np.testing.assert_array_equal(f2, f)


def bool_arithmetic_kernel(n: int = 64):
    """Sums, differences, products, floor divisions, shifts and negations of bools, read as ints and scaled."""

    @T.prim_func
    def main(A: T.Tensor((n,), "bool"), B: T.Tensor((n,), "bool"), O: T.Tensor((n, 7), "int32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(n):
                O[i, 0] = T.cast(A[i] + B[i], "int32")
                O[i, 1] = T.cast(A[i] - B[i], "int32")
                O[i, 2] = (A[i] + B[i]) * 3 + A[i] * B[i]
                O[i, 3] = T.cast(A[i] + True, "int8")
                O[i, 4] = T.if_then_else(B[i], A[i] // B[i] + A[i] % B[i] * 5, 7)
                O[i, 5] = (A[i] << B[i]) + (A[i] >> B[i]) * 5
                O[i, 6] = T.cast(-(A[i] - B[i]), "int32")

    return main


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_arithmetic_of_bools_is_int_arithmetic(rng, target):
    """Arithmetic on two bools is an int, as in Python and C (True + True is 2, True - False is 1): CUDA computed
    C's int, while the interpreters kept a bool (numpy's logical or for +, 1 for True + True) and failed on `-`
    (numpy's bare 'boolean subtract is not supported')."""
    a, b = rng.integers(0, 2, 64).astype(bool), rng.integers(0, 2, 64).astype(bool)
    a[:4], b[:4] = [True, True, False, False], [True, False, True, False]
    o = poisoned((64, 7), "int32")
    tilec.JITKernel(bool_arithmetic_kernel(), target)(a, b, o)
    x, y = a.astype(np.int32), b.astype(np.int32)
    want = [x + y, x - y, (x + y) * 3 + x * y, x + 1, np.where(b, x, 7), (x << y) + (x >> y) * 5, y - x]
    np.testing.assert_array_equal(o, np.stack(want, axis=1))
