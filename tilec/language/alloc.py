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
    if scope != "var":
        _check_sizes(shape, what)
    shp = _shape(shape, what) if scope != "var" else ()
    for d in shp:
        if not isinstance(d, int):
            raise TilecTypeError(f"{what}: on-chip buffers need static sizes, got {d}")
    buf = Buffer(b.take_name(scope), shp, dt.dtype(dtype), scope, loc=b.loc)
    k.allocs.append(buf)
    return buf


def _check_sizes(shape: Any, what: str) -> None:
    """Refuse an on-chip shape without a dimension or with an integer size below 1 (no layout spreads zero elements
    over the threads; the layout code failed with a bare ValueError on the GPU targets)."""
    dims = (shape,) if isinstance(shape, int) or hasattr(shape, "__index__") else shape
    if not isinstance(dims, (tuple, list)):
        return  # _shape names what is wrong with it
    if not dims:
        raise TilecValueError(f"{what}: shape () has no dimension (a tile of one element is shape (1,); a "
                              "per-thread scalar is T.alloc_var)")
    for i, d in enumerate(dims):
        if hasattr(d, "__index__") and not isinstance(d, bool) and int(d) < 1:
            shown = tuple(int(x) if hasattr(x, "__index__") else x for x in dims)
            raise TilecValueError(f"{what}: on-chip buffers need sizes >= 1, got shape {shown} (dimension {i} is "
                                  f"{int(d)})")


# the ``scope=`` values each allocation takes (TileLang's names) and what they are: "shared" (static shared memory in
# TileLang) and "shared.dyn" are both the block's shared memory, which tilec always allocates dynamically
_SCOPES = {
    "T.alloc_shared": (("shared.dyn", "shared"), "shared memory"),
    "T.alloc_fragment": (("local.fragment",), "a register tile spread over the block"),
    "T.alloc_local": (("local",), "a per-thread array"),
    "T.alloc_var": (("local.var",), "a per-thread scalar"),
}


def _check_scope(what: str, scope: Any) -> None:
    """Refuse a ``scope=`` that is not the memory ``what`` allocates (it would be ignored)."""
    allowed, kind = _SCOPES[what]
    if isinstance(scope, str) and scope in allowed:
        return
    expected = " or ".join(repr(s) for s in allowed)
    other = next((f for f, (names, _) in _SCOPES.items() if f != what and scope in names), None)
    hint = f"; {_SCOPES[other][1]} (scope {scope!r}) is {other}" if other else ""
    raise TilecValueError(f"{what}: scope={scope!r} is not {kind}; expected scope {expected}{hint}")


def alloc_shared(shape: Any, dtype: Any, scope: str = "shared.dyn") -> Buffer:
    """A tile in shared memory, visible to all threads of the block (``scope`` "shared.dyn" or "shared")."""
    _check_scope("T.alloc_shared", scope)
    return _alloc("shared", shape, dtype, "T.alloc_shared")


def alloc_fragment(shape: Any, dtype: Any, scope: str = "local.fragment") -> Buffer:
    """A tile in registers, spread over the threads of the block by layout inference."""
    _check_scope("T.alloc_fragment", scope)
    return _alloc("fragment", shape, dtype, "T.alloc_fragment")


def alloc_local(shape: Any, dtype: Any, scope: str = "local") -> Buffer:
    """A small array private to each thread (registers)."""
    _check_scope("T.alloc_local", scope)
    return _alloc("local", shape, dtype, "T.alloc_local")


def alloc_var(dtype: Any, *args: Any, scope: str = "local.var", init: Any = None) -> Buffer:
    """A scalar private to each thread; read it by name, assign it with ``x = ...``.

    As in TileLang, ``T.alloc_var(dtype, init)``, ``T.alloc_var(dtype, init, scope)``, a single positional string
    being the scope (``T.alloc_var(dtype, "local.var")``), or ``init=`` / ``scope=`` by keyword.
    """
    if isinstance(dtype, (tuple, list, int)) and not isinstance(dtype, bool):
        raise TilecTypeError(f"T.alloc_var takes a dtype (and an optional init value), got the shape {dtype!r}: it "
                             "allocates one scalar per thread; an array is T.alloc_local(shape, dtype) (one per "
                             "thread) or T.alloc_fragment(shape, dtype) (spread over the block's threads)")
    if len(args) > 2:
        raise TilecTypeError(f"T.alloc_var takes a dtype, an optional init value and an optional scope, got "
                             f"{len(args) + 1} positional arguments")
    if len(args) == 1 and isinstance(args[0], str):
        scope = args[0]
    elif args:
        if init is not None:
            raise TilecTypeError("T.alloc_var: init given both by position and as init=")
        init = args[0]
        if len(args) == 2:
            scope = args[1]
    _check_scope("T.alloc_var", scope)
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
