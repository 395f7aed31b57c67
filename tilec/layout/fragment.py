"""The :class:`Fragment` class: a register tile spread over the threads of a block."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import sympy

from .expr import FloorDiv, FloorMod, index_symbols
from .layout import Layout, _is_int, check_shape, flatten_expr, unflatten_exprs
from .printer import render
from .tables import show_table

__all__ = ["Fragment"]


def _pos_int(value: object, param: str) -> int:
    if not _is_int(value) or int(value) < 1:  # type: ignore[arg-type]
        raise ValueError(f"{param} must be a positive int; got {value!r}")
    return int(value)  # type: ignore[arg-type]


class Fragment:
    """A map from a multi-index over ``shape`` (and a replica number) to ``(thread, local)``.

    ``thread`` is the thread id inside the block, ``local`` the index into that thread's
    register array.  With ``replicate = r > 1`` every element lives in ``r`` places (replicas
    ``0 .. r-1``), e.g. an MMA operand shared by several warps.

    Parameters
    ----------
    shape
        The tile shape.
    thread_fn, local_fn
        Called with one sympy symbol per dimension; when ``replicate > 1`` they receive the
        replica number as an extra **last positional argument** (conventionally named ``rep``).
        They return the thread id and the local index.
    replicate
        Number of copies of every element.
    num_threads, num_locals
        Thread count and registers per thread; inferred by enumeration (``max + 1``) if omitted.

    Examples
    --------
    >>> F = Fragment((8, 8), lambda i, j: i * 4 + j // 2, lambda i, j: j % 2)
    >>> F(3, 5)
    (14, 1)
    >>> F.num_threads, F.num_locals, F.is_valid()
    (32, 2, True)
    """

    __slots__ = ("_shape", "_replicate", "_map", "_cache")

    def __init__(
        self,
        shape: Sequence[int] | int,
        thread_fn: Callable[..., object],
        local_fn: Callable[..., object],
        replicate: int = 1,
        *,
        num_threads: int | None = None,
        num_locals: int | None = None,
    ) -> None:
        dims = check_shape(shape)
        rep = _pos_int(replicate, "replicate")
        user_syms = index_symbols(len(dims) + (1 if rep > 1 else 0))
        full = index_symbols(len(dims) + 1)
        rename = dict(zip(user_syms, full))
        exprs = [sympy.sympify(fn(*user_syms)).xreplace(rename) for fn in (thread_fn, local_fn)]
        self._init(dims, rep, exprs[0], exprs[1], num_threads, num_locals)

    @classmethod
    def from_exprs(
        cls,
        shape: Sequence[int],
        thread: object,
        local: object,
        replicate: int = 1,
        *,
        num_threads: int | None = None,
        num_locals: int | None = None,
    ) -> Fragment:
        """Build from expressions over ``index_symbols(len(shape) + 1)`` (the last one is the replica)."""
        self = cls.__new__(cls)
        self._init(check_shape(shape), _pos_int(replicate, "replicate"), thread, local, num_threads, num_locals)
        return self

    @classmethod
    def from_tables(
        cls,
        threads: np.ndarray,
        locals_: np.ndarray,
        *,
        num_threads: int | None = None,
        num_locals: int | None = None,
    ) -> Fragment:
        """A table-backed fragment from arrays of shape ``shape + (replicate,)`` (as :meth:`eval_tables`)."""
        t = np.asarray(threads, dtype=np.int64)
        loc = np.asarray(locals_, dtype=np.int64)
        if t.shape != loc.shape or t.ndim < 2:
            raise ValueError(
                f"threads and locals must share a shape (*shape, replicate); got {t.shape} and {loc.shape}"
            )
        m = Layout.from_table(np.stack([t, loc], axis=-1), out_shape=(int(t.max()) + 1, int(loc.max()) + 1))
        return cls.from_exprs(t.shape[:-1], *m.exprs, t.shape[-1], num_threads=num_threads, num_locals=num_locals)

    def _init(
        self,
        dims: tuple[int, ...],
        rep: int,
        thread: object,
        local: object,
        num_threads: int | None,
        num_locals: int | None,
    ) -> None:
        m = Layout.from_exprs(dims + (rep,), [thread, local], scalar=False)
        if num_threads is not None or num_locals is not None:
            inferred = m.out_shape if num_threads is None or num_locals is None else (None, None)
            nt = _pos_int(inferred[0] if num_threads is None else num_threads, "num_threads")
            nl = _pos_int(inferred[1] if num_locals is None else num_locals, "num_locals")
            m = Layout.from_exprs(dims + (rep,), m.exprs, scalar=False, out_shape=(nt, nl), simplify=False)
        self._shape = dims
        self._replicate = rep
        self._map = m
        self._cache: dict[str, object] = {}

    # -- properties --------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The tile shape."""
        return self._shape

    @property
    def ndim(self) -> int:
        """Number of tile dimensions."""
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of elements (without replicas)."""
        return math.prod(self._shape)

    @property
    def replicate(self) -> int:
        """Number of copies of each element."""
        return self._replicate

    @property
    def num_threads(self) -> int:
        """Threads used (``max thread + 1`` unless given)."""
        return self._map.out_shape[0]

    @property
    def num_locals(self) -> int:
        """Registers per thread (``max local + 1`` unless given)."""
        return self._map.out_shape[1]

    @property
    def symbols(self) -> tuple[sympy.Symbol, ...]:
        """Index symbols of the expressions."""
        return self._map.symbols[:-1]

    @property
    def rep_symbol(self) -> sympy.Symbol:
        """The replica symbol (substituted by 0 when ``replicate == 1``)."""
        return self._map.symbols[-1]

    @property
    def thread_expr(self) -> sympy.Expr:
        """Thread id as an expression of :attr:`symbols` and :attr:`rep_symbol`."""
        return self._map.exprs[0]

    @property
    def local_expr(self) -> sympy.Expr:
        """Local index as an expression of :attr:`symbols` and :attr:`rep_symbol`."""
        return self._map.exprs[1]

    @property
    def layout(self) -> Layout:
        """The underlying map ``(*idx, rep) -> (thread, local)`` over ``shape + (replicate,)``."""
        return self._map

    # -- evaluation --------------------------------------------------------------------------
    def __call__(self, *idx: object, rep: object = None) -> object:
        """``(thread, local)`` of an element.

        With ``replicate > 1`` and integer indices, ``rep=None`` returns the list of
        ``(thread, local)`` over all replicas; symbolic indices with ``rep=None`` keep
        :attr:`rep_symbol` in the result.
        """
        if len(idx) == 1 and isinstance(idx[0], (tuple, list)):
            idx = tuple(idx[0])
        if len(idx) != self.ndim:
            raise ValueError(f"expected {self.ndim} indices for shape {self._shape}; got {len(idx)}")
        if rep is None and self._replicate == 1:
            rep = 0
        if rep is not None:
            return self._map(*idx, rep)
        if all(_is_int(x) for x in idx):
            return [self._map(*idx, r) for r in range(self._replicate)]
        return self._map(*idx, self.rep_symbol)

    def eval_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Thread ids and local indices, each of shape ``shape + (replicate,)``."""
        t = self._map.eval_table()
        return t[..., 0], t[..., 1]

    def is_valid(self) -> bool:
        """True when ``(idx, rep) -> (thread, local)`` is a bijection onto ``num_threads x num_locals``.

        That is: no two (element, replica) pairs share a register slot, and every slot of every
        thread is used exactly once (bijective, or exactly replicated when ``replicate > 1``).
        """
        return self._map.is_bijective()

    # -- algebra -----------------------------------------------------------------------------
    def inverse(self) -> Layout:
        """Layout over ``(num_threads, num_locals)`` giving the element index of each slot.

        The output is ``idx`` (a scalar for 1-D tiles), followed by the replica number when
        ``replicate > 1``.

        Raises
        ------
        ValueError
            If the fragment is not valid.
        """
        hit = self._cache.get("inverse")
        if hit is not None:
            return hit  # type: ignore[return-value]
        if not self.is_valid():
            raise ValueError(f"inverse() needs a valid fragment (see is_valid()); {self} is not")
        inv = self._map.inverse()
        if self._replicate == 1:
            comps = inv.exprs[:-1]
            inv = Layout.from_exprs(inv.shape, comps, scalar=self.ndim == 1, out_shape=self._shape, simplify=False)
        self._cache["inverse"] = inv
        return inv

    def _rebuild(
        self,
        shape: Sequence[int],
        thread: sympy.Expr,
        local: sympy.Expr,
        replicate: int | None = None,
        num_threads: int | None = None,
        num_locals: int | None = None,
    ) -> Fragment:
        return Fragment.from_exprs(
            shape,
            thread,
            local,
            self._replicate if replicate is None else replicate,
            num_threads=self.num_threads if num_threads is None else num_threads,
            num_locals=self.num_locals if num_locals is None else num_locals,
        )

    def repeat(self, reps: Sequence[int] | int, on_threads: bool = True, lower_dim_first: bool = True) -> Fragment:
        """Tile the fragment ``reps[d]`` times along each dimension.

        Element ``idx`` of the result lies in block ``idx // shape`` at ``idx % shape``.  Blocks
        are numbered with dimension 0 varying fastest if ``lower_dim_first`` (else the last
        dimension fastest, i.e. row-major).  Block ``b`` uses threads ``t + b * num_threads``
        (``on_threads=True``) or registers ``l + b * num_locals`` (``on_threads=False``).
        """
        reps_t = check_shape(reps, "reps")
        if len(reps_t) != self.ndim:
            raise ValueError(f"reps must have {self.ndim} entries like shape {self._shape}; got {reps_t}")
        dims = tuple(s * r for s, r in zip(self._shape, reps_t))
        syms = index_symbols(self.ndim + 1)
        sub = {v: FloorMod(v, s) for v, s in zip(syms, self._shape)}
        blocks = [FloorDiv(v, s) for v, s in zip(syms, self._shape)]
        if lower_dim_first:
            block_id = flatten_expr(blocks[::-1], reps_t[::-1])
        else:
            block_id = flatten_expr(blocks, reps_t)
        t, loc = (e.xreplace(sub) for e in self._map.exprs)
        n = math.prod(reps_t)
        if on_threads:
            return self._rebuild(dims, t + block_id * self.num_threads, loc, num_threads=self.num_threads * n)
        return self._rebuild(dims, t, loc + block_id * self.num_locals, num_locals=self.num_locals * n)

    def replicated(self, k: int) -> Fragment:
        """``k`` times more replicas: replica ``r`` of the result is replica ``r % replicate`` moved
        to threads ``+ (r // replicate) * num_threads``."""
        k = _pos_int(k, "k")
        r = self.rep_symbol
        t, loc = (e.xreplace({r: FloorMod(r, self._replicate)}) for e in self._map.exprs)
        t = t + FloorDiv(r, self._replicate) * self.num_threads
        return self._rebuild(self._shape, t, loc, self._replicate * k, num_threads=self.num_threads * k)

    def compose_layout(self, layout: Layout) -> Fragment:
        """The fragment seen through ``layout``: element ``x`` of the result is ``self[layout(x)]``.

        ``layout`` maps the new index space to indices of this tile
        (``layout.out_shape == self.shape``; a scalar layout for 1-D tiles).
        """
        if not isinstance(layout, Layout):
            raise TypeError(f"compose_layout() needs a Layout; got {type(layout).__name__}")
        if layout.out_shape != self._shape:
            raise ValueError(f"compose_layout: layout.out_shape must equal shape {self._shape}; got {layout.out_shape}")
        new_syms = index_symbols(layout.ndim + 1)
        args = [e.xreplace(dict(zip(layout.symbols, new_syms))) for e in layout.exprs]
        sub = dict(zip(self._map.symbols, args + [new_syms[-1]]))
        t, loc = (e.xreplace(sub) for e in self._map.exprs)
        return self._rebuild(layout.shape, t, loc)

    def reshape(self, new_shape: Sequence[int] | int) -> Fragment:
        """The same fragment over ``new_shape`` (elements matched in row-major order)."""
        dims = check_shape(new_shape, "new_shape")
        if math.prod(dims) != self.size:
            raise ValueError(f"reshape: new_shape must have {self.size} elements like {self._shape}; got {dims}")
        flat = flatten_expr(index_symbols(len(dims)), dims)
        view = Layout.from_exprs(dims, unflatten_exprs(flat, self._shape), scalar=False, out_shape=self._shape)
        if self.ndim == 1:
            view = Layout.from_exprs(dims, [flat], scalar=True, out_shape=self._shape)
        return self.compose_layout(view)

    def equals(self, other: Fragment) -> bool:
        """Same shape, thread/local counts and the same set of slots for every element."""
        if not isinstance(other, Fragment) or self._shape != other._shape:
            return False
        if (self._replicate, self.num_threads, self.num_locals) != (
            other._replicate,
            other.num_threads,
            other.num_locals,
        ):
            return False
        if self._map.exprs == other._map.exprs:
            return True
        codes = [np.sort(f._codes(), axis=-1) for f in (self, other)]
        return bool(np.array_equal(codes[0], codes[1]))

    def _codes(self) -> np.ndarray:
        t, loc = self.eval_tables()
        return t * self.num_locals + loc

    # -- printing ----------------------------------------------------------------------------
    def _names(self, names: Sequence[str] | None, rep_name: str) -> dict[sympy.Symbol, str]:
        syms = self._map.symbols
        base = [s.name for s in syms[:-1]] if names is None else list(names)
        if len(base) != self.ndim:
            raise ValueError(f"need {self.ndim} names (one per dimension); got {names!r}")
        return dict(zip(syms, base + [rep_name]))

    def to_c(self, names: Sequence[str], rep_name: str = "rep", pow2_bitops: bool = True) -> tuple[str, str]:
        """C expressions ``(thread, local)`` in terms of the index expressions ``names``.

        ``rep_name`` names the replica number (only referenced when ``replicate > 1``).
        """
        if isinstance(names, str):
            raise ValueError(f"to_c needs a sequence of {self.ndim} names; got the string {names!r}")
        mapping = self._names(names, rep_name)
        self._map.check_c_safe()
        t, loc = (render(e, mapping, "c", pow2_bitops) for e in self._map.exprs)
        return t, loc

    def index_to_c(self, thread_name: str, local_name: str, pow2_bitops: bool = True) -> tuple[str, ...]:
        """C expressions for the element index held in register ``local_name`` of ``thread_name``.

        For replicated fragments this is the element of any replica (the replica number is
        dropped).
        """
        inv = self.inverse()
        outs = inv.to_c([thread_name, local_name], pow2_bitops)
        outs = (outs,) if isinstance(outs, str) else outs
        return outs[: self.ndim]

    def __str__(self) -> str:
        mapping = self._names(None, "rep")
        args = ", ".join(mapping[s] for s in self._map.symbols[:-1])
        args = f"({args}{', rep' if self._replicate > 1 else ''})"
        t, loc = (render(e, mapping, "py") for e in self._map.exprs)
        rep = f", replicate={self._replicate}" if self._replicate > 1 else ""
        return (
            f"Fragment({self._shape}: {args} -> thread {t}, local {loc}; "
            f"threads={self.num_threads}, locals={self.num_locals}{rep})"
        )

    __repr__ = __str__

    def show(self, max_rows: int = 16, max_cols: int = 16) -> str:
        """Text table with ``T<thread>:<local>`` per element (replicas joined by ``/``)."""
        t, loc = self.eval_tables()
        cells = np.char.add(np.char.add("T", t.astype(str)), np.char.add(":", loc.astype(str)))
        shown = cells[..., 0]
        for r in range(1, min(self._replicate, 4)):
            shown = np.char.add(np.char.add(shown, "/"), cells[..., r])
        if self._replicate > 4:
            shown = np.char.add(shown, f"/+{self._replicate - 4}")
        return show_table(str(self), shown, max_rows, max_cols)
