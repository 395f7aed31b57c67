"""Recovering symbolic formulas for tabulated index maps (used by ``inverse``).

Given a table ``g`` of length ``N`` (a map ``[0, N) -> integers``) these helpers try, in order:

1. a *stride* form ``g(y) = g(0) + sum_k s_k * ((y // p_k) % r_k)`` (mixed-radix digits of
   ``y``, each with a constant, possibly negative stride), which covers row/column-major,
   reversed and strided permutations, transposes and reshapes of them;
2. an *xor-linear* form: ``g(y) = xor_b bit_b(y) * g(2**b)`` over the bits of ``y < N``, which
   covers the XOR swizzles; it is printed as ``P(y) ^ R(y)`` where ``P`` is a bit permutation written
   with ``+`` and ``R`` the remaining bits;
3. an *additive split* ``g(y) = g_hi(y // P) + g_lo(y % P)`` for a divisor ``P`` of ``N``, with
   both parts fitted recursively (e.g. one component of a multi-panel swizzle);
4. a stride form *modulo* ``m = max(g) + 1``: ``g(y) = (sum_k s_k * ((y // p_k) % r_k)) % m`` (the column of
   a register of a tile spread row-major over a thread count that rows do not divide);
5. a lookup table :class:`~tilec.layout.expr.Lut` indexed by ``y``.
"""

from __future__ import annotations

import functools

import numpy as np
import sympy
from sympy import Integer

from .expr import BitXor, FloorDiv, FloorMod, Lut, register_lut

__all__ = ["fit_expr", "fit_stride", "fit_stride_mod", "fit_xor"]


@functools.lru_cache(maxsize=1024)
def _divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


def _digit(y: sympy.Expr, lo: int, width: int) -> sympy.Expr:
    return FloorMod(FloorDiv(y, lo), width)


def fit_stride(g: np.ndarray) -> list[tuple[int, int, int]] | None:
    """Find digits ``(p_k, r_k, s_k)`` with ``g(y) == sum s_k * ((y // p_k) % r_k)``, or ``None``."""
    if g.size == 0 or int(g[0]) != 0:
        return None
    return _digits(g, None)


def fit_stride_mod(g: np.ndarray) -> tuple[list[tuple[int, int, int]], int] | None:
    """Digits ``(p_k, r_k, s_k)`` and ``m = max(g) + 1`` with ``g(y) == (sum s_k * ((y // p_k) % r_k)) % m``, or
    ``None``; each digit as long as ``g`` follows its stride modulo ``m``."""
    if g.size < 2 or int(g[0]) != 0 or int(g.min()) < 0:
        return None
    m = int(g.max()) + 1
    modes = _digits(g, m)
    return None if modes is None else (modes, m)


def _digits(g: np.ndarray, m: int | None) -> list[tuple[int, int, int]] | None:
    """The digits of :func:`fit_stride` (``m`` None) or :func:`fit_stride_mod` (sums taken modulo ``m``): each as
    long as ``g`` follows its stride."""
    n = int(g.size)

    def wrap(x: np.ndarray) -> np.ndarray:
        return x if m is None else x % m

    modes: list[tuple[int, int, int]] = []
    step = 1
    while step < n:
        rem = n // step
        stride = int(g[step])
        t = np.arange(rem, dtype=np.int64)
        bad = np.flatnonzero(g[t * step] != wrap(t * stride))
        first_bad = int(bad[0]) if bad.size else rem
        radix = max(d for d in _divisors(rem) if d <= first_bad)
        if radix <= 1:
            return None
        modes.append((step, radix, stride))
        step *= radix
    y = np.arange(n, dtype=np.int64)
    acc = np.zeros(n, dtype=np.int64)
    for lo, width, stride in modes:
        acc += stride * ((y // lo) % width)
    return modes if np.array_equal(wrap(acc), g) else None


def fit_xor(g: np.ndarray) -> list[int] | None:
    """Columns ``c_b = g(2**b)`` if ``g`` is linear over GF(2) on the bits of ``y``, else ``None``."""
    n = int(g.size)
    if n < 2 or int(g[0]) != 0 or int(g.min()) < 0:
        return None
    nbits = (n - 1).bit_length()
    cols = [int(g[1 << b]) for b in range(nbits)]
    y = np.arange(n, dtype=np.int64)
    acc = np.zeros(n, dtype=np.int64)
    for b, col in enumerate(cols):
        acc ^= ((y >> b) & 1) * col
    return cols if np.array_equal(acc, g) else None


def _match_bits(cols: list[int]) -> dict[int, int]:
    """A maximum matching input bit -> output bit inside the support, preferring equal bits."""
    owner: dict[int, int] = {}

    def try_assign(b: int, seen: set[int]) -> bool:
        cands = [o for o in range(cols[b].bit_length()) if (cols[b] >> o) & 1]
        for o in sorted(cands, key=lambda o: abs(o - b)):
            if o in seen:
                continue
            seen.add(o)
            if o not in owner or try_assign(owner[o], seen):
                owner[o] = b
                return True
        return False

    for b in range(len(cols)):
        try_assign(b, set())
    return {b: o for o, b in owner.items()}


def _xor_expr(cols: list[int], y: sympy.Expr) -> sympy.Expr:
    """``P(y) ^ R1(y) ^ ...``: ``P`` the matched bits (a sum of digits), ``R`` the remaining ones."""
    match = _match_bits(cols)
    layers: list[dict[int, int]] = [{o: b for b, o in match.items()}]
    for b, col in enumerate(cols):
        for o in range(col.bit_length()):
            if (col >> o) & 1 and match.get(b) != o:
                layer = next((lay for lay in layers[1:] if o not in lay), None)
                if layer is None:
                    layer = {}
                    layers.append(layer)
                layer[o] = b
    parts = [sympy.Add(*[Integer(1 << o) * _digit(y, 1 << b, 2) for o, b in lay.items()]) for lay in layers]
    return functools.reduce(BitXor, parts)


def _fit_split(g: np.ndarray, y: sympy.Expr, depth: int) -> sympy.Expr | None:
    """``g(y) == g(P * (y // P)) + g(y % P)`` for a divisor ``P``: fit both parts separately."""
    n = int(g.size)
    idx = np.arange(n, dtype=np.int64)
    for p in _divisors(n)[1:-1]:
        if np.array_equal(g, g[(idx // p) * p] + g[idx % p]):
            hi = _fit(np.ascontiguousarray(g[::p]), FloorDiv(y, p), depth + 1)
            lo = _fit(np.ascontiguousarray(g[:p]), FloorMod(y, p), depth + 1) if hi is not None else None
            if lo is not None:
                return hi + lo
    return None


def _fit(g: np.ndarray, y: sympy.Expr, depth: int = 0) -> sympy.Expr | None:
    base = int(g[0]) if g.size else 0
    if base:
        rest = _fit(g - base, y, depth)
        return None if rest is None else rest + base
    modes = fit_stride(g)
    if modes is not None:
        return sympy.Add(*[Integer(s) * _digit(y, lo, w) for lo, w, s in modes])
    cols = fit_xor(g)
    if cols is not None:
        return _xor_expr(cols, y)
    split = _fit_split(g, y, depth) if depth < 4 and g.size > 1 else None
    if split is not None:
        return split
    fitted = fit_stride_mod(g)
    if fitted is not None:
        return FloorMod(sympy.Add(*[Integer(s) * _digit(y, lo, w) for lo, w, s in fitted[0]]), fitted[1])
    return None


def fit_expr(g: np.ndarray, y: sympy.Symbol) -> tuple[sympy.Expr, str]:
    """A formula for the table ``g`` in terms of ``y``: ``(expr, "formula")`` or ``(Lut, "table")``.

    The expression is unsimplified.
    """
    g = np.asarray(g, dtype=np.int64).reshape(-1)
    expr = _fit(g, y)
    if expr is not None:
        return expr, "formula"
    return Lut(register_lut(g), y), "table"
