"""Frontend tests: every primitive of ``tilec.language`` parsed to Tile IR, compared with the expected IR text."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import tilec
import tilec.language as T
from tilec.ir.kernel import PrimFunc
from tilec.layout import row_major
from tilec.lower.layouts import default_fragment
from tilec.passes.verify import verify

SCALE = 0.125  # a module global read by kernels
_SHAPES = [(16, 32)]


def assert_ir(func: PrimFunc, expected: str) -> None:
    assert isinstance(func, PrimFunc)
    text = str(func)
    want = textwrap.dedent(expected).lstrip("\n")
    assert text == want, f"IR differs; got:\n{text}"
    verify(func)


# ---------------------------------------------------------------------------------------------- kernel, allocs


def test_kernel_grid_threads_and_block_names():
    @T.prim_func
    def main(A: T.Tensor((8, 8, 8), "float32")):
        with T.Kernel(2, 3, 4, threads=[32, 4]) as (bx, by, bz):
            A[bz, by, bx] = 1.0

    assert_ir(main, """
        @T.prim_func
        def main(A: T.Tensor((8, 8, 8), "float32")):
            with T.Kernel(2, 3, 4, threads=[32, 4]) as (bx, by, bz):
                A[bz, by, bx] = 1.0
    """)

    @T.prim_func
    def one(A: T.Tensor((8,), "float32")):
        with T.Kernel(T.ceildiv(8, 4), threads=64) as b:
            A[b] = 2.0

    assert_ir(one, """
        @T.prim_func
        def one(A: T.Tensor((8,), "float32")):
            with T.Kernel(2, threads=64) as b:
                A[b] = 2.0
    """)


def test_allocations_and_alloc_var():
    @T.prim_func
    def main(A: T.Tensor((64,), "float16"), n: T.int32):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((64,), "float16")
            f = T.alloc_fragment((64,), "float32")
            loc = T.alloc_local((4,), "int32")
            x = T.alloc_var("int32")
            y = T.alloc_var("float32", init=0.5)
            x = n * 2
            x += 1
            loc[0] = x
            y = y * 2
            A[x] = y

    assert_ir(main, """
        @T.prim_func
        def main(A: T.Tensor((64,), "float16"), n: T.int32):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((64,), "float16")
                f = T.alloc_fragment((64,), "float32")
                loc = T.alloc_local((4,), "int32")
                x = T.alloc_var("int32")
                y = T.alloc_var("float32")
                y = 0.5
                x = n * 2
                x = x + 1
                loc[0] = x
                y = y * 2.0
                A[x] = T.cast(y, "float16")
    """)


# ------------------------------------------------------------------------------------------------------ copy


def test_copy_forms_and_scopes():
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((2, 4, 128, 64), "float16"),
             C: T.Tensor((128, 64), "float32")):
        with T.Kernel(2, 4, threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            A_f = T.alloc_fragment((64, 32), "float32")
            T.copy(A[bx * 64, 0], A_s)  # start-index form: extents from the other operand
            T.copy(A[bx * 64 : (bx + 1) * 64, 32:64], A_s)  # slice form
            T.copy(B[by // 2, by, bx * 64 : bx * 64 + 64, 0:32], A_s)  # leading unit dimensions
            T.copy(A_s, A_f)  # shared -> fragment, with a cast
            T.copy(A_f, C[bx * 64, 32])  # fragment -> global
            T.copy(A_s[0:16, :], A_f[16:32, :])  # sub-regions of on-chip buffers

    assert_ir(main, """
        @T.prim_func
        def main(
            A: T.Tensor((128, 64), "float16"),
            B: T.Tensor((2, 4, 128, 64), "float16"),
            C: T.Tensor((128, 64), "float32"),
        ):
            with T.Kernel(2, 4, threads=128) as (bx, by):
                A_s = T.alloc_shared((64, 32), "float16")
                A_f = T.alloc_fragment((64, 32), "float32")
                T.copy(A[bx * 64:bx * 64 + 64, :32], A_s)
                T.copy(A[bx * 64:bx * 64 + 64, 32:64], A_s)
                T.copy(B[by // 2, by, bx * 64:bx * 64 + 64, :32], A_s)
                T.copy(A_s, A_f)
                T.copy(A_f, C[bx * 64:bx * 64 + 64, 32:64])
                T.copy(A_s[:16, :32], A_f[16:32, :32])
    """)


def test_copy_start_index_takes_a_column_tiles_extents_dim_for_dim():
    """``T.copy(X[0, 0], x)`` with ``x`` of shape (33, 1): the start index takes (33, 1), not x's non-unit extents
    aligned to the right ((1, 33): a row of X, clipped to its first element, the rest of the column zeros)."""

    @T.prim_func
    def main(X: T.Tensor((33, 1), "float32"), Y: T.Tensor((4, 33, 1), "float32")):
        with T.Kernel(1, threads=32) as bx:
            x = T.alloc_fragment((33, 1), "float32")
            T.copy(X[0, 0], x)
            T.copy(x, Y[bx, 0, 0])

    assert_ir(main, """
        @T.prim_func
        def main(X: T.Tensor((33, 1), "float32"), Y: T.Tensor((4, 33, 1), "float32")):
            with T.Kernel(1, threads=32) as bx:
                x = T.alloc_fragment((33, 1), "float32")
                T.copy(X, x)
                T.copy(x, Y[bx, :33, 0])
    """)


# ------------------------------------------------------------------------------------------------------ gemm


def test_gemm_flags_and_policies():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_shared((64, 32), "float16")
            at = T.alloc_shared((32, 64), "float16")
            b = T.alloc_shared((32, 16), "float16")
            bt = T.alloc_shared((16, 32), "float16")
            c = T.alloc_fragment((64, 16), "float32")
            T.gemm(a, b, c)
            T.gemm(at, b, c, transpose_A=True, policy=T.GemmWarpPolicy.FullRow)
            T.gemm(a, bt, c, transpose_B=True, policy=T.GemmWarpPolicy.FullCol, clear_accum=True)
            T.gemm(at, bt, c, True, True, T.GemmWarpPolicy.Square, k_pack=2)

    assert_ir(main, """
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                a = T.alloc_shared((64, 32), "float16")
                at = T.alloc_shared((32, 64), "float16")
                b = T.alloc_shared((32, 16), "float16")
                bt = T.alloc_shared((16, 32), "float16")
                c = T.alloc_fragment((64, 16), "float32")
                T.gemm(a, b, c)
                T.gemm(at, b, c, transpose_A=True, policy=T.GemmWarpPolicy.FullRow)
                T.gemm(a, bt, c, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)
                T.gemm(at, bt, c, transpose_A=True, transpose_B=True, k_pack=2)
    """)
    g = main.launch.body.stmts[1]
    assert g.mnk == (64, 16, 32) and g.transpose_A and not g.transpose_B


# -------------------------------------------------------------------------------- reductions, cumsum, fill


def test_reductions_cumsum_fill_clear():
    @T.prim_func
    def main(A: T.Tensor((16, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((16, 32), "float32")
            r = T.alloc_fragment((16,), "float32")
            c = T.alloc_fragment((32,), "float32")
            T.reduce_max(x, r, dim=1)
            T.reduce_min(x, r, dim=-1, clear=False)
            T.reduce_sum(x, c, dim=0)
            T.reduce_abssum(x, r, 1, False)
            T.reduce_absmax(x, c, dim=0, clear=True)
            T.cumsum(x, dim=1)  # in place
            T.cumsum(x, A[0:16, :], dim=0, reverse=True)
            T.fill(x, -T.infinity("float32"))
            T.fill(r[0:8], 3)
            T.clear(c)

    assert_ir(main, """
        @T.prim_func
        def main(A: T.Tensor((16, 32), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_fragment((16, 32), "float32")
                r = T.alloc_fragment((16,), "float32")
                c = T.alloc_fragment((32,), "float32")
                T.reduce_max(x, r, dim=1, clear=True)
                T.reduce_min(x, r, dim=1, clear=False)
                T.reduce_sum(x, c, dim=0, clear=True)
                T.reduce_abssum(x, r, dim=1, clear=False)
                T.reduce_absmax(x, c, dim=0, clear=True)
                T.cumsum(x, x, dim=1, reverse=False)
                T.cumsum(x, A, dim=0, reverse=True)
                T.fill(x, -T.infinity("float32"))
                T.fill(r[:8], 3.0)
                T.fill(c, 0.0)
    """)


# ----------------------------------------------------------------------------------------------------- loops


def test_parallel_multi_dim_and_perfect_nesting():
    @T.prim_func
    def main(A: T.Tensor((4, 8, 16), "float32"), B: T.Tensor((4, 8), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i, j, k in T.Parallel(4, 8, 16):
                A[i, j, k] = 0.0
            for i in T.Parallel(4):
                for j in T.Parallel(8):
                    for k in T.Parallel(16):
                        A[i, j, k] = A[i, j, k] + 1.0
            for i, j in T.Parallel(4, 8):
                for k in T.serial(16):  # a per-element loop inside the parallel one
                    B[i, j] = B[i, j] + A[i, j, k]

    assert_ir(main, """
        @T.prim_func
        def main(A: T.Tensor((4, 8, 16), "float32"), B: T.Tensor((4, 8), "float32")):
            with T.Kernel(1, threads=128) as bx:
                for i, j, k in T.Parallel(4, 8, 16):
                    A[i, j, k] = 0.0
                for i_1, j_1, k_1 in T.Parallel(4, 8, 16):
                    A[i_1, j_1, k_1] = A[i_1, j_1, k_1] + 1.0
                for i_2, j_2 in T.Parallel(4, 8):
                    for k_2 in T.serial(16):
                        B[i_2, j_2] = B[i_2, j_2] + A[i_2, j_2, k_2]
    """)


def test_sequential_loops_and_annotations():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for k in T.Pipelined(8, num_stages=3, order=[0, 1], stage=[0, 1]):
                A[k] = 1.0
            for k in T.Pipelined(2, 10):
                A[k] = 2.0
            for k in T.serial(4, 20, 4):
                A[k] = 3.0
            for k in T.serial(10, 0, -3):
                A[k] = 4.0
            for k in T.unroll(4):
                A[k] = 5.0
            for k in T.unroll(8, unroll_factor=2):
                A[k] = 5.5
            for k in T.vectorized(4):
                A[k] = 6.0
            for i, j in T.grid(2, 3):
                A[i * 3 + j] = 7.0
            for k in range(3):
                A[k] = 8.0

    assert_ir(main, """
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                for k in T.Pipelined(8, num_stages=3, order=(0, 1), stage=(0, 1)):
                    A[k] = 1.0
                for k_1 in T.Pipelined(8, num_stages=0):
                    A[2 + k_1] = 2.0
                for k_2 in T.serial(4):
                    A[4 + k_2 * 4] = 3.0
                for k_3 in T.serial(4):
                    A[10 + k_3 * -3] = 4.0
                for k_4 in T.unroll(4):
                    A[k_4] = 5.0
                for k_5 in T.unroll(8, unroll_factor=2):
                    A[k_5] = 5.5
                for k_6 in T.vectorized(4):
                    A[k_6] = 6.0
                for i in T.serial(2):
                    for j in T.serial(3):
                        A[i * 3 + j] = 7.0
                for k_7 in T.serial(3):
                    A[k_7] = 8.0
    """)


def test_symbolic_loop_bounds():
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for k in T.serial(bx * 64, T.min(N, bx * 64 + 64)):
                A[k] = 1.0

    assert_ir(main, """
        @T.prim_func
        def main(A: T.Tensor((N,), "float32")):
            # N = T.dynamic("N")
            with T.Kernel(N // 64 + (N % 64 + 63) // 64, threads=64) as bx:
                for k in T.serial(T.min(N, bx * 64 + 64) - bx * 64):
                    A[bx * 64 + k] = 1.0
    """)


# ------------------------------------------------------------------------------------------------ scalar math


def test_scalar_math_and_selects():
    @T.prim_func
    def main(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float16")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(16):
                A[i] = T.exp(A[i]) + T.exp2(A[i]) - T.log(A[i]) * T.log2(A[i])
                A[i] = T.sqrt(A[i]) + T.rsqrt(A[i]) + T.abs(A[i]) + T.tanh(A[i])
                A[i] = T.max(A[i], T.min(A[i], 1.0)) + T.if_then_else(i < 8, A[i], -T.infinity("float32"))
                B[i] = T.exp(B[i]) * 2
                A[i] = T.if_then_else(i % 2 == 0, T.cast(B[i], "float32"), SCALE) + T.ceildiv(i, 4)

    assert_ir(main, """
        @T.prim_func
        def main(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float16")):
            with T.Kernel(1, threads=128) as bx:
                for i in T.Parallel(16):
                    A[i] = T.exp(A[i]) + T.exp2(A[i]) - T.log(A[i]) * T.log2(A[i])
                    A[i] = T.sqrt(A[i]) + T.rsqrt(A[i]) + T.abs(A[i]) + T.tanh(A[i])
                    A[i] = T.max(A[i], T.min(A[i], 1.0)) + T.if_then_else(i < 8, A[i], -T.infinity("float32"))
                    B[i] = T.exp(B[i]) * 2.0
                    A[i] = T.if_then_else(i % 2 == 0, T.cast(B[i], "float32"), 0.125) + T.cast((i + 3) // 4, "float32")
    """)
    assert T.min(3, 5) == 3 and T.max(3, 5) == 5 and T.ceildiv(10, 3) == 4  # Python values stay Python


def test_runtime_if_and_python_condition_folding():
    def build(flag: bool, mode: str):
        @T.prim_func
        def main(A: T.Tensor((16,), "float32")):
            with T.Kernel(2, threads=128) as bx:
                if flag:
                    A[bx] = 1.0
                else:
                    A[bx] = 2.0
                if mode == "x" and bx > 0:
                    A[0] = 3.0
                if bx == 0:
                    A[1] = 4.0
                elif bx == 1:
                    A[2] = 5.0
                else:
                    pass

        return main

    assert_ir(build(True, "x"), """
        @T.prim_func
        def main(A: T.Tensor((16,), "float32")):
            with T.Kernel(2, threads=128) as bx:
                A[bx] = 1.0
                if bx > 0:
                    A[0] = 3.0
                if bx == 0:
                    A[1] = 4.0
                else:
                    if bx == 1:
                        A[2] = 5.0
    """)
    text = str(build(False, "y"))
    assert "A[bx] = 2.0" in text and "A[0] = 3.0" not in text and "1.0" not in text


# ---------------------------------------------------------------------------------------------------- atomics


def test_atomic_add_element_and_tile_forms():
    @T.prim_func
    def main(A: T.Tensor((4, 16), "float32"), S: T.Tensor((4,), "float32")):
        with T.Kernel(3, threads=128) as bx:
            f = T.alloc_fragment((4, 16), "float32")
            T.fill(f, 1.0)
            T.atomic_add(A[0, 0], f)  # tile, start-index form
            T.atomic_add(A, f)  # tile, whole buffer
            T.atomic_add(S[bx % 4], 2.0)  # one element at block level
            for i, j in T.Parallel(4, 16):
                T.atomic_add(S[i], f[i, j])  # one element per iteration

    assert_ir(main, """
        @T.prim_func
        def main(A: T.Tensor((4, 16), "float32"), S: T.Tensor((4,), "float32")):
            with T.Kernel(3, threads=128) as bx:
                f = T.alloc_fragment((4, 16), "float32")
                T.fill(f, 1.0)
                T.atomic_add(A, f)
                T.atomic_add(A, f)
                T.atomic_add(S[bx % 4], 2.0)
                for i, j in T.Parallel(4, 16):
                    T.atomic_add(S[i], f[i, j])
    """)


# -------------------------------------------------------------------------------------- kernel annotations


def test_use_swizzle_annotate_layout_print():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16")):
        with T.Kernel(4, 4, threads=128) as (bx, by):
            s = T.alloc_shared((16, 64), "float16")
            f = T.alloc_fragment((16, 8), "float32")
            T.annotate_layout({s: row_major(16, 64), f: lambda buf: default_fragment(buf.shape, 128)})
            T.use_swizzle(8, order="column")
            T.copy(A[by * 16, 0], s)
            T.print(s, msg="tile")
            T.print(bx + by)

    assert_ir(main, """
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(4, 4, threads=128) as (bx, by):
                s = T.alloc_shared((16, 64), "float16")
                f = T.alloc_fragment((16, 8), "float32")
                T.annotate_layout({s: Layout((16, 64): (i, j) -> i*64 + j)})
                T.annotate_layout({f: Fragment((16, 8): (i, j) -> thread i*8 + j, local 0; threads=128, locals=1)})
                T.use_swizzle(8, order="column")
                T.copy(A[by * 16:by * 16 + 16, :64], s)
                T.print(s, msg='tile')
                T.print(bx + by, msg='')
    """)


def test_dynamic_shapes():
    M = T.dynamic("M")
    K = T.symbolic("K")

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
            a = T.alloc_fragment((32, 64), "float16")
            T.copy(A[bx * 32, 0], a)
            for i in T.Parallel(32):
                B[bx * 32 + i] = T.cast(a[i, 0], "float32") + T.cast(K, "float32")

    assert_ir(main, """
        @T.prim_func
        def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((M,), "float32")):
            # M = T.dynamic("M")
            # K = T.dynamic("K")
            with T.Kernel(M // 32 + (M % 32 + 31) // 32, threads=128) as bx:
                a = T.alloc_fragment((32, 64), "float16")
                T.copy(A[bx * 32:bx * 32 + 32, :64], a)
                for i in T.Parallel(32):
                    B[bx * 32 + i] = T.cast(a[i, 0], "float32") + T.cast(K, "float32")
    """)
    assert [v.name for v in main.dyn_vars] == ["M", "K"]


# ------------------------------------------------------------------------- macros, closures, Python unrolling


@T.macro
def _scale_rows(buf, factor):
    for i, j in T.Parallel(4, 8):
        buf[i, j] = buf[i, j] * factor


@T.macro
def _twice(x):
    return x * 2


def test_macro_closures_globals_and_list_unrolling():
    offsets = [0, 2]  # a closure variable of the factory
    block = 4

    @T.prim_func
    def main(A: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=128) as bx:
            f = T.alloc_fragment((4, 8), "float32")
            for off in offsets:
                T.copy(A[off, 0], f)
                _scale_rows(f, SCALE)
                T.copy(f, A[off + block, 0])
            for d in [(0, 1), (1, 0)]:
                A[d[0], d[1]] = _twice(f[d[0], d[1]])

    assert_ir(main, """
        @T.prim_func
        def main(A: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=128) as bx:
                f = T.alloc_fragment((4, 8), "float32")
                T.copy(A[:4, :8], f)
                for i, j in T.Parallel(4, 8):
                    f[i, j] = f[i, j] * 0.125
                T.copy(f, A[4:8, :8])
                T.copy(A[2:6, :8], f)
                for i_1, j_1 in T.Parallel(4, 8):
                    f[i_1, j_1] = f[i_1, j_1] * 0.125
                T.copy(f, A[6:10, :8])
                A[0, 1] = f[0, 1] * 2.0
                A[1, 0] = f[1, 0] * 2.0
    """)


def test_factory_names_in_annotations_and_python_helpers():
    def factory(M, dtype):
        shape = (M, 2 * M)

        def half(n):  # a plain Python function runs at compile time
            return n // 2

        @T.prim_func
        def main(A: T.Tensor(shape, dtype)):
            with T.Kernel(half(M), threads=32) as bx:
                A[bx, 0] = T.cast(bx, dtype)

        return main

    assert_ir(factory(8, "int8"), """
        @T.prim_func
        def main(A: T.Tensor((8, 16), "int8")):
            with T.Kernel(4, threads=32) as bx:
                A[bx, 0] = T.cast(bx, "int8")
    """)


@pytest.mark.parametrize("in_registers", [True, False])
def test_a_buffer_allocated_in_a_conditional_expression_takes_its_name(in_registers):
    """``acc = T.alloc_fragment(...) if flag else T.alloc_shared(...)``: the buffer is ``acc`` (it was named after
    its scope, which then showed in errors and dumps)."""

    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            acc = T.alloc_fragment((4,), "float32") if in_registers else T.alloc_shared((4,), "float32")
            T.copy(A, acc)
            T.copy(acc, A)

    assert [b.name for b in main.launch.allocs] == ["acc"]
    assert main.launch.allocs[0].scope == ("fragment" if in_registers else "shared")


def test_kernel_local_python_names_and_assert():
    @T.prim_func
    def main(A: T.Tensor((16,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            base = bx * 8  # a kernel expression, inlined where used
            n = len(_SHAPES)  # Python builtins run at compile time
            assert n == 1, "one shape"
            for i in T.Parallel(8):
                t = A[base + i] * 2  # per-iteration temporaries
                A[base + i] = t + n

    assert_ir(main, """
        @T.prim_func
        def main(A: T.Tensor((16,), "float32")):
            with T.Kernel(2, threads=128) as bx:
                for i in T.Parallel(8):
                    A[bx * 8 + i] = A[bx * 8 + i] * 2.0 + 1.0
    """)


# ----------------------------------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8", "int32", "uint8", "float8_e4m3",
                                   "float8_e5m2"])
def test_dtypes_storage_and_casts(dtype):
    @T.prim_func
    def main(A: T.Tensor((32,), dtype), B: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((32,), dtype)
            T.copy(A, s)
            for i in T.Parallel(32):
                B[i] = T.cast(s[i], "float32")
                s[i] = T.cast(B[i], dtype)

    to_f32, back = ("s[i]", "B[i]") if dtype == "float32" else ('T.cast(s[i], "float32")', f'T.cast(B[i], "{dtype}")')
    assert_ir(main, f"""
        @T.prim_func
        def main(A: T.Tensor((32,), "{dtype}"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                s = T.alloc_shared((32,), "{dtype}")
                T.copy(A, s)
                for i in T.Parallel(32):
                    B[i] = {to_f32}
                    s[i] = {back}
    """)  # a cast to the type a value already has is no cast


def test_dtype_spellings():
    @T.prim_func
    def main(A: T.Tensor((4,), T.float16), B: T.Tensor((4,), "half"), C: T.Tensor((4,), np.float32),
             D: T.Tensor((4,), T.int4), E: T.Tensor((4,), T.float8_e4m3fn), F: T.Tensor((4,), T.bool)):
        with T.Kernel(1, threads=32) as bx:
            A[0] = B[0]

    head = str(main).splitlines()[2:8]
    assert head == ['    A: T.Tensor((4,), "float16"),', '    B: T.Tensor((4,), "float16"),',
                    '    C: T.Tensor((4,), "float32"),', '    D: T.Tensor((4,), "int4"),',
                    '    E: T.Tensor((4,), "float8_e4m3"),', '    F: T.Tensor((4,), "bool"),']


# ------------------------------------------------------------------------------------------------- eager form


@tilec.jit(target="cpu")
def _eager_add(A, B, block_M: int = 16, dtype="float32"):
    M, N = T.const("M N")
    A: T.Tensor[[M, N], dtype]
    B: T.Tensor[[M, N], dtype]
    C = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        for i, j in T.Parallel(block_M, N):
            C[bx * block_M + i, j] = A[bx * block_M + i, j] + B[bx * block_M + i, j] * 2
    return C


def test_eager_form_parses_per_shape(rng):
    a = rng.standard_normal((20, 8)).astype(np.float32)
    b = rng.standard_normal((20, 8)).astype(np.float32)
    c = _eager_add(a, b)
    np.testing.assert_allclose(c, a.astype(np.float64) + 2 * b.astype(np.float64), rtol=1e-6)
    assert_ir(_eager_add.get_kernel(a, b).prim_func, """
        @T.prim_func
        def _eager_add(
            A: T.Tensor((20, 8), "float32"),
            B: T.Tensor((20, 8), "float32"),
            C: T.Tensor((20, 8), "float32"),  # output
        ):
            with T.Kernel(2, threads=128) as bx:
                for i, j in T.Parallel(16, 8):
                    C[bx * 16 + i, j] = A[bx * 16 + i, j] + B[bx * 16 + i, j] * 2.0
    """)
    c2 = _eager_add(a[:5], b[:5], block_M=4)
    np.testing.assert_allclose(c2, a[:5] + 2 * b[:5], rtol=1e-6)
    assert "T.Kernel(2, threads=128)" in str(_eager_add.get_kernel(a[:5], b[:5], block_M=4).prim_func)


@tilec.jit(target="cpu")
def _eager_rowsum(X, block: int = 8):
    M = T.dynamic("M")
    N = T.const("N")
    X: T.Tensor[[M, N], T.float16]
    Y = T.empty((M,), "float32")
    with T.Kernel(T.ceildiv(M, block), threads=64) as bx:
        x = T.alloc_fragment((block, N), "float32")
        s = T.alloc_fragment((block,), "float32")
        T.copy(X[bx * block, 0], x)
        T.reduce_sum(x, s, dim=1)
        T.copy(s, Y[bx * block])
    return Y


def test_eager_form_with_dynamic_dims(rng):
    for m in (13, 40):
        x = rng.standard_normal((m, 24)).astype(np.float16)
        y = _eager_rowsum(x)
        np.testing.assert_allclose(y, x.astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-4)
    kernels = {id(k) for k in _eager_rowsum._kernels.values()}
    assert len(kernels) == 1  # one compilation serves every M
    assert_ir(_eager_rowsum.get_kernel(x).prim_func, """
        @T.prim_func
        def _eager_rowsum(
            X: T.Tensor((M, 24), "float16"),
            Y: T.Tensor((M,), "float32"),  # output
        ):
            # M = T.dynamic("M")
            with T.Kernel(M // 8 + (M % 8 + 7) // 8, threads=64) as bx:
                x = T.alloc_fragment((8, 24), "float32")
                s = T.alloc_fragment((8,), "float32")
                T.copy(X[bx * 8:bx * 8 + 8, :24], x)
                T.reduce_sum(x, s, dim=1, clear=True)
                T.copy(s, Y[bx * 8:bx * 8 + 8])
    """)


@tilec.jit(target="cpu")
def _eager_scale_by_rows(X):
    M = T.dynamic("M")
    X: T.Tensor[[M, 4], T.float32]
    rows = X.shape[0]  # a Python-level read of a dynamic size: the IR changes with M (here it does not)
    Y = T.empty((M, 4), "float32")
    with T.Kernel(T.ceildiv(M, 8), threads=32) as bx:
        for i, j in T.Parallel(8, 4):
            Y[bx * 8 + i, j] = X[bx * 8 + i, j] * 2.0
    return Y


@tilec.jit(target="cpu")
def _eager_bakes_rows(X):
    X: T.Tensor[[T.dynamic("M"), 4], T.float32]
    Y = T.empty((X.shape[0], 4), "float32")
    with T.Kernel(1, threads=32) as bx:
        for i, j in T.Parallel(X.shape[0], 4):
            Y[i, j] = X[i, j] + 1.0
    return Y


def test_eager_reuse_only_when_the_program_is_the_same(rng):
    for m in (8, 16):
        x = rng.standard_normal((m, 4)).astype(np.float32)
        np.testing.assert_allclose(_eager_scale_by_rows(x), 2 * x)
        np.testing.assert_allclose(_eager_bakes_rows(x), x + 1)
    assert len({id(k) for k in _eager_scale_by_rows._kernels.values()}) == 1


_N_SHARED = T.const("N")  # a module-level T.const, as a module-level T.dynamic is


def _eager_shifted(target):
    @tilec.jit(target=target)
    def shifted(X):
        X: T.Tensor[[_N_SHARED], T.float32]
        Y = T.empty((_N_SHARED * 2,), "float32")
        with T.Kernel(1, threads=32) as bx:
            for i in T.serial(_N_SHARED):
                Y[i] = X[i] + 1.0
                Y[_N_SHARED + i] = X[i] * 3.0
        return Y

    return shifted


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_a_module_level_const_is_bound_afresh_at_each_call(rng, target):
    """A T.const made outside the kernel (at module level) kept the size bound by the first call: a call with other
    sizes said "argument 'X': dimension 0 must be 5, got 7", as did a second kernel over the same symbol. Each
    parse now binds it anew from that call's arguments, and leaves it unbound after."""
    first, second = _eager_shifted(target), _eager_shifted(target)
    for kernel, n in ((first, 5), (first, 7), (second, 3), (first, 5), (second, 1)):
        x = rng.standard_normal(n).astype(np.float32)
        y = kernel(x)
        ref = np.concatenate([x.astype(np.float64) + 1.0, x.astype(np.float64) * 3.0])
        np.testing.assert_allclose(y, ref, rtol=1e-6)
    assert _N_SHARED.value is None


def test_memoized_kernels_are_keyed_by_the_environments_target_and_wgmma(monkeypatch):
    """A function without a target of its own takes TILEC_TARGET (and TILEC_WGMMA's pass configs) when it makes a
    kernel: after either changes, the same arguments get a new kernel, not the one made for the old settings."""

    @tilec.jit(out_idx=[-1])
    def add(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(N):
                    B[i] = A[i] + 1.0

        return main

    @tilec.jit
    def add_eager(A):
        N = T.const("N")
        A: T.Tensor[[N], T.float32]
        B = T.empty((N,), "float32")
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(N):
                B[i] = A[i] + 1.0
        return B

    x = np.ones(64, np.float32)
    monkeypatch.setenv("TILEC_TARGET", "cpu")
    monkeypatch.delenv("TILEC_WGMMA", raising=False)
    cpu, cpu_eager = add(64), add_eager.get_kernel(x)
    assert add(64) is cpu and add_eager.get_kernel(x) is cpu_eager
    monkeypatch.setenv("TILEC_TARGET", "simt:sm_80")
    assert str(add(64).target) == str(add_eager.get_kernel(x).target) == "simt:sm_80"
    monkeypatch.setenv("TILEC_TARGET", "cpu")
    assert add(64) is cpu and add_eager.get_kernel(x) is cpu_eager
    monkeypatch.setenv("TILEC_WGMMA", "0")
    assert add(64).pass_configs == {} and cpu.pass_configs == {"wgmma": True, "tma": True}
    np.testing.assert_allclose(add_eager(x), x + 1)


def test_comparison_of_comparisons_prints_and_reparses_the_same():
    """`(A[i] < 3) == (i > 2)` printed as `A[i] < 3 == (i > 2)`, a chained comparison with another meaning."""
    @T.prim_func
    def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "bool")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                B[i] = (A[i] < 3) == (i > 2)

    expected = """
        @T.prim_func
        def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "bool")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(8):
                    B[i] = (A[i] < 3) == (i > 2)
    """
    assert_ir(main, expected)
    assert_ir(_reparse(str(main)), expected)


def _reparse(text: str):
    """Parse printed IR again (it is kernel-language text), from a file so that its source can be read."""
    import linecache

    name = f"<tilec-reparse-{abs(hash(text))}>"
    linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    ns: dict = {"T": T}
    exec(compile(text, name, "exec"), ns)
    return ns["main"]


def test_and_or_on_kernel_values_take_the_deciding_operand_as_python_does():
    """`A[i] or 7` is A[i] where it is non-zero, else 7 (it was `A[i] != 0 or True`, folded to 1); `A[i] and 4` is
    4 or 0; over bool operands `and` / `or` stay the logical ones. Checked on both interpreters against Python."""
    import numpy as np

    import tilec

    @T.prim_func
    def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8, 4), "int32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                B[i, 0] = A[i] or 7
                B[i, 1] = A[i] and 4
                B[i, 2] = (A[i] > 0 and A[i] < 3) or 9
                B[i, 3] = 2 and (A[i] or 0 or -1)

    text = str(main)
    assert "B[i, 0] = T.if_then_else(A[i] != 0, A[i], 7)" in text, text
    assert "B[i, 1] = T.if_then_else(A[i] != 0, 4, A[i])" in text, text
    a = np.arange(-3, 5, dtype=np.int32)
    want = np.array([[x or 7, x and 4, (x > 0 and x < 3) or 9, 2 and (x or 0 or -1)] for x in a.tolist()])
    for target in ("cpu", "simt:sm_80"):
        out = np.full((8, 4), np.iinfo(np.int32).min, np.int32)
        tilec.compile(main, target=target)(a, out)
        np.testing.assert_array_equal(out, want, err_msg=target)


def test_assigning_one_alloc_var_to_another_copies_its_value():
    """`a = b` on two T.alloc_var scalars stores b's value into a (it rebound the name a to b's buffer, so a later
    `a = 5` changed b too); `old = m` binds old to m's value, not to m. Checked on both interpreters."""
    import numpy as np

    import tilec

    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            a = T.alloc_var("float32")
            b = T.alloc_var("float32")
            a = A[0]
            b = A[1]
            a = b
            a = 5.0
            B[0] = a
            B[1] = b
            old = b
            B[2] = old + 1.0

    text = str(main)
    assert "    a = b\n" in text and "B[2] = b + 1.0" in text, text
    a = np.array([1, 2, 3, 4], np.float32)
    for target in ("cpu", "simt:sm_80"):
        out = np.full(4, np.nan, np.float32)
        tilec.compile(main, target=target)(a, out)
        np.testing.assert_array_equal(out[:3], [5, 2, 3], err_msg=target)


def test_starred_unpacking_gathers_the_rest_as_python_does():
    """`a, *rest = 1, 2, 3` said 'cannot unpack 3 values into 2 names'; a starred target takes a list of the values
    the others leave, as in Python (also of kernel values); too few values is still an error naming the targets."""

    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            a, *rest = 1, 2, 3
            *init, last = A[0], A[1], A[2]
            first, *none, end = 5, 6
            A[3] = a + len(rest) + len(init) * last + first + end + len(none)

    assert "A[3] = 3.0 + 2.0 * A[2] + 5.0 + 6.0" in str(main), str(main)
    with pytest.raises(tilec.errors.TilecValueError, match=r"cannot unpack 1 value\(s\) into `\(x, \*y, z\)`"):

        @T.prim_func
        def few(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                x, *y, z = (1,)


def test_integer_powers_of_kernel_ints_are_exact_ints(rng):
    """`A[i] ** 6` of an int went through float32 pow (19 ** 6 came back 47045880, one short) and was a float;
    a kernel int to a Python int power >= 0 is the int, as in Python. Checked on both interpreters."""

    @T.prim_func
    def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8, 3), "int32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                B[i, 0] = A[i] ** 6
                B[i, 1] = A[i] ** 0
                B[i, 2] = A[i] ** 7 // 3

    assert "pow" not in str(main), str(main)
    a = rng.integers(-21, 22, 8).astype(np.int32)
    a[0] = 19
    want = np.stack([a ** 6, a ** 0, a ** 7 // 3], axis=1)
    for target in ("cpu", "simt:sm_80"):
        out = np.full((8, 3), np.iinfo(np.int32).min, np.int32)
        tilec.compile(main, target=target)(a, out)
        np.testing.assert_array_equal(out, want, err_msg=target)


def test_python_ints_a_kernel_int_cannot_hold_widen_it_to_int64(rng):
    """`A[i] + 2**40` wrapped the constant into int32 (0), so `(A[i] + 2**40) % 7` was `A[i] % 7` and `A[i] < 2**40`
    was `A[i] < 0`: the kernel value widens to int64, as TileLang does, and Python's arithmetic holds; a constant no
    64-bit type holds is an error. Checked on both interpreters against numpy's int64."""

    @T.prim_func
    def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8, 4), "int32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                B[i, 0] = (A[i] + 2**40) % 7
                B[i, 1] = T.if_then_else(A[i] < 2**40, 1, 0)
                B[i, 2] = max(A[i], 2**33) // 2**31
                B[i, 3] = (A[i] * 3000000000) // 2**32

    a = rng.integers(-1000, 1000, 8).astype(np.int32)
    w = a.astype(np.int64)
    want = np.stack([(w + 2**40) % 7, np.ones(8, np.int64), np.full(8, 4), (w * 3000000000) // 2**32], axis=1)
    for target in ("cpu", "simt:sm_80"):
        out = np.full((8, 4), np.iinfo(np.int32).min, np.int32)
        tilec.compile(main, target=target)(a, out)
        np.testing.assert_array_equal(out, want, err_msg=target)
    with pytest.raises(tilec.errors.TilecTypeError, match=r"the constant 1180591620717411303424 does not fit int32 "
                                                          r"\(the type of A\[0\]\) nor int64"):

        @T.prim_func
        def huge(A: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=32) as bx:
                A[1] = A[0] + 2**70


def test_min_and_max_of_a_list_or_generator_of_kernel_values(rng):
    """`max([A[i], B[i]])` and `min(A[i] + j for j in range(3))` ran Python's max over kernel values and failed
    with 'has no Python truth value'; one iterable argument is the values, as in Python. Both interpreters."""

    @T.prim_func
    def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32"), C: T.Tensor((8, 3), "int32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                C[i, 0] = max([A[i], B[i]])
                C[i, 1] = min(A[i] * j for j in range(-1, 2))
                C[i, 2] = max((B[i], 4, A[i]))

    a, b = (rng.integers(-9, 9, 8).astype(np.int32) for _ in range(2))
    want = np.stack([np.maximum(a, b), np.minimum(np.minimum(-a, 0), a), np.maximum(np.maximum(b, 4), a)], axis=1)
    for target in ("cpu", "simt:sm_80"):
        out = np.full((8, 3), np.iinfo(np.int32).min, np.int32)
        tilec.compile(main, target=target)(a, b, out)
        np.testing.assert_array_equal(out, want, err_msg=target)


def test_unary_minus_and_plus_of_a_bool_are_ints(rng):
    """`-(A[i] > 0)` is -1 or 0, as in Python (and C): numpy's negative refused a bool inside both interpreters."""

    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), C: T.Tensor((8, 2), "int32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                C[i, 0] = -(A[i] > 0)
                C[i, 1] = +(A[i] > 0) * 3

    a = rng.standard_normal(8).astype(np.float32)
    want = np.stack([-(a > 0).astype(np.int32), (a > 0).astype(np.int32) * 3], axis=1)
    for target in ("cpu", "simt:sm_80"):
        out = np.full((8, 2), 7, np.int32)
        tilec.compile(main, target=target)(a, out)
        np.testing.assert_array_equal(out, want, err_msg=target)


def test_a_kernel_redefined_with_another_local_annotation_is_parsed_again(rng, tmp_path):
    """Two definitions of a kernel that differ only in the type annotation of a local (`x: T.float16 = ...` in one
    notebook cell, `x: T.float32 = ...` in the next) are two kernels: Python compiles local annotations to nothing,
    so both have equal code objects, and the parse cached for the first was taken for the second (a stale kernel,
    its values rounded to float16)."""
    import importlib.util

    from conftest import assert_close, poisoned

    text = textwrap.dedent("""
        import tilec.language as T


        @T.prim_func
        def scale(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for i in T.Parallel(64):
                    x: T.{dtype} = A[i] * 3.0
                    B[i] = x
        """)
    a = rng.standard_normal(64).astype(np.float32)
    for cell, dtype in enumerate(("float16", "float32")):
        path = tmp_path / f"cell_{cell}.py"
        path.write_text(text.format(dtype=dtype))
        spec = importlib.util.spec_from_file_location(f"tilec_test_cell_{cell}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out = poisoned(64, "float32")
        tilec.compile(mod.scale, target="cpu")(a, out)
        # a float16 local holds the float32 product rounded to float16 (the float64 product rounded to float16 may
        # differ from it by one float16 step: double rounding)
        half = (a * np.float32(3.0)).astype(np.float16)
        assert_close(out, half if dtype == "float16" else a.astype(np.float64) * 3.0, "float32")


def test_quoted_parameter_annotations_without_future_annotations(rng, tmp_path):
    """`A: "T.Tensor((64,), 'float32')"` in a module without `from __future__ import annotations` was refused
    ('annotate it with T.Tensor(...), got "T.Tensor(...)"'): the string is the expression it quotes, as under the
    future import; a quoted text that is no expression is an error at the parameter."""
    import importlib.util

    from conftest import assert_close, poisoned

    text = textwrap.dedent("""
        import tilec.language as T

        N = 64


        @T.prim_func
        def scale(A: "T.Tensor((N,), 'float32')", B: 'T.Tensor((N,), "float32")', s: "T.float32"):
            with T.Kernel(1, threads=64) as bx:
                for i in T.Parallel(N):
                    B[i] = A[i] * s


        def bad():
            @T.prim_func
            def broken(A: "T.Tensor((N,), 'float32'"):
                with T.Kernel(1, threads=64) as bx:
                    A[0] = 1.0
        """)
    path = tmp_path / "quoted.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("tilec_test_quoted", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a = rng.standard_normal(64).astype(np.float32)
    out = poisoned(64, "float32")
    tilec.compile(mod.scale, target="cpu")(a, out, 1.5)
    assert_close(out, a.astype(np.float64) * 1.5, "float32")
    with pytest.raises(tilec.TilecError, match=r"quoted.py:\d+:\d+: the annotation .* is not a Python expression"):
        mod.bad()


def test_a_strided_tensor_parameter_prints_as_the_strided_tensor_it_is(rng):
    """A T.StridedTensor parameter printed as `T.Tensor(shape, dtype, strides=...)`, which T.Tensor does not take:
    the printed kernel did not parse again. It prints as `T.StridedTensor(shape, strides, dtype)`, and the kernel
    parsed from the text runs as the original."""

    @T.prim_func
    def main(A: T.StridedTensor((4, 6), (1, 4), "float32"), B: T.Tensor((4, 6), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i, j in T.Parallel(4, 6):
                B[i, j] = A[i, j] * 2.0

    expected = """
        @T.prim_func
        def main(A: T.StridedTensor((4, 6), (1, 4), "float32"), B: T.Tensor((4, 6), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i, j in T.Parallel(4, 6):
                    B[i, j] = A[i, j] * 2.0
    """
    assert_ir(main, expected)
    again = _reparse(str(main))
    assert_ir(again, expected)
    a = np.asfortranarray(rng.standard_normal((4, 6)).astype(np.float32))  # strides (1, 4) in elements
    for func in (main, again):
        out = np.full((4, 6), np.nan, np.float32)
        tilec.compile(func, target="cpu")(a, out)
        np.testing.assert_allclose(out, a.astype(np.float64) * 2.0, rtol=1e-6)


def test_a_serial_loops_annotations_print_as_its_annotations_dict():
    """`T.serial(4, annotations={"pragma_x": 1})` printed as `T.serial(4, pragma_x=1)`, a keyword T.serial refuses:
    the printed kernel did not parse again. The annotations print as the dict they were given in; T.Pipelined's
    and T.unroll's keywords stay keywords."""

    @T.prim_func
    def main(A: T.Tensor((4, 8), "float32"), B: T.Tensor((4, 8), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for k in T.serial(4, annotations={"pragma_x": 1, "note": "hot"}):
                for u in T.unroll(8, unroll_factor=2):
                    B[k, u] = A[k, u] + 1.0
            for k in T.Pipelined(2, num_stages=2, order=[0], stage=[0]):
                B[k, 0] = A[k, 0]

    expected = """
        @T.prim_func
        def main(A: T.Tensor((4, 8), "float32"), B: T.Tensor((4, 8), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for k in T.serial(4, annotations={'note': 'hot', 'pragma_x': 1}):
                    for u in T.unroll(8, unroll_factor=2):
                        B[k, u] = A[k, u] + 1.0
                for k_1 in T.Pipelined(2, num_stages=2, order=(0,), stage=(0,)):
                    B[k_1, 0] = A[k_1, 0]
    """
    assert_ir(main, expected)
    again = _reparse(str(main))
    assert_ir(again, expected)
    a = np.random.default_rng().standard_normal((4, 8)).astype(np.float32)
    for func in (main, again):
        out = np.full((4, 8), np.nan, np.float32)
        tilec.compile(func, target="cpu")(a, out)
        want = a.astype(np.float64) + 1.0
        want[:2, 0] = a[:2, 0]
        np.testing.assert_allclose(out, want, rtol=1e-6)
