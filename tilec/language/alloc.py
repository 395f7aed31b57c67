"""On-chip buffers (``T.alloc_shared`` ...) and the outputs of eager kernels (``T.empty``)."""

from __future__ import annotations

from typing import Any

from tilec import dtypes as dt
from tilec.errors import TilecSyntaxError, TilecTypeError, TilecValueError
from tilec.frontend.builder import current
from tilec.ir.buffer import Buffer
from tilec.ir.expr import Load, as_expr, cast
from tilec.ir.stmt import Store
from tilec.language.types import _shape


def _alloc(scope: str, shape: Any, dtype: Any, what: str) -> Buffer:
    b = current(what)
    k = b.require_kernel(what)
    shp = _shape(shape, what) if scope != "var" else ()
    for d in shp:
        if not isinstance(d, int):
            raise TilecTypeError(f"{what}: on-chip buffers need static sizes, got {d}")
        if d == 0:  # no layout spreads zero elements over the threads
            raise TilecValueError(f"{what}: on-chip buffers need sizes >= 1, got shape {shp}")
    buf = Buffer(b.take_name(scope), shp, dt.dtype(dtype), scope, loc=b.loc)
    k.allocs.append(buf)
    return buf


def alloc_shared(shape: Any, dtype: Any, scope: str = "shared.dyn") -> Buffer:
    """A tile in shared memory, visible to all threads of the block."""
    return _alloc("shared", shape, dtype, "T.alloc_shared")


def alloc_fragment(shape: Any, dtype: Any, scope: str = "local.fragment") -> Buffer:
    """A tile in registers, spread over the threads of the block by layout inference."""
    return _alloc("fragment", shape, dtype, "T.alloc_fragment")


def alloc_local(shape: Any, dtype: Any) -> Buffer:
    """A small array private to each thread (registers)."""
    return _alloc("local", shape, dtype, "T.alloc_local")


def alloc_var(dtype: Any, init: Any = None) -> Buffer:
    """A scalar private to each thread; read it by name, assign it with ``x = ...``."""
    buf = _alloc("var", (), dtype, "T.alloc_var")
    if init is not None:
        b = current("T.alloc_var")
        b.emit(Store(buf, (), cast(buf.dtype, as_expr(init, buf.dtype)), loc=b.loc))
    return buf


def empty(shape: Any, dtype: Any = "float32") -> Buffer:
    """In an eager kernel: a new output tensor, allocated at each call and returned by ``return``."""
    b = current("T.empty")
    if b.kernel is not None:
        raise TilecSyntaxError("T.empty must be called before `with T.Kernel(...)`, in the eager kernel's prologue")
    buf = Buffer(b.take_name("out"), _shape(shape, "T.empty"), dt.dtype(dtype), "global", loc=b.loc)
    b.empties.append(buf)
    return buf


def var_value(buf: Buffer) -> Load:
    return Load(buf, ())
