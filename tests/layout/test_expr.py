"""Expression primitives, printing and the range-aware simplifier."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from tilec.layout import BitAnd, BitXor, FloorDiv, FloorMod, ShiftRight, bitand, bitxor, floordiv, floormod, shr
from tilec.layout.expr import index_symbols
from tilec.layout.printer import render
from tilec.layout.simplify import bounds, normalize, simplify_expr, unsafe_for_c

from .helpers import c_eval

i, j, k = index_symbols(3)


def test_helpers_on_ints_and_symbols() -> None:
    assert floordiv(17, 5) == 3 and floormod(17, 5) == 2
    assert bitxor(6, 3) == 5 and bitand(6, 3) == 2 and shr(17, 2) == 4
    assert isinstance(floordiv(i, 4), FloorDiv)
    assert isinstance(floormod(i, 4), FloorMod)
    assert isinstance(bitxor(i, j), BitXor)
    assert isinstance(bitand(i, j), BitAnd)
    assert isinstance(shr(i, 2), ShiftRight)


def test_functions_fold_on_integers() -> None:
    assert FloorDiv(17, 5) == 3 and FloorMod(17, 5) == 2
    assert BitXor(12, 10) == 6 and BitAnd(12, 10) == 8 and ShiftRight(12, 2) == 3
    assert BitXor(i, 0) == i and BitXor(i, i) == 0 and FloorDiv(i, 1) == i and FloorMod(i, 1) == 0
    assert FloorDiv(i, 4).is_integer and FloorMod(i, 4).is_nonnegative


def test_normalize_converts_python_floor_and_mod() -> None:
    assert normalize(i // 4) == FloorDiv(i, 4)
    assert normalize(i % 4) == FloorMod(i, 4)
    assert normalize(sympy.ceiling(i / 4)) == FloorDiv(i + 3, 4)
    with pytest.raises(ValueError, match="integer valued"):
        normalize(i / 2)
    with pytest.raises(ValueError, match="integer valued"):
        normalize(sympy.Float(1.5) * i)


@pytest.mark.parametrize(
    ("expr", "ranges", "expected"),
    [
        (FloorDiv(32 * i + j, 32), {j: (0, 31)}, i),
        (FloorMod(32 * i + j, 32), {j: (0, 31)}, j),
        (32 * FloorDiv(i, 32) + FloorMod(i, 32), {}, i),
        (8 * FloorMod(FloorDiv(i, 8), 4) + FloorMod(i, 8), {}, FloorMod(i, 32)),
        (i - FloorMod(i, 8), {}, 8 * FloorDiv(i, 8)),
        (FloorDiv(8 * i + FloorMod(j, 8), 16), {}, FloorDiv(i, 2)),
        (FloorMod(FloorMod(j, 8), 2), {}, FloorMod(j, 2)),
        (FloorDiv(FloorMod(j, 8), 2), {}, FloorMod(FloorDiv(j, 2), 4)),
        (FloorDiv(FloorDiv(i, 4), 8), {}, FloorDiv(i, 32)),
        (FloorMod(i, 64), {i: (0, 63)}, i),
        (FloorDiv(i, 64), {i: (0, 63)}, 0),
        (BitXor(64 * i + j, 8 * FloorMod(i, 8)), {j: (0, 63)}, 64 * i + BitXor(j, 8 * FloorMod(i, 8))),
        (BitXor(BitXor(i, j), j), {}, i),
        (BitXor(8 * i, FloorMod(j, 8)), {}, 8 * i + FloorMod(j, 8)),
        (BitAnd(i, 7), {}, FloorMod(i, 8)),
        (ShiftRight(i, 3), {}, FloorDiv(i, 8)),
        (i + k, {k: (0, 0)}, i),
    ],
)
def test_simplify_rules(expr: sympy.Expr, ranges: dict, expected: sympy.Expr) -> None:
    assert simplify_expr(expr, ranges) == expected


def test_bounds() -> None:
    assert bounds(4 * i + j, {i: (0, 3), j: (0, 3)}) == (0, 15)
    assert bounds(FloorMod(i, 8), {}) == (0, 7)
    assert bounds(BitXor(i, j), {i: (0, 5), j: (0, 2)}) == (0, 7)


def _random_expr(draw: st.DrawFn, depth: int) -> sympy.Expr:
    if depth == 0:
        return draw(st.sampled_from([i, j, sympy.Integer(draw(st.integers(0, 9)))]))
    op = draw(st.sampled_from(["add", "sub", "mul", "div", "mod", "xor"]))
    a = _random_expr(draw, depth - 1)
    if op == "add":
        return a + _random_expr(draw, depth - 1)
    if op == "sub":
        return a - _random_expr(draw, depth - 1)
    if op == "mul":
        return a * draw(st.integers(1, 9))
    if op == "xor":
        return BitXor(a, _random_expr(draw, depth - 1))
    c = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 16]))
    return FloorDiv(a, c) if op == "div" else FloorMod(a, c)


@st.composite
def random_exprs(draw: st.DrawFn) -> tuple[sympy.Expr, int, int]:
    return _random_expr(draw, draw(st.integers(1, 4))), draw(st.integers(1, 24)), draw(st.integers(1, 24))


@settings(max_examples=120, deadline=None)
@given(random_exprs())
def test_simplify_preserves_values(case: tuple[sympy.Expr, int, int]) -> None:
    expr, ni, nj = case
    ranges = {i: (0, ni - 1), j: (0, nj - 1)}
    simp = simplify_expr(expr, ranges)
    gi, gj = np.meshgrid(np.arange(ni), np.arange(nj), indexing="ij")
    f_orig = sympy.lambdify((i, j), expr, modules=[_NP, "numpy"])
    f_simp = sympy.lambdify((i, j), simp, modules=[_NP, "numpy"])
    want = np.broadcast_to(f_orig(gi, gj), gi.shape)
    np.testing.assert_array_equal(np.broadcast_to(f_simp(gi, gj), gi.shape), want, err_msg=f"{expr} -> {simp}")
    if unsafe_for_c(expr, ranges) is not None:
        return  # C semantics differ for negative operands; only floor semantics are checked
    assert unsafe_for_c(simp, ranges) is None, f"{expr} -> {simp} introduced a possibly negative operand"
    code = render(simp, {i: "a", j: "b"}, "c")
    np.testing.assert_array_equal(np.broadcast_to(c_eval(code, {"a": gi, "b": gj}), gi.shape), want, err_msg=code)


_NP = {"FloorDiv": np.floor_divide, "FloorMod": np.mod, "BitXor": np.bitwise_xor}


def test_render_styles() -> None:
    e = 64 * i + BitXor(j, 8 * FloorMod(i, 8))
    assert render(e, {}, "py") == "i*64 + (j ^ ((i % 8)*8))"
    assert render(e, {i: "row", j: "col"}, "c") == "row * 64 + (col ^ ((row & 7) * 8))"
    assert render(FloorDiv(i, 6), {i: "threadIdx.x"}, "c") == "(threadIdx.x) / 6"
    assert render(FloorDiv(i, 8), {}, "c", pow2_bitops=False) == "i / 8"
    assert render(i - 2 * j, {}, "py") == "i - j*2"
    with pytest.raises(ValueError, match="style"):
        render(i, {}, "rust")
