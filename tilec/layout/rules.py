"""Rewrite rules used by :mod:`tilec.layout.simplify` (see its docstring for the list).

Every rule takes the simplification context (for bounds) and a node whose children are already
simplified, and returns an equivalent expression or ``None`` when it does not apply.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, NamedTuple

import sympy
from sympy import Integer

from .expr import BitAnd, BitXor, FloorDiv, FloorMod, ShiftRight

if TYPE_CHECKING:
    from .simplify import _Ctx

INF = math.inf


@functools.lru_cache(maxsize=4096)
def _divisors_desc(c: int) -> tuple[int, ...]:
    """Divisors ``g`` of ``c`` with ``1 < g < c``, largest first."""
    out = set()
    for d in range(2, math.isqrt(c) + 1):
        if c % d == 0:
            out.update((d, c // d))
    out.discard(c)
    return tuple(sorted(out, reverse=True))


def _terms(e: sympy.Expr) -> list[tuple[int, sympy.Expr]] | None:
    """Split a sum into ``(integer coefficient, rest)`` pairs; ``rest == 1`` for constants."""
    out = []
    for t in sympy.Add.make_args(e):
        coeff, rest = t.as_coeff_Mul()
        if not isinstance(coeff, Integer):
            return None
        out.append((int(coeff), rest))
    return out


def _sum(terms: list[tuple[int, sympy.Expr]], div: int = 1) -> sympy.Expr:
    return sympy.Add(*[Integer(c // div) * r for c, r in terms])


def _is_pos_int(e: sympy.Expr) -> bool:
    return isinstance(e, Integer) and e > 0


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _nonneg(ctx: _Ctx, *es: sympy.Expr) -> bool:
    return all(ctx.bounds(x)[0] >= 0 for x in es)


def _keeps_nonneg(ctx: _Ctx, old: sympy.Expr, new: sympy.Expr) -> bool:
    """A rewrite may not turn a provably nonnegative div/mod operand into a possibly negative one
    (C's ``/`` and ``%`` only agree with floor semantics on nonnegative operands)."""
    return ctx.bounds(new)[0] >= 0 or ctx.bounds(old)[0] < 0


def _split_by(ctx: _Ctx, terms: list[tuple[int, sympy.Expr]], g: int, span: int) -> tuple | None:
    """Split ``terms`` into multiples of ``g`` and a rest provably in ``[0, span - 1]``."""
    mult = [(c, r) for c, r in terms if c % g == 0]
    rest = [(c, r) for c, r in terms if c % g != 0]
    if not mult:
        return None
    if rest and not ctx.in_range(_sum(rest), 0, span - 1):
        return None
    return mult, rest


# ----------------------------------------------------------------------------------------------
# FloorDiv / FloorMod


def _fdiv(ctx: _Ctx, a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
    if not _is_pos_int(b):
        return None
    c = int(b)
    lo, hi = ctx.bounds(a)
    if lo not in (INF, -INF) and hi not in (INF, -INF) and lo // c == hi // c:
        return Integer(lo // c)
    if isinstance(a, FloorDiv) and _is_pos_int(a.args[1]):
        return FloorDiv(a.args[0], a.args[1] * c)
    if isinstance(a, FloorMod) and _is_pos_int(a.args[1]) and int(a.args[1]) % c == 0:
        return FloorMod(FloorDiv(a.args[0], c), int(a.args[1]) // c)
    if isinstance(a, (BitXor, BitAnd)) and _is_pow2(c) and _nonneg(ctx, *a.args):
        return a.func(FloorDiv(a.args[0], c), FloorDiv(a.args[1], c))
    terms = _terms(a)
    if terms is None:
        return None
    quot = [(q, r) for q, r in terms if q % c == 0]
    rem = [(q, r) for q, r in terms if q % c != 0]
    consts = [(q, r) for q, r in rem if r == 1]
    if consts and consts[0][0] >= c:
        k = consts[0][0]
        quot.append((k - k % c, Integer(1)))
        rem = [t for t in rem if t[1] != 1] + ([(k % c, Integer(1))] if k % c else [])
    if quot and _keeps_nonneg(ctx, a, _sum(rem)):
        return _sum(quot, c) + FloorDiv(_sum(rem), c)
    for g in _divisors_desc(c):
        split = _split_by(ctx, terms, g, g)
        if split is not None:
            return FloorDiv(_sum(split[0], g), c // g)
    return None


def _fmod(ctx: _Ctx, a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
    if not _is_pos_int(b):
        return None
    c = int(b)
    lo, hi = ctx.bounds(a)
    if lo not in (INF, -INF) and hi not in (INF, -INF) and lo // c == hi // c:
        return a - Integer((lo // c) * c)
    if isinstance(a, FloorMod) and _is_pos_int(a.args[1]) and int(a.args[1]) % c == 0:
        return FloorMod(a.args[0], c)
    if isinstance(a, (BitXor, BitAnd)) and _is_pow2(c) and _nonneg(ctx, *a.args):
        return a.func(FloorMod(a.args[0], c), FloorMod(a.args[1], c))
    terms = _terms(a)
    if terms is None:
        return None
    kept = [(q % c, r) if r == 1 else (q, r) for q, r in terms if q % c != 0]
    if kept != terms and _keeps_nonneg(ctx, a, _sum(kept)):
        return FloorMod(_sum(kept), c)
    for g in _divisors_desc(c):
        split = _split_by(ctx, terms, g, g)
        if split is not None:
            mult, rest = split
            return g * FloorMod(_sum(mult, g), c // g) + _sum(rest)
    return None


# ----------------------------------------------------------------------------------------------
# Sums: digit merging


class _Digit(NamedTuple):
    """``coef * ((x // lo) % width)`` with ``width == INF`` meaning no modulo."""

    coef: int
    x: sympy.Expr
    lo: int
    width: float


def _as_digit(coef: int, rest: sympy.Expr) -> _Digit:
    if isinstance(rest, FloorMod) and _is_pos_int(rest.args[1]):
        inner, w = rest.args
        if isinstance(inner, FloorDiv) and _is_pos_int(inner.args[1]):
            return _Digit(coef, inner.args[0], int(inner.args[1]), int(w))
        return _Digit(coef, inner, 1, int(w))
    if isinstance(rest, FloorDiv) and _is_pos_int(rest.args[1]):
        return _Digit(coef, rest.args[0], int(rest.args[1]), INF)
    return _Digit(coef, rest, 1, INF)


def _from_digit(d: _Digit) -> sympy.Expr:
    inner = d.x if d.lo == 1 else FloorDiv(d.x, d.lo)
    val = inner if d.width == INF else FloorMod(inner, int(d.width))
    return Integer(d.coef) * val


def _merge(p: _Digit, q: _Digit) -> _Digit | None:
    if p.x != q.x or p.width == INF:
        if p.x == q.x and p.width == INF and q.width == INF and q.lo % p.lo == 0:
            # k*(x//a) - k*b*(x//(a*b)) == k*((x//a) % b)
            b = q.lo // p.lo
            if b > 1 and q.coef == -p.coef * b:
                return _Digit(p.coef, p.x, p.lo, b)
        return None
    w = int(p.width)
    if q.lo == p.lo * w and q.coef == p.coef * w:
        return _Digit(p.coef, p.x, p.lo, INF if q.width == INF else w * int(q.width))
    if q.lo == p.lo and q.width == INF and q.coef == -p.coef:
        # k*(x//a) - k*((x//a) % w) == k*w*(x//(a*w))
        return _Digit(q.coef * w, p.x, p.lo * w, INF)
    return None


def _add(ctx: _Ctx, e: sympy.Add) -> sympy.Expr | None:
    terms = _terms(e)
    if terms is None:
        return None
    digits = [_as_digit(c, r) for c, r in terms if r != 1]
    consts = [c for c, r in terms if r == 1]
    changed = False
    merged = True
    while merged:
        merged = False
        for a in range(len(digits)):
            for b in range(len(digits)):
                m = _merge(digits[a], digits[b]) if a != b else None
                if m is not None:
                    digits = [d for k, d in enumerate(digits) if k not in (a, b)] + [m]
                    merged = changed = True
                    break
            if merged:
                break
    if not changed:
        return None
    return sympy.Add(*[_from_digit(d) for d in digits], *[Integer(c) for c in consts])


# ----------------------------------------------------------------------------------------------
# Bit operations


def _trailing_zeros(e: sympy.Expr) -> float:
    if isinstance(e, Integer):
        v = abs(int(e))
        return INF if v == 0 else (v & -v).bit_length() - 1
    if isinstance(e, sympy.Mul):
        return sum(_trailing_zeros(a) for a in e.args)
    if isinstance(e, sympy.Add):
        return min(_trailing_zeros(a) for a in e.args)
    return 0


def _xor_split(ctx: _Ctx, a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
    """``(D + S) ^ b -> D + (S ^ b)`` with ``D % 2**k == 0`` and ``S, b < 2**k``."""
    hb = ctx.bounds(b)[1]
    if hb == INF:
        return None
    k = int(hb).bit_length()
    tz = _trailing_zeros(a)
    if tz >= k:
        return a + b
    terms = _terms(a)
    if terms is None or len(terms) < 2:
        return None
    split = _split_by(ctx, terms, 1 << k, 1 << k)
    if split is None:
        return None
    mult, rest = split
    return _sum(mult) + BitXor(_sum(rest), b)


def _xor_operands(e: sympy.Expr) -> list[sympy.Expr]:
    if isinstance(e, BitXor):
        return _xor_operands(e.args[0]) + _xor_operands(e.args[1])
    return [e]


def _xor_cancel(e: BitXor) -> sympy.Expr | None:
    """Flatten nested xors, cancel equal operand pairs and fold constants."""
    ops = _xor_operands(e)
    if len(ops) <= 2:
        return None
    const = 0
    counts: dict[sympy.Expr, int] = {}
    for op in ops:
        if isinstance(op, Integer):
            const ^= int(op)
        else:
            counts[op] = counts.get(op, 0) + 1
    kept = sorted((op for op, n in counts.items() if n % 2), key=sympy.default_sort_key)
    if const:
        kept.append(Integer(const))
    if len(kept) == len(ops):
        return None
    return functools.reduce(BitXor, kept) if kept else Integer(0)


def _xor(ctx: _Ctx, e: BitXor) -> sympy.Expr | None:
    a, b = e.args
    if not _nonneg(ctx, a, b):
        return None
    cancelled = _xor_cancel(e)
    if cancelled is not None:
        return cancelled
    for x, y in ((a, b), (b, a)):
        out = _xor_split(ctx, x, y)
        if out is not None:
            return out
    ordered = sorted((a, b), key=lambda x: (-ctx.bounds(x)[1], sympy.default_sort_key(x)))
    if tuple(ordered) != (a, b):
        return BitXor(*ordered)
    return None


def _band(ctx: _Ctx, e: BitAnd) -> sympy.Expr | None:
    a, b = e.args
    for x, m in ((a, b), (b, a)):
        if isinstance(m, Integer) and _is_pow2(int(m) + 1) and _nonneg(ctx, x):
            return FloorMod(x, int(m) + 1)
    ordered = sorted((a, b), key=sympy.default_sort_key)
    if tuple(ordered) != (a, b):
        return BitAnd(*ordered)
    return None


def rewrite(ctx: _Ctx, e: sympy.Expr) -> sympy.Expr | None:
    """Apply the first matching rule to ``e`` (children already simplified)."""
    if isinstance(e, FloorDiv):
        return _fdiv(ctx, *e.args)
    if isinstance(e, FloorMod):
        return _fmod(ctx, *e.args)
    if isinstance(e, sympy.Add):
        return _add(ctx, e)
    if isinstance(e, BitXor):
        return _xor(ctx, e)
    if isinstance(e, BitAnd):
        return _band(ctx, e)
    if isinstance(e, ShiftRight) and isinstance(e.args[1], Integer) and e.args[1] >= 0:
        return FloorDiv(e.args[0], 2 ** int(e.args[1]))
    return None
