"""Fragment: construction, validity, repeat/replicate, inverse, printing."""

from __future__ import annotations

import numpy as np
import pytest

from tilec.layout import Fragment, Layout

from .helpers import c_eval


def pairs() -> Fragment:
    return Fragment((8, 8), lambda i, j: i * 4 + j // 2, lambda i, j: j % 2)


def test_basic() -> None:
    F = pairs()
    assert F.shape == (8, 8) and F.ndim == 2 and F.size == 64 and F.replicate == 1
    assert (F.num_threads, F.num_locals) == (32, 2)
    assert F(3, 5) == (14, 1) and F((3, 5)) == (14, 1)
    assert F.is_valid()
    t, loc = F.eval_tables()
    assert t.shape == (8, 8, 1) and loc.shape == (8, 8, 1)
    assert str(F) == "Fragment((8, 8): (i, j) -> thread i*4 + j // 2, local j % 2; threads=32, locals=2)"


def test_invalid_fragments() -> None:
    dup = Fragment((8, 8), lambda i, j: i * 4 + j // 2, lambda i, j: 0)
    assert not dup.is_valid()
    gap = Fragment((4,), lambda i: i, lambda i: 0, num_threads=8)
    assert gap.num_threads == 8 and gap.num_locals == 1 and not gap.is_valid()
    with pytest.raises(ValueError, match="valid fragment"):
        dup.inverse()


def test_replicated_constructor_and_call() -> None:
    F = Fragment((4, 4), lambda i, j, rep: rep * 16 + i * 4 + j, lambda i, j, rep: 0, replicate=2)
    assert F.replicate == 2 and F.num_threads == 32 and F.is_valid()
    assert F(1, 2) == [(6, 0), (22, 0)]
    assert F(1, 2, rep=1) == (22, 0)
    assert F.eval_tables()[0].shape == (4, 4, 2)
    inv = F.inverse()
    assert inv.shape == (32, 1) and inv(22, 0) == (1, 2, 1)
    assert "replicate=2" in str(F) and "(i, j, rep)" in str(F)


def test_repeat_on_threads_and_locals() -> None:
    F = pairs()
    R = F.repeat((2, 2), on_threads=False, lower_dim_first=True)
    assert R.shape == (16, 16) and R.num_locals == 8 and R.num_threads == 32 and R.is_valid()
    assert R(8, 0) == (0, 2) and R(0, 8) == (0, 4)
    C = F.repeat((2, 2), on_threads=False, lower_dim_first=False)
    assert C(8, 0) == (0, 4) and C(0, 8) == (0, 2)
    W = F.repeat((1, 3), on_threads=True)
    assert W.num_threads == 96 and W(0, 8) == (32, 0) and W.is_valid()
    with pytest.raises(ValueError, match="reps must have 2 entries"):
        F.repeat((2,))


def test_replicated_method() -> None:
    R = pairs().replicated(2)
    assert R.replicate == 2 and R.num_threads == 64 and R.is_valid()
    assert R(1, 1) == [(4, 1), (36, 1)]
    RR = R.replicated(3)
    assert RR.replicate == 6 and RR.num_threads == 192 and RR.is_valid()
    with pytest.raises(ValueError, match="k must be a positive int"):
        pairs().replicated(0)


def test_inverse_and_index_to_c() -> None:
    F = pairs().repeat((2, 2), on_threads=False)
    inv = F.inverse()
    assert inv.shape == (32, 8) and inv.out_shape == (16, 16)
    ti, li = np.meshgrid(np.arange(32), np.arange(8), indexing="ij")
    rows, cols = (c_eval(code, {"tid": ti, "r": li}) for code in F.index_to_c("tid", "r"))
    t, loc = F.eval_tables()
    np.testing.assert_array_equal(t[rows, cols, 0], ti)
    np.testing.assert_array_equal(loc[rows, cols, 0], li)


def test_to_c_matches_tables() -> None:
    F = Fragment((8, 4), lambda i, j, rep: rep * 32 + i * 4 + j, lambda i, j, rep: 0, replicate=3)
    gi, gj, gr = np.meshgrid(np.arange(8), np.arange(4), np.arange(3), indexing="ij")
    tc, lc = F.to_c(["a", "b"], rep_name="r")
    t, loc = F.eval_tables()
    np.testing.assert_array_equal(c_eval(tc, {"a": gi, "b": gj, "r": gr}), t)
    np.testing.assert_array_equal(np.broadcast_to(c_eval(lc, {"a": gi, "b": gj, "r": gr}), loc.shape), loc)
    with pytest.raises(ValueError, match="need 2 names"):
        F.to_c(["a"])


def test_compose_layout_and_reshape() -> None:
    F = pairs()
    T = F.compose_layout(Layout((8, 8), lambda i, j: (j, i), out_shape=(8, 8)))
    assert T(5, 3) == F(3, 5) and T.is_valid()
    R = F.reshape((64,))
    assert R(13) == F(1, 5) and R.reshape((8, 8)).equals(F)
    with pytest.raises(ValueError, match="layout.out_shape must equal shape"):
        F.compose_layout(Layout((4, 4), lambda i, j: (i, j)))
    with pytest.raises(ValueError, match="new_shape must have 64 elements"):
        F.reshape((7, 9))


def test_equals_and_from_tables() -> None:
    F = pairs()
    t, loc = F.eval_tables()
    G = Fragment.from_tables(t, loc)
    assert G.equals(F) and F.equals(G)
    assert not F.equals(F.repeat((1, 1), on_threads=True).replicated(2))
    swapped = Fragment((4,), lambda i, rep: rep * 4 + i, lambda i, rep: 0, replicate=2)
    other = Fragment((4,), lambda i, rep: (1 - rep) * 4 + i, lambda i, rep: 0, replicate=2)
    assert swapped.equals(other)  # replica numbering does not matter


def test_show() -> None:
    text = pairs().show()
    assert "T0:0" in text and "T31:1" in text
    rep = Fragment((2, 2), lambda i, j, r: r * 4 + i * 2 + j, lambda i, j, r: 0, replicate=2).show()
    assert "T0:0/T4:0" in rep


def test_constructor_errors() -> None:
    with pytest.raises(ValueError, match="replicate must be a positive int"):
        Fragment((4,), lambda i: i, lambda i: 0, replicate=0)
    with pytest.raises(ValueError, match="num_threads must be a positive int"):
        Fragment((4,), lambda i: i, lambda i: 0, num_threads=0)
    with pytest.raises(ValueError, match="share a shape"):
        Fragment.from_tables(np.zeros((2, 2, 1)), np.zeros((2, 2)))
