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
    a lookup table if it disagrees.  A coordinate with no formula of its own is tried as a digit of
    the row-major flat input index when that has one (``(l * 128 + t) // 24`` for a 16 x 24 tile
    spread over 128 threads is no mixed-radix form of ``t * 3 + l``, but its flat index is).
    """
    from .layout import Layout, flatten_expr, unflatten_exprs

    flat = layout._flat_out()
    assert flat is not None
    n = layout.size
    g = np.empty(n, dtype=np.int64)
    g[flat] = np.arange(n, dtype=np.int64)
    out_shape = layout.out_shape
    yflat = flatten_expr(index_symbols(len(out_shape)), out_shape)
    ranges = {v: (0, d - 1) for v, d in zip(index_symbols(len(out_shape)), out_shape)}
    comps: list[sympy.Expr | None] = []
    wants = np.unravel_index(g, layout.shape)
    for want in wants:
        comps.append(_formula(fit_expr(want, _Y), want, n, yflat, ranges, out_shape))
    if layout.ndim > 1 and any(c is None for c in comps):
        flat_in = fit_expr(g, _Y)
        if flat_in[1] != "table":
            digits = unflatten_exprs(flat_in[0], layout.shape)
            for d, want in enumerate(wants):
                if comps[d] is None:
                    comps[d] = _formula((digits[d], "formula"), want, n, yflat, ranges, out_shape)
    comps = [c if c is not None else Lut(register_lut(want), yflat) for c, want in zip(comps, wants)]
    return Layout.from_exprs(out_shape, comps, scalar=layout.ndim == 1, out_shape=layout.shape)


def _formula(fit: tuple[sympy.Expr, str], want: np.ndarray, n: int, yflat: sympy.Expr, ranges: dict,
             out_shape: tuple[int, ...]) -> sympy.Expr | None:
    """The fitted expression over the output indices, simplified and checked against ``want``; None if none."""
    expr, method = fit
    if method == "table":
        return None
    expr = simplify_expr(simplify_expr(expr, {_Y: (0, n - 1)}).xreplace({_Y: yflat}), ranges)
    return expr if _agrees(expr, want, out_shape) else None


def _agrees(expr: sympy.Expr, want: np.ndarray, shape: tuple[int, ...]) -> bool:
    from .layout import Layout

    probe = Layout.from_exprs(shape, [expr], scalar=True, simplify=False)
    return bool(np.array_equal(probe.eval_table().reshape(-1), want))
