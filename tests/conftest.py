"""Shared helpers of the test suite: example loading, random inputs, poisoned outputs, tolerances."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# relative tolerance of a result stored in each dtype (against a float64 reference)
RTOL = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-5, "float64": 1e-12}


def example_line(name: str, text: str) -> int:
    """The line number of the one line of example ``name`` that starts with ``text`` (after its indentation)."""
    lines = (EXAMPLES / f"{name}.py").read_text().splitlines()
    hits = [i + 1 for i, t in enumerate(lines) if t.strip().startswith(text)]
    assert len(hits) == 1, text
    return hits[0]


def load_example(name: str):
    """The module ``examples/<name>.py`` (examples are scripts, not a package)."""
    key = f"tilec_example_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, EXAMPLES / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[key] = mod
        spec.loader.exec_module(mod)
    return sys.modules[key]


@pytest.fixture
def rng() -> np.random.Generator:
    """Fresh random inputs every run (the seed is printed on failure by pytest's fixture report)."""
    seed = int(np.random.SeedSequence().entropy % 2**32)
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)


def randn(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Standard normal values rounded to ``dtype`` (never zeros)."""
    from tilec.dtypes import dtype as tdtype

    return rng.standard_normal(shape).astype(tdtype(dtype).np)


def poisoned(shape, dtype) -> np.ndarray:
    """An output buffer filled with NaN (or the type's minimum for ints) so unwritten elements show."""
    from tilec.dtypes import dtype as tdtype

    d = tdtype(dtype)
    if d.is_float:
        return np.full(shape, np.nan, dtype=d.np)
    return np.full(shape, np.iinfo(d.np).min, dtype=d.np)


def assert_close(got: np.ndarray, ref: np.ndarray, dtype: str, scale: float | None = None) -> None:
    """``got`` (any dtype) equals the float64 ``ref`` within the tolerance of ``dtype``, relative to ``scale``
    (default: the largest magnitude of ``ref``); NaN anywhere fails."""
    g = np.asarray(got).astype(np.float64)
    assert g.shape == ref.shape, (g.shape, ref.shape)
    assert np.isfinite(g).all(), "result has NaN/inf (an element was not written?)"
    s = float(np.abs(ref).max()) if scale is None else scale
    err = float(np.abs(g - ref).max()) / max(s, 1e-30)
    assert err <= RTOL[dtype], f"relative error {err:.3g} > {RTOL[dtype]} ({dtype})"


def bf16_exact(values: Any) -> np.ndarray:
    """The bfloat16 nearest (ties to even) to each value, found in the table of every bfloat16 rather than by a
    conversion (some ml_dtypes versions round ints through float32, twice). Values must be exact as float64 (ints
    below 2^53); NaN stays NaN."""
    import ml_dtypes

    v = np.asarray(values, dtype=np.float64)
    table = (np.arange(0x7F81, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)  # 0 .. max, then inf
    table[-1] = 2.0**128  # where inf takes over: past the largest finite value by a whole step, as rounding sees it
    a = np.abs(v)
    hi = np.clip(np.searchsorted(table, a), 1, len(table) - 1)
    lo = hi - 1
    pick = np.where(table[hi] - a < a - table[lo], hi, lo)
    pick = np.where((table[hi] - a == a - table[lo]) & (lo % 2 == 1), hi, pick)  # a tie: the even pattern
    pick = np.where(a == 0, 0, pick)
    bits = (pick.astype(np.uint16) | np.where(np.signbit(v), 0x8000, 0).astype(np.uint16)).astype(np.uint16)
    bits = np.where(np.isnan(v), 0x7FC0, bits).astype(np.uint16)
    return bits.view(ml_dtypes.bfloat16)


def shift_kernel(dtype: str, n: int = 256):
    """``O = A << S`` and ``P = A >> S`` elementwise on ``n`` values of ``dtype``, counts in ``S`` (any: out of
    range ones shift every bit out, as numpy's shifts do). Returns the prim_func."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((n,), dtype), S: T.Tensor((n,), dtype), O: T.Tensor((n,), dtype),
             P: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(n):
                O[i] = A[i] << S[i]
                P[i] = A[i] >> S[i]

    return main


def shift_inputs(rng: np.random.Generator, dtype: str, n: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Random values of ``dtype`` and counts from -3 (signed types) to twice its bits, each edge count present."""
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    bits = np.dtype(dtype).itemsize * 8
    s = rng.integers(max(info.min, -3), 2 * bits + 1, n).astype(dtype)
    edges = [c for c in (-1, 0, bits - 1, bits, bits + 1, 2 * bits) if c >= info.min]
    s[: len(edges)] = edges
    return a, s
