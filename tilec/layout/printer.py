"""Printing layout expressions as C or Python-like source text.

Two styles share one precedence-aware printer:

``"c"``
    C integer expressions: ``+ - *``, ``/`` and ``%`` (exact for nonnegative operands), ``^``,
    ``&``, ``>>``.  With ``pow2_bitops=True`` (the default) a division by ``2**k`` prints as
    ``>> k`` and a modulo by ``2**k`` as ``& (2**k - 1)``.  Table lookups print as
    ``tilec_lut_<hex>[index]``.
``"py"``
    The same with ``//`` for division; used by ``__str__``.  Both styles evaluate in Python
    (``/`` must be replaced by ``//`` for the C style).

Operands of bit operators and of ``/``, ``%`` inside products are always parenthesised, so the
output never relies on C's surprising ``&``/``^`` precedence.
"""

from __future__ import annotations

import functools
import re

import sympy

from .expr import BitAnd, BitXor, FloorDiv, FloorMod, Lut, ShiftRight, lut_name

__all__ = ["render"]

_ATOM = 100
_MUL = 50
_ADD = 40
_SHIFT = 30
_AND = 20
_XOR = 10
_LOW = 0

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")


def _wrap(text_prec: tuple[str, int], need: int) -> str:
    text, prec = text_prec
    return text if prec >= need else f"({text})"


def _pow2_exponent(value: sympy.Expr) -> int | None:
    if isinstance(value, sympy.Integer) and value > 0:
        v = int(value)
        if v & (v - 1) == 0:
            return v.bit_length() - 1
    return None


class _Printer:
    def __init__(self, names: dict[sympy.Symbol, str], style: str, pow2_bitops: bool) -> None:
        self.names = names
        self.style = style
        self.pow2 = pow2_bitops and style == "c"
        self.mul = " * " if style == "c" else "*"

    def emit(self, e: sympy.Expr) -> tuple[str, int]:
        if isinstance(e, sympy.Integer):
            v = int(e)
            return (str(v), _ATOM if v >= 0 else _LOW)
        if isinstance(e, sympy.Symbol):
            name = self.names.get(e, e.name)
            return (name, _ATOM if _IDENT.match(name) or name.isdigit() else _LOW)
        if isinstance(e, sympy.Add):
            return self._add(e)
        if isinstance(e, sympy.Mul):
            return self._mulexpr(e)
        if isinstance(e, sympy.Pow):
            return self._pow(e)
        return self._func(e)

    def _add(self, e: sympy.Add) -> tuple[str, int]:
        terms = sorted(e.args, key=_term_sort_key)
        parts: list[str] = []
        for t in terms:
            coeff, _ = t.as_coeff_Mul()
            if parts and coeff < 0:
                parts.append(" - " + _wrap(self.emit(-t), _ADD + 1))
            elif parts:
                parts.append(" + " + _wrap(self.emit(t), _ADD))
            else:
                parts.append(_wrap(self.emit(t), _ADD))
        return ("".join(parts), _ADD)

    def _mulexpr(self, e: sympy.Mul) -> tuple[str, int]:
        coeff, rest = e.as_coeff_Mul()
        factors = list(sympy.Mul.make_args(rest))
        if coeff == -1:
            inner = self._mulexpr(rest) if isinstance(rest, sympy.Mul) else self.emit(rest)
            return ("-" + _wrap(inner, _MUL + 1), _LOW)
        texts = [_wrap(self.emit(f), _MUL + 1) for f in factors]
        if coeff != 1:
            texts.append(_wrap(self.emit(coeff), _MUL + 1))
        return (self.mul.join(texts), _MUL)

    def _pow(self, e: sympy.Pow) -> tuple[str, int]:
        base, exp = e.args
        if not (isinstance(exp, sympy.Integer) and exp > 0):
            raise ValueError(f"cannot print non-integer power {e} as an integer expression")
        text = _wrap(self.emit(base), _MUL + 1)
        return (self.mul.join([text] * int(exp)), _MUL)

    def _binop(self, a: sympy.Expr, op: str, b: sympy.Expr, prec: int) -> tuple[str, int]:
        return (f"{_wrap(self.emit(a), _ATOM)} {op} {_wrap(self.emit(b), _ATOM)}", prec)

    def _func(self, e: sympy.Expr) -> tuple[str, int]:
        a, b = e.args if len(e.args) == 2 else (None, None)
        if isinstance(e, FloorDiv):
            k = _pow2_exponent(b) if self.pow2 else None
            if k is not None:
                return self._binop(a, ">>", sympy.Integer(k), _SHIFT)
            return self._binop(a, "/" if self.style == "c" else "//", b, _MUL)
        if isinstance(e, FloorMod):
            k = _pow2_exponent(b) if self.pow2 else None
            if k is not None:
                return self._binop(a, "&", sympy.Integer(2**k - 1), _AND)
            return self._binop(a, "%", b, _MUL)
        if isinstance(e, BitXor):
            return self._binop(a, "^", b, _XOR)
        if isinstance(e, BitAnd):
            return self._binop(a, "&", b, _AND)
        if isinstance(e, ShiftRight):
            return self._binop(a, ">>", b, _SHIFT)
        if isinstance(e, Lut):
            return (f"{lut_name(int(a))}[{self.emit(b)[0]}]", _ATOM)
        raise ValueError(f"cannot print {type(e).__name__} expression {e} as an integer expression")


def _term_sort_key(t: sympy.Expr) -> tuple[int, int, int, str]:
    """Positive terms before negative ones; among them larger coefficients first, constants last."""
    coeff, rest = t.as_coeff_Mul()
    negative = 1 if coeff.is_negative else 0
    if rest == 1:
        return (negative, 1, 0, "")
    mag = -abs(int(coeff)) if coeff.is_Integer else 0
    return (negative, 0, mag, sympy.srepr(rest))


@functools.lru_cache(maxsize=16384)
def _render_cached(e: sympy.Expr, names: tuple[tuple[sympy.Symbol, str], ...], style: str, pow2: bool) -> str:
    return _Printer(dict(names), style, pow2).emit(e)[0]


def render(
    expr: sympy.Expr,
    names: dict[sympy.Symbol, str] | None = None,
    style: str = "c",
    pow2_bitops: bool = True,
) -> str:
    """Render ``expr`` as source text.

    Parameters
    ----------
    expr
        A layout expression (integer arithmetic and the functions of :mod:`tilec.layout.expr`).
    names
        Text to print for each symbol (defaults to the symbol's name).  Names that are not plain
        identifiers are parenthesised where needed.
    style
        ``"c"`` or ``"py"``.
    pow2_bitops
        In the C style, print division/modulo by powers of two as ``>>``/``&``.

    Returns
    -------
    str
        The expression text.
    """
    if style not in ("c", "py"):
        raise ValueError(f"style must be 'c' or 'py'; got {style!r}")
    key = tuple(sorted((names or {}).items(), key=lambda kv: kv[0].name))
    return _render_cached(sympy.sympify(expr), key, style, bool(pow2_bitops))
