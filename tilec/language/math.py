"""Scalar math in kernels: intrinsics, min/max, selects, casts, constants."""

from __future__ import annotations

import math as _math
from typing import Any

import numpy as np

from tilec import dtypes as dt
from tilec.errors import TilecTypeError
from tilec.ir.expr import Expr, ExprLike, as_expr, binop, call, const, fit_ints, maximum, minimum, select, unop
from tilec.ir.expr import cast as _cast


def max(a: ExprLike, b: ExprLike) -> Any:  # noqa: A001
    """``T.max(a, b)`` (fmaxf on floats); a Python int a kernel int's type cannot hold widens it, as in ``a + b``."""
    return maximum(*fit_ints(a, b))


def min(a: ExprLike, b: ExprLike) -> Any:  # noqa: A001
    """``T.min(a, b)`` (fminf on floats); a Python int a kernel int's type cannot hold widens it, as in ``a + b``."""
    return minimum(*fit_ints(a, b))


def _unary(name: str):
    def fn(x: ExprLike) -> Expr:
        return call(name, x)

    fn.__name__ = name
    fn.__doc__ = f"``T.{name}(x)``, elementwise."
    return fn


exp = _unary("exp")
exp2 = _unary("exp2")
log = _unary("log")
log2 = _unary("log2")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
sin = _unary("sin")
cos = _unary("cos")
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")  # noqa: A001
sigmoid = _unary("sigmoid")
isnan = _unary("isnan")
isinf = _unary("isinf")


def abs(x: ExprLike) -> Any:  # noqa: A001
    """``T.abs(x)`` of a scalar expression (a Python number stays one)."""
    if isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_)):
        return x if x >= 0 else -x
    if not isinstance(x, Expr) and not (hasattr(x, "scope") and tuple(x.shape) == ()):  # nor a T.alloc_var
        raise TilecTypeError(f"T.abs: expected a scalar expression or a number, got {type(x).__name__} {x!r}")
    return call("abs", x)


def pow(x: ExprLike, y: ExprLike) -> Expr:  # noqa: A001
    """``T.pow(x, y)``: ``x`` to the power ``y``."""
    return call("pow", x, y)


def fma(a: ExprLike, b: ExprLike, c: ExprLike) -> Expr:
    """``T.fma(a, b, c)``: ``a * b + c`` rounded once, on every target."""
    return call("fma", a, b, c)


def if_then_else(cond: ExprLike, a: ExprLike, b: ExprLike) -> Expr:
    """``a`` where ``cond`` holds, else ``b`` (both evaluated)."""
    return select(cond, *fit_ints(a, b))


def cast(value: ExprLike, dtype: Any) -> Expr:
    """``T.cast(value, dtype)``."""
    _check_dtype_arg("T.cast(value, dtype)", dtype, "T.cast(x, 'float16'); T.Cast takes the dtype first")
    return _cast(dtype, value)


def Cast(dtype: Any, value: ExprLike) -> Expr:  # noqa: N802 - TVM spelling
    """``T.Cast(dtype, value)``: :func:`cast` with the dtype first (TVM's order)."""
    _check_dtype_arg("T.Cast(dtype, value)", dtype, "T.Cast('float16', x); T.cast takes the value first")
    return _cast(dtype, value)


def _check_dtype_arg(what: str, dtype: Any, hint: str) -> None:
    if isinstance(dtype, Expr):  # the arguments swapped: numpy's dtype conversion of an Expr failed obscurely
        raise TilecTypeError(f"{what}: the dtype argument is the kernel value {dtype}; the arguments are the other "
                             f"way round ({hint})")


def nan(dtype: Any = "float32") -> Expr:
    """A NaN of ``dtype`` (float32 by default)."""
    return const(_math.nan, dt.dtype(dtype))


def max_value(dtype: Any) -> Expr:
    """The largest finite value of ``dtype`` (True for bool)."""
    d = dt.dtype(dtype)
    if d.name == "bool":
        return const(True, d)
    if d.is_float:
        import ml_dtypes

        return const(float(ml_dtypes.finfo(d.np).max), d)
    return const(int(ml_dtypes_iinfo(d).max), d)


def min_value(dtype: Any) -> Expr:
    """The smallest (most negative) finite value of ``dtype`` (False for bool)."""
    d = dt.dtype(dtype)
    if d.name == "bool":
        return const(False, d)
    if d.is_float:
        import ml_dtypes

        return const(float(ml_dtypes.finfo(d.np).min), d)
    return const(int(ml_dtypes_iinfo(d).min), d)


def ml_dtypes_iinfo(d: dt.DType) -> Any:
    import numpy as np

    if d.name == "int4":
        class _I4:
            max, min = 7, -8
        return _I4
    return np.iinfo(d.np)


def all_of(*conds: ExprLike) -> Any:
    """The logical and of ``conds`` (True for none; Python bools stay Python bools)."""
    out: Any = True
    for c in conds:
        out = binop("and", out, c) if isinstance(out, Expr) or isinstance(c, Expr) else (out and c)
    return out


def any_of(*conds: ExprLike) -> Any:
    """The logical or of ``conds`` (False for none; Python bools stay Python bools)."""
    out: Any = False
    for c in conds:
        out = binop("or", out, c) if isinstance(out, Expr) or isinstance(c, Expr) else (out or c)
    return out


def logical_not(x: ExprLike) -> Any:
    """``not x``."""
    return unop("not", x) if isinstance(x, Expr) else not x


def floordiv(a: ExprLike, b: ExprLike) -> Any:
    """``a // b``, rounding toward minus infinity as Python's (see :func:`truncdiv` for C's)."""
    return binop("//", *fit_ints(a, b)) if isinstance(a, Expr) or isinstance(b, Expr) else a // b


def floormod(a: ExprLike, b: ExprLike) -> Any:
    """``a % b``, with the sign of ``b`` as Python's."""
    return binop("%", *fit_ints(a, b)) if isinstance(a, Expr) or isinstance(b, Expr) else a % b


def truncdiv(a: ExprLike, b: ExprLike) -> Any:
    """C division (rounds toward zero); equal to ``//`` for non-negative operands."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    a, b = fit_ints(a, b)
    x = as_expr(a, b.dtype if isinstance(b, Expr) else None)  # a Python int takes the other's type, as in a // b
    y = as_expr(b, x.dtype)
    # the floor quotient, one up where the division is inexact and the signs differ (|x| // |y| wrapped for the
    # type's minimum: int8 -128 // 3 gave 43)
    q = binop("//", x, y)
    up = binop("and", binop("!=", binop("%", x, y), 0), binop("!=", binop("<", x, 0), binop("<", y, 0)))
    return binop("+", q, _cast(q.dtype, up))
