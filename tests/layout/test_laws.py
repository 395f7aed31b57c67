"""Algebraic laws of layouts on random layouts (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilec.layout import Layout, row_major, swizzle

from .helpers import check_to_c, identity

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DIMS = st.sampled_from([1, 2, 3, 4, 6, 8])


@st.composite
def stride_permutations(draw: st.DrawFn) -> Layout:
    """Bijective stride layouts: the dimensions laid out in a random order (generalised transposes)."""
    shape = tuple(draw(st.lists(DIMS, min_size=1, max_size=3)))
    order = draw(st.permutations(range(len(shape))))
    strides = [0] * len(shape)
    acc = 1
    for d in order:
        strides[d] = acc
        acc *= shape[d]
    return Layout(shape, lambda *idx: sum(i * s for i, s in zip(idx, strides)))


@st.composite
def swizzles(draw: st.DrawFn) -> Layout:
    bits = draw(st.sampled_from([8, 16, 32]))
    sbytes = draw(st.sampled_from([32, 64, 128]))
    rows = draw(st.sampled_from([1, 2, 4, 8, 12, 16]))
    cols = (sbytes * 8 // bits) * draw(st.sampled_from([1, 2]))
    return swizzle((rows, cols), bits, sbytes)


@st.composite
def affine_mod(draw: st.DrawFn) -> Layout:
    """``(a * flat + b) % n`` with ``gcd(a, n) == 1``: bijective but not stride-like (table inverse)."""
    shape = tuple(draw(st.lists(DIMS, min_size=1, max_size=2)))
    n = math.prod(shape)
    a = draw(st.sampled_from([x for x in range(1, 2 * n + 2) if math.gcd(x, n) == 1]))
    b = draw(st.integers(0, n))
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    return Layout(shape, lambda *idx: (a * sum(i * s for i, s in zip(idx, strides)) + b) % n)


@st.composite
def reshaped(draw: st.DrawFn, base: st.SearchStrategy[Layout]) -> Layout:
    L = draw(base)
    n = L.size
    divs = [d for d in range(1, n + 1) if n % d == 0]
    first = draw(st.sampled_from(divs))
    return L.reshape((first, n // first))


def bijective_layouts() -> st.SearchStrategy[Layout]:
    basic = st.one_of(stride_permutations(), swizzles(), affine_mod())
    return st.one_of(basic, reshaped(basic))


@SETTINGS
@given(bijective_layouts())
def test_inverse_laws(L: Layout) -> None:
    assert L.is_bijective()
    inv = L.inverse()
    assert inv.shape == L.out_shape and inv.out_shape == L.shape
    assert inv.compose(L).equals(identity(L.shape))
    assert L.compose(inv).equals(identity(L.out_shape))
    check_to_c(L)
    check_to_c(inv)


@SETTINGS
@given(stride_permutations())
def test_stride_inverse_is_symbolic(L: Layout) -> None:
    assert not L.inverse().tables()


@SETTINGS
@given(st.sampled_from([8, 16, 32]), st.sampled_from([32, 64, 128]), st.sampled_from([4, 8, 12, 16]), DIMS)
def test_swizzle_inverse_is_symbolic(bits: int, sbytes: int, rows: int, panels: int) -> None:
    L = swizzle((rows, panels * sbytes * 8 // bits), bits, sbytes)
    inv = L.inverse()
    assert inv.compose(L).equals(identity(L.shape))
    if panels == 1 or rows % 8 == 0:
        # several panels of a row count that is not a multiple of 8 fall back to a table
        assert not inv.tables(), str(inv)


def _perm1d(draw: st.DrawFn, n: int) -> Layout:
    perm = np.array(draw(st.permutations(range(n))), dtype=np.int64)
    return Layout.from_table(perm)


@SETTINGS
@given(bijective_layouts(), st.data())
def test_compose_associative(L: Layout, data: st.DataObject) -> None:
    flat = L if L.scalar_output else row_major(*L.out_shape).compose(L)
    n = flat.size
    A = _perm1d(data.draw, n)
    B = _perm1d(data.draw, n) if data.draw(st.booleans()) else Layout((n,), lambda i: (i * 3 + 1) % n if n % 3 else i)
    left = A.compose(B.compose(flat))
    right = A.compose(B).compose(flat)
    assert left.equals(right)
    want = A.eval_table()[B.eval_table()[flat.eval_table()]]
    np.testing.assert_array_equal(left.eval_table(), want)


@SETTINGS
@given(bijective_layouts(), st.data())
def test_reshape_preserves_order(L: Layout, data: st.DataObject) -> None:
    n = L.size
    dims = data.draw(st.lists(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]), max_size=2))
    rest = n // math.prod(dims) if n % math.prod(dims) == 0 else None
    if rest is None:
        dims, rest = [], n
    R = L.reshape(tuple(dims) + (rest,))
    width = 1 if L.scalar_output else len(L.exprs)
    np.testing.assert_array_equal(R.eval_table().reshape(-1, width), L.eval_table().reshape(-1, width))
    check_to_c(R)
