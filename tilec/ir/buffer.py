"""Buffers (tensors of one memory scope) and regions (hyper-rectangles of a buffer)."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from tilec.dtypes import DType
from tilec.errors import SourceLoc, TilecTypeError, TilecValueError
from tilec.ir.expr import Const, Expr, ExprLike, Load, as_expr, binop, const_value, is_size_expr

SCOPES = ("global", "shared", "fragment", "local", "var")

Dim = Union[int, Expr]


@dataclass(frozen=True, eq=False)
class Buffer:
    """A tensor in one memory scope.

    Parameters
    ----------
    name : str
        The name the user gave it (kernel parameter or allocation target).
    shape : tuple of int or Expr
        Static sizes are ints; symbolic sizes are :class:`~tilec.ir.expr.Var` (``T.dynamic``).
    dtype : DType
    scope : str
        ``global`` (kernel parameters), ``shared`` (``T.alloc_shared``), ``fragment`` (registers spread over
        the block, ``T.alloc_fragment``), ``local`` (registers private to each thread, ``T.alloc_local``)
        or ``var`` (one scalar per thread, ``T.alloc_var``).
    strides : tuple of int or Expr, optional
        Element strides of a global tensor; ``None`` means contiguous row-major.
    """

    name: str
    shape: tuple[Dim, ...]
    dtype: DType
    scope: str = "global"
    strides: tuple[Dim, ...] | None = None
    loc: SourceLoc | None = field(default=None, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise TilecValueError(f"buffer {self.name!r}: scope must be one of {SCOPES}, got {self.scope!r}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def static_shape(self) -> tuple[int, ...] | None:
        """The shape as ints, or None when a dimension is symbolic."""
        if all(isinstance(d, int) for d in self.shape):
            return tuple(self.shape)  # type: ignore[arg-type]
        return None

    @property
    def numel(self) -> Dim:
        n: Dim = 1
        for d in self.shape:
            n = d * n if isinstance(d, int) and isinstance(n, int) else binop("*", n, d)
        return n

    def full_region(self) -> Region:
        return Region(self, tuple(as_expr(0) for _ in self.shape), tuple(self.shape))

    def __getitem__(self, key: Any) -> Load | Region:
        return index_buffer(self, key)

    def __iter__(self) -> Any:
        # without it Python iterates through __getitem__ (buf[0], buf[1], ...), which never ends: no index is out
        # of range when the kernel is parsed
        raise self._not_iterable()

    def __contains__(self, item: Any) -> bool:
        raise self._not_iterable()  # `in` would iterate (and Python would replace the error with its own)

    def _not_iterable(self) -> TilecTypeError:
        n = self.name
        return TilecTypeError(f"buffer {n!r} cannot be iterated or unpacked when the kernel is parsed (`x, y = {n}`, "
                              f"`v in {n}`, max({n})); read its elements by index, {n}[i], in a T.Parallel or "
                              "T.serial loop")

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<Buffer {self.name} {self.scope} {self.dtype} {tuple(str(d) for d in self.shape)}>"

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False)
class Region:
    """``buffer[starts[d] : starts[d] + extents[d], ...]``."""

    buffer: Buffer
    starts: tuple[Expr, ...]
    extents: tuple[Dim, ...]

    @property
    def ndim(self) -> int:
        return len(self.extents)

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype

    def squeezed_extents(self) -> tuple[Dim, ...]:
        """The extents without unit dimensions (how two regions of different rank are matched)."""
        return tuple(e for e in self.extents if not (isinstance(e, int) and e == 1))

    def index_at(self, rel: Sequence[Expr]) -> list[Expr]:
        """The buffer's indices of the element at ``rel`` within the region, one offset for each dimension of
        :meth:`squeezed_extents` (unit dimensions keep their start)."""
        out, k = [], 0
        for s, e in zip(self.starts, self.extents):
            if isinstance(e, int) and e == 1:
                out.append(s)
            else:
                out.append(binop("+", s, rel[k]))
                k += 1
        return out

    def is_full(self) -> bool:
        return all(const_value(s) == 0 for s in self.starts) and all(
            _same_dim(e, d) for e, d in zip(self.extents, self.buffer.shape)
        )

    def __str__(self) -> str:
        from tilec.ir.printer import region_str

        return region_str(self)

    __hash__ = object.__hash__


def _same_dim(a: Dim, b: Dim) -> bool:
    return a is b or (isinstance(a, int) and isinstance(b, int) and a == b)


def as_region(value: Any, what: str) -> Region:
    """A :class:`Region` from a Buffer (whole), a Region, or a Load (one element: extents of 1)."""
    if isinstance(value, Region):
        return value
    if isinstance(value, Buffer):
        return value.full_region()
    if isinstance(value, Load):
        return Region(value.buffer, value.indices, tuple(1 for _ in value.indices))
    raise TilecTypeError(f"{what}: expected a buffer or a buffer region, got {type(value).__name__} {value!r}")


def index_buffer(buf: Buffer, key: Any) -> Load | Region:
    """``buf[key]``: a :class:`Load` when every index is a scalar, else a :class:`Region`.

    Slices ``a:b`` give extent ``b - a`` (which must simplify to a constant or a symbolic dimension), ``:``
    the whole dimension, and an ellipsis ``...`` as many ``:`` as the dimensions not indexed (numpy's meaning).
    Steps are not supported. A 0-d (``var``) buffer takes ``buf[0]``, ``buf[()]`` or ``buf[...]``.
    """
    keys = _without_ellipsis(buf, key if isinstance(key, tuple) else (key,))
    if buf.ndim == 0 and keys in ((), (0,)):
        return Load(buf, ())
    if len(keys) != buf.ndim:
        raise TilecTypeError(f"buffer {buf.name!r} has {buf.ndim} dimension(s) {_shape_str(buf)}, "
                             f"indexed with {len(keys)} {'index' if len(keys) == 1 else 'indices'}")
    for d, k in enumerate(keys):
        if isinstance(k, slice):
            _integer_bounds(buf, d, k)
        for part in (k.start, k.stop) if isinstance(k, slice) else (k,):
            if part is not None or not isinstance(k, slice):  # a str, None or tile: which buffer and dimension
                as_expr(part, what=f"buffer {buf.name!r}, dimension {d}: the "
                        f"{'slice bound' if isinstance(k, slice) else 'index'}")
            _not_negative(buf, d, k, part)
    if not any(isinstance(k, slice) for k in keys):
        return Load(buf, tuple(_index_expr(buf, k) for k in keys))
    starts: list[Expr] = []
    extents: list[Dim] = []
    for d, k in enumerate(keys):
        if isinstance(k, slice):
            if k.step is not None and const_value(k.step) != 1:
                raise TilecTypeError(f"buffer {buf.name!r}: slices with a step are not supported ({k.step})")
            start = as_expr(0 if k.start is None else k.start)
            if k.stop is None:
                ext = _extent_to_end(buf.shape[d], start)
            else:
                ext = _extent(start, k.stop, buf, d)
            if isinstance(ext, int) and ext < 0:
                raise TilecValueError(f"buffer {buf.name!r}, dimension {d}: the slice `{_slice_str(k)}` ends before it "
                                      f"starts (extent {ext})")
            extents.append(ext)
            starts.append(start)
        else:
            starts.append(_index_expr(buf, k))
            extents.append(1)
    return Region(buf, tuple(starts), tuple(extents))


def _without_ellipsis(buf: Buffer, keys: tuple) -> tuple:
    """``keys`` with an ellipsis replaced by a whole-dimension slice for each dimension the others leave out."""
    at = [i for i, k in enumerate(keys) if k is Ellipsis]
    if not at:
        return keys
    if len(at) > 1:
        raise TilecTypeError(f"buffer {buf.name!r}: an index can have only one ellipsis (`...`), got {len(at)}")
    rest = len(keys) - 1
    if rest > buf.ndim:
        raise TilecTypeError(f"buffer {buf.name!r} has {buf.ndim} dimension(s) {_shape_str(buf)}, indexed with "
                             f"{rest} {'index' if rest == 1 else 'indices'} and an ellipsis")
    return keys[:at[0]] + (slice(None),) * (buf.ndim - rest) + keys[at[0] + 1:]


def _slice_str(k: slice) -> str:
    return ":".join("" if p is None else str(p) for p in (k.start, k.stop) + ((k.step,) if k.step is not None else ()))


def _integer_bounds(buf: Buffer, d: int, k: slice) -> None:
    """A slice bound or step that is a float (``A[0:4.0]``, a float kernel value) is refused as such."""
    for what, part in (("bound", k.start), ("bound", k.stop), ("step", k.step)):
        python_float = isinstance(part, numbers.Real) and not isinstance(part, numbers.Integral)
        if python_float or isinstance(part, Expr) and part.dtype.is_float:
            shown = f"{part}" if python_float or isinstance(part, Const) else f"{part}, a {part.dtype} value"
            raise TilecTypeError(f"buffer {buf.name!r}, dimension {d}: the slice `{_slice_str(k)}` has a float "
                                 f"{what} ({shown}); slice bounds must be integers")


def _not_negative(buf: Buffer, d: int, k: Any, part: Any) -> None:
    """A negative compile-time index or slice bound counts from the end in Python but not in a kernel (where it
    lies before the buffer): refuse it rather than give it another meaning."""
    v = const_value(part)
    if isinstance(v, int) and not isinstance(v, bool) and v < 0:
        what = f"the index {v} is negative"
        if isinstance(k, slice):
            what = f"the slice `{_slice_str(k)}` has a negative bound"
        raise TilecValueError(f"buffer {buf.name!r}, dimension {d}: {what}; kernel indices do not count from the "
                              "end as Python's do (write the position from the start, e.g. `n - 1`)")


def _index_expr(buf: Buffer, k: Any) -> Expr:
    e = as_expr(k)
    if not (e.dtype.is_int or e.dtype.is_bool):
        raise TilecTypeError(f"buffer {buf.name!r} indexed with a {e.dtype} value ({e}); indices must be integers")
    return e


def _simplify_dim(e: Expr) -> Dim | None:
    """``e`` as an extent: an int, or an expression of T.dynamic sizes; None when it depends on anything else."""
    from tilec.ir.affine import fast_dim

    fast = fast_dim(e)
    if fast is None:
        from tilec.ir.arith import simplify_to_dim

        fast = simplify_to_dim(e)
    return fast if fast is not None and is_size_expr(fast) else None


def _extent(start: Expr, stop: ExprLike, buf: Buffer, d: int) -> Dim:
    ext = _simplify_dim(binop("-", stop, start))
    if ext is None:
        raise TilecTypeError(
            f"buffer {buf.name!r}, dimension {d}: the slice extent `{stop} - ({start})` is not a compile-time "
            "constant; tile regions need static extents (write the slice as `base : base + size`)"
        )
    return ext


def _extent_to_end(dim: Dim, start: Expr) -> Dim:
    ext = _simplify_dim(binop("-", dim, start))
    if ext is None:
        raise TilecTypeError(f"slice `{start}:` to the end of a dimension of size {dim} has no static extent")
    return ext


def _shape_str(buf: Buffer) -> str:
    return "(" + ", ".join(str(d) for d in buf.shape) + ")"
