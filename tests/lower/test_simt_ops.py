"""Tile ops lowered to the thread IR and run by the thread interpreter (target ``simt:sm_80``) against float64
numpy, at small and ragged shapes; the kernels are those of the tile-interpreter tests where they exist."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, poisoned, randn
from test_interp import _COMBINE, _NP_REDUCE, gemm_kernel, reduce_kernel

import tilec.language as T

from .helpers import plan_of, simt


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
@pytest.mark.parametrize("chains", [1, 4])
def test_reductions(rng, monkeypatch, kind, clear, dim, shape, chains):
    """24 x 40 does not spread evenly over 128 threads, so the tile is replicated: a sum must count each element
    once however many threads hold it. A thread folds its elements in one chain (the default) or in four."""
    from tilec.lower import reduce

    monkeypatch.setattr(reduce, "CHAINS", chains)
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


@pytest.mark.parametrize("dst_scope", ["fragment", "shared"])
@pytest.mark.parametrize(("red", "dim"), [("sum", 2), ("max", 1)])
def test_reduce_of_a_shared_region_with_a_unit_dim(rng, dst_scope, red, dim):
    """The source region ``s[1, :, :]`` keeps its unit dim (``dim`` counts it) while the result has none: the
    result's coordinates must skip it (they took it as a row: an out-of-bounds read, or every thread storing
    one shared element)."""
    n_out = 8 if dim == 2 else 16

    @T.prim_func
    def main(A: T.Tensor((2, 8, 16), "float32"), B: T.Tensor((n_out,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            s = T.alloc_shared((2, 8, 16), "float32")
            if dst_scope == "fragment":
                r = T.alloc_fragment((n_out,), "float32")
            else:
                r = T.alloc_shared((n_out,), "float32")
            T.copy(A, s)
            if red == "sum":
                T.reduce_sum(s[1, :, :], r, dim=dim)
            else:
                T.reduce_max(s[1, :, :], r, dim=dim)
            T.copy(r, B)

    a = randn(rng, (2, 8, 16), "float32")
    b = poisoned((n_out,), "float32")
    simt(main)(a, b)
    x = a[1].astype(np.float64)
    ref = x.sum(axis=dim - 1) if red == "sum" else x.max(axis=dim - 1)
    assert_close(b, ref, "float32", scale=float(np.abs(x).sum(axis=dim - 1).max()))


@pytest.mark.parametrize(("op", "dim", "dst_scope"), [
    ("reduce_sum", 0, "fragment"), ("reduce_max", 1, "fragment"), ("reduce_sum", 1, "shared"),
    ("cumsum", 0, None), ("cumsum_reverse", 1, None),
])
def test_pipelined_tile_reduced_or_scanned_in_the_loop(rng, op, dim, dst_scope):
    """A tile a T.Pipelined copy fills gets one version per stage (a dim in front); a reduction or scan of it in
    the loop must still run over the user's ``dim`` (it ran over the version dim, reading the stage a cp.async was
    filling)."""
    N, R, C = 96, 8, 16
    n_out = C if dim == 0 else R

    @T.prim_func
    def main(A: T.Tensor((N, C), "float32"), Out: T.Tensor((R, C), "float32")):
        with T.Kernel(1, threads=64) as bx:
            s = T.alloc_shared((R, C), "float32")
            acc = T.alloc_fragment((R, C), "float32")
            if dst_scope == "shared":
                r = T.alloc_shared((n_out,), "float32")
            else:
                r = T.alloc_fragment((n_out,), "float32")
            T.clear(acc)
            for k in T.Pipelined(1, N // R, num_stages=3):
                T.copy(A[k * R, 0], s)
                if op == "reduce_sum":
                    T.reduce_sum(s, r, dim=dim)
                elif op == "reduce_max":
                    T.reduce_max(s, r, dim=dim)
                else:
                    T.cumsum(s, dim=dim, reverse=op == "cumsum_reverse")
                for i, j in T.Parallel(R, C):
                    if op.startswith("cumsum"):
                        acc[i, j] += s[i, j]
                    elif dim == 0:
                        acc[i, j] += r[j]
                    else:
                        acc[i, j] += r[i]
            T.copy(acc, Out)

    a = randn(rng, (N, C), "float32")
    out = poisoned((R, C), "float32")
    simt(main)(a, out)
    ref = np.zeros((R, C))
    for k in range(1, N // R):
        t = a[k * R : k * R + R].astype(np.float64)
        if op == "reduce_sum":
            ref += np.expand_dims(t.sum(axis=dim), dim)
        elif op == "reduce_max":
            ref += np.expand_dims(t.max(axis=dim), dim)
        elif op == "cumsum":
            ref += np.cumsum(t, axis=dim)
        else:
            ref += np.flip(np.cumsum(np.flip(t, dim), axis=dim), dim)
    assert_close(out, ref, "float32", scale=float(np.abs(a).sum(axis=0).max()))


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a"])
@pytest.mark.parametrize("num_stages", [2, 3])
def test_pipelined_copy_of_a_tensor_the_loop_writes_stays_in_its_iteration(rng, target, num_stages):
    """Each iteration copies in the tile of Y the one before wrote: the copy may not run ahead of that write (it
    was made a pipeline stage and read the tile before it was written), and the report says why it is not."""
    import tilec

    M, nt, bM, bN = 64, 4, 32, 32

    @T.prim_func
    def main(X: T.Tensor((M, nt * bN), "float32"), Y: T.Tensor((M, (nt + 1) * bN), "float32")):
        with T.Kernel(M // bM, threads=128) as bx:
            Y_s = T.alloc_shared((bM, bN), "float32")
            for k in T.Pipelined(nt, num_stages=num_stages):
                T.copy(Y[bx * bM, k * bN], Y_s)
                for i, j in T.Parallel(bM, bN):
                    Y[bx * bM + i, (k + 1) * bN + j] = Y_s[i, j] + X[bx * bM + i, k * bN + j]

    x = randn(rng, (M, nt * bN), "float32")
    y = poisoned((M, (nt + 1) * bN), "float32")
    y[:, :bN] = randn(rng, (M, bN), "float32")
    ref = y.astype(np.float64)
    for k in range(nt):
        ref[:, (k + 1) * bN : (k + 2) * bN] = ref[:, k * bN : (k + 1) * bN] + x[:, k * bN : (k + 1) * bN]
    kernel = tilec.JITKernel(main, target)
    kernel(x, y)
    assert_close(y, ref, "float32")
    line = main.body.loc.line + 2  # the T.Pipelined line, two below T.Kernel
    assert f"T.Pipelined at line {line}: the copy at line {line + 1} stays in its iteration: the loop writes 'Y'" \
        in kernel.report()


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a"])
@pytest.mark.parametrize("num_stages", [2, 3])
def test_pipelined_copy_into_a_tile_read_before_it_stays_in_its_iteration(rng, target, num_stages):
    """Each iteration adds the tile the one before copied in, then copies in its own: the copy may not run ahead
    (it was made a pipeline stage, and the sum read each iteration's own tile, not the previous one)."""
    import tilec

    nt, bM, bN = 5, 16, 8

    @T.prim_func
    def main(A: T.Tensor((nt * bM, bN), "float32"), C: T.Tensor((bM, bN), "float32")):
        with T.Kernel(1, threads=32) as bx:
            X_s = T.alloc_shared((bM, bN), "float32")
            acc = T.alloc_fragment((bM, bN), "float32")
            T.clear(acc)
            for k in T.Pipelined(nt, num_stages=num_stages):
                if k > 0:
                    for i, j in T.Parallel(bM, bN):
                        acc[i, j] += X_s[i, j]
                T.copy(A[k * bM, 0], X_s)
            T.copy(acc, C)

    a = randn(rng, (nt * bM, bN), "float32")
    c = poisoned((bM, bN), "float32")
    kernel = tilec.JITKernel(main, target)
    kernel(a, c)
    assert_close(c, a[: (nt - 1) * bM].astype(np.float64).reshape(nt - 1, bM, bN).sum(axis=0), "float32")
    line = main.body.loc.line + 4  # the T.Pipelined line, four below T.Kernel
    assert f"T.Pipelined at line {line}: the copy at line {line + 4} stays in its iteration: the loop reads 'X_s' " \
        "before it" in kernel.report()


@pytest.mark.parametrize(("dtype", "layout", "mnk"), [
    ("float16", "NT", (100, 130, 70)),
    ("float16", "TN", (64, 64, 64)),
    ("bfloat16", "NN", (100, 130, 70)),
    ("bfloat16", "TT", (64, 96, 32)),
    ("float32", "NN", (70, 40, 50)),  # no tensor cores for float32 operands: the scalar FMA fallback
])
def test_gemm_operand_layouts_and_dtypes(rng, dtype, layout, mnk):
    M, N, K = mnk
    ta, tb = layout[0] == "T", layout[1] == "T"
    kernel = simt(gemm_kernel(M, N, K, 64, 64, 32, dtype, dtype, trans_a=ta, trans_b=tb))
    (g,) = plan_of(kernel).gemms.values()
    assert g.instr == ("simt" if dtype == "float32" else "mma")
    a = randn(rng, (K, M) if ta else (M, K), dtype)
    b = randn(rng, (N, K) if tb else (K, N), dtype)
    c = poisoned((M, N), dtype)
    kernel(a, b, c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert_close(c, (a64.T if ta else a64) @ (b64.T if tb else b64), dtype)


def test_gemm_int8_scalar_path_accumulates_in_int32(rng):
    M, N, K = 40, 24, 48
    kernel = simt(gemm_kernel(M, N, K, 32, 32, 16, "int8", "int32", accum="int32"))
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    c = poisoned((M, N), "int32")
    kernel(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


def test_gemm_with_a_bias_relu_epilogue_ragged(rng):
    M, N, K, bm, bn, bk = 80, 72, 40, 64, 64, 32

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), Bias: T.Tensor((N,), "float32"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            D_f = T.alloc_fragment((bm, bn), "float16")
            bias = T.alloc_fragment((bn,), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(Bias[bx * bn], bias)
            for i, j in T.Parallel(bm, bn):
                D_f[i, j] = T.max(C_f[i, j] + bias[j], 0.0)
            T.copy(D_f, C[by * bm, bx * bn])

    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    bias = randn(rng, (N,), "float32")
    c = poisoned((M, N), "float16")
    simt(main)(a, b, bias, c)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    assert_close(c, ref, "float16")


def test_register_operand_gemm_and_fragment_layout_conversion(rng):
    """A register A operand (loaded with T.copy from global) and a copy between two fragments of different
    layouts (an accumulator to an A operand: converted through shared memory)."""

    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"), W: T.Tensor((64, 32), "float16"),
             C: T.Tensor((64, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_f = T.alloc_fragment((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            W_s = T.alloc_shared((64, 32), "float16")
            S = T.alloc_fragment((64, 64), "float32")
            P = T.alloc_fragment((64, 64), "float16")
            O = T.alloc_fragment((64, 32), "float32")
            T.copy(A, A_f)
            T.copy(B, B_s)
            T.copy(W, W_s)
            T.gemm(A_f, B_s, S, clear_accum=True)
            T.copy(S, P)
            T.gemm(P, W_s, O, clear_accum=True)
            T.copy(O, C)

    a, b, w = randn(rng, (64, 32), "float16"), randn(rng, (32, 64), "float16"), randn(rng, (64, 32), "float16")
    c = poisoned((64, 32), "float32")
    kernel = simt(main)
    kernel(a, b, w, c)
    assert any("layout conversion through shared memory" in n for n in kernel.state.report)
    s = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16).astype(np.float64)
    assert_close(c, s @ w.astype(np.float64), "float16")


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
def test_cumsum(rng, reverse, dim):
    M, N, bm, bn = 20, 50, 16, 64

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, bn), "float32")
            T.copy(X[bx * bm, 0], x)
            T.cumsum(x, dim=dim, reverse=reverse)
            T.copy(x, Y[bx * bm, 0])

    x = randn(rng, (M, N), "float32")
    y = poisoned((M, N), "float32")
    simt(main)(x, y)
    ref = np.zeros((M, N))
    for b0 in range(0, M, bm):
        tile = np.zeros((bm, bn))
        rows = x[b0 : b0 + bm].astype(np.float64)
        tile[: rows.shape[0], :N] = rows
        t = np.flip(np.cumsum(np.flip(tile, dim), dim), dim) if reverse else np.cumsum(tile, dim)
        ref[b0 : b0 + bm] = t[: rows.shape[0], :N]
    assert_close(y, ref, "float32", scale=float(np.abs(x).sum()))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize(("src_scope", "dst_scope"), [("fragment", "shared"), ("shared", "fragment"),
                                                      ("fragment", "fragment")])
def test_cumsum_between_a_fragment_and_another_buffer(rng, src_scope, dst_scope, reverse):
    """``T.cumsum(frag, shared_dst)``: the scan ran in a scratch buffer that was never copied to the shared
    destination (it kept what it held before; a silent wrong result)."""
    M, N = 12, 40

    @T.prim_func
    def main(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((M, N), "float16") if src_scope == "fragment" else T.alloc_shared((M, N), "float16")
            y = T.alloc_fragment((M, N), "float32") if dst_scope == "fragment" else T.alloc_shared((M, N), "float32")
            T.copy(X, x)
            T.cumsum(x, y, dim=1, reverse=reverse)
            T.copy(y, Y)

    x = randn(rng, (M, N), "float16")
    y = poisoned((M, N), "float32")
    simt(main)(x, y)
    x64 = x.astype(np.float64)
    ref = np.flip(np.cumsum(np.flip(x64, 1), 1), 1) if reverse else np.cumsum(x64, 1)
    assert_close(y, ref, "float32", scale=float(np.abs(x64).sum(axis=1).max()))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("direction", ["3d_to_2d", "2d_to_3d"])
def test_cumsum_between_shared_regions_differing_in_unit_dims(rng, direction, reverse):
    """``T.cumsum(s[1, :, :], d)`` with a 2-D shared ``d`` (or the other way round): the destination's index took
    the source's coordinates dim by dim, the unit dim's 0 as d's row (every line landed in row 0)."""

    @T.prim_func
    def main(A: T.Tensor((2, 8, 16), "float32"), B: T.Tensor((8, 16), "float32")):
        with T.Kernel(1, threads=64) as bx:
            s3 = T.alloc_shared((2, 8, 16), "float32")
            s2 = T.alloc_shared((8, 16), "float32")
            if direction == "3d_to_2d":
                T.copy(A, s3)
                T.cumsum(s3[1, :, :], s2, dim=2, reverse=reverse)
                T.copy(s2, B)
            else:
                T.copy(A[1, :, :], s2)
                T.cumsum(s2, s3[0, :, :], dim=1, reverse=reverse)
                T.copy(s3[0, :, :], B)

    a = randn(rng, (2, 8, 16), "float32")
    b = poisoned((8, 16), "float32")
    simt(main)(a, b)
    x = a[1].astype(np.float64)
    ref = np.flip(np.cumsum(np.flip(x, 1), 1), 1) if reverse else np.cumsum(x, 1)
    assert_close(b, ref, "float32", scale=float(np.abs(x).sum(axis=1).max()))


def test_atomic_adds_from_many_blocks(rng):
    nb, M, N = 3, 8, 16

    @T.prim_func
    def main(X: T.Tensor((nb, M, N), "float32"), Acc: T.Tensor((M, N), "float32"), Rows: T.Tensor((M,), "float32"),
             Count: T.Tensor((1,), "int32")):
        with T.Kernel(nb, threads=128) as bx:
            x = T.alloc_fragment((M, N), "float32")
            T.copy(X[bx, 0, 0], x)
            T.atomic_add(Acc, x)
            for i, j in T.Parallel(M, N):
                T.atomic_add(Rows[i], x[i, j])
            T.atomic_add(Count[0], 1)

    x = randn(rng, (nb, M, N), "float32")
    acc, rows, count = np.zeros((M, N), np.float32), np.zeros(M, np.float32), np.array([7], np.int32)
    simt(main)(x, acc, rows, count)
    x64 = x.astype(np.float64)
    assert_close(acc, x64.sum(axis=0), "float32", scale=float(np.abs(x64).sum(axis=0).max()))
    assert_close(rows, x64.sum(axis=(0, 2)), "float32", scale=float(np.abs(x64).sum(axis=(0, 2)).max()))
    assert count[0] == 7 + nb


def test_fill_of_a_region_of_a_local_array(rng):
    """``T.fill(l[1:3, 2:5], v)`` on a T.alloc_local array filled the whole array on GPU targets."""

    @T.prim_func
    def main(X: T.Tensor((4, 8), "float32"), Y: T.Tensor((4, 8), "float32")):
        with T.Kernel(1, threads=32) as bx:
            loc = T.alloc_local((4, 8), "float32")
            T.copy(X, loc)
            T.fill(loc[1:3, 2:5], 5.0)
            for k in T.serial(2):
                T.fill(loc[3, k * 4 + 1 : k * 4 + 3], -1.0)
            T.copy(loc, Y)

    x = randn(rng, (4, 8), "float32")
    y = poisoned((4, 8), "float32")
    simt(main)(x, y)
    ref = x.astype(np.float64)
    ref[1:3, 2:5] = 5.0
    ref[3, [1, 2, 5, 6]] = -1.0
    assert_close(y, ref, "float32")


def test_copy_into_a_local_array_gives_every_thread_all_of_it(rng):
    """A T.alloc_local array is private to each thread; ``T.copy(X, loc)`` wrote each element on one thread only
    (the block's threads shared the copy out as for a shared buffer), so a thread reading an element another thread
    had copied read garbage on GPU targets."""

    @T.prim_func
    def main(X: T.Tensor((3, 8), "float16"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            loc = T.alloc_local((2, 8), "float32")
            T.copy(X[1:3, :], loc)
            for i in T.Parallel(64):
                Y[i] = loc[i % 2, (i * 5 + 3) % 8] * 2.0 + loc[1 - i % 2, i % 8]

    x = randn(rng, (3, 8), "float16")
    y = poisoned((64,), "float32")
    simt(main)(x, y)
    i = np.arange(64)
    lx = x[1:3].astype(np.float64)
    assert_close(y, lx[i % 2, (i * 5 + 3) % 8] * 2.0 + lx[1 - i % 2, i % 8], "float32")


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a"])
def test_parallel_loop_writing_a_local_array_runs_on_every_thread(rng, target):
    """A T.Parallel loop writing a T.alloc_local array was spread over the threads like any loop, so each thread's
    copy held only its own iterations' elements: a serial sum over the array read unwritten elements (NaN) and a copy
    out of it got elements from threads that never wrote them. Every thread now runs all the iterations (its copy is
    whole); the loop's global stores come from one thread."""
    import tilec

    @T.prim_func
    def main(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32"), W: T.Tensor((64,), "float32"),
             Z: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            loc = T.alloc_local((64,), "float32")
            for i in T.Parallel(64):
                loc[i] = X[i] * 2.0
                W[i] = loc[i] + 1.0
            T.copy(loc, Y)
            s = T.alloc_var("float32")
            s = 0.0
            for k in T.serial(64):
                s = s + loc[(k * 7) % 64] * (k + 1)
            Z[0] = s

    x = randn(rng, (64,), "float32")
    y, w, z = poisoned((64,), "float32"), poisoned((64,), "float32"), poisoned((1,), "float32")
    tilec.JITKernel(main, target)(x, y, w, z)
    x2 = 2.0 * x.astype(np.float64)
    k = np.arange(64)
    assert_close(y, x2, "float32")
    assert_close(w, x2 + 1.0, "float32")
    assert_close(z, np.array([np.sum(x2[(k * 7) % 64] * (k + 1))]), "float32", scale=float(np.abs(x2).sum() * 64))


def test_parallel_loop_on_a_fragment_writing_a_local_array_is_refused():
    """A loop that runs on a fragment's layout shares its iterations out, so it cannot fill each thread's copy of a
    T.alloc_local array: refused naming the array and the loop's line (before: each copy partly written)."""
    from tilec.errors import LayoutConflictError

    @T.prim_func
    def main(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            f = T.alloc_fragment((64,), "float32")
            loc = T.alloc_local((64,), "float32")
            T.copy(X, f)
            for i in T.Parallel(64):  # the loop
                loc[i] = f[i] * 2.0
            T.copy(loc, Y)

    with pytest.raises(LayoutConflictError, match=r"the T.Parallel loop at line \d+ writes 'loc', which each thread "
                                                  r"holds a copy of .*make 'loc' a fragment") as e:
        simt(main)(poisoned((64,), "float32"), poisoned((64,), "float32"))
    assert "# the loop" in str(e.value)


@pytest.mark.parametrize("op", ["cumsum", "reduce_from", "reduce_into"])
def test_scan_or_reduction_of_a_local_array_is_refused_at_its_line(op):
    """A T.alloc_local array is private to each thread and a tile copy fills each element on one thread only; a scan
    or reduction of one read other threads' elements (each thread scanned its line of its own, mostly unwritten
    copy: the result was the input unchanged) or indexed it as shared or global memory: refused at the op's line."""
    import tilec
    from tilec.errors import TilecError

    @T.prim_func
    def main(X: T.Tensor((4, 8), "float32"), Y: T.Tensor((4, 8), "float32"), Z: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            loc = T.alloc_local((4, 8), "float32")
            f = T.alloc_fragment((4, 8), "float32")
            r = T.alloc_local((4,), "float32")
            T.copy(X, loc)
            T.copy(X, f)
            T.fill(r, 0)
            if op == "cumsum":
                T.cumsum(loc, dim=1)  # the op
            elif op == "reduce_from":
                T.reduce_sum(loc, r, dim=1)  # the op
            else:
                T.reduce_sum(f, r, dim=1)  # the op
            T.copy(loc, Y)
            T.copy(r, Z)

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    y, z = poisoned((4, 8), "float32"), poisoned((4,), "float32")
    tilec.JITKernel(main, "cpu")(x, y, z)  # the tile interpreter runs it
    with pytest.raises(TilecError, match="of T.alloc_local arrays are not supported on GPU targets") as e:
        simt(main)(x, y, z)
    assert "# the op" in str(e.value)


def test_shared_memory_elementwise_with_conditions(rng):
    @T.prim_func
    def main(A: T.Tensor((16, 24), "float16"), B: T.Tensor((16, 24), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((16, 24), "float16")
            T.copy(A, s)
            for i, j in T.Parallel(16, 24):
                if (i + j) % 3 == 0:
                    B[i, j] = T.exp2(T.cast(s[i, j], "float32"))
                else:
                    B[i, j] = T.if_then_else(j < 12, T.tanh(T.cast(s[i, j], "float32")), -1.0)

    a = randn(rng, (16, 24), "float16")
    b = poisoned((16, 24), "float32")
    simt(main)(a, b)
    x = a.astype(np.float64)
    i, j = np.indices((16, 24))
    ref = np.where((i + j) % 3 == 0, np.exp2(x), np.where(j < 12, np.tanh(x), -1.0))
    assert_close(b, ref, "float32", scale=1.0)


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a"])
def test_print_of_tiles_and_scalars(capsys, target):
    """T.print runs in the thread interpreter (its C format's `%lld` raised ValueError in Python's `%`), a message
    holding `%`, `"` or a backslash prints as written, and the CUDA printf holds it as a valid string literal."""
    import tilec

    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), I: T.Tensor((4,), "int32")):
        with T.Kernel(2, threads=32) as bx:
            s = T.alloc_shared((4,), "float32")
            f = T.alloc_fragment((4,), "float32")
            T.copy(A, s)
            T.copy(s, f)
            T.print(s, msg='tile "s" 100% %lld')
            T.print(f, msg="frag")
            T.print(I[bx], msg="i=")
            T.print(A[bx], msg="a\\b")

    tilec.compile(main, target=target)(np.arange(4, dtype=np.float32), np.arange(4, dtype=np.int32) * 10)
    lines = capsys.readouterr().out.splitlines()
    block = ['tile "s" 100% %lld s[0] = 0', 'tile "s" 100% %lld s[1] = 1', 'tile "s" 100% %lld s[2] = 2',
             'tile "s" 100% %lld s[3] = 3', "frag f[0] = 0", "frag f[1] = 1", "frag f[2] = 2", "frag f[3] = 3"]
    assert lines == block + ["i= 0", "a\\b 0"] + block + ["i= 10", "a\\b 1"]
    source = tilec.compile(main, target="cuda:sm_80" if target.endswith("sm_80") else "hip:gfx90a").get_kernel_source()
    assert r'printf("tile \"s\" 100%% %%lld s[%lld] = %g\n", ' in source
    assert r'printf("a\\b %g\n", ' in source



@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a"])
def test_print_takes_each_dtypes_conversion(capsys, target):
    """An int tile prints its ints (a fragment's went to `%g` as a long long: undefined on the GPU), a float64
    value its double (it went through float) and a uint64 one unsigned (it went through long long)."""
    import tilec

    @T.prim_func
    def main(I: T.Tensor((4,), "int32"), D: T.Tensor((2,), "float64"), U: T.Tensor((2,), "uint64")):
        with T.Kernel(1, threads=32) as bx:
            f = T.alloc_fragment((4,), "int32")
            T.copy(I, f)
            T.print(f, msg="f")
            T.print(D[0], msg="d=")
            T.print(U[0], msg="u=")

    kernel = tilec.compile(main, target=target)
    kernel(np.array([7, -8, 9, 10], np.int32), np.array([0.1234567891, 0.0]), np.array([2**63 + 5, 0], np.uint64))
    assert capsys.readouterr().out.splitlines() == ["f f[0] = 7", "f f[1] = -8", "f f[2] = 9", "f f[3] = 10",
                                                    "d= 0.123457", f"u= {2**63 + 5}"]
    source = tilec.compile(main, target="cuda:sm_80" if target.endswith("sm_80") else "hip:gfx90a").get_kernel_source()
    assert r'printf("f f[%lld] = %lld\n", ' in source and r'printf("u= %llu\n", (unsigned long long)(' in source
    assert "(double)(D[" in source


def column_vector_kernel(reduce: bool):
    """8 x 24 over 64 threads (the even spread wraps around in mid-row): a column vector read beside the tile,
    then (``reduce``) the tile summed onto another column vector."""
    M, N = 8, 24

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), S: T.Tensor((N,), "float32"), B: T.Tensor((M, N), "float32"),
             C: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            a = T.alloc_fragment((M, N), "float32")
            s = T.alloc_fragment((N,), "float32")
            c = T.alloc_fragment((N,), "float32")
            T.copy(A, a)
            for j in T.Parallel(N):
                s[j] = S[j]
            for i, j in T.Parallel(M, N):
                a[i, j] = a[i, j] * s[j]
            if reduce:
                T.reduce_sum(a, c, dim=0)  # the reduction
                T.copy(c, C)
            T.copy(a, B)

    return main


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a"])
def test_column_vector_of_a_tile_spread_across_rows(rng, target):
    """A thread's elements of one column are not in increasing column order (thread 0 holds columns 0, 16, 8 in
    registers 0, 1, 2, thread 8 columns 8, 0, 16): the column vector must number its registers like the tile's
    (it was refused: 's is not held where the loop at line N runs', the loop its layout came from)."""
    import tilec

    a, s = randn(rng, (8, 24), "float32"), randn(rng, (24,), "float32")
    b = poisoned((8, 24), "float32")
    tilec.JITKernel(column_vector_kernel(False), target)(a, s, b, np.zeros(24, np.float32))
    assert_close(b, a.astype(np.float64) * s.astype(np.float64), "float32")


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a"])
def test_reduction_whose_holders_keep_an_element_in_different_registers(rng, target):
    """Summing that tile onto its columns: the holders of a column keep it in different registers (thread 0 in
    register 0, thread 8 in register 1), so XOR shuffles would add other columns' partials: the tile is reduced
    through shared memory instead (it was refused: 'keep it in different registers')."""
    import tilec

    a, s = randn(rng, (8, 24), "float32"), randn(rng, (24,), "float32")
    b, c = poisoned((8, 24), "float32"), poisoned((24,), "float32")
    tilec.JITKernel(column_vector_kernel(True), target)(a, s, b, c)
    prod = a.astype(np.float64) * s.astype(np.float64)
    assert_close(b, prod, "float32")
    assert_close(c, prod.sum(axis=0), "float32", scale=float(np.abs(prod).sum(axis=0).max()))


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:sm_90a", "simt:gfx90a"])
@pytest.mark.parametrize(("shape", "threads"), [((12, 40), 32), ((8, 24), 96), ((16, 48), 128)])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("red", ["sum", "max", "abssum"])
def test_reductions_of_tiles_shuffles_cannot_combine(rng, target, shape, threads, dim, red):
    """Tiles whose even spread leaves a line's elements in different registers on its holders (12 x 40 over one warp,
    16 x 48 over 128 threads), or on threads no XOR pattern connects (8 x 24 over 96 threads): reduced through shared
    memory (they were refused: 'keep it in different registers', 'no XOR pattern connects', 'result registers differ
    between threads')."""
    import tilec

    M, N = shape
    R = N if dim == 0 else M

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Init: T.Tensor((R,), "float32"), Out: T.Tensor((R,), "float32"),
             Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_shared((R,), "float32")
            T.copy(X, x)
            T.copy(Init, r)
            getattr(T, f"reduce_{red}")(x, r, dim=dim, clear=False)
            for i, j in T.Parallel(M, N):
                x[i, j] = x[i, j] * 2.0
            T.copy(r, Out)
            T.copy(x, Y)

    x, init = randn(rng, (M, N), "float32"), randn(rng, (R,), "float32") * 3
    out, y = poisoned((R,), "float32"), poisoned((M, N), "float32")
    tilec.JITKernel(main, target)(x, init, out, y)
    x64 = x.astype(np.float64)
    ref = _COMBINE[red](init.astype(np.float64), _NP_REDUCE[red](x64, dim))
    assert_close(out, ref, "float32", scale=float(np.abs(x64).sum(axis=dim).max()))
    assert_close(y, 2 * x64, "float32")


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a"])
@pytest.mark.parametrize(("shape", "threads", "dim"), [((16, 48), 256, 1), ((96, 3), 32, 1), ((96, 3), 32, 0),
                                                       ((4, 8, 6), 32, 2), ((4, 8, 6), 32, 1)])
@pytest.mark.parametrize("red", ["sum", "max"])
def test_reductions_whose_lines_no_formula_gives_the_holders_of(rng, target, shape, threads, dim, red):
    """The rows of a 16 x 48 tile spread over 256 threads (three elements each, rows wrapping between threads) have
    holders only a lookup table describes: the result fragment got that layout and the first op using it failed
    ('layout needs a lookup table ...; not supported by code generation', naming the T.copy into the result, not
    the reduction). The result now takes an even spread, and the reduction goes through shared memory."""
    import tilec

    R = tuple(e for d, e in enumerate(shape) if d != dim)

    @T.prim_func
    def main(X: T.Tensor(shape, "float32"), Init: T.Tensor(R, "float32"), Out: T.Tensor(R, "float32")):
        with T.Kernel(1, threads=threads) as bx:
            x = T.alloc_fragment(shape, "float32")
            r = T.alloc_fragment(R, "float32")
            T.copy(X, x)
            T.copy(Init, r)
            getattr(T, f"reduce_{red}")(x, r, dim=dim, clear=False)
            T.copy(r, Out)

    x, init = randn(rng, shape, "float32"), randn(rng, R, "float32")
    out = poisoned(R, "float32")
    tilec.JITKernel(main, target)(x, init, out)
    x64 = x.astype(np.float64)
    ref = _COMBINE[red](init.astype(np.float64), _NP_REDUCE[red](x64, dim))
    assert_close(out, ref, "float32", scale=float(np.abs(x64).sum(axis=dim).max()))


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_reduction_combined_into_a_16_bit_fragment_of_another_layout_rounds_once(rng, target):
    """``T.reduce_sum(y, r, dim=1, clear=False)`` into a float16 fragment ``r`` laid out by an earlier reduction of
    another tile (so the sums change layout on their way): the sums were rounded to float16 before they were added
    to ``r``, so ``1 + (2**-11 + 2**-22)`` became ``1 + 2**-11``, a tie rounded to 1.0, where the tile interpreter
    (and the same reduction without the change of layout) rounds once to 1 + 2**-10. Now the sums stay in float32
    until they are combined."""
    import tilec

    M, N = 16, 32

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((N, M), "float32"), Out: T.Tensor((N,), "float16")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((M, N), "float32")
            y = T.alloc_fragment((N, M), "float32")
            r = T.alloc_fragment((N,), "float16")
            T.copy(X, x)
            T.copy(Y, y)
            T.reduce_sum(x, r, dim=0)
            T.reduce_sum(y, r, dim=1, clear=False)
            T.copy(r, Out)

    x = np.zeros((M, N), np.float32)
    x[int(rng.integers(M))] = 1.0
    y = np.zeros((N, M), np.float32)
    cols = rng.permutation(M)[:2]
    y[:, cols[0]], y[:, cols[1]] = 2.0**-11, 2.0**-22
    out = poisoned((N,), "float16")
    tilec.JITKernel(main, target)(x, y, out)
    ref = (x.astype(np.float64).sum(0) + y.astype(np.float64).sum(1)).astype(np.float16)
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a"])
@pytest.mark.parametrize("dim", [0, 1])
def test_reduction_into_a_fragment_keeping_the_reduced_dim(rng, target, dim):
    """``T.reduce_sum(a, c, dim=1)`` with ``c`` of shape (16, 1) (the frontend takes a result with unit dims): layout
    inference gave ``c`` the (16,) projection ('layout of shape (16,) given to c of shape (16, 1)')."""
    import tilec

    M, N = 16, 32
    oshape = (M, 1) if dim == 1 else (1, N)

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), C: T.Tensor(oshape, "float32"), D: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_fragment((M, N), "float32")
            c = T.alloc_fragment(oshape, "float32")
            T.copy(A, a)
            T.reduce_sum(a, c, dim=dim)
            T.copy(c, C)
            for i, j in T.Parallel(M, N):
                a[i, j] = a[i, j] - (c[i, 0] if dim == 1 else c[0, j])
            T.copy(a, D)

    a = randn(rng, (M, N), "float32")
    c, d = poisoned(oshape, "float32"), poisoned((M, N), "float32")
    tilec.JITKernel(main, target)(a, c, d)
    ref = a.astype(np.float64).sum(axis=dim, keepdims=True)
    assert_close(c, ref, "float32", scale=float(np.abs(a).sum(axis=dim).max()))
    assert_close(d, a - ref, "float32", scale=float(np.abs(a).sum(axis=dim).max()))


@pytest.mark.parametrize("laid_out_before", [False, True])
def test_reduction_into_a_row_of_a_fragment_is_refused_at_its_line(laid_out_before):
    """``T.reduce_sum(x, s[1, :], dim=1)`` with ``s`` a (3, 16) fragment: layout inference gave ``s`` the (16,) rows of
    ``x`` (ValueError 'reshape: new_shape must have 16 elements', no line); lowering supports no part of a fragment as
    the result, so it is refused at the reduction's line (the tile interpreter runs it)."""
    import tilec
    from tilec.errors import TilecError

    @T.prim_func
    def main(X: T.Tensor((16, 64), "float32"), Y: T.Tensor((3, 16), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((16, 64), "float32")
            s = T.alloc_fragment((3, 16), "float32")
            T.copy(X, x)
            if laid_out_before:
                for i, j in T.Parallel(3, 16):
                    s[i, j] = 0
            else:
                T.fill(s, 0)
            T.reduce_sum(x, s[1, :], dim=1)  # into a row
            T.copy(s, Y)

    x, y = np.ones((16, 64), np.float32), poisoned((3, 16), "float32")
    tilec.JITKernel(main, "cpu")(x, y)
    assert_close(y, np.array([[0.0] * 16, [64.0] * 16, [0.0] * 16]), "float32")
    with pytest.raises(TilecError, match="reductions into part of a fragment are not supported") as e:
        simt(main)(x, y)
    assert "T.reduce_sum(x, s[1, :], dim=1)  # into a row" in str(e.value)


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a"])
@pytest.mark.parametrize(("threads", "red"), [(32, "sum"), (128, "sum"), (128, "max")])
def test_reduction_of_a_vector_to_one_value(rng, target, threads, red):
    """``T.reduce_sum(v, s, dim=0)`` with ``v`` of shape (64,) and ``s`` of shape (1,): the projection onto no dims
    had no shape (ValueError 'threads and locals must share a shape'); the value lives on every thread holding an
    element of ``v``."""
    import tilec

    N = 64

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), C: T.Tensor((1,), "float32"), D: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            v = T.alloc_fragment((N,), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(A, v)
            if red == "sum":
                T.reduce_sum(v, s, dim=0)
            else:
                T.reduce_max(v, s, dim=0)
            for i in T.Parallel(N):
                v[i] = v[i] - s[0]
            T.copy(s, C)
            T.copy(v, D)

    a = randn(rng, (N,), "float32")
    c, d = poisoned((1,), "float32"), poisoned((N,), "float32")
    tilec.JITKernel(main, target)(a, c, d)
    ref = a.astype(np.float64).sum() if red == "sum" else a.astype(np.float64).max()
    assert_close(c, np.array([ref]), "float32", scale=float(np.abs(a).sum()))
    assert_close(d, a - ref, "float32", scale=float(np.abs(a).sum()))


@pytest.mark.parametrize("src_scope", ["shared", "fragment"])
@pytest.mark.parametrize("red", ["max", "min", "absmax"])
def test_max_and_min_skip_nan_and_give_nan_only_for_a_row_of_nan(rng, src_scope, red):
    """As fmaxf / fminf (and the tile interpreter): NaN elements are skipped, a row of nothing but NaN gives NaN. From
    shared memory the fold started at the reduction's identity, so an all-NaN row gave -inf, inf or 0."""
    M, N = 8, 40

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_shared((M, N), "float32") if src_scope == "shared" else T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            T.copy(X, x)
            getattr(T, f"reduce_{red}")(x, r, dim=1)
            T.copy(r, Y)

    x = randn(rng, (M, N), "float32")
    x[1, 3] = x[2, 0] = np.nan
    x[5, :] = np.nan
    y = poisoned((M,), "float32")
    simt(main)(x, y)
    x64 = np.abs(x.astype(np.float64)) if red == "absmax" else x.astype(np.float64)
    ref = np.fmin.reduce(x64, axis=1) if red == "min" else np.fmax.reduce(x64, axis=1)
    np.testing.assert_array_equal(y, ref.astype(np.float32))


def test_pipelined_order_gives_each_statements_place_in_a_trip(rng):
    """``order=`` is each statement's place in a trip, as in TileLang (TVM's software_pipeline_order): with
    ``order=[1, 2, 0]`` the third statement runs first. tilec read it as the statements in emission order (the
    inverse permutation), which differs for a cycle of three. ``order=`` without ``stage=`` was ignored: refused."""
    import re

    import tilec
    from tilec.errors import TilecValueError

    def kernel(stage, order):
        @T.prim_func
        def main(A: T.Tensor((64, 8), "float32"), B: T.Tensor((64, 8), "float32"), C: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=32) as bx:
                X = T.alloc_shared((8, 8), "float32")
                Y = T.alloc_shared((8, 8), "float32")
                acc = T.alloc_fragment((8, 8), "float32")
                T.fill(acc, 0)
                for k in T.Pipelined(8, num_stages=2, stage=stage, order=order):
                    T.copy(A[k * 8, 0], X)  # s0
                    T.copy(B[k * 8, 0], Y)  # s1
                    for i, j in T.Parallel(8, 8):  # s2
                        acc[i, j] += X[i, j] * Y[i, j]
                T.copy(acc, C)

        return main

    import inspect

    source, first = inspect.getsourcelines(kernel)
    s0 = first + next(i for i, text in enumerate(source) if "# s0" in text)  # the statements' lines: s0, s0 + 1, ..
    main = kernel([0, 0, 1], [1, 2, 0])
    src = tilec.JITKernel(main, "cuda:sm_80").get_kernel_source()
    lines = [int(x) for x in re.findall(r"// line (\d+)", src)]
    loop = src[src.index("for (int k"):]  # the steady state: each statement once, in its place
    assert [x for x in map(int, re.findall(r"// line (\d+)", loop)) if s0 <= x <= s0 + 2][:3] == [s0 + 2, s0, s0 + 1], \
        lines
    a, b = randn(rng, (64, 8), "float32"), randn(rng, (64, 8), "float32")
    c = poisoned((8, 8), "float32")
    tilec.JITKernel(main, "simt:sm_80")(a, b, c)
    ref = (a.astype(np.float64).reshape(8, 8, 8) * b.astype(np.float64).reshape(8, 8, 8)).sum(0)
    assert_close(c, ref, "float32", scale=float(np.abs(ref).max() + 1))
    with pytest.raises(TilecValueError, match=r"order= needs stage="):
        simt(kernel(None, [1, 0, 2]))(a, b, c)


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_copy_between_parts_of_fragments_held_by_other_threads(rng, target):
    """T.copy(s1[1:8, 14:16], s2[1:8, 3:5]) between fragments: the source elements sit on other threads than the
    destination's, so the copy goes through shared memory (it was refused with 'fragment s1 indexed outside its
    shape', the loop over the destination reading s1 at the elements outside the part too); in a loop, with a
    conversion."""
    import tilec

    @T.prim_func
    def main(X: T.Tensor((3, 8, 16), "float32"), Y: T.Tensor((8, 16), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s1 = T.alloc_fragment((8, 16), "float32")
            s2 = T.alloc_fragment((8, 16), "float16")
            acc = T.alloc_fragment((8, 16), "float32")
            T.clear(acc)
            for k in T.serial(3):
                T.fill(s2, 1)
                T.copy(X[k, 0, 0], s1)
                T.copy(s1[1:8, 14:16], s2[1:8, 3:5])
                for i, j in T.Parallel(8, 16):
                    acc[i, j] += s2[i, j]
            T.copy(acc, Y)

    x = randn(rng, (3, 8, 16), "float32")
    y = poisoned((8, 16), "float32")
    tilec.JITKernel(main, target)(x, y)
    ref = np.ones((3, 8, 16))
    ref[:, 1:8, 3:5] = x[:, 1:8, 14:16].astype(np.float16)
    assert_close(y, ref.sum(axis=0), "float32")


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a"])
@pytest.mark.parametrize("red", ["sum", "max", "abssum"])
def test_reduction_of_a_long_line_held_by_one_thread(rng, target, red):
    """A 1 x 1000 fragment is held whole by every thread (one row: nothing to spread), so a thread folds 1000 registers
    into its partial: the fold is written in statements of a bounded length (it was one expression 1000 terms deep,
    and emitting or interpreting it raised RecursionError from inside tilec)."""
    import tilec

    N = 1000

    @T.prim_func
    def main(X: T.Tensor((1, N), "float32"), Y: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            x = T.alloc_fragment((1, N), "float32")
            y = T.alloc_fragment((1,), "float32")
            T.copy(X, x)
            getattr(T, f"reduce_{red}")(x, y, dim=1)
            T.copy(y, Y)

    x, y = randn(rng, (1, N), "float32"), poisoned((1,), "float32")
    kernel = tilec.JITKernel(main, target)
    kernel(x, y)
    x64 = x.astype(np.float64)
    assert_close(y, _NP_REDUCE[red](x64, 1), "float32", scale=float(np.abs(x64).sum()))
    source = tilec.JITKernel(main, target.replace("simt", "hip" if "gfx" in target else "cuda")).get_kernel_source()
    assert "main_kernel" in source


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:sm_90a"])
@pytest.mark.parametrize(("M", "N", "bm", "threads"), [(40, 96, 8, 64), (48, 80, 16, 128)])
def test_argmax_of_rows_that_a_threads_registers_straddle(rng, target, M, N, bm, threads):
    """Top-1 of each row: the row max, then the least column holding it. The bm x N tile spread over the threads
    gives a thread registers in several rows, not aligned to its threads (8 x 96 over 64 threads: 3 rows a
    thread), so the row vectors read by the loop are held by threads in different registers; their layout needed a
    lookup table and the kernel was refused ("layout needs a lookup table ... not supported by code generation")."""
    import tilec

    @T.prim_func
    def main(X: T.Tensor((M, N), "bfloat16"), L: T.Tensor((M,), "int32"), I: T.Tensor((M,), "int32"),
             V: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            mx = T.alloc_fragment((bm,), "float32")
            idx = T.alloc_fragment((bm, N), "float32")
            mi = T.alloc_fragment((bm,), "float32")
            for i, j in T.Parallel(bm, N):  # the columns from L[row] on are masked out
                x[i, j] = T.if_then_else(j < L[bx * bm + i], T.cast(X[bx * bm + i, j], "float32"),
                                         -T.infinity("float32"))
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(bm, N):
                idx[i, j] = T.if_then_else(x[i, j] == mx[i], T.cast(j, "float32"), T.cast(N, "float32"))
            T.reduce_min(idx, mi, dim=1)
            for i in T.Parallel(bm):
                I[bx * bm + i] = T.cast(mi[i], "int32")
                V[bx * bm + i] = mx[i]

    x = randn(rng, (M, N), "bfloat16")
    lens = rng.integers(1, N + 1, size=M).astype(np.int32)
    ind, val = poisoned((M,), "int32"), poisoned((M,), "float32")
    tilec.JITKernel(main, target)(x, lens, ind, val)
    x64 = np.where(np.arange(N) < lens[:, None], x.astype(np.float64), -np.inf)
    np.testing.assert_array_equal(ind, x64.argmax(1))
    assert_close(val, x64.max(1), "float32")


def test_a_fragment_the_threads_do_not_divide_is_held_whole_with_a_note(rng):
    """A register tile whose size the thread count does not divide (4 x 77 at 128 threads, a layer norm's rows) is
    held whole by every thread: correct, but every thread computes the whole tile (a 7 x 77 layer norm spilled).
    The report said only 'spread over the threads'; a note now names the fragment, its line and what it costs, and
    a tile that divides gets none."""
    def kernel(rows, cols):
        @T.prim_func
        def main(X: T.Tensor((8, cols), "float32"), Y: T.Tensor((8, cols), "float32")):
            with T.Kernel(8 // rows, threads=128) as bx:
                x = T.alloc_fragment((rows, cols), "float32")
                T.copy(X[bx * rows, 0], x)
                for i, j in T.Parallel(rows, cols):
                    x[i, j] = x[i, j] * 2.0 + 1.0
                T.copy(x, Y[bx * rows, 0])
        return main

    k = simt(kernel(4, 77))
    note = next(n for n in k.state.report if "does not spread evenly" in n)
    assert "'x' (308 elements)" in note and "128 threads" in note and "the work 128 times over" in note
    assert note.startswith("T.alloc_fragment at line ")
    a = randn(rng, (8, 77), "float32")
    y = poisoned((8, 77), "float32")
    k(a, y)
    assert_close(y, a.astype(np.float64) * 2 + 1, "float32")
    assert not any("does not spread evenly" in n for n in simt(kernel(4, 64)).state.report)


def _argmax(M: int, N: int, bm: int, threads: int, tail: str):
    """Top-1 of each row of X (I) and its row max (V), after a last loop over the two row vectors: ``tail``
    'scale' (mx = 2 mx), 'both' (mi first: mi += 1, mx = 2 mx + mi) or 'mi_from_mx' (mi += mx)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float16"), I: T.Tensor((M,), "int32"), V: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            mx = T.alloc_fragment((bm,), "float32")
            idx = T.alloc_fragment((bm, N), "int32")
            mi = T.alloc_fragment((bm,), "int32")
            T.copy(X[bx * bm, 0], x)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(bm, N):
                idx[i, j] = T.if_then_else(x[i, j] == mx[i], j, N)
            T.reduce_min(idx, mi, dim=1)
            if tail == "scale":
                for i in T.Parallel(bm):
                    mx[i] = mx[i] * 2.0
            elif tail == "both":
                for i in T.Parallel(bm):
                    mi[i] = mi[i] + 1
                    mx[i] = mx[i] * 2.0 + T.cast(mi[i], "float32")
            else:
                for i in T.Parallel(bm):
                    mi[i] = mi[i] + T.cast(mx[i], "int32")
            T.copy(mi, I[bx * bm])
            T.copy(mx, V[bx * bm])

    return main


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:sm_90a"])
@pytest.mark.parametrize(("M", "N", "bm", "threads"), [(12, 40, 4, 32), (64, 77, 32, 32), (128, 77, 64, 64)])
def test_argmax_of_rows_whose_projection_the_loop_cannot_read(rng, target, M, N, bm, threads):
    """Top-1 of each row, the tile loaded by T.copy. Its spread over the threads (4 x 40 over 32: thread t holds
    elements t + 32 l) puts one thread's registers in several rows, different registers of one row on different
    threads: the row max's layout from the reduction (one register per row) is not one the loop over the tile can
    read (thread 0 finds row 0 in its register 1, thread 8 row 1), and the kernel was refused ("fragment 'mx'
    (rows of x, ...) is not held where the loop at line ... runs"). The row max now takes the loop's registers (each
    row in every register the loop runs an iteration of it in), converted from the reduction through shared memory;
    a loop over the rows and a copy out read it there too."""
    import tilec

    main = _argmax(M, N, bm, threads, "scale")
    x = np.stack([rng.permutation(N) for _ in range(M)]).astype(np.float16)  # no ties
    ind, val = poisoned((M,), "int32"), poisoned((M,), "float32")
    kernel = tilec.JITKernel(main, target)
    kernel(x, ind, val)
    np.testing.assert_array_equal(ind, x.astype(np.float64).argmax(1))
    assert_close(val, 2 * x.astype(np.float64).max(1), "float32")
    cuda = tilec.JITKernel(main, target.replace("simt", "cuda"))
    assert "main_kernel" in cuda.get_kernel_source()
    assert "T.reduce_max at line" in cuda.report()  # its note: the layout conversion through shared memory


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:sm_90a"])
@pytest.mark.parametrize(("M", "N", "bm", "threads"), [(12, 40, 4, 32), (64, 77, 32, 32), (128, 80, 4, 64)])
@pytest.mark.parametrize("writes_mx", [True, False])
def test_a_loop_over_both_argmax_vectors_laid_out_alike(rng, target, M, N, bm, threads, writes_mx):
    """The row max laid out as the loop over the tile reads it (see the test above), the column index as the
    reduction leaves it, then one loop over both, mi first: it took its layout from mi, which does not hold mx (or
    holds only one of a thread's copies of an element), and the kernel was refused ("fragment 'mx' ... is not held
    where the loop at line ... runs (the layout of mi ...)", or "... would write only one of them") though the loop
    with mx first compiled. The loop now runs as mx is laid out where it writes mx, and mi, where mx's layout does
    not hold it, is laid out like mx (the reduction converts it through shared memory)."""
    import tilec

    main = _argmax(M, N, bm, threads, "both" if writes_mx else "mi_from_mx")
    x = np.stack([rng.permutation(N) for _ in range(M)]).astype(np.float16)  # no ties
    ind, val = poisoned((M,), "int32"), poisoned((M,), "float32")
    tilec.JITKernel(main, target)(x, ind, val)
    top, big = x.astype(np.float64).argmax(1), x.astype(np.float64).max(1)
    np.testing.assert_array_equal(ind, top + 1 if writes_mx else top + big)
    assert_close(val, 2 * big + top + 1 if writes_mx else big, "float32")
    assert "main_kernel" in tilec.JITKernel(main, target.replace("simt", "cuda")).get_kernel_source()
