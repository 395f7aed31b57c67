"""Error tests: bad kernels and bad arguments give clear errors that name the user's line or the parameter."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

import tilec
import tilec.language as T
from tilec.errors import TilecBoundsError, TilecError, TilecSyntaxError, TilecTypeError, TilecValueError

HERE = __file__
_LINES = open(HERE).read().splitlines()


def line_of(marker: str) -> int:
    """The 1-based line of this file that carries the comment ``# <marker>``."""
    hits = [i + 1 for i, text in enumerate(_LINES) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


def assert_points_at(err: TilecError, marker: str) -> None:
    """The error's text names this file, the marked line and a column, and shows that line with a caret."""
    line = line_of(marker)
    text = str(err)
    assert re.search(rf"{re.escape(HERE)}:{line}:\d+: ", text), text
    src = _LINES[line - 1].strip()
    assert src in text and "^" in text.splitlines()[-1], text


# ------------------------------------------------------------------------------------- unsupported constructs


def test_while_is_unsupported_and_the_error_shows_the_line():
    with pytest.raises(TilecSyntaxError) as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                while bx < 4:  # while-line
                    A[0] = 1.0

    msg = str(ei.value)
    assert "`while` statements are not supported in a kernel; supported: assignments, `for` over" in msg
    assert_points_at(ei.value, "while-line")
    assert ei.value.loc.line == line_of("while-line") and ei.value.loc.col == 16


@pytest.mark.parametrize("keyword", ["try", "break", "continue", "def", "del"])
def test_other_unsupported_statements(keyword):
    def build():
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for k in T.serial(4):
                    if keyword == "try":
                        try:
                            A[k] = 1.0
                        finally:
                            pass
                    elif keyword == "break":
                        break
                    elif keyword == "continue":
                        continue
                    elif keyword == "def":

                        def helper():
                            return 1
                    else:
                        del k

        return main

    with pytest.raises(TilecSyntaxError, match=rf"`{keyword}` statements are not supported in a kernel"):
        build()


def test_return_inside_the_kernel():
    with pytest.raises(TilecSyntaxError, match=r"`return` inside `with T.Kernel\(...\)` is not supported") as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = 1.0
                return  # return-line

    assert_points_at(ei.value, "return-line")


@T.macro
def _clamp_or_store(C, i, v):
    if v > 100:  # a kernel value: the `return` under it would be taken whatever v is
        return 7  # macro-return-line
    C[i] = v
    return 1


@T.macro
def _first_of_loop(C, i, v):
    for j in T.serial(3):
        if j == 1:
            return j  # loop-return-line
        C[i] = j
    return 0


@pytest.mark.parametrize("macro, marker", [(_clamp_or_store, "macro-return-line"),
                                           (_first_of_loop, "loop-return-line")])
def test_return_under_a_runtime_if_or_loop_of_a_macro_is_an_error(macro, marker):
    """A macro's `return` under an `if` on a kernel value (or in a run-time loop) was taken when parsed, whatever the
    condition: the statements after it were dropped and the value returned everywhere (a silent wrong result)."""
    with pytest.raises(TilecSyntaxError, match=r"`return` inside the (`if`|T.serial loop) at line \d+") as ei:

        @T.prim_func
        def main(A: T.Tensor((8,), "int32"), C: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.serial(8):
                    C[i] = macro(C, i, A[i])

    assert_points_at(ei.value, marker)


def test_tile_ops_outside_a_kernel():
    with pytest.raises(TilecSyntaxError, match=r"T.copy can only be used inside a kernel \(a function decorated"):
        T.copy(np.zeros(4), np.zeros(4))
    with pytest.raises(TilecSyntaxError, match="T.alloc_shared can only be used inside a kernel"):
        T.alloc_shared((4,), "float16")
    with pytest.raises(TilecSyntaxError) as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            T.fill(A, 0.0)  # fill-outside
            with T.Kernel(1, threads=32) as bx:
                A[0] = 1.0

    assert "T.fill must be used inside `with T.Kernel(...)`" in str(ei.value)
    assert_points_at(ei.value, "fill-outside")
    with pytest.raises(TilecSyntaxError, match="T.Parallel can only be iterated by a `for` statement"):
        iter(T.Parallel(4))


def test_tile_op_inside_parallel_and_imperfect_parallel_nest():
    with pytest.raises(TilecTypeError, match="T.fill cannot be used inside T.Parallel"):

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                s = T.alloc_shared((4,), "float32")
                for _i in T.Parallel(4):
                    T.fill(s, 0.0)

    with pytest.raises(TilecSyntaxError, match="must be its whole body") as ei:

        @T.prim_func
        def main2(A: T.Tensor((4, 4), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(4):
                    A[i, 0] = 1.0
                    for j in T.Parallel(4):  # inner-parallel
                        A[i, j] = 2.0

    assert_points_at(ei.value, "inner-parallel")


def test_python_names_do_not_carry_across_iterations():
    with pytest.raises(TilecSyntaxError, match=r"'acc' is read in the body of the T.serial loop at line \d+ and then "
                                               r"reassigned there.*T.alloc_var") as ei:

        @T.prim_func
        def main(A: T.Tensor((16,), "float32"), B: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                acc = 0.0
                for k in T.serial(16):
                    acc = acc + A[k]  # acc-line
                B[0] = acc

    assert_points_at(ei.value, "acc-line")
    with pytest.raises(TilecSyntaxError, match=r"'acc' is read in the body of the T.Pipelined loop"):

        @T.prim_func
        def main2(A: T.Tensor((16,), "float32"), B: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                acc = A[0]
                for k in T.Pipelined(16):
                    acc += A[k]
                B[0] = acc


def test_names_assigned_under_a_runtime_if_are_undefined_after_it():
    with pytest.raises(TilecSyntaxError, match=r"'y' is assigned under the `if` at line \d+, whose condition is a "
                                               r"kernel value") as ei:

        @T.prim_func
        def main(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for k in T.serial(16):
                    if A[k] > 0:
                        y = A[k]
                    else:
                        y = -A[k]
                    A[k] = y  # y-line

    assert_points_at(ei.value, "y-line")
    with pytest.raises(TilecSyntaxError, match=r"'t' is assigned in the body of the T.Parallel loop at line \d+"):

        @T.prim_func
        def main2(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(16):
                    t = A[i] * 2
                A[0] = t

    @T.prim_func
    def fine(A: T.Tensor((16,), "float32")):  # the else branch sees the binding from before the if, not then's
        with T.Kernel(1, threads=32) as bx:
            x = A[1]
            if bx > 0:
                x = A[2]
                A[3] = x
            else:
                A[4] = x

    assert "A[3] = A[2]" in str(fine) and "A[4] = A[1]" in str(fine)


def test_a_name_reading_an_element_a_later_store_changes_is_an_error():
    """A name bound to a kernel expression is evaluated where it is used: after a store to what it reads it would
    read the new value, not the one assigned (`t = x[i]; x[i] = y[i]; y[i] = t` set y to y; `old = m; m = m + 1`
    made old m + 1), silently. Reading such a name, or storing in a loop to what a name bound before it and read in
    it reads, is an error naming the store's line; stores to other elements leave it valid."""
    with pytest.raises(TilecSyntaxError, match=r"'t' reads x, which the statement at line \d+ stored to after 't' "
                                               r"was assigned.*T.alloc_var") as ei:

        @T.prim_func
        def swap(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                x = T.alloc_fragment((16,), "float32")
                y = T.alloc_fragment((16,), "float32")
                for i in T.Parallel(16):
                    t = x[i]
                    x[i] = y[i]
                    y[i] = t  # stale-t

    assert_points_at(ei.value, "stale-t")
    assert f"line {line_of('stale-t') - 1}" in str(ei.value)
    with pytest.raises(TilecSyntaxError, match=r"'old' reads m, which the statement at line \d+ stored to"):

        @T.prim_func
        def old_value(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                m = T.alloc_var("float32")
                m = A[0]
                old = m
                m = m + 1.0
                A[1] = old

    with pytest.raises(TilecSyntaxError, match=r"'s0' reads s, which the statement at line \d+ stored to"):

        @T.prim_func
        def by_tile_op(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                s = T.alloc_shared((16,), "float32")
                T.copy(A, s)
                s0 = s[0]
                T.fill(s, 1.0)
                A[1] = s0

    with pytest.raises(TilecSyntaxError, match=r"'x0' is bound before the T.serial loop at line \d+ to an "
                                               r"expression reading s and read in its body, where this statement "
                                               r"stores to s") as ei:

        @T.prim_func
        def in_loop(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                s = T.alloc_shared((16,), "float32")
                T.copy(A, s)
                x0 = s[0]
                for k in T.serial(16):
                    A[k] = x0
                    s[k] = 2.0  # loop-store

    assert_points_at(ei.value, "loop-store")

    @T.prim_func
    def fine(A: T.Tensor((16,), "float32")):  # other elements: the names keep their meaning
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((16,), "float32")
            T.copy(A, s)
            a = s[bx]
            b = s[bx + 1]
            s[bx + 2] = 5.0
            T.fill(s[bx + 4:bx + 8], 0.0)
            A[1] = a + b

    assert "A[1] = s[bx] + s[bx + 1]" in str(fine)


def test_unpacking_whose_values_read_an_earlier_target_is_an_error():
    """Python evaluates the whole right side before it assigns; a kernel stores the targets one after another, so
    `x[i], y[i] = y[i], x[i]` stored the new x[i] into y[i] (and `a, b = b, a` on T.alloc_vars set both to b),
    silently. It is an error naming the target and the value; unpackings whose values do not read an earlier
    target's element run."""
    with pytest.raises(TilecSyntaxError, match=r"the value for `y\[i\]` reads x, which the target `x\[i\]` before it "
                                               r"stores to.*temporary") as ei:

        @T.prim_func
        def swap(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                x = T.alloc_fragment((16,), "float32")
                y = T.alloc_fragment((16,), "float32")
                for i in T.Parallel(16):
                    x[i], y[i] = y[i], x[i]  # swap-line

    assert_points_at(ei.value, "swap-line")
    with pytest.raises(TilecSyntaxError, match=r"the value for `b` reads a, which the target `a` before it stores to"):

        @T.prim_func
        def swap_vars(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                a = T.alloc_var("float32")
                b = T.alloc_var("float32")
                a, b = A[0], A[1]
                a, b = b, a
                A[2] = a

    @T.prim_func
    def fine(A: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            a = T.alloc_var("float32")
            b = T.alloc_var("float32")
            b, a = a + A[1], A[0]  # b's value reads a, whose target comes after b's
            A[bx + 1], A[bx] = A[bx], A[bx + 2]

    assert "b = a + A[1]\n        a = A[0]\n        A[bx + 1] = A[bx]\n        A[bx] = A[bx + 2]\n" in str(fine)


def test_python_containers_changed_in_runtime_bodies_are_errors():
    """A Python list or dict item assigned in a run-time loop or `if` is assigned once, when the kernel is parsed:
    `cnt[0] = cnt[0] + 1` in a T.serial(4) loop left 1, silently (with a kernel value: a TilecVerifyError about the
    loop variable). It is an error naming the body; outside such bodies it runs at compile time, `+=` too (which said
    '`cnt[0] = ...` needs one element')."""
    with pytest.raises(TilecSyntaxError, match=r"`cnt\[0\] = ...` changes the Python list cnt once, when the kernel "
                                               r"is parsed, not each time the T.serial loop at line \d+ runs.*"
                                               r"T.alloc_var") as ei:

        @T.prim_func
        def in_loop(B: T.Tensor((4,), "float32")):
            cnt = [0]
            with T.Kernel(1, threads=32) as bx:
                for _k in T.serial(4):
                    cnt[0] = cnt[0] + 1  # list-store
                B[0] = cnt[0]

    assert_points_at(ei.value, "list-store")
    with pytest.raises(TilecSyntaxError, match=r"changes the Python dict d once.* the `if` at line \d+ runs"):

        @T.prim_func
        def in_if(B: T.Tensor((4,), "float32")):
            d = {}
            with T.Kernel(1, threads=32) as bx:
                if B[0] > 0:
                    d["x"] = B[1]
                    B[2] = d["x"]

    @T.prim_func
    def at_compile_time(B: T.Tensor((4,), "float32")):
        cnt = [1]
        with T.Kernel(1, threads=32) as bx:
            cnt[0] += 2
            for _k in [0, 1]:
                cnt[0] *= 2
            B[0] = cnt[0]

    assert "B[0] = 12.0" in str(at_compile_time)
    with pytest.raises(TilecSyntaxError, match=r"`.append\(...\)` changes a Python list once, when the kernel is "
                                               r"parsed, not each time the T.serial loop at line \d+ runs") as ei:

        @T.prim_func
        def appended(B: T.Tensor((4,), "float32")):
            xs = []
            with T.Kernel(1, threads=32) as bx:
                for k in T.serial(4):
                    xs.append(B[k])  # list-append
                B[0] = len(xs)

    assert_points_at(ei.value, "list-append")

    @T.prim_func
    def appended_at_compile_time(B: T.Tensor((4,), "float32")):
        xs = []
        with T.Kernel(1, threads=32) as bx:
            for k in [0, 1, 2]:  # a Python list: unrolled at parse time, so the append runs three times
                xs.append(B[k])
            B[3] = xs[0] + xs[1] + xs[2]

    assert "B[3] = B[0] + B[1] + B[2]" in str(appended_at_compile_time)


def test_augmented_assignment_of_a_tile_names_the_statement():
    """`F[0:4] += 1` on a tile is refused at its line, quoting the statement (the message read '`F[0:4] = ...`': the
    operator was lost)."""
    with pytest.raises(TilecSyntaxError, match=r"`F\[0:4\] \+= 1` needs one element of 'F'; use a T.Parallel") as ei:

        @T.prim_func
        def main(X: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                F = T.alloc_fragment((8,), "float32")
                T.copy(X, F)
                F[0:4] += 1  # tile-aug
                T.copy(F, X)

    assert_points_at(ei.value, "tile-aug")


def test_kernel_expression_errors_carry_the_location():
    with pytest.raises(TilecTypeError, match=r"`/` on integers \(bx / 2\) is not defined") as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(2, threads=32) as bx:
                A[0] = bx / 2  # div-line

    assert_points_at(ei.value, "div-line")
    with pytest.raises(TilecSyntaxError, match="name 'undefined_thing' is not defined"):

        @T.prim_func
        def main2(A: T.Tensor((4,), "float32")):
            with T.Kernel(2, threads=32) as bx:
                A[0] = undefined_thing  # noqa: F821

    def pick(x):  # a Python helper that branches on its argument in Python
        return 1.0 if x > 0 else 2.0

    with pytest.raises(TilecTypeError, match=r"a kernel value \(bx > 0\) has no Python truth value at compile time"):

        @T.prim_func
        def main3(A: T.Tensor((4,), "float32")):
            with T.Kernel(2, threads=32) as bx:
                A[0] = pick(bx)


# ------------------------------------------------------------------------------------- shapes of tile ops


def test_a_gemm_tile_no_instruction_spreads_over_the_threads_names_the_gemm():
    """64 x 128 on three warpgroups: wgmma cannot split N=128 in three, mma.sync has no partition of 12 warps, and
    the scalar fallback's accumulator does not spread over 384 threads; the error says so at the gemm's line."""

    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 128), "float16"), C: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, 2, threads=384) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_f = T.alloc_fragment((64, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(2, num_stages=2):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, C_f)  # scalar-gemm
            T.copy(C_f, C[by * 64, 0])

    with pytest.raises(TilecValueError, match=r"fragment 'C_f' \(the accumulator of T.gemm .* not wgmma: N=128 does "
                                              r"not split evenly over the 3 warpgroups .* cannot be spread evenly "
                                              r"over 384 threads") as ei:
        tilec.JITKernel(main, "simt:sm_90a", [-1], pass_configs={"wgmma": True}).report()
    assert_points_at(ei.value, "scalar-gemm")




@pytest.mark.parametrize("target", ["simt:sm_80", "simt:sm_90a", "simt:gfx90a"])
def test_a_layout_conflict_with_a_scalar_gemms_accumulator_names_the_gemm(target):
    """S = A B in scalar code (float32 operands), its row maxima subtracted from X_f, whose annotated layout puts rows
    on other threads than S's spread: the conflict names S's spread as the accumulator of the gemm, at its line, and
    why it left the tensor cores. (A scalar gemm tied so to another gemm's accumulator follows that one's rows, as
    MLA decode's S follows O in tests/lower/test_examples_simt.py; an annotated fragment is no gemm's.)"""
    from tilec.lower.layouts import default_fragment

    @T.prim_func
    def main(A: T.Tensor((16, 32), "float32"), B: T.Tensor((32, 32), "float32"), X: T.Tensor((16, 64), "float32"),
             Y: T.Tensor((16, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((16, 32), "float32")
            B_s = T.alloc_shared((32, 32), "float32")
            S = T.alloc_fragment((16, 32), "float32")
            X_f = T.alloc_fragment((16, 64), "float32")
            m = T.alloc_fragment((16,), "float32")
            T.annotate_layout({X_f: default_fragment((16, 64), 128)})  # even rows on threads 0-63, odd on 64-127
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(X, X_f)
            T.gemm(A_s, B_s, S, clear_accum=True)  # scalar-gemm-tied
            T.reduce_max(S, m, dim=1)
            for i, j in T.Parallel(16, 64):
                X_f[i, j] -= m[i]
            for i, j in T.Parallel(16, 32):  # loop-over-S
                S[i, j] -= m[i]
            T.copy(X_f, X)
            T.copy(S, Y)

    with pytest.raises(TilecError, match=rf"the layout of S: spread over the threads, the accumulator of T.gemm at "
                                         rf"line {line_of('scalar-gemm-tied')} in scalar code \(fallback: operand "
                                         r"dtype float32") as ei:
        tilec.JITKernel(main, target, [3], pass_configs={"wgmma": True} if target.endswith("90a") else None).report()
    assert_points_at(ei.value, "loop-over-S")


@pytest.mark.parametrize(("stage", "order", "marker"), [([1, 0, 0], None, "reads-the-copy"),
                                                         ([0, 1, 1], [0, 2, 1], "reads-the-fragment")])
@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a", "cpu"])
def test_a_hand_schedule_running_a_reader_before_its_writer_is_refused(target, stage, order, marker):
    """stage= / order= that run an iteration's read of a tile before the statement writing it (in an earlier stage,
    or earlier in the same stage): the read saw another iteration's tile (or none) and the result was silently
    wrong; now an error naming the reading statement."""

    @T.prim_func
    def main(X: T.Tensor((64, 128), "float32"), Y: T.Tensor((64, 128), "float32")):
        with T.Kernel(2, threads=128) as bx:
            X_s = T.alloc_shared((32, 32), "float32")
            Z_f = T.alloc_fragment((32, 32), "float32")
            for k in T.Pipelined(4, num_stages=2, stage=stage, order=order):
                T.copy(X[bx * 32, k * 32], X_s)
                for i, j in T.Parallel(32, 32):  # reads-the-copy
                    Z_f[i, j] = X_s[i, j] * 2.0
                for i, j in T.Parallel(32, 32):  # reads-the-fragment
                    Y[bx * 32 + i, k * 32 + j] = Z_f[i, j]

    r, w = line_of(marker), line_of(marker) - 2 if marker == "reads-the-fragment" else line_of(marker) - 1
    reader, writer = (1, 0) if marker == "reads-the-copy" else (2, 1)
    with pytest.raises(TilecValueError, match=rf"the statement at line {r} \(stage {stage[reader]}\) reads what the "
                                              rf"one at line {w} \(stage {stage[writer]}\) writes, but runs before "
                                              r"it") as ei:
        tilec.JITKernel(main, target, None).report()
    assert_points_at(ei.value, marker)
    with pytest.raises(TilecTypeError, match=r"T.Pipelined: stage must be a list of ints >= 0, got \[-1, 0\]"):
        T.Pipelined(4, num_stages=2, stage=[-1, 0])


def _carried_tile(stage, order):
    """Each iteration adds the tile the one before copied into X_s, then copies in its own."""

    @T.prim_func
    def main(A: T.Tensor((64, 8), "float32"), C: T.Tensor((16, 8), "float32")):
        with T.Kernel(1, threads=32) as bx:
            X_s = T.alloc_shared((16, 8), "float32")
            acc = T.alloc_fragment((16, 8), "float32")
            T.clear(acc)
            T.clear(X_s)
            for k in T.Pipelined(4, num_stages=2, stage=stage, order=order):
                for i, j in T.Parallel(16, 8):
                    acc[i, j] += X_s[i, j]
                T.copy(A[k * 16, 0], X_s)  # carried-copy
            T.copy(acc, C)

    return main


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a", "cpu"])
def test_a_hand_schedule_running_a_write_before_the_next_iterations_read_is_refused(rng, target):
    """stage=[0, 1]: iteration k's copy into X_s ran after iteration k+1's sum read X_s, which so added the tile
    before the one it should have (a silently wrong result); now an error naming both statements and the tile.
    With the copy first in its trip (order=[1, 0]) the skew keeps the plain loop's order, and the sum is right."""
    from conftest import assert_close, poisoned, randn

    main = _carried_tile([0, 1], None)
    line = line_of("carried-copy")
    with pytest.raises(TilecValueError, match=rf"the statements at line {line - 2} \(stage 0\) and line {line} "
                                              r"\(stage 1\) both use 'X_s' \(one writes it\), and the schedule "
                                              "changes which runs first") as ei:
        tilec.JITKernel(main, target, None).report()
    assert_points_at(ei.value, "carried-copy")
    a, c = randn(rng, (64, 8), "float32"), poisoned((16, 8), "float32")
    tilec.JITKernel(_carried_tile([0, 1], [1, 0]), target, None)(a, c)
    assert_close(c, a[:48].astype(np.float64).reshape(3, 16, 8).sum(axis=0), "float32")


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a", "cpu"])
def test_a_hand_schedule_multi_buffering_a_tile_read_across_iterations_or_after_the_loop_is_refused(target):
    """A tile written in stage 0 and read in stage 1 gets a version per iteration in flight: a read of the previous
    iteration's value found the current iteration's version (silently wrong), and a use after the loop failed with
    an internal "invalid IR ... neither a parameter nor allocated"; now errors naming the tile and the line."""

    @T.prim_func
    def carried(A: T.Tensor((64, 8), "float32"), C: T.Tensor((16, 8), "float32")):
        with T.Kernel(1, threads=32) as bx:
            X_s = T.alloc_shared((16, 8), "float32")
            acc = T.alloc_fragment((16, 8), "float32")
            acc2 = T.alloc_fragment((16, 8), "float32")
            T.clear(acc)
            T.clear(acc2)
            for k in T.Pipelined(4, num_stages=2, stage=[0, 0, 1]):
                if k > 0:  # versioned-carried
                    for i, j in T.Parallel(16, 8):
                        acc[i, j] += X_s[i, j]
                T.copy(A[k * 16, 0], X_s)
                for i, j in T.Parallel(16, 8):
                    acc2[i, j] += X_s[i, j]
            for i, j in T.Parallel(16, 8):
                acc[i, j] += acc2[i, j]
            T.copy(acc, C)

    @T.prim_func
    def after(A: T.Tensor((64, 8), "float32"), C: T.Tensor((16, 8), "float32"), D: T.Tensor((16, 8), "float32")):
        with T.Kernel(1, threads=32) as bx:
            X_s = T.alloc_shared((16, 8), "float32")
            acc = T.alloc_fragment((16, 8), "float32")
            T.clear(acc)
            for k in T.Pipelined(4, num_stages=2, stage=[0, 1]):  # versioned-after
                T.copy(A[k * 16, 0], X_s)
                for i, j in T.Parallel(16, 8):
                    acc[i, j] += X_s[i, j]
            T.copy(acc, C)
            T.copy(X_s, D)

    line = line_of("versioned-carried") - 1
    with pytest.raises(TilecValueError, match=rf"T.Pipelined at line {line}: the statement at line {line + 1} reads "
                                              r"'X_s' before the loop writes it \(the previous iteration's value\), "
                                              "but it is written in stage 0 and read in a later one, so it has 2 "
                                              "versions") as ei:
        tilec.JITKernel(carried, target, None).report()
    assert_points_at(ei.value, "versioned-carried")
    with pytest.raises(TilecValueError, match=r"'X_s' is used outside the loop, but it is written in stage 0 and "
                                              "read in a later one, so it has 2 versions") as ei:
        tilec.JITKernel(after, target, None).report()
    assert_points_at(ei.value, "versioned-after")


def test_a_kernel_over_the_targets_shared_memory_is_refused_at_compile_time():
    """The thread interpreter would run it; the GPU would not load it: the error comes from the compiler, with the
    kernel's line, on every GPU target (sm_80's block may have 163 KB, sm_90a's 227 KB, gfx90a's 64 KB)."""

    @T.prim_func
    def main(A: T.Tensor((256, 256), "float32"), B: T.Tensor((256, 256), "float32")):
        with T.Kernel(1, threads=128) as bx:  # big-smem
            A_s = T.alloc_shared((256, 256), "float32")  # 256 KB
            T.copy(A, A_s)
            T.copy(A_s, B)

    for target, limit in (("simt:sm_80", 163 * 1024), ("cuda:sm_90a", 227 * 1024), ("simt:gfx90a", 64 * 1024)):
        with pytest.raises(TilecValueError, match=rf"needs 262144 bytes of shared memory; a block on "
                                                  rf"{target.split(':')[1]} may have at most {limit} \(largest "
                                                  r"buffers, bytes: A_s 262144\)") as ei:
            tilec.JITKernel(main, target, [-1]).report()
        assert_points_at(ei.value, "big-smem")


@pytest.mark.parametrize("target", ["simt:sm_90a", "cuda:sm_90a"])
def test_shared_memory_refusal_lists_the_lowering_scratch_too(target):
    """MLA decode with three TMA stages needs 304160 bytes; its shared memory also holds the reductions' scratch
    (no Tile IR buffer of its own), and listing the largest buffers raised a bare AttributeError ('NoneType' object
    has no attribute 'name') instead of the refusal naming the kernel's line."""
    from conftest import EXAMPLES, example_line, load_example

    g = load_example("07_mla_decode").mla_decode(1, 128, 2, 65, num_stages=3).prim_func
    with pytest.raises(TilecValueError, match=r"needs 304160 bytes of shared memory; a block on sm_90a may have at "
                                              r"most 232448 \(largest buffers, bytes: KV_s 196608, Q_s 65536, "
                                              r"O_f_stage 65536, Kpe_s 24576, Qpe_s 8192, P_s 8192\)") as ei:
        tilec.JITKernel(g, target, [4], pass_configs={"wgmma": True, "tma": True}).report()
    assert f"{EXAMPLES / '07_mla_decode.py'}:{example_line('07_mla_decode', 'with T.Kernel')}:" in str(ei.value)


def test_shared_memory_refusal_says_which_line_the_scratch_is_for():
    """Flash attention's 192 rows on two warpgroups (256 threads): S's rows lie unlike P's, so T.copy(S, P) converts
    through 96 KB of shared memory, which with the rest is too much. The refusal listed that buffer as 'convert_17',
    a name the user's kernel does not have; each scratch buffer now comes with the line it serves."""
    from conftest import example_line, load_example

    g = load_example("03_flash_attention").flash_attention(1, 2, 300, 64, False, block_M=192, block_N=128,
                                                             threads=256, num_stages=2).prim_func
    line = example_line("03_flash_attention", "T.copy(S, P)")
    with pytest.raises(TilecValueError, match=rf"largest buffers, bytes: convert_\d+ 98304 \(tilec's scratch for "
                                              rf"line {line}\), Q_s 49152, V_s 32768, K_s 32768, O_f_stage 24576, "
                                              rf"red_x_\d+ 1536 \(tilec's scratch for line \d+\)\)"):
        tilec.JITKernel(g, "simt:sm_90a", [3], pass_configs={"warp_specialize": True, "persistent": True}).report()


def test_copy_gemm_reduce_shape_mismatches():
    with pytest.raises(TilecValueError, match=r"T.copy: operand shapes differ: s has extents \(16, 16\), "
                                              r"A\[:8, :16\] has \(8, 16\)") as ei:

        @T.prim_func
        def main(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                s = T.alloc_shared((16, 16), "float16")
                T.copy(s, A[0:8, 0:16])  # copy-mismatch

    assert_points_at(ei.value, "copy-mismatch")
    with pytest.raises(TilecValueError, match=r"T.gemm: reduction sizes differ: A \(a, transpose_A=False\) has "
                                              r"K=32, B \(b, transpose_B=False\) has K=16"):

        @T.prim_func
        def main2(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                a = T.alloc_shared((16, 32), "float16")
                b = T.alloc_shared((16, 16), "float16")
                c = T.alloc_fragment((16, 16), "float32")
                T.gemm(a, b, c)

    with pytest.raises(TilecValueError, match=r"T.gemm: C \(c\) is \(16, 8\) but A @ B is \(16, 16\)"):

        @T.prim_func
        def main3(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                a = T.alloc_shared((16, 16), "float16")
                c = T.alloc_fragment((16, 8), "float32")
                T.gemm(a, a, c)

    with pytest.raises(TilecTypeError, match=r"T.gemm: C \(c\) must be a fragment \(T.alloc_fragment\), got scope "
                                             r"'shared'") as ei:

        @T.prim_func
        def main3b(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                a = T.alloc_shared((16, 16), "float16")
                c = T.alloc_shared((16, 16), "float32")
                T.gemm(a, a, c)  # gemm-shared-c

    assert_points_at(ei.value, "gemm-shared-c")  # the GPU targets said "fragment 'c' has no layout"
    with pytest.raises(TilecTypeError, match=r"T.gemm: operand A \(A\) is a global tensor"):

        @T.prim_func
        def main4(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                c = T.alloc_fragment((16, 16), "float32")
                T.gemm(A, A, c)

    with pytest.raises(TilecTypeError, match=r"T.gemm: operand B \(b\) must be in shared memory or a fragment "
                                             r"\(T.alloc_shared, T.alloc_fragment\), got scope 'local'") as ei:

        @T.prim_func
        def main4b(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                a = T.alloc_shared((16, 16), "float16")
                b = T.alloc_local((16, 16), "float16")
                c = T.alloc_fragment((16, 16), "float32")
                T.gemm(a, b, c)  # gemm-local-b

    assert_points_at(ei.value, "gemm-local-b")  # sm_80 failed with a KeyError in lowering, gfx90a gave NaN

    with pytest.raises(TilecValueError, match=r"T.reduce_sum: dst r has shape \(8,\), expected \(16,\) \(src x of "
                                              r"shape \(16, 32\) reduced over dim 1\)"):

        @T.prim_func
        def main5(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                x = T.alloc_fragment((16, 32), "float32")
                r = T.alloc_fragment((8,), "float32")
                T.reduce_sum(x, r, dim=1)

    with pytest.raises(TilecValueError, match=r"T.reduce_max: dim must be an int in \[-2, 2\)"):

        @T.prim_func
        def main6(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                x = T.alloc_fragment((16, 32), "float32")
                r = T.alloc_fragment((16,), "float32")
                T.reduce_max(x, r, dim=2)


def test_out_of_bounds_regions_at_parse_time():
    with pytest.raises(TilecValueError, match=r"T.copy: region s_1\[:128, :16\] has extent 128 in dimension 0 but "
                                              r"'s_1' has size 64 there|extent 128") as ei:

        @T.prim_func
        def main(A: T.Tensor((256, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                s = T.alloc_shared((64, 16), "float16")
                T.copy(A[0:128, :], s[0:128, :])  # too-large

    assert_points_at(ei.value, "too-large")
    with pytest.raises(TilecValueError, match=r"buffer 'A', dimension 0: the index -1 is negative; kernel indices do "
                                              "not count from the end"):

        @T.prim_func
        def main2(A: T.Tensor((256, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                s = T.alloc_shared((64, 16), "float16")
                T.copy(A[-1, 0], s)

    with pytest.raises(TilecValueError, match=r"ends at 80 in dimension 0, past the end of fragment buffer 'f'"):

        @T.prim_func
        def main3(A: T.Tensor((256, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                f = T.alloc_fragment((64, 16), "float32")
                T.fill(f[16:80, :], 0.0)

    with pytest.raises(TilecValueError, match=r"T.reduce_sum: region x\[32:64, :16\] ends at 64 in dimension 0"):

        @T.prim_func
        def main4(A: T.Tensor((256, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                x = T.alloc_fragment((48, 16), "float32")
                r = T.alloc_fragment((32,), "float32")
                T.reduce_sum(x[32:64, :], r, dim=1)


@pytest.mark.parametrize("alloc", ["alloc_shared", "alloc_fragment", "alloc_local"])
def test_an_on_chip_buffer_of_no_element_is_refused_at_its_line(alloc):
    """A zero-size on-chip buffer (a Python-level tile size of 0) ran on the CPU interpreter but failed every GPU
    target with a bare ValueError from the layout code ('shape must be a nonempty tuple of positive ints; got (0,)')
    or a ZeroDivisionError (T.alloc_local), naming no line."""
    with pytest.raises(TilecValueError, match=rf"test_errors.py:\d+:\d+: T.{alloc}: on-chip buffers need sizes >= 1, "
                                              r"got shape \(4, 0\)"):
        @T.prim_func
        def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = getattr(T, alloc)((4, 0), "float32")
                T.copy(A[0:0], f[0, :])
                T.copy(f[0, :], B[0:0])


@pytest.mark.parametrize("alloc", ["alloc_shared", "alloc_fragment", "alloc_local"])
@pytest.mark.parametrize("shape, message", [
    ((), r"shape \(\) has no dimension \(a tile of one element is shape \(1,\); a per-thread scalar is "
         r"T.alloc_var\)"),
    ([], r"shape \(\) has no dimension"),
    ((-1, 4), r"on-chip buffers need sizes >= 1, got shape \(-1, 4\) \(dimension 0 is -1\)"),
    ((4, -2), r"on-chip buffers need sizes >= 1, got shape \(4, -2\) \(dimension 1 is -2\)"),
    (-3, r"on-chip buffers need sizes >= 1, got shape \(-3,\) \(dimension 0 is -3\)"),
    (0, r"on-chip buffers need sizes >= 1, got shape \(0,\) \(dimension 0 is 0\)"),
])
def test_an_on_chip_buffer_of_a_degenerate_shape_is_refused_at_its_line(alloc, shape, message):
    """An empty shape (T.alloc_fragment(())) was accepted: it ran on the CPU interpreter, and T.alloc_fragment /
    T.alloc_shared failed every GPU target with a bare ValueError from the layout code ('shape must be a nonempty
    tuple of positive ints; got ()'), naming no line. A negative size was a TilecTypeError saying sizes must be >= 0
    (0 is refused too). Each is now a TilecValueError at the user's line naming the shape and the dimension."""
    line = inspect.currentframe().f_lineno + 5
    with pytest.raises(TilecValueError, match=rf"test_errors.py:{line}:\d+: T.{alloc}: {message}"):
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                f = getattr(T, alloc)(shape, "float32")
                T.fill(f, 0.0)


@pytest.mark.parametrize("alloc, args, kwargs, message", [
    ("alloc_shared", ((4,), "float32"), {"scope": "local"},
     "T.alloc_shared: scope='local' is not shared memory; expected scope 'shared.dyn' or 'shared'; a per-thread "
     "array (scope 'local') is T.alloc_local"),
    ("alloc_shared", ((4,), "float32", "local.fragment"), {},
     "T.alloc_shared: scope='local.fragment' is not shared memory; expected scope 'shared.dyn' or 'shared'; a "
     "register tile spread over the block (scope 'local.fragment') is T.alloc_fragment"),
    ("alloc_fragment", ((4,), "float32"), {"scope": "shared"},
     "T.alloc_fragment: scope='shared' is not a register tile spread over the block; expected scope "
     "'local.fragment'; shared memory (scope 'shared') is T.alloc_shared"),
    ("alloc_local", ((4,), "float32"), {"scope": "global"},
     "T.alloc_local: scope='global' is not a per-thread array; expected scope 'local'"),
    ("alloc_var", ("float32",), {"scope": "shared.dyn"},
     "T.alloc_var: scope='shared.dyn' is not a per-thread scalar; expected scope 'local.var'; shared memory"),
    ("alloc_var", ("float32", 1.0, "local"), {},
     "T.alloc_var: scope='local' is not a per-thread scalar; expected scope 'local.var'; a per-thread array"),
    ("alloc_shared", ((4,), "float32"), {"scope": 3},
     "T.alloc_shared: scope=3 is not shared memory; expected scope 'shared.dyn' or 'shared'"),
])
def test_an_allocation_in_another_scope_is_refused_at_its_line(alloc, args, kwargs, message):
    """T.alloc_shared(..., scope="local") (any scope= of an allocation other than its own) was silently ignored:
    the buffer stayed in shared memory."""
    with pytest.raises(TilecValueError) as ei:
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                x = getattr(T, alloc)(*args, **kwargs)  # scope-line
    assert message in str(ei.value)
    assert_points_at(ei.value, "scope-line")


@pytest.mark.parametrize("bounds, message", [
    ((0, 4.0, None), "the slice `0:4.0` has a float bound (4.0)"),
    ((1.5, 4, None), "the slice `1.5:4` has a float bound (1.5)"),
    ((np.float32(2), 4, None), "the slice `2.0:4` has a float bound (2.0)"),
    ((0, 4, 1.0), "the slice `0:4:1.0` has a float step (1.0)"),
    ((0, "x", None), "the slice `0:x` has a float bound (x, a float32 value)"),
])
def test_a_float_slice_bound_is_refused_as_such(bounds, message):
    """`A[0:4.0]` said 'the slice extent `4.0 - (0)` is not a compile-time constant' (it is one, of a float)."""
    with pytest.raises(TilecTypeError) as ei:
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                x = T.alloc_var("float32", init=4.0)
                lo, hi, step = (x if b == "x" else b for b in bounds)
                T.fill(A[lo:hi:step], 0.0)  # float-bound
    assert f"buffer 'A', dimension 0: {message}; slice bounds must be integers" in str(ei.value)
    assert_points_at(ei.value, "float-bound")


@pytest.mark.parametrize("shape", [(4,), [4, 4], 4])
def test_alloc_var_given_a_shape_says_it_takes_a_dtype(shape):
    """T.alloc_var((4,), "float32") said 'unsupported dtype (4,)' (and with TileLang's reading of a lone string as
    the scope, 'scope='float32''): neither said that T.alloc_var is one scalar or which allocation takes a shape."""
    with pytest.raises(TilecTypeError) as ei:
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                x = T.alloc_var(shape, "float32")  # var-shape
    assert (f"T.alloc_var takes a dtype (and an optional init value), got the shape {shape!r}: it allocates one "
            "scalar per thread; an array is T.alloc_local(shape, dtype) (one per thread) or T.alloc_fragment(shape, "
            "dtype) (spread over the block's threads)") in str(ei.value)
    assert_points_at(ei.value, "var-shape")


def test_allocations_take_tilelangs_scope_names(rng):
    """TileLang's scope= values of each allocation: "shared" (static) and "shared.dyn" both give shared memory;
    T.alloc_var(dtype, init, scope) and T.alloc_var(dtype, scope) as TileLang reads them."""
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((8,), "float32", scope="shared")
            d = T.alloc_shared((8,), "float32", "shared.dyn")
            f = T.alloc_fragment((8,), "float32", scope="local.fragment")
            loc = T.alloc_local((1,), "float32", scope="local")
            x = T.alloc_var("float32", 3.0, "local.var")
            y = T.alloc_var("float32", "local.var")
            y = 1.0
            loc[0] = 2.0
            T.copy(A, s)
            T.copy(s, d)
            T.copy(d, f)
            for i in T.Parallel(8):
                B[i] = f[i] * x + y + loc[0]

    assert [b.scope for b in main.launch.allocs] == ["shared", "shared", "fragment", "local", "var", "var"]
    a = rng.standard_normal(8).astype(np.float32)
    b = np.full(8, np.nan, np.float32)
    tilec.compile(main, target="cpu")(a, b)
    # two float32 roundings of terms below 16 (x * 3 + 1 + 2, where they may cancel): within 1e-5
    np.testing.assert_allclose(b, a.astype(np.float64) * 3 + 3, rtol=0, atol=1e-5)


@pytest.mark.parametrize("default, message", [
    ("tensor", "parameter 'B': a tensor parameter takes no default (got None); pass the array at each call, or "
               "name the parameter in out_idx"),
    (2.5, "the default of parameter 'n': expected a Python int8 scalar, got float 2.5"),
    (300, "the default of parameter 'n': 300 does not fit the parameter's type int8 [-128, 127]"),
])
def test_a_parameter_default_the_call_cannot_pass_is_refused_at_its_line(default, message):
    """Defaults of scalar parameters are passed by calls that leave them out: one that is not a value of the
    parameter's type, or a tensor's, is refused where it is declared."""
    with pytest.raises(TilecError) as ei:
        if default == "tensor":
            @T.prim_func
            def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32") = None):  # tensor-default
                with T.Kernel(1, threads=32) as bx:
                    B[0] = A[0]
        else:
            @T.prim_func
            def main(A: T.Tensor((4,), "float32"), n: T.int8 = default):  # scalar-default
                with T.Kernel(1, threads=32) as bx:
                    A[0] = n
    assert message in str(ei.value)
    assert_points_at(ei.value, "tensor-default" if default == "tensor" else "scalar-default")


@pytest.mark.parametrize("bad", ["x", "square", 3])
def test_a_gemm_warp_policy_that_is_none_names_the_policies(bad):
    """T.GemmWarpPolicy("x") raised the enum's own "'x' is not a valid GemmWarpPolicy", naming none of the
    policies; it is a TilecValueError (still a ValueError) that names them."""
    with pytest.raises(TilecValueError, match=rf"T.GemmWarpPolicy: {re.escape(repr(bad))} is not a policy; expected "
                       "one of 'Square', 'FullRow', 'FullCol'") as ei:
        T.GemmWarpPolicy(bad)
    assert isinstance(ei.value, ValueError)
    assert T.GemmWarpPolicy("FullRow") is T.GemmWarpPolicy.FullRow


@pytest.mark.parametrize(("kind", "arch", "message"), [
    ("bogus", "x", "unknown target 'bogus:x'; expected 'auto', 'cpu'"),
    ("cuda", "sm_70", "target 'cuda:sm_70': unknown cuda architecture 'sm_70'; expected one of sm_80"),
    ("hip", "sm_90a", "target 'hip:sm_90a': unknown hip architecture 'sm_90a'; expected one of gfx90a, gfx942"),
    ("simt", "gfx1100", "target 'simt:gfx1100': unknown architecture 'gfx1100' for simt"),
    ("simt", "", "target 'simt': unknown architecture '' for simt"),
    ("cpu", "sm_80", "unknown target 'cpu:sm_80'"),
])
def test_a_target_built_directly_is_checked_like_a_parsed_one(kind, arch, message):
    """tilec.Target("bogus", "x") built a target with no check (a kernel for it failed later, far from the cause);
    its constructor now refuses what parse_target refuses, with the same message."""
    with pytest.raises(TilecValueError, match=re.escape(message)):
        tilec.Target(kind, arch)
    if kind != "simt" or arch:
        with pytest.raises(TilecValueError, match=re.escape(message)):
            tilec.target.parse_target(f"{kind}:{arch}")
    assert tilec.Target("cuda", "sm_90a") == tilec.target.parse_target("cuda:sm_90a")
    assert tilec.Target("simt", "gfx90a") == tilec.target.parse_target("simt:gfx90a")
    assert tilec.Target("cuda") == tilec.target.parse_target("cuda") and tilec.Target("cpu") == tilec.Target("cpu", "")


def test_bad_primitive_arguments():
    with pytest.raises(TilecTypeError, match="T.Kernel: at most 1024 threads per block, got 2048"):
        T.Kernel(4, threads=2048)
    with pytest.raises(TilecTypeError, match="T.Pipelined: num_stages must be an int >= 0"):
        T.Pipelined(4, num_stages=-1)
    with pytest.raises(TilecTypeError, match="step must be a non-zero Python int"):
        T.serial(0, 4, 0)
    with pytest.raises(TilecTypeError, match="policy must be a T.GemmWarpPolicy"):

        @T.prim_func
        def main(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                a = T.alloc_shared((16, 16), "float16")
                c = T.alloc_fragment((16, 16), "float32")
                T.gemm(a, a, c, policy="Diagonal")

    with pytest.raises(TilecTypeError, match=r"parameter 'A': annotate it with T.Tensor\(shape, dtype\)"):

        @T.prim_func
        def main2(A: list):
            with T.Kernel(1, threads=32) as bx:
                pass

    @T.prim_func
    def main3(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            A[0] = 1.0

    with pytest.raises(TilecValueError, match="unknown target 'tpu'; expected 'auto', 'cpu'"):
        tilec.compile(main3, target="tpu")
    with pytest.raises(TilecValueError, match="unknown cuda architecture 'sm_70'"):
        tilec.compile(main3, target="cuda:sm_70")
    with pytest.raises(TilecTypeError, match=r"out_idx: 5 is not a parameter index of 'main3' \(1 parameters\)"):
        tilec.compile(main3, target="cpu", out_idx=[5])
    # TileLang's order, tilec.compile(func, out_idx): the list reaches the target (an AttributeError from .strip())
    with pytest.raises(TilecTypeError, match=r"target must be a string .* got list \[0\] .*pass out_idx= by keyword"):
        tilec.compile(main3, [0])
    with pytest.raises(TilecTypeError, match=r"target must be a string .* got int 42"):
        tilec.JITKernel(main3, target=42)


# ------------------------------------------------------------------------------------------------ at launch


@tilec.jit(out_idx=[-1], target="cpu")
def _scaled_copy(M, N, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), alpha: T.float32, n: T.int32, B: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=32) as bx:
            for i, j in T.Parallel(M, N):
                B[i, j] = A[i, j] * T.cast(alpha, dtype) + T.cast(n, dtype)

    return main


@pytest.mark.parametrize(
    "arg, exc, message",
    [
        (np.zeros((8, 16), np.float32), TypeError, "argument 'A': expected dtype float16, got float32"),
        (np.zeros((8, 15), np.float16), ValueError, "argument 'A': dimension 1 must be 16, got 15"),
        (np.zeros((8, 16, 1), np.float16), ValueError,
         r"argument 'A': expected 2 dimension\(s\) of shape \(8, 16\), got an array of shape \(8, 16, 1\)"),
        (np.zeros((8, 32), np.float16)[:, ::2], ValueError,
         r"argument 'A': expected a contiguous row-major array, got strides \(32, 2\) for shape \(8, 16\)"),
        (np.zeros((16, 8), np.float16).T, ValueError,
         r"argument 'A': expected a contiguous row-major array, got strides \(1, 8\)"),
        ([[0.0] * 16] * 8, TypeError, r"argument 'A': expected an array \(numpy, torch or cupy\), got list"),
        (np.zeros((8, 16), np.complex64), TypeError, "argument 'A': unsupported dtype dtype\\('complex64'\\)"),
        (np.zeros((8, 16), object), TypeError, "argument 'A': unsupported dtype dtype\\('O'\\)"),
    ],
)
def test_launch_rejects_bad_arrays(arg, exc, message):
    kernel = _scaled_copy(8, 16)
    with pytest.raises(exc, match=message) as ei:
        kernel(arg, 1.0, 2)
    assert isinstance(ei.value, TilecError)


def test_launch_rejects_bad_scalars_and_arity():
    kernel = _scaled_copy(8, 16)
    a = np.ones((8, 16), np.float16)
    with pytest.raises(TilecTypeError, match=r"kernel 'main' takes 3 argument\(s\) \(A, alpha, n\), got 2"):
        kernel(a, 1.0)
    with pytest.raises(TilecTypeError, match="argument 'n': expected a Python int32 scalar, got float 2.5"):
        kernel(a, 1.0, 2.5)
    with pytest.raises(TilecTypeError, match="argument 'alpha': expected a Python float32 scalar, got str 'x'"):
        kernel(a, "x", 2)
    with pytest.raises(TilecTypeError, match="argument 'n': expected a Python int32 scalar, got ndarray"):
        kernel(a, 1.0, np.array([2]))
    out = kernel(a, np.float32(0.5), np.int64(3))  # numpy scalars are fine
    assert (out == 3.5).all()


def test_launch_takes_keyword_arguments_by_parameter_name():
    """A keyword argument was a bare TypeError from JITKernel.__call__ ('got an unexpected keyword argument')."""
    kernel = _scaled_copy(8, 16)
    a = np.ones((8, 16), np.float16)
    np.testing.assert_array_equal(kernel(a, n=3, alpha=0.5), np.full((8, 16), 3.5, np.float16))
    np.testing.assert_array_equal(kernel(A=a, alpha=0.5, n=3), np.full((8, 16), 3.5, np.float16))
    with pytest.raises(TilecTypeError, match=r"kernel 'main' got multiple values for argument 'alpha'"):
        kernel(a, 0.5, alpha=0.5, n=3)
    with pytest.raises(TilecTypeError, match=r"kernel 'main' has no input 'B' \(its inputs: A, alpha, n; B is an "
                                             r"output, allocated by the call\)"):
        kernel(a, 0.5, 3, B=a)
    with pytest.raises(TilecTypeError, match=r"kernel 'main' has no input 'scale' \(its inputs: A, alpha, n\)"):
        kernel(a, 0.5, scale=3)
    with pytest.raises(TilecTypeError, match=r"kernel 'main' takes 3 argument\(s\) \(A, alpha, n\): 'n' is missing"):
        kernel(a, alpha=0.5)


@pytest.mark.parametrize(("dtype", "value"), [("int32", 2**31), ("int32", -(2**31) - 1), ("uint8", 256),
                                              ("uint8", -1), ("int16", np.int64(40000))])
def test_launch_rejects_an_int_scalar_outside_its_type(dtype, value):
    """The kernel gets an int parameter in its own width: a value outside it was wrapped silently (2**31 became
    -2**31, -1 a uint8 255)."""
    scalar = getattr(T, dtype)

    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), n: scalar, B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                B[i] = A[i] * n

    for target in ("cpu", "simt:sm_80"):
        kernel = tilec.compile(main, target=target, out_idx=[-1])
        with pytest.raises(TilecValueError, match=rf"argument 'n': {value} does not fit the parameter's type "
                                                  rf"{dtype} \[-?\d+, \d+\]"):
            kernel(np.ones(8, np.float32), value)
        lo = int(np.iinfo(dtype).min)
        out = kernel(np.ones(8, np.float32), lo)  # the ends of the range pass
        np.testing.assert_array_equal(out, np.full(8, np.float32(lo)))


def test_launch_rejects_an_int4_scalar_outside_its_type():
    """The range check skipped types under 8 bits: an int4 scalar of 100 ran as 4."""
    @T.prim_func
    def main(A: T.Tensor((4,), "int32"), n: T.int4, B: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(4):
                B[i] = A[i] + T.cast(n, "int32")

    for target in ("cpu", "simt:sm_80"):
        kernel = tilec.compile(main, target=target, out_idx=[-1])
        for value in (100, 8, -9):
            with pytest.raises(TilecValueError, match=rf"argument 'n': {value} does not fit the parameter's type int4 "
                                                      r"\[-8, 7\]"):
                kernel(np.zeros(4, np.int32), value)
        np.testing.assert_array_equal(kernel(np.zeros(4, np.int32), -8), np.full(4, -8))
        np.testing.assert_array_equal(kernel(np.zeros(4, np.int32), 7), np.full(4, 7))


@pytest.mark.parametrize(("dtype", "value"), [("float16", 1e6), ("float16", 65520.0), ("float32", 1e300),
                                              ("float32", -(10**39)), ("float64", 10**400)])
def test_launch_rejects_a_float_scalar_beyond_its_type(dtype, value):
    """A finite float the parameter's type cannot hold became inf silently (1e6 in a float16), and an int beyond a
    double (10**400) was a bare OverflowError."""
    scalar = getattr(T, dtype)

    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), s: scalar, B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                B[i] = A[i] * T.cast(s, "float32")

    for target in ("cpu", "simt:sm_80"):
        kernel = tilec.compile(main, target=target, out_idx=[-1])
        top = re.escape(f"{np.finfo(dtype).max:.8g}")
        with pytest.raises(TilecValueError, match=rf"argument 's': {re.escape(repr(value)[:12])}\S* is beyond the "
                                                  rf"largest finite {dtype} \({top}\)"):
            kernel(np.ones(8, np.float32), value)
        top = float(np.finfo(dtype).max) if dtype != "float64" else 1.0
        np.testing.assert_array_equal(kernel(np.ones(8, np.float32), top), np.full(8, np.float32(top)))
        assert np.isinf(kernel(np.ones(8, np.float32), float("-inf"))).all()  # infinities and NaN are meant
        assert np.isnan(kernel(np.ones(8, np.float32), float("nan"))).all()


_M = T.dynamic("M")


@T.prim_func
def _copy_rows(A: T.Tensor((_M, 4), "float32"), B: T.Tensor((_M, 4), "float32")):
    with T.Kernel(1, threads=32) as bx:
        for i, j in T.Parallel(_M, 4):
            B[i, j] = A[i, j]


def test_launch_symbolic_sizes_must_agree():
    kernel = tilec.compile(_copy_rows, target="cpu")
    with pytest.raises(TilecValueError, match=r"argument 'B': dimension 0 is 5, but M = 3 from an earlier argument"):
        kernel(np.zeros((3, 4), np.float32), np.zeros((5, 4), np.float32))


def test_a_size_no_argument_binds_names_the_argument_or_output():
    """A symbol that appears only inside a size expression (M * 2), or only in an output's shape, is bound by no
    argument: the call raised 'the size 'M' is not bound by any argument's shape', naming no parameter."""
    N = T.dynamic("N")

    @T.prim_func
    def doubled(A: T.Tensor((_M * 2,), "float32"), B: T.Tensor((_M * 2,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(_M * 2):
                B[i] = A[i]

    @T.prim_func
    def free_output(A: T.Tensor((_M,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(4):
                B[i] = A[i]

    with pytest.raises(TilecValueError, match=r"argument 'A': dimension 0 is M \* 2, but no argument has a dimension "
                                              r"or stride of M alone to bind it"):
        tilec.compile(doubled, target="cpu", out_idx=[-1])(np.ones(6, np.float32))
    with pytest.raises(TilecValueError, match=r"output 'B': dimension 0 is N, but no argument has a dimension or "
                                              r"stride of N alone to bind it"):
        tilec.compile(free_output, target="cpu", out_idx=[-1])(np.ones(4, np.float32))


def test_an_output_of_a_negative_size_is_refused_naming_it():
    """An out_idx output shaped M - 4, called with M = 2: numpy's bare 'negative dimensions are not allowed' from the
    allocation, naming neither the output nor the size."""
    @T.prim_func
    def main(A: T.Tensor((_M,), "float32"), B: T.Tensor((_M - 4,), "float32")):
        with T.Kernel(T.ceildiv(_M, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < _M - 4:
                    B[bx * 32 + i] = A[bx * 32 + i + 4]

    for target in ("cpu", "simt:sm_80"):
        kernel = tilec.compile(main, target=target, out_idx=[-1])
        with pytest.raises(TilecValueError, match=r"output 'B': dimension 0 is M - 4 = -2 for these arguments' sizes; "
                                                  r"an output cannot have a negative size"):
            kernel(np.zeros(2, np.float32))
        np.testing.assert_array_equal(kernel(np.arange(10, dtype=np.float32)), np.arange(4, 10, dtype=np.float32))


def test_a_tensor_sized_by_a_scalar_parameter_is_refused_at_its_parameter():
    """A scalar parameter used as a tensor's size (string annotations) took the size from the array and the value
    from the argument unchecked: n=5 with 6-element arrays ran 5 iterations and returned a NaN element on the
    interpreters; the CUDA kernel declared `int n` twice."""
    with pytest.raises(TilecTypeError, match=r"parameter 'A': its shape uses the scalar parameter 'n'; declare the "
                                             r"size with n = T.dynamic\('n'\)") as ei:
        @T.prim_func
        def main(n: T.int32, A: T.Tensor((n,), "float32"),  # noqa: F821 - n: the parameter (string annotations)
                 B: T.Tensor((n,), "float32")):  # noqa: F821
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(8):
                    if i < n:
                        B[i] = A[i] + T.cast(n, "float32")

    assert 'A: T.Tensor((n,), "float32")' in str(ei.value)


def test_launch_rejects_a_size_beyond_int32_and_strides_between_elements():
    """A symbolic size goes to the kernel as int32: 2**31 rows is refused, not wrapped. A field of a packed
    structured array has byte strides that are no multiple of its element: refused, not read as contiguous."""
    kernel = tilec.compile(_copy_rows, target="cpu")
    huge = np.lib.stride_tricks.as_strided(np.zeros(4, np.float32), shape=(2**31, 4), strides=(0, 4))
    with pytest.raises(TilecValueError, match=r"argument 'A': dimension 0 is 2147483648; the symbolic size M is "
                                              r"passed to the kernel as int32 \(at most 2147483647\)"):
        kernel(huge, huge)
    packed = np.zeros((3, 4), dtype=[("tag", "u1"), ("x", "<f4")])["x"]  # byte strides (20, 5)
    with pytest.raises(TilecValueError, match=r"argument 'A': byte strides \(20, 5\) are not multiples of the "
                                              r"4-byte elements"):
        kernel(packed, np.zeros((3, 4), np.float32))


def test_launch_rejects_a_tensor_past_int32_element_offsets():
    """Kernels address a tensor by int32 element offsets: a (40000, 60000) int8 tensor, each size within int32, ran
    with wrapped offsets (the thread interpreter: 'read of global A[-1895027296] outside its 2400000000 elements'; a
    GPU: other memory, silently). Inputs, strided inputs and outputs that large are refused by name."""
    from tilec.runtime.args import allocate_like, bind

    M, N, S = T.dynamic("M"), T.dynamic("N"), T.dynamic("S")

    @T.prim_func
    def last_row(A: T.Tensor((M, N), "int8"), B: T.StridedTensor((M, N), (S, 1), "int8")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                B[M - 1, i] = A[M - 1, i] + 1

    @T.prim_func
    def outer(X: T.Tensor((M,), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
            for i, j in T.Parallel(64, 64):
                Z[by * 64 + i, bx * 64 + j] = X[by * 64 + i] * Y[bx * 64 + j]

    base = np.zeros(64, np.int8)  # never read: only the arguments are checked
    big = np.lib.stride_tricks.as_strided(base, shape=(40000, 60000), strides=(60000, 1))
    small = np.lib.stride_tricks.as_strided(base, shape=(4, 60000), strides=(60000, 1))
    with pytest.raises(TilecValueError, match=r"argument 'A': its elements reach offset 2399999999, but kernels "
                                              r"address a tensor by int32 element offsets \(at most 2147483647\)"):
        bind(last_row, (big, small), "cpu", allocate_like)
    wide = np.lib.stride_tricks.as_strided(base, shape=(4, 60000), strides=(2**30, 1))
    with pytest.raises(TilecValueError, match=r"argument 'B': its elements reach offset 3221285471, but kernels"):
        bind(last_row, (small, wide), "cpu", allocate_like)
    for target in ("cpu", "simt:sm_80"):
        with pytest.raises(TilecValueError, match=r"output 'Z': its elements reach offset 2399999999, but kernels"):
            tilec.compile(outer, target=target, out_idx=[-1])(np.ones(40000, np.float32), np.ones(60000, np.float32))


def test_launch_rejects_a_symbolic_stride_below_int32():
    """A symbolic stride goes to the kernel as int32 too: one below -2**31 passed the check (only the upper end was
    checked) and the CUDA launch failed with a bare OverflowError from np.int32."""
    from tilec.runtime.args import allocate_like, bind

    S = T.dynamic("S")

    @T.prim_func
    def main(A: T.StridedTensor((2, 4), (S, 1), "float32"), B: T.Tensor((2, 4), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i, j in T.Parallel(2, 4):
                B[i, j] = A[i, j]

    base = np.zeros(4, np.float32)  # never read: only the arguments are checked
    far = np.lib.stride_tricks.as_strided(base, shape=(2, 4), strides=(-(2**31 + 1) * 4, 4))
    with pytest.raises(TilecValueError, match=r"argument 'A': stride 0 is -2147483649; the symbolic size S is passed "
                                              r"to the kernel as int32 \(at least -2147483648\)"):
        bind(main, (far, np.zeros((2, 4), np.float32)), "cpu", allocate_like)


@T.prim_func
def _two_outputs(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32"), C: T.Tensor((4,), "float32")):
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(4):
            B[i] = A[i] + 1.0
            C[i] = A[i] + 2.0


def test_out_idx_naming_a_parameter_twice_is_refused_and_numpy_ints_count():
    """out_idx=[-1, 2] on three parameters named C twice: the call allocated two outputs for it and returned one that
    the kernel never wrote (NaN) beside the real one. A numpy integer index was a bare TypeError ('not iterable'),
    True was taken for 1."""
    with pytest.raises(TilecValueError, match=r"out_idx: \[-1, 2\] names parameter 2 \(C\) twice"):
        tilec.compile(_two_outputs, target="cpu", out_idx=[-1, 2])
    with pytest.raises(TilecTypeError, match=r"out_idx: True is not a parameter index of '_two_outputs'"):
        tilec.compile(_two_outputs, target="cpu", out_idx=True)
    kernel = tilec.compile(_two_outputs, target="cpu", out_idx=np.int64(-1))
    c = kernel(np.ones(4, np.float32), np.zeros(4, np.float32))
    np.testing.assert_array_equal(c, np.full(4, 3.0, np.float32))
    b, c = tilec.compile(_two_outputs, target="cpu", out_idx=[np.int32(1), -1])(np.ones(4, np.float32))
    np.testing.assert_array_equal(b, np.full(4, 2.0, np.float32))
    np.testing.assert_array_equal(c, np.full(4, 3.0, np.float32))


def test_out_idx_that_is_no_index_nor_a_list_is_refused_by_name():
    """out_idx=1.0 or a 0-d numpy array was a bare TypeError from list() ('float' object is not iterable, 'iteration
    over a 0-d array'), naming neither out_idx nor the kernel."""
    with pytest.raises(TilecTypeError, match=r"out_idx: 1.0 is not a parameter index of '_two_outputs' "
                                             r"\(3 parameters\)"):
        tilec.compile(_two_outputs, target="cpu", out_idx=1.0)
    with pytest.raises(TilecTypeError, match=r"out_idx: array\(2\) is not a parameter index of '_two_outputs'"):
        tilec.compile(_two_outputs, target="cpu", out_idx=np.array(2))


def test_out_idx_naming_a_parameter_the_kernel_never_writes_is_refused():
    """out_idx=[0] on a kernel that only reads A returned the allocation as it was: all NaN on the interpreters,
    uninitialized memory on a GPU, with no error."""
    for target in ("cpu", "simt:sm_80"):
        with pytest.raises(TilecValueError, match=r"out_idx: parameter 0 \(A\) is never written by the kernel"):
            tilec.compile(_two_outputs, target=target, out_idx=[0, -1])


def _accumulate_into(B_kind):
    """Kernels whose output B is read (by the marked statement) before anything writes it."""
    if B_kind == "parallel":
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for i in T.Parallel(64):
                    B[i] = B[i] + A[i]  # unset-parallel
    elif B_kind == "serial":
        @T.prim_func
        def main(A: T.Tensor((4, 64), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for k in T.serial(4):
                    for i in T.Parallel(64):
                        B[i] += A[k, i]  # unset-serial
    elif B_kind == "copy":
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                s = T.alloc_shared((64,), "float32")
                T.copy(B, s)  # unset-copy
                for i in T.Parallel(64):
                    B[i] = s[i] * 2.0 + A[i]
    else:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(2, threads=32) as bx:
                for i in T.Parallel(32):
                    T.atomic_add(B[i], A[bx * 32 + i])  # unset-atomic
    return main


@pytest.mark.parametrize("kind", ["parallel", "serial", "copy", "atomic"])
def test_out_idx_naming_a_tensor_read_before_it_is_written_is_refused(kind):
    """`B[i] = B[i] + A[i]` with out_idx=[1] read what the call allocated and never filled (NaN under TILEC_POISON,
    garbage on a GPU): the output's first access, unconditional, is a read (in a T.Parallel nest, in the first
    trip of a loop, by a copy, by an atomic add)."""
    with pytest.raises(TilecValueError) as ei:
        tilec.compile(_accumulate_into(kind), target="cpu", out_idx=[1])
    assert ("out_idx: parameter 1 (B) is read before the kernel writes it: the call allocates it and leaves it "
            "unset (NaN on the interpreters and under TILEC_POISON, garbage on a GPU); pass B as an input, or "
            "write it first (T.clear, T.fill, a copy)") in str(ei.value)
    assert_points_at(ei.value, f"unset-{kind}")
    tilec.compile(_accumulate_into(kind), target="cpu")  # passed in by the caller: fine


def test_an_eager_output_read_before_it_is_written_is_refused():
    @tilec.jit(target="cpu")
    def f(A):
        M = T.const("M")
        A: T.Tensor[[M], T.float32]
        B = T.empty((M,), "float32")
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(M):
                B[i] = B[i] * 2.0 + A[i]  # eager-unset
        return B

    with pytest.raises(TilecValueError, match="the tensor 'B' made by T.empty is read before the kernel writes it: "
                                              "it starts unset") as ei:
        f(np.ones(4, np.float32))
    assert_points_at(ei.value, "eager-unset")


def test_outputs_read_after_a_write_or_maybe_never_are_not_refused(rng):
    """No false alarm: an output read only after a write (in the same T.Parallel iteration, after a T.clear, in a
    later loop trip), or read first only under a run-time condition or in a T.if_then_else branch, is accepted."""
    @T.prim_func
    def main(A: T.Tensor((4, 64), "float32"), B: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32"),
             D: T.Tensor((4,), "float32"), E: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                B[i] = A[0, i]
                B[i] = B[i] * 2.0
            T.clear(C)
            for k in T.serial(4):
                for i in T.Parallel(64):
                    C[i] += A[k, i]
            for k in T.serial(4):
                if k > 0:
                    D[k] = D[k - 1] + A[k, 0]
                else:
                    D[0] = A[0, 0]
            for i in T.Parallel(64):
                E[i] = T.if_then_else(i < 64, A[1, i], E[i])

    a = rng.standard_normal((4, 64)).astype(np.float32)
    b, c, d, e = tilec.compile(main, target="cpu", out_idx=[1, 2, 3, 4])(a)
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(b, a64[0] * 2, rtol=1e-6)
    np.testing.assert_allclose(c, a64.sum(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d, np.cumsum(a64[:, 0]), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(e, a[1])


def test_out_idx_refuses_a_strided_tensor():
    """The call allocates its outputs contiguous, but the kernel addresses a T.StridedTensor by its declared strides:
    rows at pitch 16 into a (4, 8) allocation wrote past its end (the thread interpreter: 'write of global B[32]
    outside its 32 elements'; the GPU: other memory, silently)."""
    @T.prim_func
    def main(A: T.Tensor((4, 8), "float32"), B: T.StridedTensor((4, 8), (16, 1), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i, j in T.Parallel(4, 8):
                B[i, j] = A[i, j] + 1.0

    with pytest.raises(TilecTypeError, match=r"out_idx: parameter 1 \(B\) is a T.StridedTensor; the call allocates "
                                             r"contiguous outputs"):
        tilec.compile(main, target="simt:sm_80", out_idx=[-1])
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    b = np.full((4, 16), np.nan, np.float32)
    tilec.compile(main, target="simt:sm_80")(a, b[:, :8])  # passed by the caller, with its strides
    np.testing.assert_array_equal(b[:, :8], a + 1)
    assert np.isnan(b[:, 8:]).all()


def test_a_read_only_array_the_kernel_writes_is_refused_naming_it():
    """A read-only numpy array as an output was a bare numpy ValueError ('assignment destination is read-only') from
    inside the interpreter, naming no argument; as an input it is fine."""
    for target in ("cpu", "simt:sm_80"):
        kernel = tilec.compile(_two_outputs, target=target)
        a, b, c = np.ones(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32)
        a.setflags(write=False)
        c.setflags(write=False)
        with pytest.raises(TilecValueError, match=r"argument 'C': the kernel writes it, but the array is read-only"):
            kernel(a, b, c)
        c = np.zeros(4, np.float32)
        kernel(a, b, c)  # a read-only input is fine
        np.testing.assert_array_equal(c, np.full(4, 3.0, np.float32))


def test_arguments_sharing_memory_with_one_the_kernel_writes_are_refused(rng):
    """C[i, j] = A[i, j] + A[i + 1, j] with C over A's memory: blocks and threads run in no fixed order, so the result
    depended on it (and differed between the interpreters) without a word; now an error naming both arguments.
    Arrays that only read the same memory, or strided views whose elements interleave without meeting, are fine."""
    S = T.dynamic("S")

    @T.prim_func
    def shift(A: T.StridedTensor((8, 4), (S, 1), "float32"), C: T.StridedTensor((7, 4), (S, 1), "float32")):
        with T.Kernel(7, threads=32) as bx:
            for j in T.Parallel(4):
                C[bx, j] = A[bx, j] + A[bx + 1, j]

    @T.prim_func
    def reads(A: T.Tensor((8, 4), "float32"), B: T.Tensor((8, 4), "float32"), C: T.Tensor((8, 4), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i, j in T.Parallel(8, 4):
                C[i, j] = A[i, j] * B[i, j]

    msg = r"arguments 'C' and 'A' share memory, and the kernel writes 'C'"
    for target in ("cpu", "simt:sm_80"):
        kernel = tilec.compile(shift, target=target)
        base = rng.standard_normal((16, 4)).astype(np.float32)
        for a, c in ((base[:8], base[1:8]), (base[8:], base[2:9]), (base[:8], base[7:14])):
            with pytest.raises(TilecValueError, match=msg):
                kernel(a, c)
        wide = rng.standard_normal((16, 8)).astype(np.float32)
        c = np.full((16, 8), np.nan, np.float32)
        kernel(wide[:8, :4], wide[:7, 4:])  # the two halves of each row: no element in common
        kernel(wide[8:, :4], c[8:15, 4:])
        want = wide[8:15, :4].astype(np.float64) + wide[9:16, :4]
        np.testing.assert_allclose(c[8:15, 4:], want, rtol=1e-6)
        np.testing.assert_allclose(wide[:7, 4:], wide[:7, :4].astype(np.float64) + wide[1:8, :4], rtol=1e-6)
        a = rng.standard_normal((8, 4)).astype(np.float32)
        c = np.full((8, 4), np.nan, np.float32)
        tilec.compile(reads, target=target)(a, a, c)  # A and B the same array, only read
        np.testing.assert_allclose(c, a.astype(np.float64) ** 2, rtol=1e-6)
        with pytest.raises(TilecValueError, match=r"arguments 'C' and 'B' share memory, and the kernel writes 'C'"):
            tilec.compile(reads, target=target)(a, c, c)


def test_negative_strides_run_on_the_tile_interpreter_and_are_refused_by_the_thread_interpreter():
    """The thread interpreter addresses a global tensor from its first element in a flat view of its memory: an array
    with a negative stride (a[::-1]) crashed it ('negative dimensions are not allowed') or read as out of bounds."""
    S, R = T.dynamic("S"), T.dynamic("R")

    @T.prim_func
    def main(A: T.StridedTensor((6, 4), (S, R), "float32"), B: T.Tensor((6, 4), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i, j in T.Parallel(6, 4):
                B[i, j] = A[i, j] * 2.0

    base = np.arange(48, dtype=np.float32).reshape(6, 8)
    for a in (base[::-1, :4], base[:, 3::-1]):
        np.testing.assert_array_equal(tilec.compile(main, target="cpu", out_idx=[-1])(a), a * 2)
        with pytest.raises(TilecValueError, match=r"argument 'A': the thread interpreter \(simt targets\) takes no "
                                                  r"negative strides, got \(-?\d+, -?\d+\)"):
            tilec.compile(main, target="simt:sm_80", out_idx=[-1])(a)
    a = np.broadcast_to(base[0, :4], (6, 4))  # zero strides are fine
    np.testing.assert_array_equal(tilec.compile(main, target="simt:sm_80", out_idx=[-1])(a), a * 2)


def test_strides_of_size_one_dimensions_are_not_checked():
    """A dimension of size 1 is never stepped along, and numpy and torch give it any stride (x[:1] keeps x's row
    stride): a one-row slice was refused against a T.StridedTensor's declared stride ('stride 0 must be 16, got 8'),
    or bound a shared stride symbol that the next argument then contradicted ('stride 0 is 4, but S = 8')."""
    S = T.dynamic("S")

    @T.prim_func
    def shared(A: T.StridedTensor((1, 4), (S, 1), "float32"), B: T.StridedTensor((1, 4), (S, 1), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i, j in T.Parallel(1, 4):
                B[i, j] = A[i, j] + 1.0

    @T.prim_func
    def static(A: T.StridedTensor((1, 4), (16, 1), "float32"), B: T.Tensor((1, 4), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i, j in T.Parallel(1, 4):
                B[i, j] = A[i, j] + 1.0

    @T.prim_func
    def two_rows(A: T.StridedTensor((2, 4), (16, 1), "float32"), B: T.Tensor((2, 4), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i, j in T.Parallel(2, 4):
                B[i, j] = A[i, j] + 1.0

    base = np.arange(64, dtype=np.float32).reshape(8, 8)
    for target in ("cpu", "simt:sm_80"):
        with pytest.raises(TilecValueError, match=r"argument 'A': stride 0 must be 16, got 8"):  # a real row stride
            tilec.compile(two_rows, target=target, out_idx=[-1])(base[:2, :4])
        out = np.zeros((1, 4), np.float32)
        tilec.compile(shared, target=target)(base[:1, :4], out)
        np.testing.assert_array_equal(out, base[:1, :4] + 1)
        np.testing.assert_array_equal(tilec.compile(static, target=target, out_idx=[-1])(base[:1, :4]),
                                      base[:1, :4] + 1)


def test_jit_refuses_an_unknown_keyword():
    """A typo in a keyword of tilec.jit is an error (it was ignored); TileLang's own options port unchanged."""
    with pytest.raises(TilecTypeError, match=r"unexpected keyword argument 'pass_config' \(did you mean "
                                             r"'pass_configs'\?\)"):
        tilec.jit(out_idx=[-1], pass_config={"wgmma": False})
    assert callable(tilec.jit(out_idx=[-1], execution_backend="cython", verbose=False))


def test_eager_argument_errors():
    @tilec.jit(target="cpu")
    def f(A, scale: float = 1.0):
        M = T.const("M")
        A: T.Tensor[[M], T.float16]
        B = T.empty((M,), "float16")
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(M):
                B[i] = A[i] * scale
        return B

    with pytest.raises(TilecTypeError, match="argument 'A': annotated dtype float16, got an array of dtype float32"):
        f(np.zeros(4, np.float32))
    with pytest.raises(TilecValueError, match=r"argument 'A': annotated with 1 dimension\(s\), got an array of shape"):
        f(np.zeros((2, 2), np.float16))
    with pytest.raises(TilecTypeError, match="kernel 'f': too many positional arguments"):
        f(np.zeros(4, np.float16), 1.0, 2.0)
    with pytest.raises(TilecTypeError, match=r"argument 'A': unsupported dtype dtype\('complex64'\)"):
        f(np.zeros(4, np.complex64))


def test_an_eager_kernel_given_arrays_other_than_by_named_parameters_says_so():
    """An eager `def f(*args)` (or an array inside a list argument) refused its arrays with 'argument 'args':
    ndarray values cannot key the kernel cache; pass ints, floats, ...', as if arrays were not what a kernel
    takes; now the call says that an eager kernel takes each tensor through a named parameter."""
    @tilec.jit(target="cpu")
    def star(*args):
        N = T.const("N")
        y = T.empty((N,), "float32")
        with T.Kernel(1, threads=32) as bx:
            y[0] = 1.0
        return y

    @tilec.jit(target="cpu")
    def stars(**kw):
        N = T.const("N")
        y = T.empty((N,), "float32")
        with T.Kernel(1, threads=32) as bx:
            y[0] = 1.0
        return y

    @tilec.jit(target="cpu")
    def listed(xs, scale=1.0):
        N = T.const("N")
        y = T.empty((N,), "float32")
        with T.Kernel(1, threads=32) as bx:
            y[0] = scale
        return y

    a = np.ones(4, np.float32)
    with pytest.raises(TilecTypeError, match=r"kernel 'star': args\[0\] is an array passed through \*args; an eager "
                                             r"kernel takes each tensor through a named parameter \(def star\(x, y, "
                                             r"\.\.\.\)\), which its T.Tensor annotation binds"):
        star(a)
    with pytest.raises(TilecTypeError, match=r"kernel 'stars': kw\['x'\] is an array passed through \*\*kw; an "
                                             "eager kernel takes each tensor through a named parameter"):
        stars(x=a)
    with pytest.raises(TilecTypeError, match=r"kernel 'listed': xs\[0\] is an array inside the list argument 'xs'; an "
                                             "eager kernel takes each tensor through a named parameter"):
        listed([a, a])


def test_an_eager_output_never_written_is_an_error():
    """An eager kernel returning a T.empty tensor it never writes returned it as allocated (all NaN here,
    uninitialized memory on a GPU) beside the real output, with no error."""
    @tilec.jit(target="cpu")
    def f(A):
        M = T.const("M")
        A: T.Tensor[[M], T.float32]
        B = T.empty((M,), "float32")
        C = T.empty((M,), "float32")  # never-written
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(M):
                B[i] = A[i] * 2.0
        return B, C

    with pytest.raises(TilecSyntaxError, match="the tensor 'C' made by T.empty is returned but never written") as ei:
        f(np.ones(4, np.float32))
    assert_points_at(ei.value, "never-written")


def test_an_eager_kernel_returning_one_tensor_twice_is_an_error():
    """`return C, C` allocated two outputs for the one parameter C: the kernel wrote the second, and the first came
    back as allocated (all NaN here, uninitialized memory on a GPU) with no error. Now an error at the return."""

    @tilec.jit(target="cpu")
    def f(A):
        M = T.const("M")
        A: T.Tensor[[M], T.float32]
        C = T.empty((M,), "float32")
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(M):
                C[i] = A[i] * 2.0
        return C, C  # returned-twice

    with pytest.raises(TilecSyntaxError, match="an eager kernel returns each T.empty tensor once, got 'C' twice") as ei:
        f(np.ones(4, np.float32))
    assert_points_at(ei.value, "returned-twice")


def test_out_idx_on_an_eager_kernel_is_refused():
    """out_idx names the outputs of a lazy factory's kernel; on an eager kernel (whose outputs are its T.empty
    tensors) it was ignored without a word: f(a, b) wrote into b and returned None, f(a) said 'B' was missing."""

    def add(A, B):
        M = T.const("M")
        A: T.Tensor[[M], T.float32]
        B: T.Tensor[[M], T.float32]
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(M):
                B[i] = A[i] + 1

    with pytest.raises(TilecTypeError, match=r"tilec.jit: out_idx=\[-1\] is for a kernel factory .* 'add' is an "
                                             r"eager kernel: its outputs are the T.empty tensors it returns"):
        tilec.jit(out_idx=[-1], target="cpu")(add)
    assert tilec.jit(target="cpu")(add).eager


# ------------------------------------------------------------------------------------------- at run time


def test_a_negative_grid_is_an_error_on_the_interpreters():
    """T.Kernel(M - 8) with M = 4 ran no block on the interpreters (the outputs stayed unset) while a CUDA launch
    failed with the driver's bare 'invalid argument'; every target now names the grid (test_launcher: CUDA)."""
    M = T.dynamic("M")

    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(M - 8, threads=32) as bx:
            for i in T.Parallel(1):
                B[bx + i] = A[bx + i] + 1.0

    for target in ("cpu", "simt:sm_80"):
        kernel = tilec.compile(main, target=target, out_idx=[-1])
        with pytest.raises(TilecValueError, match=r"kernel 'main': its launch grid \(-4,\) has -4 blocks along x"):
            kernel(np.zeros(4, np.float32))
        out = kernel(np.zeros(10, np.float32))
        np.testing.assert_array_equal(out[:2], np.ones(2, np.float32))


def test_a_negative_constant_grid_is_an_error_at_its_line():
    with pytest.raises(TilecValueError, match="T.Kernel: grid extents must be >= 0, got -2") as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(-2, threads=32) as bx:  # negative-grid
                A[bx] = 1.0

    assert_points_at(ei.value, "negative-grid")


def test_block_level_out_of_bounds_access_raises_at_run_time():
    @T.prim_func
    def main(A: T.Tensor((16,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            A[bx * 10 + 8] = 1.0  # oob-store

    kernel = tilec.compile(main, target="cpu")
    with pytest.raises(TilecBoundsError) as ei:
        kernel(np.zeros(16, np.float32))
    assert "write of A[18] outside its shape (16,) (block (1))" in str(ei.value)
    assert_points_at(ei.value, "oob-store")

    @T.prim_func
    def read(A: T.Tensor((16,), "float32"), B: T.Tensor((2,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            B[bx] = A[bx * 16]  # oob-load

    with pytest.raises(TilecBoundsError, match=r"read of A\[16\] outside its shape \(16,\) \(block \(1\)\)") as ei:
        tilec.compile(read, target="cpu")(np.zeros(16, np.float32), np.zeros(2, np.float32))
    assert_points_at(ei.value, "oob-load")


def test_shared_out_of_bounds_inside_parallel_raises():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((64,), "float32")
            T.copy(A, s)
            for i in T.Parallel(64):
                A[i] = s[i + 1]  # oob-shared

    with pytest.raises(TilecBoundsError, match=r"read of s\[64\] outside its shape \(64,\)") as ei:
        tilec.compile(main, target="cpu")(np.zeros(64, np.float32))
    assert_points_at(ei.value, "oob-shared")


def test_race_in_parallel_raises():
    @T.prim_func
    def main(A: T.Tensor((4, 8), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            r = T.alloc_fragment((4,), "float32")
            for i, j in T.Parallel(4, 8):
                r[i] = A[i, j]  # race-line
            T.copy(r, B)

    with pytest.raises(TilecBoundsError, match="T.Parallel writes elements of r from several iterations") as ei:
        tilec.compile(main, target="cpu")(np.ones((4, 8), np.float32), np.zeros(4, np.float32))
    assert_points_at(ei.value, "race-line")


def test_dump_of_an_unknown_stage():
    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            A[0] = 1.0

    with pytest.raises(TilecValueError, match="unknown stage 'lower'; stages are: parse, verify, build_ftg"):
        tilec.dump(main, after="lower")


@pytest.mark.parametrize("what", ["factory", "number"])
def test_dump_of_something_not_a_kernel(what):
    """tilec.dump(f) of the @tilec.jit factory (not the kernel it makes), or of any other object, raised a bare
    AttributeError ('... has no attribute prim_func') from inside tilec; the error now names the argument."""
    @tilec.jit(target="cpu")
    def factory(n):
        @T.prim_func
        def main(A: T.Tensor((n,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = 1.0

        return main

    obj = factory if what == "factory" else 3
    with pytest.raises(TilecTypeError, match=r"tilec.dump: kernel must be a JITKernel \(what a @tilec.jit factory "
                                             r"returns, or tilec.compile\) or a @T.prim_func kernel, got "):
        tilec.dump(obj)
    assert "def main(" in tilec.dump(factory(4)) and "def main(" in tilec.dump(factory(4).prim_func)


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:gfx90a"])
def test_registers_of_a_kernel_no_gpu_compiler_built(target):
    """kernel.n_regs / n_spills (what ptxas reported) on a kernel of an interpreter target raised a bare
    AttributeError ('CpuExecutable' object has no attribute 'ck'); they now say that the target compiles no GPU
    code."""
    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            A[0] = 1.0

    kernel = tilec.compile(main, target=target)
    for attr in ("n_regs", "n_spills"):
        with pytest.raises(TilecValueError, match=rf"kernel\.{attr}: the {target} target compiles no GPU code; "
                           r"registers and spills are what ptxas / the HIP compiler report for the cuda and hip "
                           r"targets"):
            getattr(kernel, attr)


def test_unsupported_pipelined_and_atomic_options_are_errors():
    import tilec.language as T
    from tilec.errors import TilecTypeError

    with pytest.raises(TilecTypeError, match="sync= and group="):
        T.Pipelined(8, num_stages=2, sync=[[0, 1]])

    @T.macro
    def body(A):
        T.atomic_add(A[0], 1.0, memory_order="seq_cst")

    with pytest.raises(TilecTypeError, match="memory_order='seq_cst'"):
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                body(A)


@pytest.mark.parametrize(("configs", "message"), [
    ({"wgma": True}, "unknown pass config 'wgma' (did you mean 'wgmma'?); the pass configs are: wgmma, "),
    ({"remat_addresses": True}, "unknown pass config 'remat_addresses'; the pass configs are: "),
    ({"tma": "yes"}, "pass config 'tma' takes True or False, got 'yes'"),
    ({"persistent": 0}, "pass config 'persistent' takes True, False or a positive int, got 0"),
    ({"cluster": 3}, "pass config 'cluster' takes 0 or 1 (none), 2 or 4, got 3"),
    # a float equal to an accepted int: cluster=2.0 failed in pipelining ('loop extent ... is not an integer')
    ({"cluster": 2.0}, "pass config 'cluster' takes 0 or 1 (none), 2 or 4, got 2.0"),
    ({"consumers": 2.0}, "pass config 'consumers' takes 1 or 2, got 2.0"),
    ({"store_buffers": 1.0}, "pass config 'store_buffers' takes 1 or 2, got 1.0"),
])
def test_pass_configs_are_checked(configs, message):
    """A misspelt or removed pass config would otherwise be ignored without a word."""

    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            A[0] = 1.0

    with pytest.raises(TilecValueError, match=re.escape(message)):
        tilec.JITKernel(main, "cpu", pass_configs=configs)

    with pytest.raises(TilecValueError, match=re.escape(message)):  # at the decorator already
        tilec.jit(target="cpu", pass_configs=configs)(_factory)
    with pytest.raises(TilecValueError, match=re.escape(message)):
        tilec.compile(main, "cpu", pass_configs=configs)


def test_compile_takes_pass_configs(rng):
    """tilec.compile(func, target, out_idx) had no pass_configs (TileLang's compile has them): a kernel compiled
    that way could not turn off TMA or ask for warp specialization. The configs reach the pipeline."""
    from conftest import load_example

    func = load_example("01_gemm").matmul.fn(256, 256, 128, block_M=128, block_N=128, block_K=32, num_stages=2)
    assert "TMA" in tilec.compile(func, "simt:sm_90a", [-1]).report()
    kernel = tilec.compile(func, "simt:sm_90a", [-1], pass_configs={"tma": False})
    assert "TMA" not in kernel.report()
    a, b = (rng.standard_normal(s).astype(np.float16) for s in ((256, 128), (128, 256)))
    c = kernel(a, b)  # (the interpreters allocate outputs filled with NaN)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=2e-2, atol=2e-2)


def _factory(n):
    return None


@pytest.mark.parametrize("configs", ["wgmma", [("wgmma", True)], ["tma"]])
def test_pass_configs_that_are_no_dict_are_refused(configs):
    """pass_configs="wgmma" (or a list) failed with AttributeError: 'str' object has no attribute 'items'."""
    from tilec.errors import TilecTypeError

    with pytest.raises(TilecTypeError, match=r"pass_configs is a dict of pass config names to values .*, got "):
        tilec.jit(target="cpu", pass_configs=configs)(_factory)
    with pytest.raises(TilecTypeError, match=r"pass_configs is a dict"):
        tilec.JITKernel(_kernel_of_one_store(), "cpu", pass_configs=configs)


def _kernel_of_one_store():
    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            A[0] = 1.0

    return main


def test_the_readme_lists_every_pass_config():
    """README's table of pass configs is the registry's, row for row: name, meaning, values and default (a default
    or meaning changed in tilec/passes/configs.py and not in the README fails here)."""
    from conftest import ROOT

    from tilec.passes.configs import PASS_CONFIGS

    readme = (ROOT / "README.md").read_text()
    header = "| pass config | meaning | values | default |\n| --- | --- | --- | --- |\n"
    table = readme.split(header)[1].split("\n\n")[0]
    rows = [re.fullmatch(r"\| `(\w+)` \| (.+) \| (.+) \| (.+) \|", line) for line in table.splitlines()]
    assert all(rows), [line for line, m in zip(table.splitlines(), rows) if not m]
    documented = {m[1]: (m[2], m[3], m[4]) for m in rows}
    assert list(documented) == list(PASS_CONFIGS)
    for name, c in PASS_CONFIGS.items():
        # a default in words (True on sm_90a ...) is written as it is, a value as code: `True`, `'balanced'`
        default = c.default if isinstance(c.default, str) and " " in c.default else f"`{c.default!r}`"
        assert documented[name] == (c.meaning, c.takes, default), name


_KERNEL_HEAD = '''
import tilec.language as T
@T.prim_func
def main(A: T.Tensor((16, 16), "float16"), C: T.Tensor((16, 16), "float32")):
    with T.Kernel(1, threads=32) as bx:
'''
_BUFFERS = """\
        A_s = T.alloc_shared((16, 16), "float16")
        C_f = T.alloc_fragment((16, 16), "float32")
        m = T.alloc_fragment((16,), "float32")
"""


def _refused_at_its_line(stmt: str, tmp_path: Path, buffers: str = _BUFFERS) -> str:
    """The TilecTypeError a kernel (A, C; ``buffers``; then ``stmt``) raises when defined, checked to name the
    line of ``stmt`` in the user's file."""
    src = _KERNEL_HEAD + buffers + f"        {stmt}\n"
    path = tmp_path / "kernel.py"
    path.write_text(src)
    with pytest.raises(TilecTypeError) as ei:
        exec(compile(src, str(path), "exec"), {})
    text = str(ei.value)
    assert f"{path}:{src.count(chr(10), 0, src.index(stmt)) + 1}:" in text, text
    return text


@pytest.mark.parametrize(("stmt", "name", "keyword"), [
    ("T.gemm(A_s, A_s, C_f, transpose_b=True)", "T.gemm", "transpose_b"),  # would compute A @ A, not A @ A.T
    ("T.reduce_max(C_f, m, dims=0)", "T.reduce_max", "dims"),  # would reduce dim -1
    ("T.cumsum(m, axis=0)", "T.cumsum", "axis"),
    ("T.copy(A, A_s, coalesce_width=4)", "T.copy", "coalesce_width"),
    ("T.fill(C_f, 0, foo=1)", "T.fill", "foo"),
    ("T.atomic_add(C[0, 0], 1.0, mem_order='relaxed')", "T.atomic_add", "mem_order"),
    ("for k in T.Pipelined(4, num_stage=3):\n            T.copy(A, A_s)", "T.Pipelined", "num_stage"),
    ("for i in T.Parallel(16, coalesce_width=4):\n            m[i] = 0", "T.Parallel", "coalesce_width"),
    ("for k in T.unroll(4, unrol_factor=2):\n            m[k] = 0", "T.unroll", "unrol_factor"),
    ("for k in T.serial(0, 4, stpe=2):\n            m[k] = 0", "T.serial", "stpe"),  # was kept as an annotation
])
def test_misspelled_keywords_of_primitives_are_errors(stmt, name, keyword, tmp_path):
    """A keyword a T.* primitive does not take was swallowed (``**_``): a misspelled TileLang keyword silently
    changed the kernel's meaning. It is an error naming the primitive, the keyword and the line."""
    text = _refused_at_its_line(stmt, tmp_path)
    assert f"calling {name}: TypeError: " in text and f"unexpected keyword argument '{keyword}'" in text, text


@pytest.mark.parametrize(("stmt", "message"), [
    ("T.fill(C_f, 'x')", "T.fill: value must be a scalar expression or a number, got str 'x'"),
    ("T.fill(C_f, A_s)", "T.fill: value must be a scalar expression or a number, got Buffer"),
    ("T.fill(C_f, None)", "T.fill: value must be a scalar expression or a number, got NoneType None"),
    ("T.atomic_add(C[0, 0], 'x')", "T.atomic_add: value must be a scalar expression or a number, got str 'x'"),
    ("T.atomic_add(C, 1.0)", "T.atomic_add: value must be a tile (dst C is a tile), got float 1.0"),
    ("T.atomic_add(C, 'C_f')", "T.atomic_add: value must be a tile (dst C is a tile), got str 'C_f'"),
    ("for k in T.serial('a'):\n            m[k] = 0", "T.serial: the extent must be an int or an integer scalar "
                                                       "expression, got str 'a'"),
    ("for k in T.serial(2.5):\n            m[k] = 0", "T.serial: the extent must be an int or an integer scalar "
                                                       "expression, got float 2.5"),
    ("for k in T.serial(0, 'b'):\n            m[k] = 0", "T.serial: stop must be an int or an integer scalar "
                                                          "expression, got str 'b'"),
    ("for k in T.serial(0.5, 4):\n            m[k] = 0", "T.serial: start must be an int or an integer scalar "
                                                          "expression, got float 0.5"),
    ("for k in T.Pipelined(A_s, num_stages=2):\n            m[k] = 0", "T.Pipelined: the extent must be an int "
                                                                       "or an integer scalar expression, got Buffer"),
    ("for k in T.Pipelined(4.0):\n            m[k] = 0", "T.Pipelined: the extent must be an int or an integer "
                                                          "scalar expression, got float 4.0"),
    ("for k in T.unroll('4'):\n            m[k] = 0", "T.unroll: the extent must be an int or an integer scalar "
                                                       "expression, got str '4'"),
])
def test_a_wrongly_typed_value_or_loop_bound_names_the_primitive_and_parameter(stmt, message, tmp_path):
    """A value of T.fill or T.atomic_add, or a bound of T.serial / T.Pipelined / T.unroll, of the wrong type was
    refused with 'expected a scalar expression or a number, got str ...' or 'loop extent 2.5 must be an integer, got
    float32', naming neither the primitive nor the parameter; T.atomic_add(C, 1.0) said dst must be an element or a
    tile, though C is one. Each now names the primitive and the parameter, at the user's line."""
    text = _refused_at_its_line(stmt, tmp_path)
    assert message in text, text


@pytest.mark.parametrize("stmt", ["X = T.alloc_shared((16,), None)", "X = T.alloc_fragment((16,), None)",
                                  "X = T.alloc_local((4,), None)", "X = T.alloc_var(None)"])
def test_a_dtype_of_none_is_refused_at_its_line(stmt, tmp_path):
    """``T.alloc_shared((16,), None)`` allocated a float64 buffer (numpy reads dtype None as float64), a silent change
    of the kernel's numerics; a dtype of None is now refused, with the supported names, at the user's line."""
    text = _refused_at_its_line(stmt, tmp_path, buffers="")
    assert "unsupported dtype None; expected one of: float64, float32, float16" in text, text


@pytest.mark.parametrize(("stmt", "message"), [
    ("T.copy(A['a', 0], A_s)", "buffer 'A', dimension 0: the index must be a scalar expression or a number, got "
                               "str 'a'"),
    ("T.copy(A[0, None], A_s)", "buffer 'A', dimension 1: the index must be a scalar expression or a number, got "
                                "NoneType None"),
    ("T.copy(A['a':16, 0:16], A_s)", "buffer 'A', dimension 0: the slice bound must be a scalar expression or a "
                                     "number, got str 'a'"),
    ("T.copy(A[0:16, 0:'b'], A_s)", "buffer 'A', dimension 1: the slice bound must be a scalar expression or a "
                                    "number, got str 'b'"),
    ("A_s[A_s, 0] = 0", "buffer 'A_s', dimension 0: the index must be a scalar expression or a number, got Buffer"),
])
def test_an_index_of_the_wrong_type_names_the_buffer_and_dimension(stmt, message, tmp_path):
    """``A['a', 0]`` (or a slice bound of the wrong type) was refused with 'expected a scalar expression or a number,
    got str 'a'' (or, for a slice's stop, an error from inside the subtraction of its bounds), naming neither the
    buffer nor the dimension. The error now names both, at the user's line."""
    text = _refused_at_its_line(stmt, tmp_path)
    assert message in text, text


def test_tilelang_keywords_that_need_nothing_are_accepted():
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float16"), C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32, prelude="") as bx:
            A_s = T.alloc_shared((16, 16), "float16")
            C_f = T.alloc_fragment((16, 16), "float32")
            T.copy(A, A_s, coalesced_width=8, disable_tma=True, eviction_policy="evict_first")
            T.gemm(A_s, A_s, C_f, clear_accum=True, wg_wait=-1)
            for k in T.unroll(2, explicit=True):
                C_f[0, k] = 0
            for i, j in T.Parallel(16, 16, coalesced_width=4):
                C_f[i, j] = C_f[i, j] + 1
            T.atomic_add(C, C_f, use_tma=False)

    assert "T.gemm(A_s, A_s, C_f, clear_accum=True)" in str(main)
    # T.copy's options are kept (tests/lower/test_copy_options.py: what each does)
    assert "T.copy(A, A_s, coalesced_width=8, disable_tma=True, eviction_policy='evict_first')" in str(main)
    with pytest.raises(TilecTypeError, match="mbar="):
        T.gemm(None, None, None, mbar=object())


@pytest.mark.parametrize(("index", "message"), [
    ("S[-1]", "buffer 'S', dimension 0: the index -1 is negative; kernel indices do not count from the end as "
              "Python's do"),
    ("S[:-1]", "buffer 'S', dimension 0: the slice `:-1` has a negative bound"),
    ("A[-4:]", "buffer 'A', dimension 0: the slice `-4:` has a negative bound"),
    ("A[2:-2]", "buffer 'A', dimension 0: the slice `2:-2` has a negative bound"),
    ("S[6:2]", "buffer 'S', dimension 0: the slice `6:2` ends before it starts (extent -4)"),
])
def test_negative_indices_and_slices_are_errors(index, message, tmp_path):
    """Python reads S[-1] as the last element and S[:-1] as all but it; a kernel took -1 as a position before the
    buffer (S[:-1] was a region of extent -1 that T.fill accepted). Such indices are refused, the caret under them."""
    src = f'''
import tilec.language as T
@T.prim_func
def main(A: T.Tensor((8,), "float32")):
    with T.Kernel(1, threads=32) as bx:
        S = T.alloc_shared((8,), "float32")
        T.fill({index}, 0)
'''
    path = tmp_path / "kernel.py"
    path.write_text(src)
    with pytest.raises(TilecValueError) as ei:
        exec(compile(src, str(path), "exec"), {})
    text = str(ei.value)
    assert message in text and f"{path}:7:16: " in text, text
    shown, caret = text.splitlines()[-2:]
    assert caret.index("^") == shown.index(index) and caret.strip() == "^", text


def test_dynamic_size_of_another_int_type_is_an_error():
    """Symbolic sizes reach the kernel as int32 (the CUDA and HIP launches pass them so): an int64 T.dynamic would
    have been declared int in the kernel and wrapped past 2^31 on HIP."""
    with pytest.raises(TilecTypeError, match=r"T.dynamic\('M'\): dtype must be int32 .* got int64"):
        T.dynamic("M", "int64")
    assert T.dynamic("N", "int32").dtype.name == "int32"


@pytest.mark.parametrize("target", ["simt:sm_80", "cuda:sm_90a", "hip:gfx90a"])
def test_parallel_over_a_symbolic_extent_is_an_error_on_gpu_targets(target):
    """A T.Parallel loop is spread over the threads at compile time: over a T.dynamic extent the GPU targets raised
    a bare TypeError from layout inference (int() of the size); the CPU interpreter runs it."""
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, 4), "float32"), Y: T.Tensor((M, 4), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i, j in T.Parallel(M, 4):
                Y[i, j] = X[i, j] * 2.0

    with pytest.raises(TilecValueError, match=r"test_errors.py:\d+:\d+: T.Parallel over a symbolic extent \(M\)"):
        tilec.JITKernel(main, target).get_kernel_source()
    x = np.random.default_rng().standard_normal((37, 4)).astype(np.float32)
    y = np.full_like(x, np.nan)
    tilec.compile(main, target="cpu")(x, y)
    np.testing.assert_array_equal(y, x * 2)


@pytest.mark.parametrize("target", ["simt:sm_80", "cuda:sm_80", "hip:gfx90a"])
def test_a_grid_of_a_scalar_parameter_is_an_error_on_gpu_targets(target):
    """The host computes a GPU launch's grid from the symbolic sizes alone: T.Kernel(n) of a scalar parameter compiled,
    then every CUDA launch failed with a bare NameError from the grid function ('n' is not defined; HIP: 'the size
    n is not bound by any argument's shape'). The CPU interpreter runs it."""
    @T.prim_func
    def main(A: T.Tensor((16,), "float32"), n: T.int32, B: T.Tensor((16,), "float32")):
        with T.Kernel(n + 1, threads=32) as bx:
            for i in T.Parallel(1):
                B[bx + i] = A[bx + i] + 1.0

    with pytest.raises(TilecValueError, match=r"test_errors.py:\d+:\d+: T.Kernel's grid extent n \+ 1 reads n: a GPU "
                                              r"launch computes its grid from the tensors' shapes"):
        tilec.JITKernel(main, target, out_idx=[-1]).get_kernel_source()
    out = tilec.compile(main, target="cpu", out_idx=[-1])(np.zeros(16, np.float32), 3)
    np.testing.assert_array_equal(out[:4], np.ones(4, np.float32))
    assert np.isnan(out[4:]).all()


def test_with_of_something_else_than_t_kernel_is_refused_before_it_runs(tmp_path):
    """`with open(path, "w")` in a kernel was called before the check that `with` takes T.Kernel: the file was
    created (or the error was open's FileNotFoundError). Now the call never runs."""
    path = tmp_path / "made-by-the-kernel"
    with pytest.raises(TilecSyntaxError, match=r"`with` in a kernel takes T.Kernel\(...\), got `open\(path, 'w'\)`"):

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with open(path, "w") as bx:
                A[0] = 1.0

    assert not path.exists()


def test_python_print_of_a_kernel_value_names_t_print():
    """print(A[i]) ran Python's print once, at parse time, printing the expression's text."""
    with pytest.raises(TilecTypeError, match=r"print\(\) of a kernel value runs once.*use T.print") as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(4):
                    print("value", A[i])  # py-print

    assert_points_at(ei.value, "py-print")


def test_python_round_of_a_kernel_value_names_t_round():
    """round(A[i]) failed inside Python ('type Load doesn't define __round__ method'); the error now names T.round
    and how its halves differ from Python's."""
    with pytest.raises(TilecTypeError, match=r"round\(\) of a kernel value: use T.round \(C's roundf") as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(4):
                    A[i] = round(A[i])  # py-round

    assert_points_at(ei.value, "py-round")


def test_bool_sizes_are_refused_and_numpy_int_stage_counts_taken(rng):
    """T.Tensor((True, 19), ...) was a (1, 19) tensor (a bool taken as a size): refused naming it. T.Pipelined's
    num_stages=np.int64(2) (a count read from numpy) was refused ('num_stages must be an int >= 0'): taken."""
    from conftest import poisoned

    for shape in [(True, 19), (np.bool_(False), 3)]:
        with pytest.raises(TilecTypeError, match=r"T.Tensor: dimension (True|np.False_) is a bool, not a size"):
            T.Tensor(shape, "float32")

    @T.prim_func
    def staged(A: T.Tensor((64, 8), "float32"), B: T.Tensor((64, 8), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((8, 8), "float32")
            for k in T.Pipelined(8, num_stages=np.int64(2)):
                T.copy(A[k * 8, 0], s)
                T.copy(s, B[k * 8, 0])

    a = rng.standard_normal((64, 8)).astype(np.float32)
    b = poisoned((64, 8), "float32")
    tilec.JITKernel(staged, "simt:sm_80")(a, b)
    np.testing.assert_array_equal(b, a)


def test_kernel_prelude_is_refused():
    """T.Kernel(..., prelude="...") was accepted and the C code silently dropped: refused at the kernel's line."""
    with pytest.raises(TilecTypeError, match=r"test_errors.py:\d+.*T.Kernel: prelude= \(C code put before the kernel\) "
                                             r"is not supported"):

        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32, prelude="__device__ int helper() { return 1; }") as bx:
                A[0] = 1.0


@pytest.mark.parametrize("form", ["unpack", "in", "max"])
def test_iterating_a_buffer_is_refused_at_its_line(form):
    """`x, y = A`, `v in A` and max(A) iterated A through its __getitem__ (A[0], A[1], ...), which no index ends
    when the kernel is parsed: the parse never returned. Each is now an error at its line naming the buffer."""
    with pytest.raises(TilecTypeError, match=r"buffer 'A' cannot be iterated or unpacked when the kernel is parsed.*"
                                             r"read its elements by index, A\[i\]") as ei:

        @T.prim_func
        def main(A: T.Tensor((2,), "float32"), B: T.Tensor((2,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                if form == "unpack":
                    x, y = A  # iter-unpack
                    B[0] = x + y
                elif form == "in":
                    B[0] = T.if_then_else(1.0 in A, 1.0, 0.0)  # iter-in
                else:
                    B[0] = max(A)  # iter-max

    assert_points_at(ei.value, f"iter-{form}")


def test_a_chained_assignment_whose_value_reads_an_earlier_target_is_refused(rng):
    """`A[0] = A[1] = A[0] + 1` stored A[0] first and then evaluated A[0] + 1 again for A[1], which read the new A[0]
    (A[1] got 7 for A[0] = 5, silently); Python evaluates the value once. Now an error at the line; a chained
    assignment whose value reads none of its targets still stores the one value into each."""
    from conftest import poisoned

    with pytest.raises(TilecSyntaxError, match=r"the value reads A, which the target `A\[0\]` stores to before "
                                               r"`A\[1\]` is assigned") as ei:

        @T.prim_func
        def bad(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = A[1] = A[0] + 1.0  # chained-self

    assert_points_at(ei.value, "chained-self")

    @T.prim_func
    def fine(X: T.Tensor((4,), "float32"), A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(4):
                A[i] = B[i] = X[i] * 2.0

    x = rng.standard_normal(4).astype(np.float32)
    a, b = poisoned(4, "float32"), poisoned(4, "float32")
    tilec.compile(fine, target="cpu")(x, a, b)
    np.testing.assert_array_equal(a, 2 * x)
    np.testing.assert_array_equal(b, 2 * x)


@pytest.mark.parametrize("form", ["if", "not", "and", "ternary", "assert", "bool"])
def test_a_tile_used_as_a_condition_is_refused_at_its_line(form):
    """`if F:`, `not F`, `F and G`, `x if F else y`, `assert F` and bool(F) on a tile took Python's truth of the
    buffer object (always true): `if F:` ran its body unconditionally, `if not F:` never, silently. Each is now an
    error at its line naming the tile; T.alloc_var scalars stay run-time conditions."""
    with pytest.raises(TilecTypeError, match=r"`F` is the tile F, used as a condition: a tile has no truth value in a "
                                             r"kernel") as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                F = T.alloc_fragment((4,), "float32")
                G = T.alloc_fragment((4,), "float32")
                T.copy(A, F)
                T.copy(A, G)
                if form == "if":
                    if F:  # tile-cond-if
                        T.copy(F, B)
                elif form == "not":
                    if not F:  # tile-cond-not
                        T.copy(F, B)
                elif form == "and":
                    if F and G:  # tile-cond-and
                        T.copy(F, B)
                elif form == "ternary":
                    T.copy(F if F else G, B)  # tile-cond-ternary
                elif form == "assert":
                    assert F  # tile-cond-assert
                else:
                    B[0] = T.if_then_else(bool(F), 1.0, 0.0)  # tile-cond-bool

    assert_points_at(ei.value, f"tile-cond-{form}")


def test_an_alloc_var_condition_and_a_python_or_of_tiles_still_work(rng):
    from conftest import poisoned

    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            v = T.alloc_var("float32")
            v = A[0]
            F = T.alloc_fragment((4,), "float32")
            T.copy(A, F)
            if not v:
                T.fill(B, 1.0)
            else:
                T.copy(None or F, B)  # the last operand's truth is not taken

    a = rng.standard_normal(4).astype(np.float32)
    b = poisoned(4, "float32")
    tilec.compile(main, target="cpu")(a, b)
    np.testing.assert_array_equal(b, a)
    a[0] = 0.0
    tilec.compile(main, target="cpu")(a, b)
    np.testing.assert_array_equal(b, np.ones(4, np.float32))


@pytest.mark.parametrize("form, message", [
    ("gt", r"`F > 0` compares the tile F: comparisons in a kernel are on elements"),
    ("eq", r"`F == 0` compares the tile F: comparisons in a kernel are on elements"),
    ("mul", r"`\*` on the tile F: arithmetic in a kernel is on elements \(F\[i\] \* \.\.\. in a T.Parallel loop\)"),
    ("matmul", r"`@` on the tile F: a tile product is T.gemm\(A, B, C\)"),
    ("pystr", r"`'a' < 3`: TypeError: '<' not supported between instances of 'str' and 'int'"),
])
def test_operators_on_whole_tiles_are_refused_at_their_line(form, message):
    """`if F > 0:` on a tile crashed with Python's bare TypeError ('>' not supported between 'Buffer' and 'int'),
    as did any failing comparison of Python values; `F == 0` compared the buffer object (False: the else branch,
    silently); `F * 2` and `F @ G` gave Python's 'unsupported operand type(s)'. Each is now an error at its line
    naming the tile and what to write instead."""
    with pytest.raises(TilecTypeError, match=message) as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                F = T.alloc_fragment((4,), "float32")
                T.copy(A, F)
                if form == "gt":
                    if F > 0:  # tile-op-gt
                        T.copy(F, B)
                elif form == "eq":
                    if F == 0:  # tile-op-eq
                        T.copy(F, B)
                elif form == "mul":
                    T.copy(F * 2, B)  # tile-op-mul
                elif form == "matmul":
                    T.copy(F @ F, B)  # tile-op-matmul
                elif "a" < 3:  # tile-op-pystr
                    T.copy(F, B)

    assert_points_at(ei.value, f"tile-op-{form}")


@pytest.mark.parametrize("op, message", [
    ("gemm", r"T.gemm: transpose_B must be True or False, got str 'False'"),
    ("reduce", r"T.reduce_sum: clear must be True or False, got str 'False'"),
    ("cumsum", r"T.cumsum: reverse must be True or False, got str 'no'"),
    ("k_pack", r"T.gemm: k_pack must be an int >= 1, got 'x'"),
    ("dim", r"T.reduce_sum: dim must be an int in \[-2, 2\) for .* got True"),
])
def test_tile_op_options_of_the_wrong_kind_are_refused(op, message):
    """transpose_B="False" was taken by its Python truth (a non-empty string: True), so the gemm transposed B and
    returned a wrong product without a word; likewise clear="False" cleared and reverse="no" reversed; k_pack="x"
    failed inside int() ('invalid literal for int()'), and dim=True reduced dimension 1. Each is now an error at the
    op's line naming the option."""
    with pytest.raises(TilecTypeError if op != "dim" else TilecValueError, match=message) as ei:

        @T.prim_func
        def main(A: T.Tensor((16, 16), "float16"), C: T.Tensor((16, 16), "float32")):
            with T.Kernel(1, threads=32) as bx:
                a = T.alloc_shared((16, 16), "float16")
                c = T.alloc_fragment((16, 16), "float32")
                r = T.alloc_fragment((16,), "float32")
                T.copy(A, a)
                T.copy(A, c)
                if op == "gemm":
                    T.gemm(a, a, c, transpose_B="False")  # flag-gemm
                elif op == "reduce":
                    T.reduce_sum(c, r, dim=1, clear="False")  # flag-reduce
                elif op == "cumsum":
                    T.cumsum(c, dim=1, reverse="no")  # flag-cumsum
                elif op == "k_pack":
                    T.gemm(a, a, c, k_pack="x")  # flag-k_pack
                else:
                    T.reduce_sum(c, r, dim=True)  # flag-dim
                T.copy(c, C)

    assert_points_at(ei.value, f"flag-{op}")


def test_numpy_bools_and_ints_as_tile_op_options(rng):
    """numpy values (read from a config array) are taken as the bools and ints they are: dim=np.int64(1) was
    refused ('dim must be an int ... got 1')."""
    from conftest import poisoned

    @T.prim_func
    def main(A: T.Tensor((16, 16), "float16"), B: T.Tensor((16, 16), "float16"), C: T.Tensor((16, 16), "float32"),
             R: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            a = T.alloc_shared((16, 16), "float16")
            b = T.alloc_shared((16, 16), "float16")
            c = T.alloc_fragment((16, 16), "float32")
            r = T.alloc_fragment((16,), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.fill(c, 7.0)
            T.gemm(a, b, c, transpose_B=np.bool_(True), clear_accum=np.bool_(True))
            T.reduce_sum(c, r, dim=np.int64(1), clear=1)
            T.copy(c, C)
            T.copy(r, R)

    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    c, r = poisoned((16, 16), "float32"), poisoned((16,), "float32")
    tilec.compile(main, target="cpu")(a, b, c, r)
    want = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(r, want.sum(axis=1), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("form, what", [
    ("fstring", r"`bx` in an f-string"), ("format", r"format\(\) of bx"), ("str", r"str\(\) of bx")])
def test_text_made_of_a_kernel_value_is_refused_at_its_line(form, what):
    """T.print(A[bx], f"block {bx}: ") printed 'block bx: ' from every block: the f-string was formatted once, when
    the kernel was parsed, with the expression's text (likewise "...".format(bx) and str(bx)). Now an error at the
    line naming T.print's value argument."""
    with pytest.raises(TilecTypeError, match=what + r" makes text of a kernel value when the kernel is parsed: the "
                                                    r"text is the expression 'bx', not its value at run time") as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(2, threads=32) as bx:
                if form == "fstring":
                    T.print(A[bx], f"block {bx}: ")  # text-fstring
                elif form == "format":
                    T.print(A[bx], "block {}: ".format(bx))  # noqa: UP032  # text-format
                else:
                    T.print(A[bx], "block " + str(bx))  # text-str

    assert_points_at(ei.value, f"text-{form}")


def test_fstrings_of_python_values_format_at_parse_time(capsys):
    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            T.print(A[1], f"scale {0.5:.3f} {'x'!r} {len(A.shape)}:")

    tilec.compile(main, target="cpu")(np.arange(4, dtype=np.float32))
    assert "scale 0.500 'x' 1: 1.0" in capsys.readouterr().out


@T.macro
def _fill_down(A, n):
    A[n % 4] = 1.0
    _fill_down(A, n - 1)  # the stop (`if n > 0:`) is missing


def test_a_macro_that_never_stops_calling_itself_is_an_error_at_its_call():
    """A macro calling itself with no compile-time stop crashed with Python's RecursionError from deep inside the
    parser; now an error naming the macro at the kernel's call."""
    with pytest.raises(TilecSyntaxError, match=r"macro '_fill_down' expands without end: its macro calls nest deeper "
                                               r"than Python's recursion limit") as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                _fill_down(A, 3)  # endless-macro

    assert_points_at(ei.value, "endless-macro")


def test_calling_a_prim_func_says_to_compile_it():
    """main(a) on a @T.prim_func failed with Python's "'PrimFunc' object is not callable"; the error now says how to
    run it."""

    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            A[0] = 1.0

    with pytest.raises(TilecTypeError, match=r"'main' is a @T.prim_func, the kernel's IR, which does not run by "
                                             r"itself: compile it, kernel = tilec.compile\(main, target=...\)"):
        main(np.zeros(4, np.float32))


@pytest.mark.parametrize("form, message", [
    ("float-step", r"T.serial: step must be a non-zero Python int, got 2.0"),
    ("bool-step", r"T.unroll: step must be a non-zero Python int, got True"),
    ("float-threads", r"T.Kernel: threads must be a positive int or up to 3 of them, got 32.0"),
    ("bool-threads", r"T.Kernel: threads must be a positive int or up to 3 of them, got True"),
    ("bool-extent", r"T.Parallel: extents must be ints, got True"),
])
def test_loop_and_launch_numbers_of_the_wrong_kind_are_refused(form, message):
    """T.serial(0, 8, 2.0) made float loop indices and failed at the first index ('buffer A indexed with a float32
    value'), not naming the step; a bool step, threads=True (one thread) and T.Parallel(True) (one iteration) were
    taken as 1; threads=32.0 failed with "'float' object is not iterable". Each now names the argument."""
    with pytest.raises(TilecTypeError, match=message) as ei:

        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            threads = {"float-threads": 32.0, "bool-threads": True}.get(form, 32)
            with T.Kernel(1, threads=threads):  # kernel-line
                if form == "float-step":
                    for i in T.serial(0, 8, 2.0):  # loop-float-step
                        A[i] = 1.0
                elif form == "bool-step":
                    for i in T.unroll(0, 8, True):  # loop-bool-step
                        A[i] = 1.0
                else:
                    for i in T.Parallel(True):  # loop-bool-extent
                        A[i] = 1.0

    assert_points_at(ei.value, "kernel-line" if "threads" in form else f"loop-{form}")


def test_numpy_ints_as_loop_steps_and_thread_counts(rng):
    """threads=np.int64(32) was refused ("'numpy.int64' object is not iterable"); numpy steps are taken too."""
    from conftest import poisoned

    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=np.int64(32)) as bx:
            for i in T.serial(np.int64(1), np.int64(8), np.int64(3)):
                B[i] = A[i] * 2.0

    a = rng.standard_normal(8).astype(np.float32)
    b = poisoned(8, "float32")
    tilec.compile(main, target="cpu")(a, b)
    want = np.full(8, np.nan, np.float32)
    want[1::3] = 2 * a[1::3]
    np.testing.assert_array_equal(b, want)


def test_pipelined_stage_and_order_of_the_wrong_form_say_what_is_wrong():
    """stage=1 (an int, not a list) failed with "'int' object is not iterable"; order=[0, 0] on a two-statement body
    said stage and order needed one entry per statement (2) when both had two: the fault is that order is no
    permutation."""
    with pytest.raises(TilecTypeError, match=r"T.Pipelined: stage must be a list of ints >= 0, got 1 \(one entry per "
                                             r"statement of the loop body\)"):
        T.Pipelined(4, num_stages=2, stage=1)

    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Pipelined(8, num_stages=2, stage=[0, 0], order=[0, 0]):  # not-a-permutation
                B[i] = A[i]
                B[i] = B[i] + 1.0

    with pytest.raises(TilecValueError, match=r"order must give each statement of the loop body its own place, 0 to 1 "
                                              r"\(a permutation\), got order=\[0, 0\]") as ei:
        tilec.compile(main, target="cpu").report()
    assert_points_at(ei.value, "not-a-permutation")


@pytest.mark.parametrize("form, message", [
    ("cast", r"T.cast\(value, dtype\): the dtype argument is the kernel value A\[i\]; the arguments are the other way "
             r"round \(T.cast\(x, 'float16'\); T.Cast takes the dtype first\)"),
    ("Cast", r"T.Cast\(dtype, value\): the dtype argument is the kernel value A\[i\]; the arguments are the other way "
             r"round \(T.Cast\('float16', x\); T.cast takes the value first\)"),
])
def test_cast_with_its_arguments_swapped_says_so(form, message):
    """T.cast("int32", A[i]) (T.Cast's order) failed with numpy's "Could not convert <Load A[i]: float32> to a NumPy
    dtype"; the error now says the arguments are swapped."""
    with pytest.raises(TilecTypeError, match=message) as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "int32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(4):
                    if form == "cast":
                        B[i] = T.cast("int32", A[i])  # swapped-cast
                    else:
                        B[i] = T.Cast(A[i], "int32")  # swapped-Cast

    assert_points_at(ei.value, f"swapped-{form}")


def test_tilec_jit_over_a_prim_func_compiles_it_and_other_misuse_is_named(rng):
    """@tilec.jit stacked on a @T.prim_func (as TileLang allows) failed with 'expected a Python function, got
    PrimFunc': it now gives the compiled kernel. @tilec.jit("cpu") (the target by position) failed the same way at
    the decorator: the error now says to pass it by keyword."""
    from conftest import poisoned

    @tilec.jit(target="cpu", out_idx=[-1])
    @T.prim_func
    def double(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                B[i] = A[i] * 2.0

    a = rng.standard_normal(8).astype(np.float32)
    np.testing.assert_array_equal(double(a), 2 * a)
    b = poisoned(8, "float32")

    @tilec.jit(target="cpu")
    @T.prim_func
    def double_in_place(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                B[i] = A[i] * 2.0

    assert double_in_place(a, b) is None
    np.testing.assert_array_equal(b, 2 * a)
    with pytest.raises(TilecTypeError, match=r"tilec.jit takes its options by keyword: @tilec.jit\(target='cpu'\)"):

        @tilec.jit("cpu")
        def factory(n):
            return None

    with pytest.raises(TilecTypeError, match=r"tilec.jit decorates a Python function \(a kernel factory returning a "
                                             r"@T.prim_func, or an eager kernel\) or a @T.prim_func, got int 3"):
        tilec.jit(3)


@pytest.mark.parametrize("form, message", [
    ("t-exp-tile", r"T.exp works on scalar values, got the tile F: apply it to its elements in a T.Parallel loop "
                   r"\(T.exp\(F\[i\]\)\)"),
    ("t-max-tile", r"T.max works on scalar values, got the tile F"),
    ("math-exp", r"calling math.exp: TypeError: must be real number, not Load; A\[i\] is a kernel value, which a "
                 r"Python function gets as an expression when the kernel is parsed, not as a number: use T.\* "
                 r"functions on kernel values"),
    ("np-exp", r"calling numpy.exp: TypeError: .*; A\[i\] is a kernel value, which a Python function gets as an "
               r"expression"),
])
def test_math_on_tiles_and_python_math_on_kernel_values_say_what_to_use(form, message):
    """T.exp(F) on a tile said only 'expected a scalar expression or a number, got Buffer F'; math.exp(A[i]) and
    np.exp(A[i]) gave Python's errors ('must be real number, not Load'). Each now says what to use instead."""
    import math

    with pytest.raises(TilecTypeError, match=message) as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                F = T.alloc_fragment((4,), "float32")
                T.copy(A, F)
                if form == "t-exp-tile":
                    F = T.exp(F)  # math-t-exp-tile
                elif form == "t-max-tile":
                    B[0] = T.max(F, 0.0)  # math-t-max-tile
                else:
                    for i in T.Parallel(4):
                        if form == "math-exp":
                            B[i] = math.exp(A[i])  # math-math-exp
                        else:
                            B[i] = np.exp(A[i])  # math-np-exp

    assert_points_at(ei.value, f"math-{form}")


@pytest.mark.parametrize("form", ["list", "dict", "array"])
def test_a_python_container_indexed_by_a_kernel_value_says_so(form):
    """`scales[k]` with k a run-time loop index failed with Python's 'list indices must be integers or slices, not
    Var' (a dict: "KeyError: <Var k: int32>"; a numpy array: 'only integers, slices ... are valid indices'), which
    did not say that the container is indexed when the kernel is parsed. Now it does, and what to write instead."""
    table = {"list": [1.0, 2.0, 3.0, 4.0], "dict": {k: k + 1.0 for k in range(4)},
             "array": np.arange(1.0, 5.0)}[form]
    kind = {"list": "list", "dict": "dict", "array": "ndarray"}[form]
    with pytest.raises(TilecTypeError, match=rf"`table\[k\]`: table is a Python {kind}, indexed when the kernel is "
                                             r"parsed, but the index k is a kernel value, known only when the kernel "
                                             r"runs .* \(`for k in list\(range\(n\)\)` unrolls\)") as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for k in range(4):
                    A[k] = A[k] * table[k]  # table-index

    assert_points_at(ei.value, "table-index")


def test_eager_const_symbols_misused_say_how_to_write_them():
    """`A: T.Tensor[[N * 2], ...]` with N a T.const bound by that annotation failed with Python's "unsupported
    operand type(s) for *: 'ConstSymbol' and 'int'"; T.const(8) with "'int' object has no attribute 'replace'" and
    T.const("") gave an empty tuple (a 'dimension ()' error later)."""

    @tilec.jit(target="cpu")
    def f(A):
        N = T.const("N")
        A: T.Tensor[[N * 2], T.float32]  # const-expr
        B = T.empty((N,), "float32")
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(N):
                B[i] = A[2 * i]
        return B

    with pytest.raises(TilecTypeError, match=r"the T.const 'N' is bound by this annotation from the argument's shape, "
                                             r"so a dimension must be the symbol itself") as ei:
        f(np.ones(8, np.float32))
    assert_points_at(ei.value, "const-expr")
    for names in (8, "", "M 2N"):
        with pytest.raises(TilecTypeError, match=r"T.const takes the names of its symbols in one string"):
            T.const(names)


def test_tilelang_loop_options_are_honoured_or_noted(tmp_path):
    """T.Parallel(coalesced_width=...), T.unroll(unroll_factor=..., explicit=...) and the annotations={...} of
    T.serial / T.unroll / T.vectorized were accepted and dropped (or kept and ignored): no effect and no word. A
    free loop's coalesced_width now sets the run of elements a thread takes (an error naming it and the line where
    it cannot), unroll_factor gives `#pragma unroll N`, and what tilec has no use for is kept in the IR and noted
    in the report, naming the keyword and the line; an annotation key tilec uses itself is refused."""
    import numpy as np

    from tilec.errors import TilecValueError

    src = '''
import tilec.language as T


@T.prim_func
def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((128, 64), "float16")):
    with T.Kernel(1, threads=128) as bx:
        F = T.alloc_fragment((128, 64), "float32")
        for i, j in T.Parallel(128, 64, coalesced_width=2):
            B[i, j] = A[i, j] * 2.0
        for i, j in T.Parallel(128, 64):
            F[i, j] = A[i, j]
        for i, j in T.Parallel(128, 64, coalesced_width=4):
            B[i, j] = B[i, j] + F[i, j]
        for k in T.unroll(8, unroll_factor=2, explicit=True):
            B[0, k] = B[0, k] + 1.0
        for k in T.serial(2, annotations={"pragma_x": 1}):
            for v in T.vectorized(2, annotations={"lanes": 2}):
                B[1, k * 2 + v] = B[1, k * 2 + v] + 1.0
'''
    path = tmp_path / "kernel_opts.py"
    path.write_text(src)
    env: dict = {}
    exec(compile(src, str(path), "exec"), env)
    main = env["main"]
    text = str(main)
    assert "T.Parallel(128, 64, coalesced_width=2)" in text and "T.unroll(8, unroll_factor=2, explicit=True)" in text
    assert "T.serial(2, annotations={'pragma_x': 1})" in text and "T.vectorized(2, annotations={'lanes': 2})" in text
    jk = tilec.JITKernel(main, "cuda:sm_80")
    source, report = jk.get_kernel_source(), jk.report()
    loop = jk.state.artifacts["layout_inference"].loops[jk.ftg.node("n0")["op"]]
    threads, _ = loop.eval_tables()
    assert [int(threads[0, j, 0]) for j in range(4)] == [0, 0, 1, 1], "runs of 2 elements a thread"
    assert "#pragma unroll 2\n" in source
    for note in ("T.Parallel at line 13: coalesced_width=4 has no effect: the loop runs on a layout it does not "
                 "choose (from F)",
                 "T.unroll at line 15: explicit=True is accepted for TileLang compatibility and has no effect",
                 "T.serial at line 17: annotations={'pragma_x': 1} are accepted for TileLang compatibility and have "
                 "no effect",
                 "T.vectorized at line 18: annotations={'lanes': 2} are accepted"):
        assert f"note: {note}" in report, report
    assert "line 9: coalesced_width" not in report
    a = np.random.default_rng().standard_normal((128, 64)).astype(np.float16)
    want = a.astype(np.float64) * 3.0
    want[0, :8] += 1.0
    want[1, :4] += 1.0
    for target in ("simt:sm_80", "cpu"):
        b = np.full((128, 64), np.nan, np.float16)
        tilec.compile(main, target=target)(a, b)
        np.testing.assert_allclose(b, want, rtol=2e-3, atol=2e-3)

    bad = src.replace("coalesced_width=2", "coalesced_width=3")
    path.write_text(bad)
    exec(compile(bad, str(path), "exec"), env)
    with pytest.raises(TilecValueError, match=r"T.Parallel\(coalesced_width=3\): runs of 3 consecutive elements "
                                              r"of the innermost extent 64") as ei:
        tilec.JITKernel(env["main"], "cuda:sm_80").get_kernel_source()
    assert ei.value.loc.file == str(path) and ei.value.loc.line == 9
    for stmt, message in (("T.serial(2, annotations={'lets': 1})", "tilec uses the annotation 'lets' itself"),
                          ("T.unroll(2, unroll_factor=0)", "unroll_factor must be an int >= 1, got 0"),
                          ("T.Parallel(2, coalesced_width=2.0)", "coalesced_width must be an int >= 1, got 2.0")):
        bad = src.replace("T.serial(2, annotations={\"pragma_x\": 1})", stmt)
        path.write_text(bad)
        with pytest.raises(tilec.TilecError, match=re.escape(message)) as ei:
            exec(compile(bad, str(path), "exec"), env)
        assert ei.value.loc.file == str(path) and ei.value.loc.line == 17, ei.value


def test_wgmma_and_tma_asked_for_where_they_cannot_be_are_noted():
    """pass_configs={'tma': True} (or 'wgmma') on a target without them (sm_80, AMD, the interpreter) was ignored
    without a word, though the report says why a config is declined; the environment's defaults (TILEC_WGMMA) and
    sm_90a, or False, add no note."""
    from conftest import load_example

    func = load_example("01_gemm").matmul.fn(256, 256, 128, block_M=128, block_N=128, block_K=32, num_stages=2)
    for target in ("cuda:sm_80", "simt:gfx90a", "cpu"):
        report = tilec.compile(func, target, [-1], pass_configs={"tma": True, "wgmma": True}).report()
        why = "the CPU interpreter runs the tile program as written" if target == "cpu" else \
            "wgmma and TMA need sm_90a"
        for k in ("wgmma", "tma"):
            assert f"note: pass config '{k}' has no effect on {target}: {why}" in report, report
        for configs in (None, {"tma": False}):
            assert "has no effect" not in tilec.compile(func, target, [-1], pass_configs=configs).report()
    assert "has no effect" not in tilec.compile(func, "cuda:sm_90a", [-1], pass_configs={"tma": True}).report()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"use_tma": True}, r"T.atomic_add: use_tma=True \(the TMA reduce path\) is not supported; tilec adds the tile "
                        r"with one atomic add per element"),
    ({"use_tma": "no"}, r"T.atomic_add: use_tma must be True or False, got str 'no'"),
])
def test_atomic_add_use_tma_is_refused(kwargs, message):
    """T.atomic_add(..., use_tma=True) was accepted and dropped: the tile was added element by element with no word
    that the TMA reduce path asked for was not taken. It is refused at the user's line; use_tma=False stays."""
    with pytest.raises(TilecTypeError, match=r"test_errors.py:\d+:\d+: " + message):

        @T.prim_func
        def main(A: T.Tensor((16, 16), "float32"), C: T.Tensor((16, 16), "float32")):
            with T.Kernel(1, threads=32) as bx:
                C_f = T.alloc_fragment((16, 16), "float32")
                T.copy(A, C_f)
                T.atomic_add(C, C_f, **kwargs)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"warp_id": 1}, r"T.print: warp_id=1 is not supported: tilec prints a shared or global buffer and a scalar from "
                     r"thread 0 of the block, and each fragment element from the thread that holds it"),
    ({"warp_group_id": 1}, r"T.print: warp_group_id=1 is not supported"),
    ({"warp_id": "1"}, r"T.print: warp_id must be an int, got str '1'"),
])
def test_print_warp_selection_is_refused(kwargs, message):
    """T.print(buf, warp_id=1) / warp_group_id=1 were accepted and dropped: TileLang prints from thread
    warp_group_id * 128 + warp_id * 32, tilec printed from thread 0 all the same. A value other than 0 is refused at
    the user's line (0, the default, stays)."""
    with pytest.raises(TilecTypeError, match=r"test_errors.py:\d+:\d+: " + message):

        @T.prim_func
        def main(A: T.Tensor((16, 16), "float32")):
            with T.Kernel(1, threads=256) as bx:
                A_s = T.alloc_shared((16, 16), "float32")
                T.copy(A, A_s)
                T.print(A_s, msg="tile", **kwargs)


def test_print_default_warp_selection_is_accepted():
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=256) as bx:
            A_s = T.alloc_shared((16, 16), "float32")
            T.copy(A, A_s)
            T.print(A_s, msg="tile", warp_group_id=0, warp_id=0)

    assert "T.print" in str(main)


def test_jit_tilelang_options_are_noted_in_the_report():
    """tilec.jit(compile_flags=[...], verbose=True, execution_backend=..., debug_root_path=...) were accepted and
    dropped with no word: a port asking for --use_fast_math got tilec's own options silently. Each is noted in the
    kernel's report (lazy, eager and @T.prim_func forms), naming the keyword and its value; TileLang's defaults
    (verbose=False, compile_flags=None, ...) are not noted."""
    def factory(n):
        @T.prim_func
        def copy1(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(n):
                    B[i] = A[i]

        return copy1

    opts = {"compile_flags": ["--use_fast_math"], "verbose": True, "execution_backend": "cython",
            "debug_root_path": "/tmp/tl"}
    lazy = tilec.jit(target="cpu", **opts)(factory)(16)
    direct = tilec.jit(factory(16), target="cpu", **opts)
    a = np.arange(16, dtype=np.float32)

    @tilec.jit(target="cpu", compile_flags=["-O3"])
    def eager(A):
        n = T.const("n")
        A: T.Tensor[[n], T.float32]
        B = T.empty((n,), "float32")
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(n):
                B[i] = A[i]
        return B

    np.testing.assert_array_equal(eager(a), a)
    for kernel in (lazy, direct):
        report = kernel.report()
        for k, v in opts.items():
            assert f"note: tilec.jit: {k}={v!r} is accepted for TileLang compatibility and has no effect" in report, \
                report
    assert "note: tilec.jit: compile_flags=['-O3'] is accepted" in eager.get_kernel(a).report()
    quiet = tilec.jit(target="cpu", verbose=False, compile_flags=None, execution_backend="auto")(factory)(16)
    assert "tilec.jit:" not in quiet.report()


@pytest.mark.parametrize(("call", "message"), [
    ("T.use_swizzle(True)", r"T.use_swizzle: panel_size must be a positive int, got True"),
    ("T.use_swizzle(4, enable='no')", r"T.use_swizzle: enable must be True or False, got str 'no'"),
    ("T.use_swizzle(4, order=None)", r"T.use_swizzle: order must be 'row' or 'column', got None"),
])
def test_use_swizzle_refuses_values_taken_by_their_truth(tmp_path, call, message):
    """T.use_swizzle(True) swizzled in panels of 1 block, and enable='no' (or any string) turned swizzling on: a
    bool is no panel size and enable is a flag. Both are refused at the user's line, naming the parameter."""
    src = f'''
import tilec.language as T


@T.prim_func
def main(A: T.Tensor((16,), "float32")):
    with T.Kernel(4, 4, threads=32) as (bx, by):
        {call}
        A[0] = 1.0
'''
    path = tmp_path / "swz.py"
    path.write_text(src)
    with pytest.raises(TilecTypeError, match=re.escape(f"{path}:8:9: ") + message):
        exec(compile(src, str(path), "exec"), {})


def test_dynamic_takes_names_as_tilelang_does(rng):
    """T.dynamic("M, N") (TileLang's form for several sizes) made one symbol named 'M, N' (`M, N = ...` raised a
    bare TypeError, cannot unpack), and T.dynamic(3) made one whose str() raised TypeError. Names separated by
    commas or spaces now give one symbol each (as T.const's), and a name that is no identifier is refused naming
    it."""
    with pytest.raises(TilecTypeError, match=r"T.dynamic takes the names of its sizes in one string, separated by "
                                             r"spaces or commas \(M, N = T.dynamic\(\"M, N\"\)\), got 3"):
        T.dynamic(3)
    with pytest.raises(TilecTypeError, match=r"T.dynamic takes .* got '1M'"):
        T.dynamic("1M")
    M, N = T.dynamic("M, N")
    assert (M.name, N.name, T.dynamic("K").name) == ("M", "N", "K")

    @T.prim_func
    def add1(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=32) as bx:
            for j in T.serial(N):
                B[bx, j] = A[bx, j] + 1.0

    for target, (m, n) in (("cpu", (3, 5)), ("simt:sm_80", (4, 2))):
        a = rng.standard_normal((m, n)).astype(np.float32)
        b = np.full((m, n), np.nan, np.float32)
        tilec.compile(add1, target=target)(a, b)
        np.testing.assert_allclose(b, a.astype(np.float64) + 1.0, rtol=1e-6)


@pytest.mark.parametrize(("value", "message"), [
    ("'x'", r"T.gemm: wg_wait must be an int >= -1 \(TileLang's count of wgmma groups left in flight\), got 'x'"),
    ("-2", r"T.gemm: wg_wait must be an int >= -1 .*, got -2"),
    ("True", r"T.gemm: wg_wait must be an int >= -1 .*, got True"),
])
def test_gemm_wg_wait_of_the_wrong_kind_is_refused(tmp_path, value, message):
    """T.gemm's wg_wait is accepted and needs nothing (tilec places the wgmma waits itself), but any value was:
    wg_wait='x' parsed silently. A value TileLang would not take is refused at the user's line, naming it."""
    src = f'''
import tilec.language as T


@T.prim_func
def main(A: T.Tensor((16, 16), "float16"), C: T.Tensor((16, 16), "float32")):
    with T.Kernel(1, threads=128) as bx:
        A_s = T.alloc_shared((16, 16), "float16")
        C_f = T.alloc_fragment((16, 16), "float32")
        T.copy(A, A_s)
        T.gemm(A_s, A_s, C_f, clear_accum=True, wg_wait={value})
        T.copy(C_f, C)
'''
    path = tmp_path / "wgw.py"
    path.write_text(src)
    with pytest.raises(TilecTypeError, match=re.escape(f"{path}:11:9: ") + message):
        exec(compile(src, str(path), "exec"), {})


# ------------------------------------------------------------------------------------- T.ceildiv, T.macro, tilec.jit


def test_ceildiv_of_numbers_takes_integers_only():
    """``T.ceildiv(16, 2.5)`` returned 7.0 (refused later, far from the call, wherever an int was needed), and
    ``T.ceildiv(16, 0)`` raised a bare ZeroDivisionError."""
    assert T.ceildiv(16, 3) == 6 and type(T.ceildiv(np.int64(16), 3)) is int
    for args, name in (((16, 2.5), "b"), ((16.0, 2), "a"), ((True, 2), "a"), (("16", 2), "a")):
        bad = args[0] if name == "a" else args[1]
        msg = rf"T.ceildiv: {name} must be an integer, got \w+ {re.escape(repr(bad))}"
        with pytest.raises(TilecTypeError, match=msg):
            T.ceildiv(*args)
    with pytest.raises(TilecValueError, match=r"T.ceildiv\(16, 0\): b must not be 0") as ei:
        T.ceildiv(16, 0)  # ceildiv-by-zero
    assert ei.value.loc is not None and ei.value.loc.line == line_of("ceildiv-by-zero")  # the caller's line


def test_ceildiv_in_a_jit_factory_names_the_factorys_line():
    """A factory's block size of 0 (``softmax(5, 100, block_N=0)``) raised ``T.ceildiv(100, 0): b must not be 0``
    with no location: the call is plain Python before the kernel, so the error names its file:line."""

    @tilec.jit(out_idx=[-1])
    def scale(N, block_N=64):
        tiles = T.ceildiv(N, block_N)  # ceildiv-in-factory

        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(tiles, threads=32) as bx:
                for i in T.Parallel(block_N):
                    B[bx * block_N + i] = A[bx * block_N + i] * 2.0

        return main

    with pytest.raises(TilecValueError, match=r"test_errors.py:\d+:\d+: T.ceildiv\(100, 0\): b must not be 0") as ei:
        scale(100, block_N=0)
    assert ei.value.loc.line == line_of("ceildiv-in-factory")


def test_ceildiv_of_a_float_variable_in_a_kernel_is_refused_at_its_line():
    with pytest.raises(TilecTypeError, match="T.ceildiv: a must be an integer") as ei:

        @T.prim_func
        def main(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                n = T.alloc_var("float32")
                n = 3.0
                for i in T.serial(T.ceildiv(n, 2)):  # ceildiv-float-var
                    A[i] = 1.0

    assert_points_at(ei.value, "ceildiv-float-var")


def test_ceildiv_of_an_int_variable_in_a_kernel_runs(rng):
    @T.prim_func
    def main(A: T.Tensor((16,), "float32"), N: T.int32):
        with T.Kernel(1, threads=32) as bx:
            n = T.alloc_var("int32")
            n = N
            for i in T.serial(T.ceildiv(n, 2)):
                A[i] = 1.0

    n = int(rng.integers(1, 32))
    a = np.full(16, np.nan, np.float32)
    tilec.JITKernel(main, "cpu")(a, n)
    ref = np.full(16, np.nan, np.float32)
    ref[: -(-n // 2)] = 1.0
    np.testing.assert_array_equal(a, ref)


def test_macro_of_something_not_a_function_is_refused():
    with pytest.raises(TilecTypeError, match=r"T.macro decorates a Python function \(def ...\), got int 3"):
        T.macro(3)


@pytest.mark.parametrize(("target", "err", "match"), [
    (3, TilecTypeError, r"target must be a string such as 'cpu'.*got int 3"),
    ("cuda:sm_99", TilecValueError, r"target 'cuda:sm_99': unknown cuda architecture 'sm_99'"),
    ("gpu", TilecValueError, r"unknown target 'gpu'")])
def test_jit_refuses_a_wrong_target_at_the_decorator(target, err, match):
    """A wrong target was refused only at the first call of the kernel factory, far from the decorator."""
    with pytest.raises(err, match=match):

        @tilec.jit(target=target)
        def factory(n):
            return None

    with pytest.raises(err, match=match):
        tilec.jit(lambda n: None, target=target)


def test_bool_extremes_and_abs_of_a_string():
    """``T.max_value('bool')`` raised "Invalid integer data type 'b'" and ``T.abs('a')`` compared a string with 0;
    the extremes of bool are True and False, and abs of something not a number names what it got."""
    assert T.max_value("bool").value is True and T.min_value("bool").value is False
    with pytest.raises(TilecTypeError, match="T.abs.*expected a scalar expression or a number, got str 'a'") as ei:

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = T.abs("a")  # abs-of-str

    assert_points_at(ei.value, "abs-of-str")


def test_max_value_of_bool_in_a_kernel(rng):
    @T.prim_func
    def main(A: T.Tensor((4,), "bool")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.serial(4):
                A[i] = T.max_value("bool") if i % 2 == 0 else T.min_value("bool")

    a = rng.integers(0, 2, 4).astype(bool)
    a[:] = ~a  # whatever it held, the kernel writes every element
    tilec.JITKernel(main, "cpu")(a)
    np.testing.assert_array_equal(a, [True, False, True, False])


@pytest.mark.parametrize("arch", ["sm_70", "sm_100"])
def test_a_gpu_tilec_does_not_target_is_named(monkeypatch, arch):
    """target='cuda' takes the device's architecture; one outside tilec's list (since Target's constructor checks
    it) failed with 'target 'cuda:sm_100': unknown cuda architecture', which reads as if the user had asked for it.
    The error now says the GPU is not one tilec's CUDA backend targets, and what runs instead."""
    import tilec.backends.cuda.runtime as rt
    from tilec.errors import TilecRuntimeError

    monkeypatch.setattr(rt, "device_arch", lambda device=0: arch)

    @T.prim_func
    def main(A: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            A[0] = 1.0

    with pytest.raises(TilecRuntimeError, match=rf"the GPU is {arch}, which tilec's CUDA backend does not target "
                                                r"\(it builds for sm_80, .*sm_90a\); target='cpu' runs the kernel"):
        tilec.JITKernel(main, "cuda").build_target()


def test_target_cuda_without_a_gpu_says_it_reads_the_gpus_architecture(monkeypatch):
    """target='cuda' (no architecture) on a machine without an NVIDIA GPU failed at kernel.get_kernel_source(),
    report() and layouts with only 'the CUDA driver (libcuda.so.1) cannot be loaded', although those need no GPU once
    an architecture is named. The error now says that 'cuda' takes the GPU's architecture, that none is visible, and
    what to write instead."""
    import tilec.backends.cuda.driver as driver
    import tilec.backends.cuda.runtime as rt
    from tilec.errors import TilecRuntimeError

    def no_driver(device):
        raise TilecRuntimeError("the CUDA driver (libcuda.so.1) cannot be loaded: libcuda.so.1: cannot open shared "
                                "object file: No such file or directory")

    monkeypatch.setattr(driver, "compute_capability", no_driver)
    rt.device_arch.cache_clear()  # a GPU machine's architecture, read before, would hide the missing driver

    @T.prim_func
    def main(A: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            A[0] = 1.0

    kernel = tilec.JITKernel(main, "cuda")
    try:
        for what in (kernel.get_kernel_source, kernel.report):
            with pytest.raises(TilecRuntimeError, match=r"target 'cuda' compiles for the GPU's architecture, and no "
                                                        r"NVIDIA GPU is usable \(the CUDA driver \(libcuda.so.1\) "
                                                        r"cannot be loaded.*\): name one, target='cuda:sm_90a', .*"
                                                        r"'simt:sm_90a' or 'cpu'"):
                what()
    finally:
        rt.device_arch.cache_clear()


@pytest.mark.parametrize("form", ["tile", "element"])
def test_atomic_add_into_a_fragment_is_refused_at_its_line_on_every_target(form):
    """An atomic add into a fragment (memory no other thread sees) ran on the CPU interpreter as a plain add, while
    the GPU targets refused it only when lowering: the kernel is now refused where it is written, naming the buffer
    and its scope."""
    with pytest.raises(TilecTypeError, match=r"T.atomic_add: dst must be a global or shared buffer, got 'f' in "
                                             r"fragment memory") as ei:

        @T.prim_func
        def main(X: T.Tensor((16, 32), "float32")):
            with T.Kernel(1, threads=64) as bx:
                f = T.alloc_fragment((16, 32), "float32")
                T.clear(f)
                if form == "tile":
                    T.atomic_add(f, X)  # atomic-fragment-tile
                else:
                    T.atomic_add(f[0, 1], X[0, 1])  # atomic-fragment-element
                T.copy(f, X)

    assert_points_at(ei.value, f"atomic-fragment-{form}")
