"""Layout: construction, evaluation, algebra and printing."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

from tilec.layout import Layout, Lut, bitxor, col_major, row_major, swizzle

from .helpers import check_to_c, identity


def test_basic_row_major() -> None:
    L = Layout((64, 32), lambda i, j: i * 32 + j)
    assert L.shape == (64, 32) and L.ndim == 2 and L.size == 2048
    assert L.out_shape == (2048,) and L.scalar_output
    assert L(3, 4) == 100 and L((3, 4)) == 100
    assert str(L) == "Layout((64, 32): (i, j) -> i*32 + j)"
    assert L.is_bijective()
    np.testing.assert_array_equal(L.eval_table(), np.arange(2048).reshape(64, 32))


def test_tuple_output_and_out_shape_inference() -> None:
    T = Layout((4, 8), lambda i, j: (j, i))
    assert not T.scalar_output and T.out_shape == (8, 4)
    assert T(1, 6) == (6, 1)
    assert T.eval_table().shape == (4, 8, 2)
    assert T.is_bijective()
    given = Layout((4, 8), lambda i, j: (j, i), out_shape=(8, 8))
    assert given.out_shape == (8, 8) and not given.is_bijective()


def test_symbolic_call_and_python_operators() -> None:
    L = Layout((16, 16), lambda i, j: (i // 4) * 64 + (i % 4) * 16 + j)
    assert str(L) == "Layout((16, 16): (i, j) -> i*16 + j)"
    x, y = sympy.symbols("x y", integer=True, nonnegative=True)
    assert L(x, y) == 16 * x + y


def test_call_errors() -> None:
    L = row_major(4, 4)
    with pytest.raises(ValueError, match="expected 2 indices"):
        L(1)
    with pytest.raises(IndexError, match="out of range"):
        L(4, 0)


def test_constructor_errors() -> None:
    with pytest.raises(ValueError, match="shape"):
        Layout((0, 4), lambda i, j: i)
    with pytest.raises(ValueError, match="shape"):
        Layout("ab", lambda i: i)
    with pytest.raises(ValueError, match="integer valued"):
        Layout((4,), lambda i: i / 2)
    z = sympy.Symbol("z")
    with pytest.raises(ValueError, match="not indices"):
        Layout((4,), lambda i: i + z)
    with pytest.raises(ValueError, match="out_shape must have 2 entries"):
        Layout((4, 4), lambda i, j: (j, i), out_shape=(16,))


def test_padded_not_bijective_and_inverse_error() -> None:
    P = Layout((8, 8), lambda i, j: i * 10 + j)
    assert P.out_shape == (78,) and not P.is_bijective()
    with pytest.raises(ValueError, match="bijective"):
        P.inverse()


def test_inverse_symbolic_forms() -> None:
    assert str(row_major(64, 32).inverse()) == "Layout((2048,): i -> (i // 32, i % 32))"
    assert str(col_major(64, 32).inverse()) == "Layout((2048,): i -> (i % 64, i // 64))"
    T = Layout((4, 8), lambda i, j: (j, i))
    assert str(T.inverse()) == "Layout((8, 4): (i, j) -> (j, i))"
    S = swizzle((64, 64), 16, 128)
    assert str(S.inverse()) == "Layout((4096,): i -> (i // 64, (i % 64) ^ (((i // 64) % 8)*8)))"
    assert not S.inverse().tables()


def test_inverse_of_a_stride_modulo_the_size_is_a_formula() -> None:
    """``5 * flat % 64`` is inverted by ``13 * flat % 64``: a stride form modulo the size, no lookup table."""
    L = Layout((8, 8), lambda i, j: (i * 8 + j) * 5 % 64)
    inv = L.inverse()
    assert not inv.tables()
    assert inv.compose(L).equals(identity((8, 8)))
    check_to_c(inv)


def test_inverse_table_fallback() -> None:
    L = Layout.from_table(np.random.default_rng(0).permutation(64).reshape(8, 8))
    inv = L.inverse()
    assert inv.tables() and any(isinstance(n, Lut) for e in inv.exprs for n in sympy.preorder_traversal(e))
    assert inv.compose(L).equals(identity((8, 8)))
    assert L.compose(inv).equals(identity((64,)))
    check_to_c(inv)
    assert "tilec_lut_" in inv.to_c(["y"])[0]


def test_compose_and_errors() -> None:
    L = row_major(8, 4)
    T = Layout((4, 8), lambda i, j: (j, i))
    C = L.compose(T)
    assert C.shape == (4, 8) and C.equals(col_major(4, 8))
    with pytest.raises(ValueError, match=r"other.out_shape must equal self.shape \(8, 4\); got \(8, 8\)"):
        L.compose(Layout((8, 8), lambda i, j: (i, j)))
    with pytest.raises(TypeError):
        L.compose("x")  # type: ignore[arg-type]


def test_reshape_and_errors() -> None:
    L = swizzle((16, 64), 16, 128)
    R = L.reshape((4, 4, 64))
    np.testing.assert_array_equal(R.eval_table().reshape(-1), L.eval_table().reshape(-1))
    assert str(row_major(64, 32).reshape((2048,))) == "Layout((2048,): i -> i)"
    with pytest.raises(ValueError, match=r"new_shape must have 1024 elements"):
        L.reshape((3, 5))


def test_repeat_and_stack() -> None:
    base = row_major(2, 2)
    R = base.repeat((2, 3))
    assert R.shape == (4, 6) and R.out_shape == (24,)
    assert R(0, 2) == 4 and R(2, 0) == 12 and R(3, 5) == 23
    assert R.is_bijective()
    S = base.stack(3)
    assert S.shape == (3, 2, 2) and S(2, 1, 1) == 11 and S.is_bijective()
    with pytest.raises(ValueError, match="reps must have 2 entries"):
        base.repeat((2,))
    with pytest.raises(ValueError, match="scalar"):
        Layout((2, 2), lambda i, j: (j, i)).repeat((2, 2))


def test_equals() -> None:
    a = Layout((8, 8), lambda i, j: i * 8 + j)
    b = Layout((8, 8), lambda i, j: bitxor(i * 8 + j, 0))
    assert a.equals(b) and a.equals(row_major(8, 8))
    assert not a.equals(col_major(8, 8))
    assert not a.equals(row_major(4, 16))
    assert not a.equals(Layout((8, 8), lambda i, j: (i, j)))
    c = Layout.from_table(np.arange(64).reshape(8, 8))
    assert a.equals(c) and c.equals(a)


def test_from_table_multi_output() -> None:
    table = np.stack(np.meshgrid(np.arange(4), np.arange(3), indexing="ij")[::-1], axis=-1)
    L = Layout.from_table(table, out_shape=(3, 4))
    assert L.shape == (4, 3) and L(2, 1) == (1, 2)
    assert L.equals(Layout((4, 3), lambda i, j: (j, i)))
    check_to_c(L)


def test_to_c() -> None:
    S = swizzle((64, 64), 16, 128)
    assert S.to_c(["r", "c"]) == "r * 64 + (c ^ ((r & 7) * 8))"
    assert S.to_c(["r", "c"], pow2_bitops=False) == "r * 64 + (c ^ ((r % 8) * 8))"
    assert Layout((4, 8), lambda i, j: (j, i)).to_c(["a", "b"]) == ("b", "a")
    with pytest.raises(ValueError, match="needs 2 names"):
        S.to_c(["r"])
    check_to_c(Layout((6, 10), lambda i, j: (i * 10 + j) // 3 + (j % 4) * 7))


def test_show() -> None:
    text = row_major(32, 32).show()
    lines = text.splitlines()
    assert lines[0] == str(row_major(32, 32))
    assert lines[2].split()[:3] == ["0", "0", "1"] and lines[2].endswith("...")
    assert lines[-1].strip() == "..." and len(lines) == 2 + 16 + 1
    small = Layout((2, 2), lambda i, j: (j, i)).show()
    assert "(1,0)" in small
    assert "rows merge dims" in row_major(2, 2, 2).show()


def test_simplify_and_unsimplified_construction() -> None:
    raw = Layout((8, 4), lambda i, j: ((i * 4 + j) // 4) * 4 + (i * 4 + j) % 4, simplify=False)
    assert raw.simplify().exprs[0] == 4 * raw.symbols[0] + raw.symbols[1]
    assert raw.equals(row_major(8, 4))


def test_inverse_through_the_flat_input_index() -> None:
    """A 16 x 24 tile dealt element by element round 128 threads (3 each): no coordinate is a mixed-radix form of
    the flat (thread, local) index, but the flat element index is, so the inverse is a formula, not a table."""
    L = Layout((16, 24), lambda i, j: ((i * 24 + j) % 128, (i * 24 + j) // 128))
    inv = L.inverse()
    assert not inv.tables(), str(inv)
    assert str(inv) == "Layout((128, 3): (i, j) -> ((j*128 + i) // 24, (j*8 + i) % 24))"  # column: stride mod 24
    assert inv.compose(L).equals(identity((16, 24)))
    check_to_c(inv)
