"""What the autotuner needs around a kernel: a GPU timer, random inputs, and output comparison.

:func:`do_bench` follows ``triton.testing.do_bench``: estimate one call's time, run ``warmup`` ms of calls, then
time ``rep`` ms of calls one by one with CUDA events, the L2 cache cleared (a 256 MB buffer zeroed) before each,
and return the median. It uses torch's events when torch sees a GPU, else CuPy's.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

from tilec.errors import TilecRuntimeError, TilecValueError

L2_FLUSH_BYTES = 256 * 1024 * 1024
# relative tolerance of a candidate's output against the reference candidate's, by output dtype
TOLERANCE = {"float16": 1e-2, "bfloat16": 4e-2, "float32": 1e-4, "float64": 1e-10, "float8_e4m3": 0.125,
             "float8_e5m2": 0.25}


def _torch_cuda() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def gpu_name() -> str | None:
    """The name of GPU 0, or None where no GPU is visible."""
    from tilec.target import gpu_available

    torch = _torch_cuda()
    if torch is not None:
        return torch.cuda.get_device_name()
    if not gpu_available():
        return None
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(0).get("name", b"")
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def do_bench(fn: Callable[[], Any], warmup: float = 25, rep: float = 100) -> float:
    """Median milliseconds of ``fn()`` on the GPU (CUDA events), after ``warmup`` ms of calls, over ``rep`` ms.

    Raises
    ------
    TilecRuntimeError
        When no GPU is visible.
    """
    torch = _torch_cuda()
    if torch is not None:
        event, sync = (lambda: torch.cuda.Event(enable_timing=True)), torch.cuda.synchronize
        flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
        clear, elapsed = flush.zero_, (lambda a, b: a.elapsed_time(b))
    else:
        from tilec.target import gpu_available

        if not gpu_available():
            raise TilecRuntimeError("do_bench times on a GPU with CUDA events, and no GPU is visible")
        import cupy

        event, sync = cupy.cuda.Event, cupy.cuda.runtime.deviceSynchronize
        flush = cupy.empty(L2_FLUSH_BYTES, dtype=cupy.int8)
        clear, elapsed = (lambda: flush.fill(0)), cupy.cuda.get_elapsed_time
    fn()
    sync()
    start, end = event(), event()
    start.record()
    for _ in range(5):
        clear()
        fn()
    end.record()
    sync()
    estimate = max(elapsed(start, end) / 5, 1e-3)
    for _ in range(max(1, int(warmup / estimate))):
        fn()
    n = min(max(1, int(rep / estimate)), 10000)
    pairs = [(event(), event()) for _ in range(n)]
    for s, e in pairs:
        clear()
        s.record()
        fn()
        e.record()
    sync()
    return statistics.median(elapsed(s, e) for s, e in pairs)


class GpuTimer:
    """The default timer of :func:`tilec.autotune`: ``timer(run, config)`` is ``do_bench(run, warmup, rep)``."""

    def __init__(self, warmup: float = 25, rep: float = 100) -> None:
        self.warmup, self.rep = warmup, rep

    def __call__(self, run: Callable[[], Any], config: dict) -> float:
        return do_bench(run, self.warmup, self.rep)


# ------------------------------------------------------------------------------------------------- inputs


def random_inputs(func: Any, target: Any, seed: int = 0) -> list[Any]:
    """Random arrays for the inputs of a kernel (its tensor parameters not in ``out_params``): standard normal
    floats, small integers; torch tensors on the GPU for a CUDA target (CuPy arrays without torch), numpy arrays
    for the CPU interpreters."""
    from tilec.ir.buffer import Buffer

    rng = np.random.default_rng(seed)
    out = []
    for i, p in enumerate(func.params):
        if i in func.out_params:
            continue
        if not isinstance(p, Buffer):
            raise TilecValueError(f"kernel {func.name!r} has the scalar parameter {p.name!r}: random inputs cannot "
                                  "choose it; pass supply=lambda func: [...] to tilec.autotune")
        shape = p.static_shape
        if shape is None:
            raise TilecValueError(f"parameter {p.name!r} of {func.name!r} has symbolic sizes; pass supply=...")
        if p.dtype.is_float:
            x = rng.standard_normal(shape, dtype=np.float32)
        elif p.dtype.is_bool:
            x = rng.random(shape) < 0.5
        else:
            x = rng.integers(0 if p.dtype.kind == "uint" else -4, 5, size=shape)
        out.append(_on_target(x, p.dtype, target))
    return out


def _on_target(x: np.ndarray, dtype: Any, target: Any) -> Any:
    if target.kind in ("cpu", "simt"):
        return x.astype(dtype.np)
    torch = _torch_cuda()
    if torch is not None:
        tname = {"float8_e4m3": "float8_e4m3fn", "boolean": "bool"}.get(dtype.name, dtype.name)
        return torch.from_numpy(np.ascontiguousarray(x)).to(device="cuda", dtype=getattr(torch, tname))
    import cupy

    return cupy.asarray(x.astype(dtype.np))


def clone(x: Any) -> Any:
    return x.clone() if hasattr(x, "clone") else x.copy()


def to_numpy(x: Any) -> np.ndarray:
    """A host float64 (or integer) copy of a numpy, torch or CuPy array."""
    if type(x).__module__.startswith("torch"):
        x = x.detach()
        x = (x.double() if x.is_floating_point() else x).cpu().numpy()
    elif type(x).__module__.startswith("cupy"):
        import cupy

        x = cupy.asnumpy(x)
    a = np.asarray(x)
    return a.astype(np.float64) if a.dtype.kind == "f" or a.dtype.name.startswith(("bfloat", "float")) else a


def mismatch(ref: Any, got: Any, dtype: str, rtol: float | None = None) -> str | None:
    """Why ``got`` differs from ``ref`` beyond the dtype's tolerance (relative to ``max |ref|``), or None."""
    a, b = to_numpy(ref), to_numpy(got)
    if a.shape != b.shape:
        return f"shape {b.shape} != {a.shape}"
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        n = int(np.count_nonzero(a != b))
        return f"{n} elements differ" if n else None
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return "NaN where the reference has none (or the reverse)"
    inf = np.isinf(a) | np.isinf(b)
    if not np.array_equal(a[inf], b[inf]):  # inf - inf is NaN, which would hide every other difference
        return f"{int(np.count_nonzero(a[inf] != b[inf]))} infinities differ from the reference's"
    ok = np.isfinite(a)
    scale = float(np.abs(a[ok]).max()) if ok.any() else 0.0
    err = float(np.abs(a[ok] - b[ok]).max()) / max(scale, 1e-30) if ok.any() else 0.0
    tol = TOLERANCE.get(dtype, 0.0) if rtol is None else rtol
    return f"relative error {err:.3g} > {tol:g}" if err > tol else None
