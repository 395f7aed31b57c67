"""Inversion of bijective layouts (see :meth:`tilec.layout.Layout.inverse`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import sympy

from .expr import Lut, index_symbols, register_lut
from .fit import fit_expr
from .simplify import simplify_expr

if TYPE_CHECKING:
    from .layout import Layout

__all__ = ["invert"]

_Y = sympy.Symbol("y_flat", integer=True, nonnegative=True)


def invert(layout: Layout) -> Layout:
    """Inverse of a bijective ``layout``: output index -> input index.

    Each input coordinate is fitted, as a function of the flat output index, with
    :func:`~tilec.layout.fit.fit_expr`; a formula is checked against the table and replaced by
    a lookup table if it disagrees.
    """
    from .layout import Layout, flatten_expr

    flat = layout._flat_out()
    assert flat is not None
    n = layout.size
    g = np.empty(n, dtype=np.int64)
    g[flat] = np.arange(n, dtype=np.int64)
    out_shape = layout.out_shape
    yflat = flatten_expr(index_symbols(len(out_shape)), out_shape)
    ranges = {v: (0, d - 1) for v, d in zip(index_symbols(len(out_shape)), out_shape)}
    comps = []
    for want in np.unravel_index(g, layout.shape):
        expr, method = fit_expr(want, _Y)
        if method != "table":
            expr = simplify_expr(simplify_expr(expr, {_Y: (0, n - 1)}).xreplace({_Y: yflat}), ranges)
            if not _agrees(expr, want, out_shape):
                method = "table"
        comps.append(expr.xreplace({_Y: yflat}) if method != "table" else Lut(register_lut(want), yflat))
    return Layout.from_exprs(out_shape, comps, scalar=layout.ndim == 1, out_shape=layout.shape)


def _agrees(expr: sympy.Expr, want: np.ndarray, shape: tuple[int, ...]) -> bool:
    from .layout import Layout

    probe = Layout.from_exprs(shape, [expr], scalar=True, simplify=False)
    return bool(np.array_equal(probe.eval_table().reshape(-1), want))
