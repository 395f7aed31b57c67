"""Running all the trips of a loop at once: the thread interpreter widened from threads to (trip, thread) lanes.

A fragment that every thread holds whole (its size not a multiple of the thread count, or a scalar-FMA gemm's
accumulator: 4096 registers a thread for a 64 x 64 tile) is lowered to loops of thousands of trips whose bodies
are a few register writes; run trip by trip that is a million numpy calls, minutes for one small gemm. A loop
whose trips are independent runs its body once over ``trips x threads`` lanes instead (in chunks), lane
``i * T + t`` standing for thread ``t`` in trip ``i``.

The loop qualifies when (checked once per loop from its body, then on the offsets at run time):

* its body is made of sequences, declarations, ``if``, loops and writes to registers, with no shuffle (lanes of
  a warp), and the kernel has no TMA loads (their overwrite check looks at which read of an element came last,
  an order the batch changes);
* every register array written in the body is read and written there at one offset expression, free of memory
  reads and of the variables the body binds, except the loop's own variable;
* at run time no two trips of a thread touch one element of such an array (so no trip reads what another
  wrote: the order of the trips does not matter).

Every access is checked as before, against the real thread ids: bounds, alignment, reads of shared memory
that another thread wrote since the last barrier or that a ``cp.async`` has not landed in (the body writes no
shared memory, so the order of its reads is not seen by these checks).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tilec.ir.expr import Expr, Var
from tilec.lower.tir import Comment, Decl, Group, If, Loop, Mem, MemRef, Seq, TCall, TmaLoad, TStmt, Write

LANES = 1 << 16  # (trip, thread) lanes of one chunk


@dataclasses.dataclass(frozen=True)
class Plan:
    """Per register array written in a loop's body: the offset expression of its accesses and their lanes."""

    offsets: tuple[tuple[Mem, Expr, int], ...]


def plan_of(it: Any, loop: Loop) -> Plan | None:
    """The loop's plan if its trips may run at once (the static conditions of the module docstring)."""
    if it.k not in it.batch_plans:  # (the kernel's own entry: whether it has TMA loads)
        it.batch_plans[it.k] = any(isinstance(s, TmaLoad) for s in _stmts(it.k.body))
    if loop not in it.batch_plans:
        it.batch_plans[loop] = None if it.batch_plans[it.k] else _plan(loop)
    return it.batch_plans[loop]


def _stmts(s: Any) -> Any:
    """Every statement under ``s`` (``s`` included), through any field holding statements."""
    if isinstance(s, TStmt):
        yield s
        for f in dataclasses.fields(s):
            yield from _stmts(getattr(s, f.name))
    elif isinstance(s, (tuple, list)):
        for x in s:
            yield from _stmts(x)


def _plan(loop: Loop) -> Plan | None:
    bound: set[Var] = set()
    accesses: dict[Mem, set[tuple[Any, int]]] = {}
    exprs: dict[tuple[Any, int], Expr] = {}
    written: set[Mem] = set()
    roots: list[Expr] = []
    for s in _stmts(loop.body):
        if isinstance(s, Write):
            if s.mem.space != "reg":
                return None
            written.add(s.mem)
            roots += [s.value, MemRef(s.mem, s.offset, s.lanes)]
        elif isinstance(s, Decl):
            bound.add(s.var)
            roots.append(s.value)
        elif isinstance(s, Loop):
            bound.add(s.var)
            roots.append(s.extent)
        elif isinstance(s, If):
            roots.append(s.cond)
        elif not isinstance(s, (Seq, Group, Comment)):
            return None
    for e in _exprs(roots):
        if isinstance(e, TCall):
            return None
        if isinstance(e, MemRef) and e.mem.space == "reg":
            key = (_key(e.offset), e.lanes)
            accesses.setdefault(e.mem, set()).add(key)
            exprs[key] = e.offset
    offsets = []
    for mem in written:
        if len(accesses[mem]) != 1:
            return None
        (key,) = accesses[mem]
        e = exprs[key]
        if any(isinstance(x, (MemRef, TCall)) or (isinstance(x, Var) and x in bound) for x in _exprs([e])):
            return None
        offsets.append((mem, e, key[1]))
    return Plan(tuple(offsets))


def _exprs(roots: list[Any]) -> Any:
    """Every expression under ``roots`` (themselves included)."""
    stack = list(roots)
    while stack:
        e = stack.pop()
        if isinstance(e, Expr):
            yield e
            stack += [getattr(e, f.name) for f in dataclasses.fields(e)]
        elif isinstance(e, tuple):
            stack += list(e)


def _key(e: Any) -> Any:
    """A structural key of an expression (variables and mems by identity)."""
    if isinstance(e, (Var, Mem)):
        return id(e)
    if isinstance(e, Expr):
        return (type(e).__name__, *(_key(getattr(e, f.name)) for f in dataclasses.fields(e)))
    if isinstance(e, tuple):
        return tuple(_key(x) for x in e)
    return e


def run_batched(it: Any, loop: Loop, plan: Plan, env: dict, mask: np.ndarray, trips: int) -> bool:
    """Runs the ``trips`` trips of ``loop`` (of uniform extent) at once; False (nothing run) when two trips of a
    thread would touch one register element."""
    if not _disjoint(it, loop, plan, env, mask, trips):
        return False
    T, tids = it.T, it.tids
    step = max(1, LANES // T)
    try:
        it.batched = True
        for first in range(0, trips, step):
            n = min(step, trips - first)
            it.T, it.tids = T * n, np.tile(tids, n)
            wide = _widen(env, T, n)
            wide[loop.var] = np.repeat(np.arange(first, first + n, dtype=np.int32), T)
            it.exec(loop.body, wide, np.tile(mask, n))
    finally:
        it.T, it.tids, it.batched = T, tids, False
    env[loop.var] = np.asarray(trips - 1, np.int32)
    return True


def _widen(env: dict, T: int, n: int) -> dict:
    """``env`` over ``n`` trips: per-thread values repeated trip after trip."""
    out = {}
    for v, x in env.items():
        if np.ndim(x) and np.shape(x)[0] == T:
            x = np.tile(x, (n,) + (1,) * (np.ndim(x) - 1))
        out[v] = x
    return out


def _disjoint(it: Any, loop: Loop, plan: Plan, env: dict, mask: np.ndarray, trips: int) -> bool:
    """No two trips of an active thread touch one element of a register array the body writes."""
    T = it.T
    if trips * T > 1 << 22:
        return False
    wide = _widen(env, T, trips)
    wide[loop.var] = np.repeat(np.arange(trips, dtype=np.int32), T)
    saved = it.T
    try:
        it.T = T * trips
        for _, e, lanes in plan.offsets:
            o = np.broadcast_to(np.asarray(it.eval(e, wide, None), np.int64), (T * trips,)).reshape(trips, T)
            o = np.sort(o[:, mask], axis=0)
            if o.size and np.any(np.diff(o, axis=0) < lanes):
                return False
    finally:
        it.T = saved
    return True
