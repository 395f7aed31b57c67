"""The :class:`Layout` class: a map from a multi-index to a linear offset or an output index."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np
import sympy
from sympy import Integer

from .expr import NUMPY_FUNCS, FloorDiv, FloorMod, Lut, index_symbols, lut_array, lut_name, register_lut
from .printer import render
from .simplify import normalize, simplify_expr, unsafe_for_c
from .tables import show_table

__all__ = ["Layout", "check_shape", "flatten_expr", "unflatten_exprs"]


def check_shape(shape: object, param: str = "shape") -> tuple[int, ...]:
    """Validate a shape: a nonempty tuple of positive ints (a bare int means a 1-D shape)."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    try:
        dims = tuple(shape)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{param} must be a tuple of positive ints; got {shape!r}") from None
    if not dims or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0 for d in dims):
        raise ValueError(f"{param} must be a nonempty tuple of positive ints; got {shape!r}")
    return tuple(int(d) for d in dims)


def flatten_expr(vars_: Sequence[sympy.Expr], shape: Sequence[int]) -> sympy.Expr:
    """Row-major flat index ``sum(v_d * stride_d)`` of ``vars_`` over ``shape``."""
    out: sympy.Expr = Integer(0)
    for v, d in zip(vars_, shape):
        out = out * d + v
    return sympy.expand(out)


def unflatten_exprs(flat: sympy.Expr, shape: Sequence[int]) -> tuple[sympy.Expr, ...]:
    """Row-major multi-index over ``shape`` of the flat index ``flat``."""
    out = []
    stride = math.prod(shape)
    for d in shape:
        stride //= d
        out.append(FloorMod(FloorDiv(flat, stride), d))
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _compiled(vars_: tuple[sympy.Symbol, ...], exprs: tuple[sympy.Expr, ...]) -> Callable[..., list]:
    """A Python function of the index values (ints or numpy arrays) returning the outputs.

    The expressions are printed in the ``py`` style (``//``, ``%``, ``^``, ``&``, ``>>`` are numpy's floor and
    bit operations on arrays) and compiled directly: ``sympy.lambdify`` with the numpy namespace costs ~0.2 s
    on first use (it imports every lazily loaded numpy submodule) and a code printer per call.
    """
    names = {v: f"x{i}" for i, v in enumerate(vars_)}
    try:
        body = ", ".join(render(e, names, "py") for e in exprs)
    except ValueError:  # an expression outside the layout functions
        return sympy.lambdify(vars_, list(exprs), modules=[NUMPY_FUNCS, "numpy"])
    ns: dict[str, object] = {}
    for e in exprs:
        for n in sympy.preorder_traversal(e):
            if isinstance(n, Lut):
                ns[lut_name(int(n.args[0]))] = lut_array(int(n.args[0]))
    exec(compile(f"def f({', '.join(names.values())}):\n    return [{body}]\n", "<tilec layout>", "exec"), ns)  # noqa: S102
    return ns["f"]  # type: ignore[return-value]


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


class Layout:
    """A map from a multi-index over ``shape`` to a linear offset or to an output multi-index.

    Parameters
    ----------
    shape
        Input index space, e.g. ``(64, 32)``.
    fn
        Called once with one sympy symbol per dimension (named ``i, j, k, ...``; nonnegative
        integers).  It returns either one expression (a *scalar* layout: the linear offset) or a
        tuple of expressions (an output multi-index, e.g. ``lambda i, j: (j, i)``).  Python's
        ``//`` and ``%`` as well as :func:`~tilec.layout.floordiv`,
        :func:`~tilec.layout.floormod`, :func:`~tilec.layout.bitxor`, ... may be used.
    out_shape
        Output space: ``(cosize,)`` for scalar layouts, one extent per output otherwise.  Inferred
        by enumeration (``max + 1``) when omitted.
    simplify
        Simplify the expressions with the index ranges (cached).

    Examples
    --------
    >>> L = Layout((64, 32), lambda i, j: i * 32 + j)
    >>> L(3, 4)
    100
    >>> str(L)
    'Layout((64, 32): (i, j) -> i*32 + j)'
    """

    __slots__ = ("_shape", "_vars", "_exprs", "_scalar", "_out_shape", "_cache")

    def __init__(
        self,
        shape: Sequence[int] | int,
        fn: Callable[..., object],
        *,
        out_shape: Sequence[int] | int | None = None,
        simplify: bool = True,
    ) -> None:
        dims = check_shape(shape)
        result = fn(*index_symbols(len(dims)))
        scalar = not isinstance(result, (tuple, list))
        exprs = (result,) if scalar else tuple(result)
        self._init(dims, exprs, scalar, out_shape, simplify)

    @classmethod
    def from_exprs(
        cls,
        shape: Sequence[int] | int,
        exprs: Sequence[object],
        *,
        scalar: bool,
        out_shape: Sequence[int] | int | None = None,
        simplify: bool = True,
    ) -> Layout:
        """Build from expressions over the canonical symbols ``index_symbols(len(shape))``."""
        self = cls.__new__(cls)
        self._init(check_shape(shape), tuple(exprs), scalar, out_shape, simplify)
        return self

    @classmethod
    def from_table(cls, table: np.ndarray, out_shape: Sequence[int] | int | None = None) -> Layout:
        """A table-backed layout: ``table[idx]`` (shape ``S``) or ``table[idx, :]`` (shape ``S + (k,)``).

        A table of shape ``S`` gives a scalar layout over ``S``; pass ``out_shape`` with ``k``
        extents to read the last axis as a ``k``-dimensional output index.  Expressions use
        :class:`~tilec.layout.expr.Lut`; ``to_c`` prints ``tilec_lut_<hex>[flat index]`` and
        :meth:`tables` returns the arrays the C code must define.
        """
        arr = np.asarray(table, dtype=np.int64)
        multi = out_shape is not None and not _is_int(out_shape) and len(tuple(out_shape)) > 1  # type: ignore[arg-type]
        shape = arr.shape[:-1] if multi else arr.shape
        flat = flatten_expr(index_symbols(len(shape)), shape)
        cols = [arr[..., d] for d in range(arr.shape[-1])] if multi else [arr]
        exprs = [Lut(register_lut(c), flat) for c in cols]
        return cls.from_exprs(shape, exprs, scalar=not multi, out_shape=out_shape)

    def _init(
        self,
        shape: tuple[int, ...],
        exprs: tuple[object, ...],
        scalar: bool,
        out_shape: Sequence[int] | int | None,
        simplify: bool,
    ) -> None:
        if not exprs:
            raise ValueError("layout function must return at least one expression; got an empty tuple")
        vars_ = index_symbols(len(shape))
        ranges = {v: (0, d - 1) for v, d in zip(vars_, shape)}
        norm = tuple(normalize(e) for e in exprs)
        for e in norm:
            extra = e.free_symbols - set(vars_)
            if extra:
                names = ", ".join(sorted(s.name for s in extra))
                raise ValueError(f"layout expression {e} uses symbols [{names}] that are not indices {vars_}")
        if simplify:
            norm = tuple(simplify_expr(e, ranges) for e in norm)
        self._shape = shape
        self._vars = vars_
        self._exprs = norm
        self._scalar = bool(scalar)
        self._out_shape = None if out_shape is None else check_shape(out_shape, "out_shape")
        if self._out_shape is not None and len(self._out_shape) != len(norm):
            raise ValueError(f"out_shape must have {len(norm)} entries (one per output); got {self._out_shape}")
        self._cache: dict[str, object] = {}

    # -- basic properties --------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """Input index space."""
        return self._shape

    @property
    def ndim(self) -> int:
        """Number of input dimensions."""
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of input indices, ``prod(shape)``."""
        return math.prod(self._shape)

    @property
    def symbols(self) -> tuple[sympy.Symbol, ...]:
        """The input symbols the expressions are written in."""
        return self._vars

    @property
    def exprs(self) -> tuple[sympy.Expr, ...]:
        """Output expressions (one for scalar layouts)."""
        return self._exprs

    @property
    def scalar_output(self) -> bool:
        """True when the layout returns one linear offset rather than a tuple."""
        return self._scalar

    @property
    def out_shape(self) -> tuple[int, ...]:
        """Output space: ``(cosize,)`` for scalar layouts, else one extent per output."""
        if self._out_shape is None:
            table = self._table2d()
            if table.size and int(table.min()) < 0:
                raise ValueError(f"cannot infer out_shape of {self}: it produces negative values")
            self._out_shape = tuple(int(m) + 1 for m in table.max(axis=0))
        return self._out_shape

    # -- evaluation --------------------------------------------------------------------------
    def _compiled(self) -> Callable[..., list]:
        return _compiled(self._vars, self._exprs)

    def __call__(self, *idx: object) -> object:
        """Evaluate at one index: ints give ints (or a tuple), sympy arguments give expressions.

        Raises
        ------
        ValueError
            If the number of indices is not ``ndim``.
        IndexError
            If an integer index is out of range.
        """
        if len(idx) == 1 and isinstance(idx[0], (tuple, list)):
            idx = tuple(idx[0])
        if len(idx) != self.ndim:
            raise ValueError(f"expected {self.ndim} indices for shape {self._shape}; got {len(idx)}")
        if all(_is_int(x) for x in idx):
            for d, (x, n) in enumerate(zip(idx, self._shape)):
                if not 0 <= x < n:
                    raise IndexError(f"index {x} out of range [0, {n}) in dimension {d}")
            vals = tuple(int(v) for v in self._compiled()(*[int(x) for x in idx]))
        else:
            sub = {v: sympy.sympify(x) for v, x in zip(self._vars, idx)}
            vals = tuple(e.xreplace(sub) for e in self._exprs)
        return vals[0] if self._scalar else vals

    def _table2d(self) -> np.ndarray:
        """All outputs as an array of shape ``(size, n_outputs)`` (cached)."""
        hit = self._cache.get("table2d")
        if hit is None:
            grids = np.indices(self._shape, dtype=np.int64)
            outs = self._compiled()(*grids)
            cols = [np.broadcast_to(np.asarray(o, dtype=np.int64), self._shape).reshape(-1) for o in outs]
            hit = np.stack(cols, axis=-1)
            hit.setflags(write=False)
            self._cache["table2d"] = hit
        return hit  # type: ignore[return-value]

    def eval_table(self) -> np.ndarray:
        """Outputs for every index: shape ``shape`` (scalar layouts) or ``shape + (n_outputs,)``."""
        t = self._table2d()
        return t.reshape(self._shape) if self._scalar else t.reshape(self._shape + (t.shape[1],))

    def _flat_out(self) -> np.ndarray | None:
        """Row-major flat output index per flat input, or None if an output leaves ``out_shape``."""
        t = self._table2d()
        out_shape = self.out_shape
        if ((t < 0) | (t >= np.array(out_shape))).any():
            return None
        return np.ravel_multi_index(tuple(t.T), out_shape) if t.shape[1] > 1 else t[:, 0]

    def is_bijective(self) -> bool:
        """True when the outputs over all inputs are exactly the output space, each once."""
        hit = self._cache.get("bijective")
        if hit is None:
            total = math.prod(self.out_shape)
            flat = self._flat_out() if total == self.size else None
            hit = self._cache["bijective"] = flat is not None and bool((np.bincount(flat, minlength=total) == 1).all())
        return hit  # type: ignore[return-value]

    # -- algebra -----------------------------------------------------------------------------
    def inverse(self) -> Layout:
        """The inverse map from the output space back to the input index.

        A stride (affine over mixed-radix digits) or xor-linear formula is derived when the map
        has one (covering row/column-major, transposes, reshapes and the XOR swizzles);
        otherwise the result is table-backed (see :meth:`from_table`).  The inverse of a
        layout over a 1-D shape is scalar, otherwise it returns a tuple.

        Raises
        ------
        ValueError
            If the layout is not bijective.
        """
        hit = self._cache.get("inverse")
        if hit is not None:
            return hit  # type: ignore[return-value]
        if not self.is_bijective():
            raise ValueError(f"inverse() needs a bijective layout; {self} is not (out_shape={self.out_shape})")
        from .inverse import invert

        inv = invert(self)
        self._cache["inverse"] = inv
        return inv

    def compose(self, other: Layout) -> Layout:
        """``self ∘ other``: first apply ``other``, then ``self``.

        Requires ``other.out_shape == self.shape``; the result has ``other.shape`` as input.
        """
        if not isinstance(other, Layout):
            raise TypeError(f"compose() needs a Layout; got {type(other).__name__}")
        if other.out_shape != self._shape:
            raise ValueError(f"compose: other.out_shape must equal self.shape {self._shape}; got {other.out_shape}")
        return self._substitute(other.shape, other.exprs)

    def _substitute(self, shape: tuple[int, ...], args: Sequence[sympy.Expr]) -> Layout:
        sub = dict(zip(self._vars, args))
        exprs = [e.xreplace(sub) for e in self._exprs]
        return Layout.from_exprs(shape, exprs, scalar=self._scalar, out_shape=self._out_shape)

    def reshape(self, new_shape: Sequence[int] | int) -> Layout:
        """The same map over ``new_shape``, matching indices by row-major flat position."""
        dims = check_shape(new_shape, "new_shape")
        if math.prod(dims) != self.size:
            raise ValueError(f"reshape: new_shape must have {self.size} elements like {self._shape}; got {dims}")
        flat = flatten_expr(index_symbols(len(dims)), dims)
        return self._substitute(dims, unflatten_exprs(flat, self._shape))

    def repeat(self, reps: Sequence[int] | int) -> Layout:
        """Tile a scalar layout: shape ``shape * reps``; block ``b`` (row-major) at offset ``b * cosize``.

        Within each block the element order is that of ``self``.
        """
        if not self._scalar:
            raise ValueError("repeat() needs a scalar (offset) layout; got one with a tuple output")
        reps_t = check_shape(reps, "reps")
        if len(reps_t) != self.ndim:
            raise ValueError(f"reps must have {self.ndim} entries like shape {self._shape}; got {reps_t}")
        dims = tuple(s * r for s, r in zip(self._shape, reps_t))
        vars_ = index_symbols(len(dims))
        inner = [FloorMod(v, s) for v, s in zip(vars_, self._shape)]
        block = flatten_expr([FloorDiv(v, s) for v, s in zip(vars_, self._shape)], reps_t)
        cosize = self.out_shape[0]
        expr = block * cosize + self._exprs[0].xreplace(dict(zip(self._vars, inner)))
        return Layout.from_exprs(dims, [expr], scalar=True, out_shape=(cosize * math.prod(reps_t),))

    def stack(self, n: int) -> Layout:
        """Prepend a dimension of ``n`` copies: ``(s, *idx) -> s * cosize + self(*idx)`` (scalar layouts)."""
        if not self._scalar:
            raise ValueError("stack() needs a scalar (offset) layout; got one with a tuple output")
        n = check_shape(n, "n")[0]
        vars_ = index_symbols(self.ndim + 1)
        cosize = self.out_shape[0]
        expr = vars_[0] * cosize + self._exprs[0].xreplace(dict(zip(self._vars, vars_[1:])))
        return Layout.from_exprs((n,) + self._shape, [expr], scalar=True, out_shape=(n * cosize,))

    def simplify(self) -> Layout:
        """A copy with simplified expressions (layouts are simplified on construction by default)."""
        return Layout.from_exprs(self._shape, self._exprs, scalar=self._scalar, out_shape=self._out_shape)

    def equals(self, other: Layout) -> bool:
        """Same shape, output kind and out_shape, and the same outputs on every index.

        Structural equality of the simplified expressions short-cuts the enumeration.
        """
        if not isinstance(other, Layout) or self._shape != other._shape or self._scalar != other._scalar:
            return False
        if len(self._exprs) != len(other._exprs):
            return False
        if self._exprs == other._exprs and (self._out_shape is None or self._out_shape == other._out_shape):
            return other._out_shape is None or self.out_shape == other.out_shape
        return self.out_shape == other.out_shape and bool(np.array_equal(self._table2d(), other._table2d()))

    # -- printing ----------------------------------------------------------------------------
    def to_c(self, names: Sequence[str], pow2_bitops: bool = True) -> str | tuple[str, ...]:
        """C integer expression(s) for the outputs, in terms of the C expressions ``names``.

        Uses ``+ - * / % ^ & >>`` (division and modulo by powers of two as ``>>``/``&`` unless
        ``pow2_bitops=False``).  The names must denote nonnegative values within ``shape``; a
        ``ValueError`` is raised when an operand of ``/``, ``%`` or a bit operation cannot be
        proved nonnegative (see :meth:`check_c_safe`).
        Table-backed layouts reference arrays named ``tilec_lut_<hex>`` (see :meth:`tables`).

        Returns
        -------
        str or tuple of str
            One string for scalar layouts, else one per output.
        """
        if isinstance(names, str) or len(names) != self.ndim:
            raise ValueError(f"to_c needs {self.ndim} names (one per dimension); got {names!r}")
        self.check_c_safe()
        mapping = dict(zip(self._vars, names))
        outs = tuple(render(e, mapping, "c", pow2_bitops) for e in self._exprs)
        return outs[0] if self._scalar else outs

    def check_c_safe(self) -> None:
        """Raise ``ValueError`` unless every ``/``, ``%`` and bit operand is provably nonnegative.

        Called by :meth:`to_c`, where C's truncating ``/`` and ``%`` must agree with floor
        semantics.  Layouts built from nonnegative index arithmetic always pass.
        """
        if self._cache.get("c_safe"):
            return
        ranges = {v: (0, d - 1) for v, d in zip(self._vars, self._shape)}
        for e in self._exprs:
            bad = unsafe_for_c(e, ranges)
            if bad is not None:
                raise ValueError(
                    f"to_c: cannot prove the operands of {bad} nonnegative in {self}; "
                    "C's / and % would differ from floor semantics"
                )
        self._cache["c_safe"] = True

    def tables(self) -> dict[str, np.ndarray]:
        """Lookup tables referenced by the expressions: ``{C name: int64 array}``."""
        found: dict[str, np.ndarray] = {}
        for e in self._exprs:
            for node in sympy.preorder_traversal(e):
                if isinstance(node, Lut):
                    found[lut_name(int(node.args[0]))] = lut_array(int(node.args[0]))
        return found

    def formula(self, names: Sequence[str] | None = None) -> str:
        """Python-style text of the outputs (``//`` for division)."""
        mapping = dict(zip(self._vars, names)) if names is not None else {}
        outs = [render(e, mapping, "py") for e in self._exprs]
        return outs[0] if self._scalar else "(" + ", ".join(outs) + ")"

    def __str__(self) -> str:
        args = ", ".join(v.name for v in self._vars)
        args = f"({args})" if self.ndim > 1 else args
        return f"Layout({self._shape}: {args} -> {self.formula()})"

    __repr__ = __str__

    def show(self, max_rows: int = 16, max_cols: int = 16) -> str:
        """A text table of the outputs (2-D view: leading dimensions merged), clipped with ``...``."""
        table = self.eval_table()
        if self._scalar:
            cells = table.astype(str)
        else:
            parts = [table[..., d].astype(str) for d in range(table.shape[-1])]
            cells = np.char.add(
                np.char.add("(", functools.reduce(lambda a, b: np.char.add(np.char.add(a, ","), b), parts)), ")"
            )
        return show_table(str(self), cells, max_rows, max_cols)
