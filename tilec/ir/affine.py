"""Affine forms of integer expressions: a fast, sympy-free path for the common simplifications.

``linear(e)`` writes ``e`` as ``c0 + sum(c_k * atom_k)`` where atoms are variables or any other
sub-expression (by identity); ``None`` when a product of two non-constants appears.
"""

from __future__ import annotations

from typing import Any

from tilec.ir.expr import BinOp, Cast, Const, Expr, UnOp

Form = dict[Any, int]  # atom (an Expr, by identity) or None (the constant) -> coefficient


def linear(e: Any) -> Form | None:
    """The affine form of an integer expression, or None."""
    if isinstance(e, bool):
        return None
    if isinstance(e, int):
        return {None: e}
    if not isinstance(e, Expr) or not e.dtype.is_int:
        return None
    if isinstance(e, Const):
        return {None: int(e.value)}
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        a, b = linear(e.a), linear(e.b)
        if a is None or b is None:
            return None
        return _add(a, b, 1 if e.op == "+" else -1)
    if isinstance(e, BinOp) and e.op == "*":
        a, b = linear(e.a), linear(e.b)
        if a is None or b is None:
            return None
        if set(a) <= {None}:
            return _scale(b, a.get(None, 0))
        if set(b) <= {None}:
            return _scale(a, b.get(None, 0))
        return None
    if isinstance(e, UnOp) and e.op == "-":
        a = linear(e.a)
        return None if a is None else _scale(a, -1)
    if isinstance(e, Cast) and e.value.dtype.is_int:
        return linear(e.value)
    return {e: 1}


def _add(a: Form, b: Form, sign: int) -> Form:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + sign * v
    return {k: v for k, v in out.items() if v != 0 or k is None}


def _scale(a: Form, c: int) -> Form:
    if c == 0:
        return {None: 0}
    return {k: v * c for k, v in a.items()}


def constant(e: Any) -> int | None:
    """The value of ``e`` when its affine form is a constant."""
    f = linear(e)
    if f is None or any(k is not None and v != 0 for k, v in f.items()):
        return None
    return f.get(None, 0)


def fast_dim(e: Any) -> int | Expr | None:
    """``e`` as an int, or as the single atom it equals; None when that needs real simplification."""
    form = linear(e)
    if form is None:
        return None
    atoms = [k for k, v in form.items() if k is not None and v != 0]
    c = form.get(None, 0)
    if not atoms:
        return c
    if len(atoms) == 1 and c == 0 and form[atoms[0]] == 1:
        return atoms[0]
    return None
