"""Scalar expressions of the Tile IR.

Nodes are frozen dataclasses with identity equality: two ``Var("i")`` are different variables. They are
built through the helpers at the bottom (:func:`binop`, :func:`cast`, :func:`select`, ...), which infer the
result dtype, coerce Python numbers and fold constants; the Python operators on :class:`Expr` call them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from tilec import dtypes as dt
from tilec.dtypes import DType
from tilec.errors import TilecTypeError, TilecValueError, caller_loc

if TYPE_CHECKING:
    from tilec.ir.buffer import Buffer

ARITH_OPS = ("+", "-", "*", "/", "//", "%", "min", "max", "&", "|", "^", "<<", ">>")
CMP_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGIC_OPS = ("and", "or")

# intrinsic name -> (minimum arity, maximum arity); all are elementwise on floats
INTRINSICS = {
    "exp": (1, 1), "exp2": (1, 1), "log": (1, 1), "log2": (1, 1), "sqrt": (1, 1), "rsqrt": (1, 1),
    "abs": (1, 1), "tanh": (1, 1), "sin": (1, 1), "cos": (1, 1), "floor": (1, 1), "ceil": (1, 1),
    "round": (1, 1), "sigmoid": (1, 1), "pow": (2, 2), "fma": (3, 3), "isnan": (1, 1), "isinf": (1, 1),
}  # fmt: skip


class Expr:
    """Base of all scalar expressions. ``dtype`` is a field of every subclass."""

    dtype: DType

    def __bool__(self) -> bool:
        raise TilecTypeError(
            f"a kernel value ({self}) has no Python truth value at compile time; use an `if` inside the kernel "
            "body, T.if_then_else(cond, a, b), or T.all_of/T.any_of"
        )

    def __str__(self) -> str:
        from tilec.ir.printer import expr_str

        return expr_str(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}: {self.dtype}>"

    # arithmetic operators build IR (comparisons too; == stays identity, see the frontend for `==`)
    def __add__(self, o): return binop("+", self, o)
    def __radd__(self, o): return binop("+", o, self)
    def __sub__(self, o): return binop("-", self, o)
    def __rsub__(self, o): return binop("-", o, self)
    def __mul__(self, o): return binop("*", self, o)
    def __rmul__(self, o): return binop("*", o, self)
    def __truediv__(self, o): return binop("/", self, o)
    def __rtruediv__(self, o): return binop("/", o, self)
    def __floordiv__(self, o): return binop("//", self, o)
    def __rfloordiv__(self, o): return binop("//", o, self)
    def __mod__(self, o): return binop("%", self, o)
    def __rmod__(self, o): return binop("%", o, self)
    def __and__(self, o): return binop("&", self, o)
    def __rand__(self, o): return binop("&", o, self)
    def __or__(self, o): return binop("|", self, o)
    def __ror__(self, o): return binop("|", o, self)
    def __xor__(self, o): return binop("^", self, o)
    def __rxor__(self, o): return binop("^", o, self)
    def __lshift__(self, o): return binop("<<", self, o)
    def __rshift__(self, o): return binop(">>", self, o)
    def __lt__(self, o): return binop("<", self, o)
    def __le__(self, o): return binop("<=", self, o)
    def __gt__(self, o): return binop(">", self, o)
    def __ge__(self, o): return binop(">=", self, o)
    def __neg__(self): return unop("-", self)
    def __invert__(self): return unop("~", self)
    def __pos__(self): return self

    def astype(self, dtype: Any) -> Expr:
        return cast(dtype, self)

    __hash__ = object.__hash__  # identity, as for every IR node


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A scalar variable: a block or loop index, a symbolic dimension, a scalar kernel parameter."""

    name: str
    dtype: DType = dt.int32


@dataclass(frozen=True, eq=False, repr=False)
class SizeVar(Var):
    """A symbolic size (``T.dynamic``): the one kind of variable a tile region's extent may depend on."""


def is_size_expr(e: Any) -> bool:
    """``e`` is an int, or an integer expression of constants and :class:`SizeVar` only (a valid extent)."""
    if isinstance(e, int):
        return True
    if isinstance(e, (SizeVar, Const)):
        return e.dtype.is_int
    if isinstance(e, BinOp):
        return e.op in ("+", "-", "*", "//", "%", "min", "max") and is_size_expr(e.a) and is_size_expr(e.b)
    if isinstance(e, UnOp):
        return e.op == "-" and is_size_expr(e.a)
    if isinstance(e, Cast):
        return e.dtype.is_int and is_size_expr(e.value)
    return False


@dataclass(frozen=True, eq=False, repr=False)
class Const(Expr):
    """A typed constant."""

    value: int | float | bool
    dtype: DType


@dataclass(frozen=True, eq=False, repr=False)
class BinOp(Expr):
    """``a op b``; ``op`` in :data:`ARITH_OPS`, :data:`CMP_OPS` or :data:`LOGIC_OPS`.

    ``//`` and ``%`` round toward negative infinity (Python semantics) on integers.
    """

    op: str
    a: Expr
    b: Expr
    dtype: DType


@dataclass(frozen=True, eq=False, repr=False)
class UnOp(Expr):
    """``-a``, ``~a`` (bitwise) or ``not a``."""

    op: str
    a: Expr
    dtype: DType


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A math intrinsic from :data:`INTRINSICS`."""

    name: str
    args: tuple[Expr, ...]
    dtype: DType


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    value: Expr
    dtype: DType


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    """``a if cond else b``, both sides evaluated (``T.if_then_else``)."""

    cond: Expr
    a: Expr
    b: Expr
    dtype: DType


@dataclass(frozen=True, eq=False, repr=False)
class Table(Expr):
    """``values[index]``: an entry of a table of integers fixed at compile time (a persistent kernel's order of
    tiles, :mod:`tilec.passes.pipelining`); ``index`` lies in ``range(len(values))``."""

    values: tuple[int, ...]
    index: Expr
    dtype: DType = dt.int32
    DATA_FIELDS = ("values",)  # (not child nodes: the traversals of tilec.ir.visit skip them)

    @functools.cached_property
    def array(self) -> np.ndarray:
        """The entries as an array (made once: the interpreters index it at every evaluation)."""
        return np.asarray(self.values, dtype=np.int64)

    def at(self, index: Any) -> Any:
        """The entries at ``index`` (an int or an array of them), checked to be in range."""
        idx = np.asarray(index)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self.values)):
            raise IndexError(f"table index {idx.min()}..{idx.max()} outside 0..{len(self.values) - 1}")
        return self.array[idx]


@dataclass(frozen=True, eq=False, repr=False)
class Load(Expr):
    """One element of a buffer: ``buffer[indices]``."""

    buffer: Buffer
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.buffer.dtype


ExprLike = Union[Expr, int, float, bool]


# ----------------------------------------------------------------------------------------------------------------
# builders


def const(value: int | float | bool, dtype: DType | str | None = None) -> Const:
    """A constant; the dtype defaults to bool / int32 (int64, then uint64, when it does not fit) / float32.

    Integer values outside ``dtype``'s range wrap modulo 2**bits (two's complement), as a C conversion does.
    """
    if dtype is None:
        if isinstance(value, bool):
            dtype = dt.boolean
        elif isinstance(value, int):  # (a value of [2**63, 2**64) is a uint64, not wrapped negative into int64)
            if not -(2**63) <= value < 2**64:
                raise TilecTypeError(f"the integer constant {value} does not fit a 64-bit type")
            dtype = dt.int32 if -(2**31) <= value < 2**31 else dt.int64 if value < 2**63 else dt.uint64
        elif isinstance(value, float):
            dtype = dt.float32
        else:
            raise TilecTypeError(f"expected a number, got {type(value).__name__} {value!r}")
    dtype = dt.dtype(dtype)
    if dtype.is_float:
        value = float(value)
    elif dtype.is_bool:
        value = bool(value)
    else:
        if isinstance(value, float) and not value.is_integer():
            raise TilecTypeError(f"constant {value!r} is not an integer but {dtype} was asked for")
        value = dt.wrap_int(int(value), dtype)  # out-of-range values wrap, as in C
    return Const(value, dtype)


def as_expr(value: Any, like: DType | None = None, what: str = "") -> Expr:
    """Coerce a Python number to a :class:`Const` (taking ``like``'s dtype when compatible); pass Exprs through.
    ``what`` (``"T.fill: value"``) names the parameter in the error for anything else."""
    if isinstance(value, Expr):
        return value
    if hasattr(value, "scope") and tuple(value.shape) == ():  # a T.alloc_var or 0-d tensor read by name
        return Load(value, ())
    if hasattr(value, "item") and not isinstance(value, (list, tuple)):  # numpy scalars
        value = value.item()
    if isinstance(value, (bool, int, float)):
        if like is not None and not isinstance(value, bool):
            if like.is_float or (like.is_int and isinstance(value, int)):
                return const(value, like)
        return const(value)
    must = f"{what} must be" if what else "expected"
    raise TilecTypeError(f"{must} a scalar expression or a number, got {type(value).__name__} {value!r}")


def const_value(e: Any) -> int | float | bool | None:
    """The Python value of a constant expression or number, else None."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, (bool, int, float)):
        return e
    return None


def _pair(a: Any, b: Any) -> tuple[Expr, Expr]:
    if isinstance(a, Expr) and not isinstance(b, Expr):
        return a, as_expr(b, a.dtype)
    if isinstance(b, Expr) and not isinstance(a, Expr):
        return as_expr(a, b.dtype), b
    return as_expr(a), as_expr(b)


def _fold(op: str, x: Any, y: Any, operand: DType) -> Any:
    if op == "/" or op in ("//", "%") and operand.is_float:  # IEEE's: x / 0.0 is inf or NaN, as at run time
        with np.errstate(divide="ignore", invalid="ignore"):
            return {"/": np.divide, "//": np.floor_divide, "%": np.mod}[op](np.float64(x), np.float64(y)).item()
    if op in ("//", "%") and y == 0:
        raise TilecTypeError(f"division by zero in a constant expression ({x} {op} {y})")
    if op in ("<<", ">>"):  # any count, as tl::shl / tl::shr and the interpreters shift (numpy's result)
        with np.errstate(over="ignore"):
            shift = np.left_shift if op == "<<" else np.right_shift
            return shift(np.array(x, operand.np), np.array(y, operand.np)).item()
    table = {
        "+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "//": lambda: x // y, "%": lambda: x % y,
        "min": lambda: y if x != x else min(x, y), "max": lambda: y if x != x else max(x, y),  # fminf / fmaxf:
        "&": lambda: x & y, "|": lambda: x | y, "^": lambda: x ^ y, "<<": lambda: x << y,  # a NaN operand skipped
        ">>": lambda: x >> y, "<": lambda: x < y, "<=": lambda: x <= y, ">": lambda: x > y, ">=": lambda: x >= y,
        "==": lambda: x == y,
        "!=": lambda: x != y, "and": lambda: bool(x) and bool(y), "or": lambda: bool(x) or bool(y),
    }  # fmt: skip
    return table[op]()


def _typed_value(c: Const) -> Any:
    """A float constant's value in its type, as the interpreters and the GPU compute with it (1 + 2**24 as a float32
    is 2**24); other constants' values are already their type's."""
    if not c.dtype.is_float:
        return c.value
    return dt.typed(np.asarray(c.value), c.dtype).item()


def _result_dtype(op: str, a: Expr, b: Expr) -> tuple[DType, DType]:
    """(operand dtype, result dtype) of ``a op b``."""
    if op in LOGIC_OPS:
        return dt.boolean, dt.boolean
    common = dt.promote(a.dtype, b.dtype)
    if op in CMP_OPS:
        return common, dt.boolean
    if op == "/" and not common.is_float:
        raise TilecTypeError(f"`/` on integers ({a} / {b}) is not defined in a kernel; use `//` for floor "
                             "division or cast an operand to a float type")
    if op in ("&", "|", "^", "<<", ">>") and not (common.is_int or common.is_bool):
        raise TilecTypeError(f"bitwise `{op}` needs integer operands, got {a.dtype} and {b.dtype}")
    if common.is_bool and op in ("+", "-", "*", "//", "%", "<<", ">>"):  # an int, as in Python and C: True + True
        return dt.int32, dt.int32  # is 2 (numpy's bool sum is their logical or, and it has no bool subtraction)
    return common, common


def binop(op: str, a: ExprLike, b: ExprLike) -> Expr:
    """Build ``a op b`` with dtype promotion, Python-number coercion and constant folding."""
    x, y = _pair(a, b)
    operand, result = _result_dtype(op, x, y)
    if operand is not x.dtype and op not in LOGIC_OPS:
        x = cast(operand, x)
    if operand is not y.dtype and op not in LOGIC_OPS:
        y = cast(operand, y)
    if isinstance(x, Const) and isinstance(y, Const):  # in the operand type: int32 2**24 + 1 == float32 2**24
        return const(_fold(op, _typed_value(x), _typed_value(y), operand), result)
    simple = _identity(op, x, y)
    if simple is not None:
        return simple
    return BinOp(op, x, y, result)


def _identity(op: str, x: Expr, y: Expr) -> Expr | None:
    xv, yv = const_value(x), const_value(y)
    if op == "+" and yv == 0 and not isinstance(yv, bool):
        return x
    if op == "+" and xv == 0 and not isinstance(xv, bool):
        return y
    if op == "-" and yv == 0:
        return x
    if op == "*" and yv == 1:
        return x
    if op == "*" and xv == 1:
        return y
    if op in ("*",) and x.dtype.is_int and (xv == 0 or yv == 0):
        return const(0, x.dtype)
    if op in ("//",) and yv == 1 and x.dtype.is_int:
        return x
    if op == "and":
        if xv is True:
            return y
        if yv is True:
            return x
        if xv is False or yv is False:
            return const(False)
    if op == "or":
        if xv is False:
            return y
        if yv is False:
            return x
        if xv is True or yv is True:
            return const(True)
    return None


def unop(op: str, a: ExprLike) -> Expr:
    """``-a``, ``~a`` or ``not a``."""
    x = as_expr(a)
    if op == "not":
        if isinstance(x, Const):
            return const(not x.value)
        return UnOp("not", x, dt.boolean)
    if op == "-" and x.dtype.is_bool:  # Python's -True is -1: an int (as the frontend negates a bool)
        x = cast(dt.int32, x)
    if isinstance(x, Const):
        if op == "~" and x.dtype.is_bool:  # ~ of a bool is its logical not, as interpreted (~1 is -2: true)
            return const(not x.value)
        return const(-x.value if op == "-" else ~int(x.value), x.dtype)
    if op == "~" and not (x.dtype.is_int or x.dtype.is_bool):
        raise TilecTypeError(f"`~` needs an integer operand, got {x.dtype}")
    return UnOp(op, x, x.dtype)


def cast(dtype: Any, value: ExprLike) -> Expr:
    """``T.cast(value, dtype)``; folds constants (with the target type's rounding)."""
    dtype = dt.dtype(dtype)
    x = as_expr(value)
    if x.dtype is dtype:
        return x
    if isinstance(x, Const):
        v = x.value
        if dtype.is_int and isinstance(v, float) and not math.isfinite(v):
            raise TilecTypeError(f"cannot cast {v} to {dtype}")
        if not dtype.is_bool:  # as the interpreters convert a value at run time (fp8 and float to int saturate)
            v = dt.typed(np.asarray(v), dtype).item()
        return const(v, dtype)
    return Cast(x, dtype)


def select(cond: ExprLike, a: ExprLike, b: ExprLike) -> Expr:
    """``T.if_then_else(cond, a, b)``."""
    c = as_expr(cond)
    x, y = _pair(a, b)
    common = dt.promote(x.dtype, y.dtype)
    x, y = cast(common, x), cast(common, y)
    if not c.dtype.is_bool:
        c = binop("!=", c, 0)
    cv = const_value(c)
    if cv is not None:
        return x if cv else y
    return Select(c, x, y, common)


def call(name: str, *args: ExprLike) -> Expr:
    """A math intrinsic (``T.exp`` ...). Integer arguments are computed in float32."""
    lo, hi = INTRINSICS[name]
    if not lo <= len(args) <= hi:
        raise TilecTypeError(f"T.{name} takes {lo} argument(s), got {len(args)}")
    exprs = [as_expr(a) for a in args]
    common = exprs[0].dtype
    for e in exprs[1:]:
        common = dt.promote(common, e.dtype)
    if name == "abs" and (common.is_int or common.is_float):
        pass
    elif not common.is_float:
        common = dt.float32
    exprs = [cast(common, e) for e in exprs]
    result = dt.boolean if name in ("isnan", "isinf") else common
    return Call(name, tuple(exprs), result)


def fit_ints(a: Any, b: Any) -> tuple[Any, Any]:
    """The operands of a binary operation, a Python int beside a kernel int of a type that cannot hold it made an
    int64 constant (the other operand widens to it, so the arithmetic is Python's, not the constant wrapped into the
    kernel value's type: ``A[i] < 2**40`` was ``A[i] < 0``); an error where no 64-bit type holds both."""
    def fit(x: Any, other: Any) -> Any:
        if not (isinstance(other, Expr) and other.dtype.is_int and isinstance(x, int) and not isinstance(x, bool)):
            return x
        d = other.dtype
        lo, hi = (0, 1 << d.bits) if d.kind == "uint" else (-(1 << (d.bits - 1)), 1 << (d.bits - 1))
        if lo <= x < hi:
            return x
        if d.bits < 64 and -(1 << 63) <= x < 1 << 63:
            return const(x, "int64")
        raise TilecTypeError(f"the constant {x} does not fit {d} (the type of {other}) nor int64")

    return fit(a, b), fit(b, a)


def minimum(a: ExprLike, b: ExprLike) -> Any:
    """``T.min``: a Python value when both are Python values."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return min(a, b)
    return binop("min", a, b)


def maximum(a: ExprLike, b: ExprLike) -> Any:
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return max(a, b)
    return binop("max", a, b)


def ceildiv(a: ExprLike, b: ExprLike) -> Any:
    """``(a + b - 1) // b``; a Python int when both are Python ints. Of a symbolic size (a :class:`SizeVar` in
    ``a``) it is built as ``a // b + (a % b + b - 1) // b`` (equal under floor division for every ``a`` and ``b``):
    ``a + b - 1`` would wrap in int32 for a size near 2**31 (a loop bound ``T.ceildiv(M, 32)`` of 0 trips, or
    negative); block and loop indices, bounded by the grid, keep the one division."""
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in (a, b)):
        if b == 0:
            raise TilecValueError(f"T.ceildiv({a}, {b}): b must not be 0", caller_loc())
        return -(-int(a) // int(b))
    for name, v in (("a", a), ("b", b)):  # of a float, 2.5, the result would be 7.0
        if isinstance(v, (bool, np.bool_, str)) or not as_expr(v).dtype.is_int:
            raise TilecTypeError(f"T.ceildiv: {name} must be an integer, got {type(v).__name__} {v!r}", caller_loc())
    if _has_size_var(a):
        return binop("+", binop("//", a, b), binop("//", binop("+", binop("%", a, b), binop("-", b, 1)), b))
    return binop("//", binop("+", a, binop("-", b, 1)), b)


def _has_size_var(e: Any) -> bool:
    if isinstance(e, SizeVar):
        return True
    if isinstance(e, tuple):
        return any(map(_has_size_var, e))
    return isinstance(e, Expr) and any(_has_size_var(getattr(e, f.name)) for f in dataclasses.fields(e))


def infinity(dtype: Any) -> Const:
    """``T.infinity(dtype)``: +inf of a float dtype."""
    return const(math.inf, dt.dtype(dtype))
