"""Integer arithmetic on IR expressions through sympy: simplification, constant proofs, bounds.

Expressions that sympy cannot model (loads, calls, casts from floats) become opaque symbols, so every
answer here is sound: "unknown" (None) rather than a wrong claim.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import sympy

from tilec import dtypes as dt
from tilec.ir.affine import constant, fast_dim
from tilec.ir.expr import BinOp, Cast, Const, Expr, Table, UnOp, Var, as_expr, binop, const, unop

_counter = itertools.count()
_SYMBOL_OF: dict[int, sympy.Symbol] = {}
_VAR_OF: dict[sympy.Symbol, Expr] = {}
_KEEP: list[Expr] = []  # keeps ids in _SYMBOL_OF valid


def _symbol(e: Expr) -> sympy.Symbol:
    s = _SYMBOL_OF.get(id(e))
    if s is None:
        name = e.name if isinstance(e, Var) else "opaque"
        s = sympy.Symbol(f"{name}_{next(_counter)}", integer=True)
        _SYMBOL_OF[id(e)] = s
        _VAR_OF[s] = e
        _KEEP.append(e)
    return s


@functools.lru_cache(maxsize=65536)
def to_sympy(e: Expr) -> sympy.Expr:
    """An integer sympy expression equal to ``e`` (opaque symbols for what sympy cannot model)."""
    if isinstance(e, Const):
        if isinstance(e.value, bool):
            return sympy.Integer(int(e.value))
        if isinstance(e.value, int):
            return sympy.Integer(e.value)
        return _symbol(e)
    if isinstance(e, Var) and e.dtype.is_int:
        return _symbol(e)
    if isinstance(e, BinOp) and e.dtype.is_int:
        a, b = to_sympy(e.a), to_sympy(e.b)
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        if e.op == "//":
            return sympy.floor(a / b)
        if e.op == "%":
            return sympy.Mod(a, b)
        if e.op == "min":
            return sympy.Min(a, b)
        if e.op == "max":
            return sympy.Max(a, b)
    if isinstance(e, UnOp) and e.op == "-" and e.dtype.is_int:
        return -to_sympy(e.a)
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
        return to_sympy(e.value)
    return _symbol(e)


def from_sympy(s: sympy.Expr, dtype: dt.DType = dt.int32) -> Expr:
    """Back to IR: sums, products, floor, Mod, Min, Max over the symbols :func:`to_sympy` made."""
    if s.is_Integer:
        return const(int(s), dtype)
    if s.is_Symbol:
        return _VAR_OF[s]
    if s.is_Add:
        terms = sorted(s.args, key=lambda t: (t.is_number, sympy.default_sort_key(t)))
        out = from_sympy(terms[0], dtype)
        for t in terms[1:]:
            c, rest = t.as_coeff_Mul()
            if c.is_negative:
                out = binop("-", out, from_sympy(-t, dtype))
            else:
                out = binop("+", out, from_sympy(t, dtype))
        return out
    if s.is_Mul:
        c, rest = s.as_coeff_Mul()
        if c == -1:
            return unop("-", from_sympy(rest, dtype))
        factors = sorted(s.args, key=lambda t: (t.is_number, sympy.default_sort_key(t)))
        out = from_sympy(factors[0], dtype)
        for f in factors[1:]:
            out = binop("*", out, from_sympy(f, dtype))
        return out
    if isinstance(s, sympy.floor):
        num, den = s.args[0].as_numer_denom()
        return binop("//", from_sympy(num, dtype), from_sympy(den, dtype))
    if isinstance(s, sympy.Mod):
        return binop("%", from_sympy(s.args[0], dtype), from_sympy(s.args[1], dtype))
    if isinstance(s, (sympy.Min, sympy.Max)):
        op = "min" if isinstance(s, sympy.Min) else "max"
        out = from_sympy(s.args[0], dtype)
        for a in s.args[1:]:
            out = binop(op, out, from_sympy(a, dtype))
        return out
    if s.is_Pow and s.exp.is_Integer and s.exp > 0:
        base = from_sympy(s.base, dtype)
        out = base
        for _ in range(int(s.exp) - 1):
            out = binop("*", out, base)
        return out
    raise ValueError(f"cannot convert {s} back to IR")


def simplify(e: Any) -> Any:
    """A simpler equal integer expression (a Python int when constant); non-integer expressions pass through."""
    if not isinstance(e, Expr):
        return e
    if not e.dtype.is_int or isinstance(e, (Const, Var)):
        return e.value if isinstance(e, Const) else e
    s = to_sympy(e)
    if s.is_Integer:
        return int(s)
    try:
        return from_sympy(s, e.dtype)
    except ValueError:
        return e


def simplify_to_dim(e: Any) -> int | Expr | None:
    """``e`` simplified for use as an extent: an int, or an expression of variables; None if it has opaque parts."""
    if isinstance(e, int):
        return e
    e = as_expr(e)
    fast = fast_dim(e)
    if fast is not None:
        return fast
    s = to_sympy(e)
    if s.is_Integer:
        return int(s)
    if any(not isinstance(_VAR_OF.get(sym), Var) for sym in s.free_symbols):
        return None
    return simplify(e)


def const_int(e: Any) -> int | None:
    """The value of ``e`` when it is provably a constant integer."""
    if isinstance(e, int) and not isinstance(e, bool):
        return e
    if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value
    if isinstance(e, Expr) and e.dtype.is_int:
        c = constant(e)
        if c is not None:
            return c
        s = to_sympy(e)
        if not s.is_Integer:
            s = sympy.expand(s)  # (i + 1) * (j + 1) - i * j - i - j
        if s.is_Integer:
            return int(s)
    return None


def bounds(e: Any, ranges: dict[Var, tuple[int, int]]) -> tuple[int, int] | None:
    """Inclusive integer bounds of ``e`` given inclusive ranges of some variables, or None when unknown.

    Interval arithmetic over + - * // % min max; sound but not tight.
    """
    if isinstance(e, int):
        return (e, e)
    if isinstance(e, Const) and isinstance(e.value, int):
        return (int(e.value), int(e.value))
    if isinstance(e, Var):
        return ranges.get(e)
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
        return bounds(e.value, ranges)
    if isinstance(e, Table):
        return (min(e.values), max(e.values))
    if isinstance(e, UnOp) and e.op == "-":
        b = bounds(e.a, ranges)
        return None if b is None else (-b[1], -b[0])
    if not isinstance(e, BinOp):
        return None
    a, b = bounds(e.a, ranges), bounds(e.b, ranges)
    if e.op == "%" and a is None and b is not None and b[0] > 0:  # a floor modulo: in [0, b) whatever a is
        return (0, b[1] - 1)
    if a is None or b is None:
        return None
    return _interval(e.op, a, b)


def _interval(op: str, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    if op == "+":
        return (a[0] + b[0], a[1] + b[1])
    if op == "-":
        return (a[0] - b[1], a[1] - b[0])
    if op == "*":
        p = [x * y for x in a for y in b]
        return (min(p), max(p))
    if op == "//" and b[0] > 0:
        p = [x // y for x in a for y in b]
        return (min(p), max(p))
    if op == "%" and b[0] > 0:
        if a[0] >= 0 and a[1] < b[0]:
            return a
        return (0, b[1] - 1)
    if op == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if op == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    return None
