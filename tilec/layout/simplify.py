"""Range-aware simplification of integer layout expressions.

sympy knows nothing about the ranges of layout indices, so it cannot see that
``floor((32*i + j) / 32) == i`` when ``0 <= j < 32``.  This module implements a small rewrite
system over :class:`~tilec.layout.expr.FloorDiv`, :class:`~tilec.layout.expr.FloorMod` and the
bit functions that uses interval bounds of every sub-expression:

* ``(q*c + r) // c -> q + r // c`` and ``(g*d + s) // c -> d // (c/g)`` when ``g | c`` and
  ``0 <= s < g`` (and the matching rules for ``%``);
* nested division/modulo folding (``(x // a) // b -> x // (a*b)``,
  ``(x % m) // c -> (x // c) % (m/c)``, ``(x % m) % c -> x % c`` when ``c | m``);
* digit merging in sums: ``c*((x // c) % d) + x % c -> x % (c*d)``, ``a*(x // a) + x % a -> x``;
* xor splitting: ``(D + S) ^ b -> D + (S ^ b)`` when ``D`` is a multiple of ``2**k`` and
  ``S, b < 2**k``; xor of provably disjoint bits becomes ``+``;
* canonical forms: ``x >> k -> x // 2**k`` and ``x & (2**k - 1) -> x % 2**k``.

Results are cached on ``(expression, ranges)`` so re-building a layout is cheap.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import sympy
from sympy import Integer

from .expr import BitAnd, BitXor, FloorDiv, FloorMod, Lut, ShiftRight, lut_array

__all__ = ["bounds", "normalize", "simplify_expr", "unsafe_for_c"]

INF = math.inf
Bound = tuple[float, float]


# ----------------------------------------------------------------------------------------------
# Normalisation of user expressions (sympy floor / Mod -> FloorDiv / FloorMod)


def normalize(e: object) -> sympy.Expr:
    """Convert a user expression into the canonical function set and check integrality.

    ``sympy.floor(p / q)`` becomes ``FloorDiv(p, q)``, ``sympy.Mod`` becomes ``FloorMod`` and
    ``ShiftRight``/``BitAnd`` with constant masks become division/modulo.  Python's ``//`` and
    ``%`` on sympy symbols therefore work inside layout lambdas.

    Raises
    ------
    ValueError
        If the expression is not an integer-valued polynomial in the supported functions.
    """
    return _normalize_cached(sympy.sympify(e))


@functools.lru_cache(maxsize=65536)
def _normalize_cached(e: sympy.Expr) -> sympy.Expr:
    expr = _normalize(e)
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Rational) and not isinstance(node, Integer):
            raise ValueError(f"layout expressions must be integer valued; got {expr} (contains {node})")
        if isinstance(node, sympy.Float):
            raise ValueError(f"layout expressions must be integer valued; got float {node} in {expr}")
        if isinstance(node, sympy.Pow) and not (node.exp.is_Integer and node.exp > 0):
            raise ValueError(f"layout expressions must be integer valued; got power {node} in {expr}")
    return expr


def _normalize(e: sympy.Expr) -> sympy.Expr:
    if not e.args:
        return e
    args = [_normalize(a) for a in e.args]
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(args[0]))
        if isinstance(den, Integer) and den != 0:
            if den < 0:
                num, den = -num, -den
            return FloorDiv(sympy.expand(num), den)
        raise ValueError(f"cannot express floor({args[0]}) with an integer divisor")
    if isinstance(e, sympy.ceiling):
        num, den = sympy.fraction(sympy.together(args[0]))
        if isinstance(den, Integer) and den > 0:
            return FloorDiv(sympy.expand(num) + den - 1, den)
        raise ValueError(f"cannot express ceiling({args[0]}) with a positive integer divisor")
    if isinstance(e, sympy.Mod):
        return FloorMod(args[0], args[1])
    return e.func(*args)


# ----------------------------------------------------------------------------------------------
# Bounds


def _mul_bounds(x: Bound, y: Bound) -> Bound:
    prods = []
    for p in x:
        for q in y:
            prods.append(0 if (p == 0 or q == 0) else p * q)
    return (min(prods), max(prods))


def _fdiv_bound(v: float, c: int) -> float:
    return v if v in (INF, -INF) else v // c


def _is_pos_int(e: sympy.Expr) -> bool:
    return isinstance(e, Integer) and e > 0


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


class _Ctx:
    """One simplification session: symbol ranges plus memo tables."""

    def __init__(self, env: Mapping[sympy.Symbol, tuple[int, int]]) -> None:
        self.env = dict(env)
        self.bmemo: dict[sympy.Expr, Bound] = {}
        self.smemo: dict[sympy.Expr, sympy.Expr] = {}

    # -- bounds ------------------------------------------------------------------------------
    def bounds(self, e: sympy.Expr) -> Bound:
        hit = self.bmemo.get(e)
        if hit is None:
            hit = self._bounds(e)
            self.bmemo[e] = hit
        return hit

    def _bounds(self, e: sympy.Expr) -> Bound:
        if isinstance(e, Integer):
            return (int(e), int(e))
        if isinstance(e, sympy.Symbol):
            return self.env.get(e, (0 if e.is_nonnegative else -INF, INF))
        if isinstance(e, sympy.Add):
            bs = [self.bounds(a) for a in e.args]
            return (sum(b[0] for b in bs), sum(b[1] for b in bs))
        if isinstance(e, sympy.Mul):
            out: Bound = (1, 1)
            for a in e.args:
                out = _mul_bounds(out, self.bounds(a))
            return out
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
            lo, hi = self.bounds(e.base)
            n = int(e.exp)
            if lo >= 0:
                return (lo**n, hi**n)
            return (-INF, INF)
        return self._func_bounds(e)

    def _func_bounds(self, e: sympy.Expr) -> Bound:
        if isinstance(e, (FloorDiv, ShiftRight)):
            a, b = e.args
            c = 2 ** int(b) if isinstance(e, ShiftRight) and isinstance(b, Integer) else b
            if _is_pos_int(c):
                lo, hi = self.bounds(a)
                return (_fdiv_bound(lo, int(c)), _fdiv_bound(hi, int(c)))
            return (-INF, INF)
        if isinstance(e, FloorMod):
            a, b = e.args
            if not _is_pos_int(b):
                return (-INF, INF)
            c = int(b)
            lo, hi = self.bounds(a)
            if lo not in (INF, -INF) and hi not in (INF, -INF) and lo // c == hi // c:
                k = lo // c
                return (lo - k * c, hi - k * c)
            return (0, c - 1)
        if isinstance(e, (BitXor, BitAnd)):
            (la, ha), (lb, hb) = self.bounds(e.args[0]), self.bounds(e.args[1])
            if la < 0 or lb < 0:
                return (-INF, INF)
            if isinstance(e, BitAnd):
                return (0, min(ha, hb))
            hi = max(ha, hb)
            return (0, INF if hi == INF else (1 << int(hi).bit_length()) - 1)
        if isinstance(e, Lut):
            table = lut_array(int(e.args[0]))
            return (int(table.min()), int(table.max())) if table.size else (0, 0)
        return (-INF, INF)

    def in_range(self, e: sympy.Expr, lo: int, hi: int) -> bool:
        blo, bhi = self.bounds(e)
        return blo >= lo and bhi <= hi

    # -- simplification ----------------------------------------------------------------------
    def simp(self, e: sympy.Expr) -> sympy.Expr:
        hit = self.smemo.get(e)
        if hit is not None:
            return hit
        if not e.args:
            out = self._atom(e)
        else:
            cur = self._rebuild(e)
            for _ in range(16):
                nxt = self._rewrite(cur)
                if nxt is None or nxt == cur:
                    break
                cur = self._rebuild(nxt)
            out = cur
        self.smemo[e] = out
        return out

    def _atom(self, e: sympy.Expr) -> sympy.Expr:
        if isinstance(e, sympy.Symbol) and e in self.env and self.env[e][0] == self.env[e][1]:
            return Integer(self.env[e][0])
        return e

    def _rebuild(self, e: sympy.Expr) -> sympy.Expr:
        if not e.args:
            return self._atom(e)
        args = tuple(self.simp(a) for a in e.args)
        return e if args == e.args else e.func(*args)

    def _rewrite(self, e: sympy.Expr) -> sympy.Expr | None:
        from . import rules

        return rules.rewrite(self, e)


def _key(expr: sympy.Expr, ranges: Mapping[sympy.Symbol, tuple[int, int]]) -> tuple:
    free = expr.free_symbols
    return tuple(sorted(((s, int(r[0]), int(r[1])) for s, r in ranges.items() if s in free), key=lambda t: t[0].name))


@functools.lru_cache(maxsize=65536)
def _simplify_cached(expr: sympy.Expr, key: tuple) -> sympy.Expr:
    ctx = _Ctx({s: (lo, hi) for s, lo, hi in key})
    return ctx.simp(expr)


def simplify_expr(expr: object, ranges: Mapping[sympy.Symbol, tuple[int, int]] | None = None) -> sympy.Expr:
    """Simplify ``expr`` given inclusive ranges ``{symbol: (lo, hi)}`` for its symbols.

    Parameters
    ----------
    expr
        An integer layout expression (normalised with :func:`normalize` first).
    ranges
        Inclusive bounds for symbols; symbols not listed are assumed nonnegative if declared so.

    Returns
    -------
    sympy.Expr
        An equivalent expression on the given ranges.  The result is cached.
    """
    e = normalize(expr)
    return _simplify_cached(e, _key(e, ranges or {}))


def bounds(expr: sympy.Expr, ranges: Mapping[sympy.Symbol, tuple[int, int]] | None = None) -> Bound:
    """Inclusive interval bounds of ``expr`` (an over-approximation), possibly infinite."""
    return _Ctx(ranges or {}).bounds(sympy.sympify(expr))


def unsafe_for_c(expr: sympy.Expr, ranges: Mapping[sympy.Symbol, tuple[int, int]] | None = None) -> sympy.Expr | None:
    """The first division, modulo or bit operation whose operands are not provably nonnegative.

    C's ``/`` and ``%`` (and bit operations on signed ints) only agree with the floor semantics of
    the layout functions on nonnegative operands.  Returns ``None`` when every such operand is
    provably nonnegative on ``ranges``.
    """
    ctx = _Ctx(ranges or {})
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, (FloorDiv, FloorMod, ShiftRight, BitXor, BitAnd)):
            if any(ctx.bounds(a)[0] < 0 for a in node.args):
                return node
    return None
