"""Shared test helpers: evaluating emitted C strings in Python, identity layouts."""

from __future__ import annotations

import re

import numpy as np

from tilec.layout import Layout

_LUT = re.compile(r"tilec_lut_[0-9a-f]{12}")


def c_eval(code: str, env: dict[str, object], tables: dict[str, np.ndarray] | None = None) -> object:
    """Evaluate a C integer expression with Python semantics (``/`` -> ``//``, valid for nonnegative ints).

    ``env`` maps the variable names to ints or numpy arrays (evaluation is vectorised).
    """
    assert "//" not in code, code
    names = dict(env)
    for name in _LUT.findall(code):
        assert tables is not None and name in tables, f"missing table {name}"
        names[name] = tables[name]
    return eval(code.replace("/", "//"), {"__builtins__": {}}, names)  # noqa: S307


def identity(shape: tuple[int, ...]) -> Layout:
    """The identity layout on ``shape`` (scalar for 1-D shapes)."""
    if len(shape) == 1:
        return Layout(shape, lambda i: i)
    return Layout(shape, lambda *idx: tuple(idx))


def check_to_c(layout: Layout) -> None:
    """Assert that ``layout.to_c`` evaluates to ``layout.eval_table`` on every index."""
    names = [f"x{d}" for d in range(layout.ndim)]
    grids = np.indices(layout.shape, dtype=np.int64)
    env = dict(zip(names, grids))
    codes = layout.to_c(names)
    codes = (codes,) if isinstance(codes, str) else codes
    table = layout.eval_table()
    table = table[..., None] if layout.scalar_output else table
    for d, code in enumerate(codes):
        got = np.broadcast_to(np.asarray(c_eval(code, env, layout.tables())), layout.shape)
        np.testing.assert_array_equal(got, table[..., d], err_msg=code)
