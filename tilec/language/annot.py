"""Kernel-level annotations and the decorators of the language."""

from __future__ import annotations

import inspect
import numbers
from typing import Any

import numpy as np

from tilec.errors import LayoutConflictError, TilecTypeError
from tilec.frontend.builder import current
from tilec.ir.buffer import Buffer


def prim_func(fn: Any) -> Any:
    """``@T.prim_func``: parse the decorated function into a Tile IR kernel (a :class:`~tilec.ir.kernel.PrimFunc`).

    Its parameters are annotated ``T.Tensor(shape, dtype)`` (global tensors) or with scalar types (``T.int32``).
    """
    import sys

    from tilec.frontend.entry import parse_prim_func

    caller = sys._getframe(1).f_locals  # the factory's locals: names used only in parameter annotations
    return parse_prim_func(fn, caller)


def macro(fn: Any) -> Any:
    """``@T.macro``: a helper parsed inline at each call from a kernel (it may use loops and tile ops)."""
    from tilec.frontend.parser import Macro

    if not inspect.isfunction(fn):  # its source is parsed at each call
        raise TilecTypeError(f"T.macro decorates a Python function (def ...), got {type(fn).__name__} {fn!r}")
    return Macro(fn)


def annotate_layout(layout_map: dict) -> None:
    """Fix the layout of buffers: ``T.annotate_layout({A_shared: layout})``.

    Values are :mod:`tilec.layout` objects (a ``Layout`` for shared memory, a ``Fragment`` for fragments) or
    functions of the buffer returning one. Layout inference treats them as strict constraints.
    """
    b = current("T.annotate_layout")
    k = b.require_kernel("T.annotate_layout")
    if not isinstance(layout_map, dict):
        raise TilecTypeError(f"T.annotate_layout takes a dict {{buffer: layout}}, got {type(layout_map).__name__}")
    for buf, layout in layout_map.items():
        if not isinstance(buf, Buffer) or buf.scope not in ("shared", "fragment"):
            raise TilecTypeError(f"T.annotate_layout: keys must be shared or fragment buffers, got {buf!r}")
        if callable(layout) and not hasattr(layout, "shape"):
            layout = layout(buf)
        _check_layout(buf, layout)
        k.layout_map[buf] = layout
        k.layout_locs[buf] = b.loc


def _check_layout(buf: Buffer, layout: Any) -> None:
    """The value of ``buf`` in T.annotate_layout is a Fragment (for a fragment) or a Layout (for shared memory) of
    the buffer's shape: refused here, on every target (layout inference checks the rest: threads, registers,
    offsets)."""
    from tilec.layout import Fragment, Layout

    want = Fragment if buf.scope == "fragment" else Layout
    head = f"T.annotate_layout of {buf.scope} {buf.name!r}"
    if not isinstance(layout, want):
        raise TilecTypeError(f"{head} needs a {want.__name__}, got {type(layout).__name__} {layout!r}")
    shape = tuple(buf.shape)
    if all(isinstance(d, int) for d in shape) and tuple(layout.shape) != shape:
        raise LayoutConflictError(f"{head}: layout of shape {tuple(layout.shape)} given to {buf.name!r} of shape "
                                  f"{shape}")


def use_swizzle(panel_size: int, order: str = "row", enable: bool = True) -> None:
    """Rasterize the grid in panels of ``panel_size`` blocks for L2 reuse (the blocks' work is unchanged)."""
    b = current("T.use_swizzle")
    k = b.require_kernel("T.use_swizzle")
    if order not in ("row", "column"):
        raise TilecTypeError(f"T.use_swizzle: order must be 'row' or 'column', got {order!r}")
    if not isinstance(panel_size, numbers.Integral) or isinstance(panel_size, (bool, np.bool_)) or panel_size <= 0:
        raise TilecTypeError(f"T.use_swizzle: panel_size must be a positive int, got {panel_size!r}")
    if not isinstance(enable, (numbers.Integral, np.bool_)) or int(enable) not in (0, 1):  # "no" would be true
        raise TilecTypeError(f"T.use_swizzle: enable must be True or False, got {type(enable).__name__} {enable!r}")
    if enable:
        k.swizzle = (int(panel_size), order)
