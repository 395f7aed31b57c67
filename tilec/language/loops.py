"""Loop and launch constructs: they are only meaningful as the iterable of a ``for`` or the item of a ``with``
statement in a kernel, where the parser turns them into IR."""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilec.errors import TilecSyntaxError, TilecTypeError, TilecValueError
from tilec.ir.buffer import Buffer
from tilec.ir.expr import Const, Expr, as_expr, binop, ceildiv
from tilec.ir.stmt import LOOP_ANNOTATIONS

LOOP_CTORS = {"pipelined": "T.Pipelined", "parallel": "T.Parallel"}


@dataclass(frozen=True)
class LoopSpec:
    """``T.serial / T.unroll / T.Pipelined / T.vectorized / T.Parallel``, before the parser binds its variables."""

    kind: str
    starts: tuple[Any, ...]
    extents: tuple[Any, ...]
    steps: tuple[Any, ...]
    annotations: tuple[tuple[str, Any], ...] = ()

    @property
    def ctor(self) -> str:
        """The primitive's name as the user wrote it (``T.Pipelined``, ``T.serial``, ...)."""
        return LOOP_CTORS.get(self.kind, f"T.{self.kind}")

    def __iter__(self):
        raise TilecSyntaxError(f"{self.ctor} can only be iterated by a `for` statement in a kernel")


@dataclass(frozen=True)
class KernelSpec:
    grid: tuple[Any, ...]
    threads: tuple[int, ...]
    options: dict = field(default_factory=dict)

    def __enter__(self):
        raise TilecSyntaxError("T.Kernel can only be used in a `with` statement of a kernel")

    def __exit__(self, *a):
        return False


def _is_int(v: Any) -> bool:
    """A Python or numpy int, not a bool (True would count as 1) and not a kernel value."""
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_, Expr))


def _range(what: str, start: Any, stop: Any, step: Any) -> tuple[Any, Any, Any]:
    bounds = (("the extent", start),) if stop is None else (("start", start), ("stop", stop))
    for name, v in bounds:  # a float made float loop indices; a str, 'expected a scalar expression' (of what?)
        if not (_is_int(v) or isinstance(v, Expr) or isinstance(v, Buffer) and v.shape == ()):  # or a T.alloc_var
            raise TilecTypeError(f"{what}: {name} must be an int or an integer scalar expression, got "
                                 f"{type(v).__name__} {v!r}")
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    if not _is_int(step) or step == 0:  # a float step made float loop indices (an error about them, not the step)
        raise TilecTypeError(f"{what}: step must be a non-zero Python int, got {step}")
    step = int(step)  # a numpy int too
    if isinstance(start, int) and isinstance(stop, int):
        extent = max(0, -(-(stop - start) // step)) if step > 0 else max(0, -(-(start - stop) // -step))
    elif step > 0:
        extent = ceildiv(binop("-", stop, start), step) if step != 1 else binop("-", stop, start)
    else:
        extent = ceildiv(binop("-", start, stop), -step)
    return start, extent, step


def _annotations(what: str, annotations: Any) -> tuple[tuple[str, Any], ...]:
    """TileLang's ``annotations`` dict of a loop, kept on it as sorted pairs (the report notes that they have no
    effect in tilec)."""
    if annotations is None:
        return ()
    if not isinstance(annotations, dict) or not all(isinstance(k, str) for k in annotations):
        raise TilecTypeError(f"{what}: annotations must be a dict with str keys, got {annotations!r}")
    taken = sorted(k for k in annotations if k in LOOP_ANNOTATIONS)
    if taken:
        raise TilecValueError(f"{what}: annotations={{{taken[0]!r}: ...}}: tilec uses the annotation {taken[0]!r} "
                              f"itself; pick another name (reserved: {', '.join(LOOP_ANNOTATIONS)})")
    return tuple(sorted(annotations.items()))


def _positive(what: str, name: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 1:
        raise TilecTypeError(f"{what}: {name} must be an int >= 1, got {value!r}")
    return int(value)


def serial(start: Any, stop: Any = None, step: Any = None, annotations: dict | None = None) -> LoopSpec:
    """``for k in T.serial(n)`` / ``T.serial(start, stop, step)``: a sequential loop (TileLang's ``annotations``
    dict is kept on the loop and noted in the report as having no effect; any other keyword is an error)."""
    s, e, st = _range("T.serial", start, stop, step)
    return LoopSpec("serial", (s,), (e,), (st,), _annotations("T.serial", annotations))


def unroll(start: Any, stop: Any = None, step: Any = None, explicit: bool = False, unroll_factor: int | None = None,
           annotations: dict | None = None) -> LoopSpec:
    """A loop the backend unrolls: fully, or by ``unroll_factor`` (``#pragma unroll N``). TileLang's ``explicit``
    (unroll in the IR, not by the CUDA compiler) and ``annotations`` are kept and noted as having no effect."""
    s, e, st = _range("T.unroll", start, stop, step)
    ann = (("unroll_factor", _positive("T.unroll", "unroll_factor", unroll_factor)),) if unroll_factor is not None \
        else ()
    ann += (("explicit", True),) if explicit else ()
    return LoopSpec("unroll", (s,), (e,), (st,), ann + _annotations("T.unroll", annotations))


def vectorized(start: Any, stop: Any = None, annotations: dict | None = None) -> LoopSpec:
    """A loop over a vector's lanes (a plain loop in tilec; TileLang's ``annotations`` are kept and noted as having
    no effect)."""
    s, e, st = _range("T.vectorized", start, stop, None)
    return LoopSpec("vectorized", (s,), (e,), (st,), _annotations("T.vectorized", annotations))


def Pipelined(start: Any, stop: Any = None, num_stages: int = 0, order: list[int] | None = None,
              stage: list[int] | None = None, sync: Any = None, group: Any = None) -> LoopSpec:
    """``for k in T.Pipelined(n, num_stages=3)``: a sequential loop whose copies are software-pipelined.

    ``stage`` and ``order`` override the inferred schedule, one entry per statement of the body: its stage (a
    statement of stage ``s`` works on the iteration ``s`` trips behind) and its place in a trip (``order=[1, 2, 0]``
    runs the third statement first), as TileLang's (TVM's software pipeline annotations)."""
    s, e, st = _range("T.Pipelined", start, stop, None)
    if sync is not None or group is not None:
        raise TilecTypeError("T.Pipelined: sync= and group= (manual synchronization and copy grouping) are not "
                             "supported; tilec places the waits and barriers itself (use stage=/order= to schedule)")
    if isinstance(num_stages, (bool, np.bool_)) or not isinstance(num_stages, numbers.Integral) or num_stages < 0:
        raise TilecTypeError(f"T.Pipelined: num_stages must be an int >= 0, got {num_stages!r}")
    num_stages = int(num_stages)  # a numpy int too (a tile size read from numpy)
    for name, given in (("order", order), ("stage", stage)):
        ints = isinstance(given, (list, tuple)) and all(_is_int(x) and x >= 0 for x in given)
        if given is not None and not ints:
            raise TilecTypeError(f"T.Pipelined: {name} must be a list of ints >= 0, got {given!r} (one entry per "
                                 "statement of the loop body)")
    ann: list[tuple[str, Any]] = [("num_stages", num_stages)]
    if order is not None:
        ann.append(("order", tuple(int(x) for x in order)))
    if stage is not None:
        ann.append(("stage", tuple(int(x) for x in stage)))
    return LoopSpec("pipelined", (s,), (e,), (st,), tuple(ann))


def Parallel(*extents: Any, coalesced_width: int | None = None) -> LoopSpec:
    """``for i, j in T.Parallel(M, N)``: element-wise work spread over the block's threads. ``coalesced_width``
    (as TileLang's) is how many consecutive elements of the innermost dimension a thread takes in a row, where the
    loop's layout is free (not set by a fragment it indexes)."""
    if not extents:
        raise TilecTypeError("T.Parallel needs at least one extent")
    # a numpy integer (a size from an array's shape, a config read from numpy) counts as the int it is
    extents = tuple(int(e) if not isinstance(e, (int, Expr)) and hasattr(e, "__index__") else e for e in extents)
    for e in extents:
        if isinstance(e, bool) or not isinstance(e, (int, Expr)):  # T.Parallel(True) was one iteration
            raise TilecTypeError(f"T.Parallel: extents must be ints, got {e!r}")
    ann = (("coalesced_width", _positive("T.Parallel", "coalesced_width", coalesced_width)),) \
        if coalesced_width is not None else ()
    return LoopSpec("parallel", tuple(0 for _ in extents), tuple(extents), tuple(1 for _ in extents), ann)


def grid(*extents: Any) -> LoopSpec:
    """``for i, j in T.grid(M, N)``: nested serial loops."""
    return LoopSpec("grid", tuple(0 for _ in extents), tuple(extents), tuple(1 for _ in extents))


def Kernel(*blocks: Any, threads: int | list[int] | tuple[int, ...] | None = 128, is_cpu: bool = False,
           prelude: str | None = None) -> KernelSpec:
    """``with T.Kernel(gx, gy, threads=128) as (bx, by)``: launch a grid of blocks."""
    if is_cpu:
        raise TilecTypeError("T.Kernel: is_cpu=True is not supported; pick the CPU with target=\"cpu\"")
    if prelude is not None and str(prelude).strip():  # an empty one needs nothing
        raise TilecTypeError("T.Kernel: prelude= (C code put before the kernel) is not supported: tilec emits every "
                             "statement itself, and its interpreters run kernels on the CPU, where C code cannot run")
    if not blocks:
        raise TilecTypeError("T.Kernel needs at least one grid extent")
    if len(blocks) > 3:
        raise TilecTypeError(f"T.Kernel: at most 3 grid dimensions, got {len(blocks)}")
    grid = tuple(as_expr(b) for b in blocks)
    for g in grid:
        if not g.dtype.is_int:
            raise TilecTypeError(f"T.Kernel: grid extents must be integers, got {g} ({g.dtype})")
        if isinstance(g, Const) and g.value < 0:
            raise TilecValueError(f"T.Kernel: grid extents must be >= 0, got {g.value}")
    if threads is None:
        threads = 128
    ts = (threads,) if not isinstance(threads, (list, tuple)) else tuple(threads)
    if not ts or len(ts) > 3 or not all(_is_int(t) and t > 0 for t in ts):
        raise TilecTypeError(f"T.Kernel: threads must be a positive int or up to 3 of them, got {threads!r}")
    ts = tuple(int(t) for t in ts)  # numpy ints too
    total = 1
    for t in ts:
        total *= t
    if total > 1024:
        raise TilecTypeError(f"T.Kernel: at most 1024 threads per block, got {total}")
    return KernelSpec(grid, ts, {})
