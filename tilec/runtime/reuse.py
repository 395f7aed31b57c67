"""When a ``@tilec.jit`` function's kernel may be reused (:mod:`.jit`): its arguments frozen into a cache key, and the
globals and closure variables its source reads still bound to what they were when the kernel was made (an equal
number, string or tuple of them counts as the same)."""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from tilec.errors import TilecTypeError


def freeze(value: Any, what: str) -> Any:
    """``value`` as a hashable key that tells apart what a kernel could tell apart (its type, -0.0 from 0.0, NaNs by
    their bits); lists and dicts as tuples. ``what`` names the value in the error for one that cannot be a key."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v, what) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v, what)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        raise TilecTypeError(f"{what}: {type(value).__name__} values cannot key the kernel cache; pass ints, "
                             "floats, strings, dtypes or tuples") from None
    if isinstance(value, (float, np.floating)) and value == 0:  # -0.0 == 0.0, but x * -0.0 flips x's sign
        return (type(value).__name__, value, bool(np.signbit(value)))
    if isinstance(value, (float, np.floating)) and value != value:  # NaN != NaN: key it by its bits
        return (type(value).__name__, "nan", np.asarray(value).tobytes())
    return (type(value).__name__, value)


_UNBOUND = object()


def free_names(fn: Any) -> frozenset[str]:
    """The names ``fn``'s source reads and never binds (its nested functions and annotations too: the parser
    evaluates those): what it may take from its closure or module."""
    from tilec.frontend.source import function_source

    read, bound = set(), set()
    for n in ast.walk(function_source(fn).tree):
        if isinstance(n, ast.Name):
            (read if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
    return frozenset(read - bound)


def environment(fn: Any, names: frozenset[str]) -> tuple:
    """What ``names`` are bound to in ``fn``'s closure and module now: ``(cell or None, name, value)`` each."""
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    out = []
    for name in sorted(names):
        if name in cells:
            try:
                out.append((cells[name], name, cells[name].cell_contents))
            except ValueError:  # a cell not yet filled
                pass
        elif name in fn.__globals__:
            out.append((None, name, fn.__globals__[name]))
    return tuple(out)


def unchanged(fn: Any, env: tuple) -> bool:
    """Whether every name of ``env`` is still bound to its value (or an equal number, string or tuple of them)."""
    for cell, name, value in env:
        try:
            now = cell.cell_contents if cell is not None else fn.__globals__.get(name, _UNBOUND)
        except ValueError:
            return False
        if now is not value and not _equal_constants(now, value):
            return False
    return True


def _equal_constants(a: Any, b: Any) -> bool:
    if type(a) is not type(b) or not isinstance(a, (int, float, str, tuple)):
        return False
    try:
        return freeze(a, "") == freeze(b, "")
    except TilecTypeError:  # a tuple holding an unhashable value
        return False
