"""Reads of a tensor that certainly come before anything writes it (an output the call allocates and never fills).

:func:`first_unset_read` scans a kernel body in program order for the first statement that touches a buffer. When
that statement reads it (before its own write: ``B[i] = B[i] + A[i]``, ``B[i] += ...``, ``T.copy(B, s)``,
``T.atomic_add(B[i], v)``) and runs unconditionally, the first block to reach it reads elements that no block has
written yet: each block reaches the read before any write of its own, whatever the order of blocks, threads and
``T.Parallel`` iterations. A loop is no excuse: the read runs in the loop's first trip, before that trip's writes,
unless the loop runs no trip at all (a constant extent of 0, whose body is skipped). The scan gives up (no finding)
at the first touch that is a write or that may not run: a statement under a run-time ``if``, a load in a branch of
``T.if_then_else`` (whose value may be discarded). ``T.print`` is neither read nor write here.
"""

from __future__ import annotations

from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Const, Load, Select
from tilec.ir.stmt import AtomicRMW, For, IfThenElse, Parallel, Print, SeqStmt, Stmt, Store, TileOp
from tilec.ir.visit import children, walk

_WRITE = "write"  # the first touch writes the buffer, or may not run: nothing certain follows


def first_unset_read(body: Stmt, buf: Buffer) -> Stmt | None:
    """The statement whose read of ``buf`` certainly runs before any write of it (see the module), else None."""
    found = _scan(body, buf)
    return found if isinstance(found, Stmt) else None


def _scan(s: Stmt, buf: Buffer) -> Stmt | str | None:
    """The reading statement, ``_WRITE`` (stop: no finding), or None (``s`` does not touch ``buf``)."""
    if isinstance(s, SeqStmt):
        for c in s.stmts:
            found = _scan(c, buf)
            if found is not None:
                return found
        return None
    if isinstance(s, For):
        if isinstance(s.extent, Const) and s.extent.value <= 0:
            return None
        return _scan(s.body, buf)
    if isinstance(s, Parallel):
        if any(isinstance(e, (int, Const)) and int(getattr(e, "value", e)) <= 0 for e in s.extents):
            return None
        return _scan(s.body, buf)
    if isinstance(s, IfThenElse):
        if _reads(s.cond, buf):
            return s
        return _WRITE if _touches(s, buf) else None
    if isinstance(s, (Store, AtomicRMW)):
        if isinstance(s, AtomicRMW) and s.buffer is buf or any(_reads(e, buf) for e in (*s.indices, s.value)):
            return s
        return _WRITE if _touches(s, buf) else None
    if isinstance(s, Print):
        return None
    if isinstance(s, TileOp):
        bounds = [e for r in (*s.reads(), *s.writes()) for e in r.starts]
        if any(r.buffer is buf for r in s.reads()) or any(_reads(e, buf) for e in bounds):
            return s
        return _WRITE if _touches(s, buf) else None
    return _WRITE if _touches(s, buf) else None


def _reads(e: object, buf: Buffer) -> bool:
    """Whether evaluating ``e`` certainly loads an element of ``buf`` (not only in a branch of a select)."""
    if isinstance(e, Load) and e.buffer is buf:
        return True
    if isinstance(e, Select):
        return _reads(e.cond, buf)
    return any(_reads(c, buf) for c in children(e) if not isinstance(c, Buffer))


def _touches(s: Stmt, buf: Buffer) -> bool:
    for n in walk(s):
        if isinstance(n, (Store, AtomicRMW, Load)) and n.buffer is buf:
            return True
        if isinstance(n, Region) and n.buffer is buf:
            return True
    return False
