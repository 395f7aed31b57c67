"""How many times each tile op of a kernel runs, per block: the trip counts the cost model multiplies by.

Counts are numpy arrays that broadcast over the launch grid: block variable ``bx`` is ``arange(gx)`` along
axis 0, ``by`` along axis 1, ``bz`` along axis 2, so a count that depends only on ``bx`` (a causal trip count
``T.min(n, bx + 1)``) costs ``gx`` numbers, not one per block. Rules:

* a loop multiplies the count of its body by its extent, evaluated per block (symbolic sizes need ``sizes``);
* a loop whose variable decides a condition or an inner loop's extent inside its body (a pipelined loop's
  ``if k >= 2`` guards) is enumerated iteration by iteration, vectorized over the blocks;
* a condition on block and loop variables and sizes selects the blocks and iterations it holds for; a condition
  on data (a loaded value) counts both branches (an upper bound), and says so in the notes;
* ``T.Parallel`` nests and tile ops are counted as a whole (their element work is the op rules' business).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilec.errors import TilecValueError
from tilec.ir.buffer import Buffer
from tilec.ir.evaluate import eval_int
from tilec.ir.expr import BinOp, Call, Cast, Const, Expr, Load, Select, Table, UnOp, Var
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import AtomicRMW, For, IfThenElse, KernelLaunch, SeqStmt, Stmt, Store, TileOp
from tilec.ir.visit import walk

ENUMERATION_BUDGET = 1 << 16  # loop iterations enumerated per kernel before conditions are assumed to hold

_BIN = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
    "%": operator.mod, "min": np.minimum, "max": np.maximum, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge, "==": np.equal, "!=": np.not_equal, "and": np.logical_and,
    "or": np.logical_or, "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift,
    ">>": operator.rshift,
}  # fmt: skip


class NotStatic(Exception):
    """An expression depends on data (a load) or on a variable with no value here."""


def evaluate(e: Any, env: dict[Var, Any]) -> Any:
    """``e`` as a number or numpy array, its variables taken from ``env`` (values or arrays over the grid)."""
    if isinstance(e, (bool, int, float, np.ndarray, np.generic)):
        return e
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        if e not in env:
            raise NotStatic(e.name)
        return env[e]
    if isinstance(e, BinOp):
        return _BIN[e.op](evaluate(e.a, env), evaluate(e.b, env))
    if isinstance(e, UnOp):
        a = evaluate(e.a, env)
        return np.logical_not(a) if e.op == "not" else (-a if e.op == "-" else ~a)
    if isinstance(e, Cast):
        v = evaluate(e.value, env)
        if e.dtype.is_bool:
            return np.asarray(v) != 0
        return np.floor(v).astype(np.int64) if e.dtype.is_int and np.asarray(v).dtype.kind == "f" else v
    if isinstance(e, Select):
        return np.where(evaluate(e.cond, env), evaluate(e.a, env), evaluate(e.b, env))
    if isinstance(e, Table):
        return e.at(evaluate(e.index, env))
    if isinstance(e, (Load, Call, Expr)):
        raise NotStatic(str(e))
    raise NotStatic(repr(e))


@dataclass
class Grid:
    """The launch grid and the arrays standing for its block variables."""

    shape: tuple[int, ...]
    env: dict[Var, Any]

    @property
    def blocks(self) -> int:
        return int(np.prod(self.shape))

    def full(self, value: Any) -> np.ndarray:
        """``value`` (a number or an array over some grid axes) as one number per block."""
        return np.broadcast_to(np.asarray(value, dtype=np.float64), self.shape)


def launch_grid(func: PrimFunc, sizes: dict[str, int] | None = None) -> Grid:
    """The grid of ``func`` with its sizes bound: ``sizes`` gives the ``T.dynamic`` sizes by name."""
    sizes = dict(sizes or {})
    env: dict[Var, Any] = {}
    for v in func.dyn_vars:
        if v.name in sizes:
            env[v] = int(sizes[v.name])
    launch: KernelLaunch = func.launch
    try:
        shape = tuple(eval_int(g, env) for g in launch.grid)
    except TilecValueError as e:
        raise TilecValueError(f"the cost model needs the kernel's sizes: {e} (pass sizes={{name: value}})") from None
    shape3 = shape + (1,) * (3 - len(shape))
    for axis, v in enumerate(launch.block_vars):
        dims = [1, 1, 1]
        dims[axis] = shape3[axis]
        env[v] = np.arange(shape3[axis], dtype=np.int64).reshape(dims)
    return Grid(shape3, env)


@dataclass
class TripCounts:
    """Per tile op (by ``id``), how many times one block runs it (an array over the grid); per loop
    (by ``id``), its trips per block; and notes on what was approximated."""

    ops: dict[int, Any] = field(default_factory=dict)
    loops: dict[int, tuple[For, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def of(self, op: Stmt) -> Any:
        return self.ops.get(id(op), 0)


class _Counter:
    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self.out = TripCounts()
        self.budget = ENUMERATION_BUDGET
        self._controls: dict[int, bool] = {}

    def visit(self, s: Stmt, mult: Any, env: dict[Var, Any]) -> None:
        if isinstance(s, SeqStmt):
            for c in s.stmts:
                self.visit(c, mult, env)
        elif isinstance(s, For):
            self.loop(s, mult, env)
        elif isinstance(s, IfThenElse):
            self.branch(s, mult, env)
        elif isinstance(s, (TileOp, Store, AtomicRMW)):
            self.out.ops[id(s)] = self.out.ops.get(id(s), 0) + mult

    def loop(self, s: For, mult: Any, env: dict[Var, Any]) -> None:
        try:
            ext = evaluate(s.extent, env)
        except NotStatic as e:
            raise TilecValueError(f"the trip count of loop {s.var.name!r} depends on {e}, which has no value here; "
                                  "pass the kernel's sizes (sizes={name: value})", s.loc) from None
        _, old = self.out.loops.get(id(s), (s, 0))
        self.out.loops[id(s)] = (s, old + mult * np.maximum(ext, 0))
        top = int(np.max(ext)) if np.size(ext) else 0
        if not self.controls(s) or top <= 0:
            self.visit(s.body, mult * np.maximum(ext, 0), env)
            return
        if top > self.budget:
            self.out.notes.append(f"loop {s.var.name!r}: {top} iterations are too many to enumerate; the conditions "
                                  "on it are assumed to hold")
            self.visit(s.body, mult * np.maximum(ext, 0), env)
            return
        self.budget -= top
        for k in range(top):
            self.visit(s.body, mult * (k < ext) if np.ndim(ext) else mult, {**env, s.var: k})

    def branch(self, s: IfThenElse, mult: Any, env: dict[Var, Any]) -> None:
        try:
            cond = np.asarray(evaluate(s.cond, env), dtype=bool)
        except NotStatic:
            self.out.notes.append(f"the condition `{s.cond}` depends on data: both branches are counted")
            self.visit(s.then_body, mult, env)
            if s.else_body is not None:
                self.visit(s.else_body, mult, env)
            return
        self.visit(s.then_body, mult * cond, env)
        if s.else_body is not None:
            self.visit(s.else_body, mult * ~cond, env)

    def controls(self, loop: For) -> bool:
        """The loop's variable appears in a condition or an inner loop extent of its body (outside tile ops)."""
        if id(loop) not in self._controls:
            exprs = []
            stack = [loop.body]
            while stack:
                s = stack.pop()
                if isinstance(s, SeqStmt):
                    stack.extend(s.stmts)
                elif isinstance(s, For):
                    exprs.append(s.extent)
                    stack.append(s.body)
                elif isinstance(s, IfThenElse):
                    exprs.append(s.cond)
                    stack += [s.then_body] + ([s.else_body] if s.else_body is not None else [])
            self._controls[id(loop)] = any(n is loop.var for e in exprs for n in walk(e))
        return self._controls[id(loop)]


def trip_counts(func: PrimFunc, grid: Grid) -> TripCounts:
    """How many times each tile op and loop of ``func`` runs in each block of ``grid`` (see the module docstring)."""
    counter = _Counter(grid)
    counter.visit(func.launch.body, 1, dict(grid.env))
    return counter.out


def buffer_bytes(buf: Buffer, env: dict[Var, Any]) -> float:
    """The size of a buffer in bytes (its symbolic dimensions evaluated in ``env``)."""
    n = 1
    for d in buf.shape:
        n *= int(evaluate(d, env))
    return n * buf.dtype.bits / 8
