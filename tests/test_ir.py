"""Unit tests of the Tile IR: expression builders, buffers and regions, printer, verifier, visitors, arithmetic."""

from __future__ import annotations

import textwrap

import ml_dtypes
import numpy as np
import pytest

from tilec import dtypes as dt
from tilec.errors import TilecTypeError, TilecValueError, TilecVerifyError
from tilec.ir import affine, arith
from tilec.ir.buffer import Buffer, Region, index_buffer
from tilec.ir.expr import BinOp, Cast, Const, Load, SizeVar, Var, binop, call, cast, ceildiv, const, select, unop
from tilec.ir.kernel import PrimFunc
from tilec.ir.printer import expr_str, print_func
from tilec.ir.stmt import Copy, Fill, For, KernelLaunch, Parallel, SeqStmt, Store
from tilec.ir.visit import substitute, transform, vars_in, walk
from tilec.passes.verify import verify

# ---------------------------------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize(
    "a, b, want",
    [
        (dt.float16, dt.float16, dt.float16),
        (dt.float16, dt.float32, dt.float32),
        (dt.float32, dt.float16, dt.float32),
        (dt.float16, dt.bfloat16, dt.float32),  # neither 16-bit float holds the other
        (dt.float8_e4m3, dt.float16, dt.float32),
        (dt.float8_e4m3, dt.float8_e5m2, dt.float32),
        (dt.float64, dt.float16, dt.float64),
        (dt.int32, dt.float16, dt.float16),  # an int with a float: the float
        (dt.float32, dt.int64, dt.float32),
        (dt.int8, dt.int32, dt.int32),
        (dt.int64, dt.int32, dt.int64),
        (dt.int32, dt.uint32, dt.int32),  # equal widths: the signed one
        (dt.uint8, dt.int8, dt.int8),
        (dt.uint8, dt.uint16, dt.uint16),
        (dt.boolean, dt.int8, dt.int8),
        (dt.int32, dt.boolean, dt.int32),
    ],
)
def test_promote(a, b, want):
    assert dt.promote(a, b) is want


def test_dtype_names_resolve():
    assert dt.dtype("half") is dt.float16
    assert dt.dtype(np.float16) is dt.float16
    assert dt.dtype(np.dtype(ml_dtypes.bfloat16)) is dt.bfloat16
    assert dt.dtype("float8_e4m3fn") is dt.float8_e4m3
    assert dt.dtype(dt.int4) is dt.int4
    with pytest.raises(TypeError, match="unsupported dtype 'complex64'; expected one of: float64"):
        dt.dtype("complex64")


def test_ml_dtypes_ieee_float8_e4m3_is_not_tilecs_e4m3():
    """ml_dtypes.float8_e4m3 is the IEEE-style e4m3 (infinities, largest finite 240), whose numpy name is tilec's
    name for CUDA's e4m3fn (no infinities, largest 448): it resolved to float8_e4m3, so its arrays were read as the
    other format (the byte 0x78 is inf in one, 256 in the other)."""
    assert dt.dtype(ml_dtypes.float8_e4m3fn) is dt.float8_e4m3
    assert dt.dtype(np.dtype(ml_dtypes.float8_e5m2)) is dt.float8_e5m2
    with pytest.raises(TypeError, match=r"unsupported dtype .*\(float8_e4m3 here is ml_dtypes.float8_e4m3fn\)"):
        dt.dtype(ml_dtypes.float8_e4m3)
    with pytest.raises(TypeError, match="unsupported dtype"):
        dt.dtype(np.dtype(ml_dtypes.float8_e4m3))


def test_wrap_int():
    assert [dt.wrap_int(v, dt.int4) for v in (7, 8, 9, -8, -9, 16)] == [7, -8, -7, -8, 7, 0]
    assert dt.wrap_int(300, dt.int8) == 44
    assert dt.wrap_int(-1, dt.uint8) == 255
    assert dt.wrap_int(2**31, dt.int32) == -(2**31)


# ----------------------------------------------------------------------------------------------- expressions


def test_binop_folds_constants_with_the_promoted_dtype():
    c = binop("+", const(2), const(3))
    assert isinstance(c, Const) and c.value == 5 and c.dtype is dt.int32
    f = binop("*", const(1.5, "float16"), 2)
    assert isinstance(f, Const) and f.value == 3.0 and f.dtype is dt.float16
    m = binop("//", -7, const(2))
    assert m.value == -4  # floor division, as in Python
    assert binop("%", -7, const(2)).value == 1
    assert binop("<", const(1), const(2)).dtype is dt.boolean
    assert binop("max", const(1), const(5.0)).value == 5.0


def test_binop_identities_and_coercion():
    i = Var("i")
    assert binop("+", i, 0) is i
    assert binop("*", 1, i) is i
    assert binop("-", i, 0) is i
    z = binop("*", i, 0)
    assert isinstance(z, Const) and z.value == 0
    x = Var("x", dt.float16)
    e = x * 2  # the Python number takes the float16 of the other operand
    assert isinstance(e, BinOp) and e.dtype is dt.float16 and e.b.dtype is dt.float16
    mixed = i + x  # int32 + float16 -> float16, the int operand cast
    assert mixed.dtype is dt.float16 and isinstance(mixed.a, Cast)
    cmp = i < 4
    assert cmp.dtype is dt.boolean
    with pytest.raises(TilecTypeError, match="has no Python truth value"):
        bool(cmp)


def test_int_true_division_is_an_error():
    i = Var("i")
    with pytest.raises(TilecTypeError, match=r"`/` on integers .* use `//`"):
        binop("/", i, 2)
    with pytest.raises(TilecTypeError):
        i / Var("j")
    assert (i / 2.0).dtype is dt.float32  # a float operand makes it a float division
    with pytest.raises(TilecTypeError, match="bitwise"):
        binop("&", Var("x", dt.float32), 1)


def test_cast_folds_with_the_target_rounding():
    assert cast("float16", 0.1).value == float(np.float16(0.1)) != 0.1
    assert cast("bfloat16", 1.00390625).value == 1.0  # 1 + 2**-8 rounds to even in bfloat16's 8-bit mantissa
    assert cast("float8_e4m3", 0.3).value == float(ml_dtypes.float8_e4m3fn(0.3))
    assert cast("float8_e5m2", 0.3).value == float(ml_dtypes.float8_e5m2(0.3))
    assert cast("int32", 2.7).value == 2 and cast("int32", -2.7).value == -2  # toward zero
    assert cast("int8", 300).value == 44  # wraps as the GPU conversion does
    assert cast("int4", 9).value == -7
    assert cast("float32", 3).dtype is dt.float32
    assert cast("bool", 5).value is True
    i = Var("i")
    assert cast("int32", i) is i
    assert isinstance(cast("float32", i), Cast)
    with pytest.raises(TilecTypeError, match="cannot cast inf"):
        cast("int32", float("inf"))


def test_select_call_unop_ceildiv():
    i = Var("i")
    s = select(i < 3, 1.0, 2)
    assert s.dtype is dt.float32 and expr_str(s) == "T.if_then_else(i < 3, 1.0, 2.0)"
    assert select(True, 1, 2).value == 1  # a constant condition folds
    assert call("exp", i).dtype is dt.float32  # integer arguments compute in float32
    assert call("abs", i).dtype is dt.int32
    assert call("isnan", Var("x", dt.float16)).dtype is dt.boolean
    with pytest.raises(TilecTypeError, match="takes 1 argument"):
        call("exp", i, i)
    assert unop("-", const(3)).value == -3
    assert unop("not", const(True)).value is False
    with pytest.raises(TilecTypeError, match="`~` needs an integer"):
        unop("~", Var("x", dt.float32))
    assert ceildiv(10, 4) == 3
    assert expr_str(ceildiv(i, 4)) == "(i + 3) // 4"  # an index, bounded by the grid
    assert expr_str(ceildiv(SizeVar("M"), 4)) == "M // 4 + (M % 4 + 3) // 4"  # no M + 3: it would wrap near 2**31


def test_ceildiv_expression_equals_the_ceiling_without_leaving_int32():
    """The expression T.ceildiv builds of a symbolic size equals (a + b - 1) // b under floor division, for every
    sign of a and b, and its intermediate values stay within int32 for a up to 2**31 - 1."""
    from tilec.ir.evaluate import eval_int

    a, b = SizeVar("a"), Var("b")
    e = ceildiv(a, b)
    for x in range(-20, 21):
        for y in [*range(-6, 0), *range(1, 7)]:
            assert eval_int(e, {a: x, b: y}) == (x + y - 1) // y, (x, y)
    def parts(x):
        return [x, *parts(x.a), *parts(x.b)] if isinstance(x, BinOp) else [x]

    top = 2**31 - 1
    for y in (2, 32, 2**30, top):
        assert eval_int(e, {a: top, b: y}) == -(-top // y)
        assert max(eval_int(p, {a: top, b: y}) for p in parts(e)) <= top


def test_expr_printing_precedence():
    i, j, k = Var("i"), Var("j"), Var("k")
    assert expr_str(i - (j - k)) == "i - (j - k)"
    assert expr_str((i - j) - k) == "i - j - k"
    assert expr_str((i + j) * k) == "(i + j) * k"
    assert expr_str(-(i + j)) == "-(i + j)"
    assert expr_str(binop("and", i < j, j < k)) == "i < j and j < k"
    assert expr_str(unop("not", binop("or", i < j, j < k))) == "not (i < j or j < k)"
    assert expr_str(binop("min", i, j + 1)) == "T.min(i, j + 1)"
    assert expr_str(cast("float16", i)) == 'T.cast(i, "float16")'
    assert expr_str(const(float("-inf"), "float32")) == '-T.infinity("float32")'


def test_comparison_of_comparisons_is_bracketed():
    """Python chains comparisons: `i < j == (k > 2)` reads as `i < j and j == (k > 2)`, so a comparison operand of
    a comparison is bracketed on either side (the left one printed bare)."""
    i, j, k = Var("i"), Var("j"), Var("k")
    assert expr_str(binop("==", i < j, k > 2)) == "(i < j) == (k > 2)"
    assert expr_str(binop("!=", binop("==", i, j), binop("==", j, k))) == "(i == j) != (j == k)"
    assert expr_str(binop("and", i < j, j < k)) == "i < j and j < k"
    assert expr_str(binop("<", i + j, k)) == "i + j < k"


# ----------------------------------------------------------------------------------------- buffers and regions


def test_index_buffer_element_and_regions():
    A = Buffer("A", (64, 128), dt.float16)
    i, j = Var("i"), Var("j")
    ld = A[i, j]
    assert isinstance(ld, Load) and ld.indices == (i, j) and ld.dtype is dt.float16
    r = A[0:16, j]
    assert isinstance(r, Region) and r.extents == (16, 1)
    full = A[:, :]
    assert full.extents == (64, 128) and full.is_full()
    assert A[16:, 0:8].extents == (48, 8)  # to the end of a dimension
    with pytest.raises(TilecTypeError, match="no static extent"):
        A[i * 4 :, 0:8]  # 64 - 4 * i is not static
    b = 32
    blk = A[i * b : (i + 1) * b, j * b : j * b + b]
    assert blk.extents == (32, 32) and all(isinstance(e, int) for e in blk.extents)
    assert str(blk) == "A[i * 32:i * 32 + 32, j * 32:j * 32 + 32]"
    assert A[0:64, 0:128].is_full() and not A[0:32, :].is_full()


def test_an_ellipsis_stands_for_the_dimensions_not_indexed():
    """`A[...]` (numpy: every dimension whole) was refused with 'indexed with 1' (or, on a 1-d buffer, 'expected a
    scalar expression or a number, got ellipsis Ellipsis')."""
    A = Buffer("A", (64, 128), dt.float16)
    B = Buffer("B", (4, 8, 16), dt.float16)
    x = Buffer("x", (), dt.float32, "var")
    i = Var("i")
    whole = index_buffer(A, ...)
    assert isinstance(whole, Region) and whole.is_full() and whole.extents == (64, 128)
    assert str(index_buffer(A, (i, ...))) == str(index_buffer(A, (i, slice(None))))
    assert str(index_buffer(B, (..., 3))) == "B[:4, :8, 3]"
    assert str(index_buffer(B, (1, ..., slice(2, 6)))) == "B[1, :8, 2:6]"
    assert str(index_buffer(B, (1, 2, ..., 3))) == "B[1, 2, 3]"  # an ellipsis of no dimension
    assert str(index_buffer(x, ...)) == "x"
    with pytest.raises(TilecTypeError, match=r"buffer 'B': an index can have only one ellipsis \(`...`\)"):
        index_buffer(B, (..., 1, ...))
    with pytest.raises(TilecTypeError, match=r"'B' has 3 dimension\(s\) \(4, 8, 16\), indexed with 4 indices and an "
                                             "ellipsis"):
        index_buffer(B, (1, 2, ..., 3, 4))


def test_index_buffer_errors():
    A = Buffer("A", (64, 128), dt.float16)
    i = Var("i")
    with pytest.raises(TilecTypeError, match=r"'A' has 2 dimension\(s\) \(64, 128\), indexed with 1"):
        index_buffer(A, i)
    with pytest.raises(TilecTypeError, match="step"):
        index_buffer(A, (slice(0, 8, 2), 0))
    with pytest.raises(TilecTypeError, match="not a compile-time constant"):
        index_buffer(A, (slice(i, i * 2), 0))
    with pytest.raises(TilecTypeError, match="indices must be integers"):
        index_buffer(A, (Var("x", dt.float32), 0))
    with pytest.raises(TilecValueError, match="scope"):
        Buffer("X", (4,), dt.float32, "registers")


def test_dynamic_dims_in_regions():
    M = SizeVar("M")
    A = Buffer("A", (M, 64), dt.float32)
    assert A.static_shape is None and A[:, :].extents == (M, 64)
    r = A[0:M, 0:64]
    assert r.extents[0] is M


# -------------------------------------------------------------------------------------------------- printer


def _two_k_loops() -> PrimFunc:
    A = Buffer("A", (8,), dt.float32)
    bx = Var("bx")
    k1, k2 = Var("k"), Var("k")
    s = Buffer("s", (8,), dt.float32, "shared")
    body = SeqStmt((
        For(k1, const(8), "serial", Store(s, (k1,), Load(A, (k1,)))),
        For(k2, const(4), "unroll", Store(A, (k2 * 2,), Load(s, (k2,)) + 1.0)),
        Fill(s[0:4], const(0.0)),
        Copy(s[:], A[:]),
    ))  # fmt: skip
    return PrimFunc("f", (A,), KernelLaunch((const(1),), (bx,), (128,), body, (s,)))


def test_printer_names_are_unique_and_deterministic():
    f = _two_k_loops()
    want = textwrap.dedent(
        """\
        @T.prim_func
        def f(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((8,), "float32")
                for k in T.serial(8):
                    s[k] = A[k]
                for k_1 in T.unroll(4):
                    A[k_1 * 2] = s[k_1] + 1.0
                T.fill(s[:4], 0.0)
                T.copy(s, A)
        """
    )
    assert print_func(f) == want
    assert str(f) == want  # the same text every time
    verify(f)


def test_printer_empty_bodies_print_pass():
    A = Buffer("A", (8,), dt.float32)
    k = Var("k")
    f = PrimFunc("g", (A,), KernelLaunch((const(2),), (Var("bx"),), (32,), For(k, const(3), "serial", SeqStmt(()))))
    assert "for k in T.serial(3):\n            pass\n" in str(f)


# ------------------------------------------------------------------------------------------------- verifier


def _kernel(body, allocs=(), params=None) -> PrimFunc:
    A = params[0] if params else Buffer("A", (8,), dt.float32)
    return PrimFunc("bad", tuple(params or (A,)), KernelLaunch((const(1),), (Var("bx"),), (128,), body, allocs))


def test_verify_unbound_variable():
    A = Buffer("A", (8,), dt.float32)
    j = Var("j")
    with pytest.raises(TilecVerifyError, match="variable 'j' is used outside its loop"):
        verify(_kernel(Store(A, (j,), const(1.0)), params=[A]))


def test_verify_buffer_not_allocated():
    A = Buffer("A", (8,), dt.float32)
    s = Buffer("s", (8,), dt.float32, "shared")
    with pytest.raises(TilecVerifyError, match="buffer 's' is neither a parameter nor allocated"):
        verify(_kernel(Copy(A[:], s[:]), params=[A]))


def test_verify_tile_op_inside_parallel():
    A = Buffer("A", (8,), dt.float32)
    s = Buffer("s", (8,), dt.float32, "shared")
    i = Var("i")
    bad = Parallel((i,), (8,), Fill(s[:], const(0.0)))
    with pytest.raises(TilecVerifyError, match="tile op fill inside T.Parallel"):
        verify(_kernel(bad, allocs=(s,), params=[A]))


def test_verify_wrong_index_count_and_dtype():
    A = Buffer("A", (8, 8), dt.float32)
    with pytest.raises(TilecVerifyError, match=r"'A' has 2 dimension\(s\) but is indexed with 1"):
        verify(_kernel(Store(A, (const(0),), const(1.0)), params=[A]))
    with pytest.raises(TilecVerifyError, match="stored value 1 has dtype int32, buffer 'A' is float32"):
        verify(_kernel(Store(A, (const(0), const(0)), const(1)), params=[A]))


def test_verify_region_outside_on_chip_buffer_and_stage_name():
    A = Buffer("A", (8,), dt.float32)
    s = Buffer("s", (4,), dt.float32, "shared")
    bad = Copy(A[0:8], Region(s, (const(0),), (8,)))
    with pytest.raises(TilecVerifyError, match=r"after stage 'lower'.*lies outside 's'"):
        verify(_kernel(bad, allocs=(s,), params=[A]), "lower")


def test_verify_double_binding():
    A = Buffer("A", (8,), dt.float32)
    k = Var("k")
    inner = For(k, const(2), "serial", Store(A, (k,), const(1.0)))
    with pytest.raises(TilecVerifyError, match="bound twice"):
        verify(_kernel(For(k, const(2), "serial", inner), params=[A]))


# --------------------------------------------------------------------------------------------------- visitors


def test_transform_returns_the_same_object_when_nothing_changes():
    f = _two_k_loops()
    assert transform(f.body, lambda n: None) is f.body
    assert transform(f.body, lambda n: n) is f.body


def test_transform_rebuilds_only_the_changed_path():
    f = _two_k_loops()
    seq = f.launch.body

    def bump(n):
        if isinstance(n, Const) and n.value == 1.0 and n.dtype is dt.float32:
            return const(2.0)
        return None

    new = transform(seq, bump)
    assert new is not seq
    assert new.stmts[0] is seq.stmts[0] and new.stmts[2] is seq.stmts[2]  # untouched statements are shared
    assert "s[k_1] + 2.0" in str(PrimFunc("f", f.params, KernelLaunch(f.launch.grid, f.launch.block_vars, (128,), new,
                                                                      f.launch.allocs)))


def test_substitute_and_walk():
    i, j = Var("i"), Var("j")
    e = i * 4 + i
    out = substitute(e, {i: j})
    assert vars_in(out) == [j, j] or set(map(id, vars_in(out))) == {id(j)}
    assert substitute(e, {}) is e
    assert substitute(e, {Var("i"): j}) is e  # identity, not name: another Var named i is not i
    A, B = Buffer("A", (4,), dt.float32), Buffer("B", (4,), dt.float32)
    st = Store(A, (i,), Load(A, (i,)))
    st2 = substitute(st, {A: B})
    assert st2.buffer is B and st2.value.buffer is B
    assert sum(1 for n in walk(e) if n is i) == 1  # a shared node is visited once


# ------------------------------------------------------------------------------------------ affine and arith


def test_affine_linear_forms():
    i, j = Var("i"), Var("j")
    f = affine.linear(3 * i + 2 * j - i + 4)
    assert f == {i: 2, j: 2, None: 4}
    assert affine.linear(i * j) is None
    assert affine.constant(i - i + 3) == 3
    assert affine.constant(i + 1) is None
    assert affine.fast_dim((i + 1) * 8 - i * 8) == 8
    assert affine.fast_dim(i + 0) is i
    assert affine.fast_dim(i * 2 - i) is i  # terms are collected
    assert affine.fast_dim(i * 2) is None  # not a single atom


def test_arith_simplify_const_int_bounds():
    i, j = Var("i"), Var("j")
    assert str(arith.simplify((i * 4 + 8) // 4)) == "i + 2"
    assert arith.simplify(binop("+", const(2), 3)) == 5
    assert arith.const_int((i + 1) * (j + 1) - i * j - i - j) == 1  # needs sympy's expansion
    assert arith.const_int(i * j) is None
    assert arith.const_int(7) == 7
    r = {i: (0, 3), j: (0, 15)}
    assert arith.bounds(i * 2 + 1, r) == (1, 7)
    assert arith.bounds(i * 16 + j, r) == (0, 63)
    assert arith.bounds(j % 4, r) == (0, 3)
    assert arith.bounds(j // 4 - i, r) == (-3, 3)
    assert arith.bounds(binop("min", i, j), r) == (0, 3)
    assert arith.bounds(i + Var("k"), r) is None
    assert arith.bounds(Var("k") % 32, r) == (0, 31)  # a floor modulo, whatever its dividend
    assert arith.bounds(Var("k") // 32 % 4 * 64 + j, r) == (0, 207)
    assert arith.bounds(Var("k") % Var("n"), r) is None
    assert arith.simplify_to_dim(i * 2 - i) is i
