"""Register prefetch for ``T.Pipelined`` loops on targets without asynchronous copies (AMD CDNA: no cp.async).
Part of the pipelining stage (:mod:`tilec.passes.pipelining`); pre: verified Tile IR. Post: Tile IR that still
runs on the tile interpreter, with new fragment buffers in the kernel's allocations.

Each producer of the loop body (a global->shared copy of a tile nothing else in the loop writes) is split in two
through a register tile ``X_next`` of the same shape::

    X <- tile 0                                  # before the loop (when it runs at all)
    for k in range(n):
        if k + 1 < n: X_next <- tile k + 1       # issued first: the loads are in flight during the compute
        ...the rest of the body, reading X...
        if k + 1 < n: X <- X_next                # after it: the next trip finds its tile in shared memory

One shared buffer per producer: the barrier pass places a barrier before the store (the compute read ``X``) and
one before the next trip's compute (it reads what the store wrote), as for a plain loop; so a second shared
version would only cost shared memory until barriers tell versions apart. What is gained is the global-memory
latency, hidden behind the compute of the current tile.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tilec.errors import where
from tilec.ir.buffer import Buffer
from tilec.ir.expr import Const, binop, const
from tilec.ir.stmt import Copy, For, IfThenElse, SeqStmt, Stmt
from tilec.ir.visit import substitute


def prefetch_loop(loop: For, body: list[Stmt], producers: list[Copy], new_allocs: list[Buffer],
                  notes: list[str]) -> Stmt:
    """The prefetching form of ``loop`` (whose statements are ``body``, of which ``producers`` are split);
    the register tiles it makes are appended to ``new_allocs``, a report line to ``notes``."""
    k, n = loop.var, loop.extent
    nxt = binop("+", k, 1)
    loads: list[Stmt] = []
    stores: list[Stmt] = []
    for p in producers:
        x = p.dst.buffer
        reg = Buffer(f"{x.name}_next", tuple(x.shape), x.dtype, "fragment", loc=x.loc)
        new_allocs.append(reg)
        ahead = substitute(p, {k: nxt})
        loads.append(dataclasses.replace(ahead, dst=reg.full_region()))
        stores.append(Copy(reg.full_region(), p.dst, loc=p.loc))
    more = binop("<", nxt, n)
    rest = [s for s in body if not any(s is p for p in producers)]
    trip = [IfThenElse(more, _seq(loads), loc=loop.loc), *rest, IfThenElse(more, _seq(stores), loc=loop.loc)]
    first = _seq([substitute(p, {k: const(0)}) for p in producers])
    if not (isinstance(n, Const) and int(n.value) > 0):
        first = IfThenElse(binop(">", n, 0), first, loc=loop.loc)
    new = For(k, n, "serial", SeqStmt(tuple(trip)), loc=loop.loc)
    here = where(loop.loc)
    notes.append(f"T.Pipelined at {here}: register prefetch of the next tile of "
                 f"{', '.join(p.dst.buffer.name for p in producers)} during this one's compute, then a synchronous "
                 "copy to shared memory (this target has no asynchronous copies)")
    return SeqStmt((first, new))


def _seq(stmts: list[Any]) -> Stmt:
    return stmts[0] if len(stmts) == 1 else SeqStmt(tuple(stmts))
