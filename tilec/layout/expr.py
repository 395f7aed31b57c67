"""Integer expression primitives for the layout algebra.

All layout expressions are sympy expressions over nonnegative integer symbols.  Division and
modulo are represented by the functions :class:`FloorDiv` and :class:`FloorMod` (floor
semantics, which equal C's ``/`` and ``%`` on nonnegative operands); bit operations by
:class:`BitXor`, :class:`BitAnd` and :class:`ShiftRight`; table lookups by :class:`Lut`.
Each function folds to an ``Integer`` when all of its arguments are integers.

The helpers :func:`floordiv`, :func:`floormod`, :func:`bitxor`, :func:`bitand` and
:func:`shr` accept Python ints or sympy expressions, so layout lambdas can be evaluated on
either.
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np
import sympy
from sympy import Integer

__all__ = [
    "BitAnd",
    "BitXor",
    "FloorDiv",
    "FloorMod",
    "IntLike",
    "Lut",
    "ShiftRight",
    "bitand",
    "bitxor",
    "floordiv",
    "floormod",
    "index_symbols",
    "lut_array",
    "lut_name",
    "register_lut",
    "shr",
]

IntLike = int | sympy.Expr

_SYMBOL_NAMES = "ijklmn"


@functools.cache
def index_symbols(ndim: int) -> tuple[sympy.Symbol, ...]:
    """Canonical input symbols for an ``ndim``-dimensional index space.

    Up to six dimensions use ``i, j, k, l, m, n``; more use ``i0, i1, ...``.
    """
    if ndim <= len(_SYMBOL_NAMES):
        names = list(_SYMBOL_NAMES[:ndim])
    else:
        names = [f"i{d}" for d in range(ndim)]
    return tuple(sympy.Symbol(n, integer=True, nonnegative=True) for n in names)


def _all_int(*args: sympy.Expr) -> bool:
    return all(isinstance(a, Integer) for a in args)


class _IntFunction(sympy.Function):
    """Base class: integer valued, nonnegative when all arguments are nonnegative."""

    def _eval_is_integer(self) -> bool:
        return True

    def _eval_is_nonnegative(self) -> bool | None:
        if all(a.is_nonnegative for a in self.args):
            return True
        return None


class FloorDiv(_IntFunction):
    """``floor(a / b)`` for integers; printed as ``a / b`` in C (nonnegative operands)."""

    nargs = 2

    @classmethod
    def eval(cls, a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
        if _all_int(a, b):
            return Integer(int(a) // int(b))
        if b == 1:
            return a
        if a == 0:
            return Integer(0)
        return None


class FloorMod(_IntFunction):
    """``a - b * floor(a / b)``; printed as ``a % b`` in C (nonnegative operands)."""

    nargs = 2

    @classmethod
    def eval(cls, a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
        if _all_int(a, b):
            return Integer(int(a) % int(b))
        if b == 1 or a == 0:
            return Integer(0)
        return None


class BitXor(_IntFunction):
    """Bitwise exclusive or of two nonnegative integers; printed as ``a ^ b``."""

    nargs = 2

    @classmethod
    def eval(cls, a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
        if _all_int(a, b):
            return Integer(int(a) ^ int(b))
        if a == 0:
            return b
        if b == 0:
            return a
        if a == b:
            return Integer(0)
        return None


class BitAnd(_IntFunction):
    """Bitwise and of two nonnegative integers; printed as ``a & b``."""

    nargs = 2

    @classmethod
    def eval(cls, a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
        if _all_int(a, b):
            return Integer(int(a) & int(b))
        if a == 0 or b == 0:
            return Integer(0)
        if a == b:
            return a
        return None


class ShiftRight(_IntFunction):
    """Arithmetic right shift ``a >> b``; equals ``floor(a / 2**b)``."""

    nargs = 2

    @classmethod
    def eval(cls, a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
        if _all_int(a, b):
            return Integer(int(a) >> int(b))
        if b == 0:
            return a
        return None


# ----------------------------------------------------------------------------------------------
# Lookup tables

_LUTS: dict[int, np.ndarray] = {}


def register_lut(values: np.ndarray) -> int:
    """Register a 1-D integer table and return its content-derived key.

    The key is stable across processes (it is derived from a hash of the contents), so the C
    name returned by :func:`lut_name` is deterministic.
    """
    arr = np.ascontiguousarray(np.asarray(values, dtype=np.int64).reshape(-1))
    digest = hashlib.sha1(arr.tobytes() + str(arr.shape).encode()).hexdigest()
    key = int(digest[:12], 16)
    if key not in _LUTS:
        arr.setflags(write=False)
        _LUTS[key] = arr
    return key


def lut_array(key: int) -> np.ndarray:
    """The read-only table registered under ``key``."""
    return _LUTS[int(key)]


def lut_name(key: int) -> str:
    """The C identifier used for the table ``key`` (``tilec_lut_<12 hex digits>``)."""
    return f"tilec_lut_{int(key):012x}"


class Lut(_IntFunction):
    """``table[idx]`` for a registered table; ``Lut(key, idx)``.

    Printed in C as ``tilec_lut_<hex>[idx]``; the array contents come from :func:`lut_array`.
    """

    nargs = 2

    @classmethod
    def eval(cls, key: sympy.Expr, idx: sympy.Expr) -> sympy.Expr | None:
        if _all_int(key, idx):
            return Integer(int(_LUTS[int(key)][int(idx)]))
        return None

    def _eval_is_nonnegative(self) -> bool | None:
        return bool(_LUTS[int(self.args[0])].min(initial=0) >= 0)


# ----------------------------------------------------------------------------------------------
# Helpers usable on Python ints and sympy expressions


def _is_py_int(*args: object) -> bool:
    return all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in args)


def floordiv(a: IntLike, b: IntLike) -> IntLike:
    """Floor division that works on Python ints (``a // b``) and sympy expressions."""
    if _is_py_int(a, b):
        return int(a) // int(b)
    return FloorDiv(sympy.sympify(a), sympy.sympify(b))


def floormod(a: IntLike, b: IntLike) -> IntLike:
    """Floor modulo that works on Python ints (``a % b``) and sympy expressions."""
    if _is_py_int(a, b):
        return int(a) % int(b)
    return FloorMod(sympy.sympify(a), sympy.sympify(b))


def bitxor(a: IntLike, b: IntLike) -> IntLike:
    """Bitwise xor of nonnegative integers (ints or sympy expressions)."""
    if _is_py_int(a, b):
        return int(a) ^ int(b)
    return BitXor(sympy.sympify(a), sympy.sympify(b))


def bitand(a: IntLike, b: IntLike) -> IntLike:
    """Bitwise and of nonnegative integers (ints or sympy expressions)."""
    if _is_py_int(a, b):
        return int(a) & int(b)
    return BitAnd(sympy.sympify(a), sympy.sympify(b))


def shr(a: IntLike, b: IntLike) -> IntLike:
    """Right shift of a nonnegative integer (ints or sympy expressions)."""
    if _is_py_int(a, b):
        return int(a) >> int(b)
    return ShiftRight(sympy.sympify(a), sympy.sympify(b))


# ----------------------------------------------------------------------------------------------
# numpy implementations for lambdify


def _np_lut(key: object, idx: np.ndarray) -> np.ndarray:
    return lut_array(int(key))[np.asarray(idx, dtype=np.int64)]


NUMPY_FUNCS: dict[str, object] = {
    "FloorDiv": np.floor_divide,
    "FloorMod": np.mod,
    "BitXor": np.bitwise_xor,
    "BitAnd": np.bitwise_and,
    "ShiftRight": np.right_shift,
    "Lut": _np_lut,
}
