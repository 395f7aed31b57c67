"""Bridges between :mod:`tilec.layout` (sympy) and the IR: layout formulas as IR expressions, and a numpy
evaluator of IR index expressions (used to check, by enumeration over threads, what lowering emits)."""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from tilec.errors import TilecError
from tilec.ir.expr import BinOp, Cast, Const, Expr, Select, Table, UnOp, Var, as_expr, binop, const, select
from tilec.layout import BitAnd, BitXor, FloorDiv, FloorMod, Lut, ShiftRight
from tilec.lower.tir import MemRef


def to_ir(s: Any, env: dict[sympy.Symbol, Expr]) -> Expr:
    """A layout expression over symbols in ``env`` as an int32 IR expression."""
    if isinstance(s, (int, np.integer)):
        return const(int(s))
    if s.is_Integer:
        return const(int(s))
    if s.is_Symbol:
        return env[s]
    if s.is_Add:
        terms = sorted(s.args, key=lambda t: t.is_number)
        out = to_ir(terms[0], env)
        for t in terms[1:]:
            if t.is_number and t < 0:
                out = binop("-", out, -int(t))
            else:
                out = binop("+", out, to_ir(t, env))
        return out
    if s.is_Mul:
        factors = sorted(s.args, key=lambda t: t.is_number)
        out = to_ir(factors[0], env)
        for f in factors[1:]:
            out = binop("*", out, to_ir(f, env))
        return out
    if s.is_Pow and s.exp.is_Integer and s.exp > 0:
        base = to_ir(s.base, env)
        out = base
        for _ in range(int(s.exp) - 1):
            out = binop("*", out, base)
        return out
    ops = {FloorDiv: "//", FloorMod: "%", BitXor: "^", BitAnd: "&", ShiftRight: ">>"}
    for cls, op in ops.items():
        if isinstance(s, cls):
            return binop(op, to_ir(s.args[0], env), to_ir(s.args[1], env))
    if isinstance(s, Lut):
        raise TilecError(f"layout needs a lookup table ({s}); this layout is not supported by code generation")
    raise TilecError(f"cannot lower the layout expression {s}")


_NP_BIN = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide, "%": np.mod, "^": np.bitwise_xor,
    "&": np.bitwise_and, "|": np.bitwise_or, ">>": np.right_shift, "<<": np.left_shift, "min": np.minimum,
    "max": np.maximum, "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
    "==": np.equal, "!=": np.not_equal, "and": np.logical_and, "or": np.logical_or,
}  # fmt: skip


class NotTabulable(Exception):  # noqa: N818
    """The expression depends on something other than the tabulated variables."""


def eval_np(e: Any, env: dict[Var, Any]) -> Any:
    """Evaluate an integer IR expression with numpy, the variables in ``env`` given as arrays or ints."""
    if isinstance(e, (int, np.integer)):
        return e
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        if e not in env:
            raise NotTabulable(e.name)
        return env[e]
    if isinstance(e, BinOp) and e.op in _NP_BIN:
        a, b = eval_np(e.a, env), eval_np(e.b, env)
        if e.op in ("//", "%"):
            b = np.where(np.asarray(b) == 0, 1, b)
        return _NP_BIN[e.op](a, b)
    if isinstance(e, UnOp) and e.op in ("-", "not"):
        x = eval_np(e.a, env)
        return np.negative(x) if e.op == "-" else np.logical_not(x)
    if isinstance(e, Cast):
        return eval_np(e.value, env)
    if isinstance(e, Select):
        return np.where(eval_np(e.cond, env), eval_np(e.a, env), eval_np(e.b, env))
    if isinstance(e, Table):
        return e.at(eval_np(e.index, env))
    if isinstance(e, MemRef):
        raise NotTabulable("memory")
    raise NotTabulable(type(e).__name__)


def depends_only_on(e: Any, allowed: set[int]) -> bool:
    from tilec.ir.visit import walk

    return all(not isinstance(n, (Var, MemRef)) or id(n) in allowed for n in walk(e) if isinstance(n, (Var, MemRef)))


def cond_and(a: Expr | None, b: Expr | None) -> Expr | None:
    if a is None:
        return b
    if b is None:
        return a
    return binop("and", a, b)


def clamp_if(pred: Expr | None, off: Expr) -> Expr:
    """``pred ? off : 0``: an offset that is safe to read even where the predicate is false."""
    return off if pred is None else select(pred, off, as_expr(0))
