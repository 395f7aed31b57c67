"""Thread-block clusters with TMA multicast (after pipelining; sm_90a, pass config ``cluster``: blocks per cluster).

Pre: a warp-specialized TMA pipeline (:class:`~tilec.ir.stmt.WarpRoles` at the kernel's top level).
Post: the blocks run in clusters of ``n`` consecutive blocks along one grid dimension (``KernelLaunch.cluster``).
The dimension is the one along which the most bytes a stage are the same tile for every block: for a GEMM with
``(bx, by)`` over ``(N, M)``, the B tile does not depend on ``by``, so clusters run along y and share it. Such a
copy becomes a multicast :class:`~tilec.ir.stmt.TmaCopy`: each block issues ``1/n`` of its boxes and the copy
engine writes each into all ``n`` blocks, so the tile is read from L2 once per cluster. A producer now writes into
the other blocks' stages, so a stage is free only when the consumers of every block of the cluster released it:
each consumer warp's release goes to every block (``every_block``) and the ``empty`` barriers expect ``n`` times
the arrivals. A :class:`~tilec.ir.stmt.ClusterSync` after the barriers are initialised keeps any block from
sending to a peer whose barriers are not ready, and one at the end keeps any block from leaving while a peer may
still arrive on its barriers.

A persistent kernel's grid is one row of blocks, each looping over tiles: there software pipelining already chose
the dimension (:func:`shared_copies`, on the tiles' block variables), gave the ``n`` consecutive blocks of a cluster
tiles that neighbour along it in every round and marked the copies they share ``multicast``; this pass clusters the
row in groups of ``n`` and does the rest.

Refused with a note: without warp specialization, for rasterized (``T.use_swizzle``) grids that are not persistent,
when no grid dimension is a multiple of ``n`` along which some tile is shared whose boxes divide among ``n`` blocks
(whole swizzle panels, or bands of 8k rows of each) and the ``n`` blocks of every cluster run the same trips of the
pipelined loop (causal attention's row blocks may not: each would wait for the others' boxes and releases).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from tilec.errors import where
from tilec.ir.buffer import Buffer
from tilec.ir.expr import Var
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import (
    BarrierArrive,
    BarrierInit,
    BarrierWait,
    ClusterSync,
    Copy,
    For,
    SeqStmt,
    Stmt,
    TmaCopy,
    WarpRoles,
)  # fmt: skip
from tilec.ir.visit import transform, walk
from tilec.target import Target

SIZES = (2, 4)  # blocks per cluster this pass makes (one block per SM each: any GPC holds 4)


def cluster_blocks(func: PrimFunc, target: Target, options: dict | None = None) -> tuple[PrimFunc, list[str]]:
    """``func`` with its blocks in clusters (the same object, and a note saying why, when it is not done)."""
    options = options or {}
    n = options.get("cluster")
    if not n:
        return func, []
    launch = func.launch
    here = where(launch.loc)
    stmts = list(launch.body.stmts) if isinstance(launch.body, SeqStmt) else [launch.body]
    roles = next((s for s in stmts if isinstance(s, WarpRoles)), None)
    why, plan = _refusal(func, target, n, roles), None
    if why is None and roles is not None:
        copies = [c for c in walk(roles.then_body) if isinstance(c, TmaCopy)]
        if _persistent(roles):  # marked by software pipelining (see the module's docstring)
            shared = {id(c) for c in copies if c.multicast}
            plan = (0, shared) if shared else None
            why = f"its blocks' tiles were not ordered in clusters of {n} (see the notes above)"
        else:
            uneven = _uneven_trips(launch, roles, n)
            plan = shared_copies(launch.grid, launch.block_vars, copies, n, skip=frozenset(uneven))
            why = f"no grid dimension that is a multiple of {n} shares a tile of a stage between its blocks"
            best = shared_copies(launch.grid, launch.block_vars, copies, n) if plan is None else None
            if best is not None:  # the dimensions that share tiles were skipped
                dim, loop = best[0], uneven[best[0]]
                why = (f"the trip count of the T.Pipelined loop at {where(loop.loc)} differs "
                       f"between neighbouring blocks along {'xyz'[dim]} (a cluster's blocks would wait for each "
                       "other's copies and releases of the stages they share)")
    if roles is None or plan is None:
        return func, [f"T.Kernel at {here}: not clustered: {why}"]
    dim, shared = plan
    empty = {id(w.barrier.buffer) for w in walk(roles.then_body) if isinstance(w, BarrierWait)}

    def producer(node: Any) -> Any:
        return dataclasses.replace(node, multicast=True) if isinstance(node, TmaCopy) and id(node) in shared else None

    def consumer(node: Any) -> Any:
        if isinstance(node, BarrierArrive) and node.per_warp and id(node.barrier.buffer) in empty:
            return dataclasses.replace(node, every_block=True)
        return None

    out: list[Stmt] = []
    for s in stmts:
        if isinstance(s, BarrierInit) and id(s.barriers.buffer) in empty:
            out.append(dataclasses.replace(s, count=s.count * n))
        elif s is roles:
            out += [ClusterSync(loc=s.loc), dataclasses.replace(s, then_body=transform(s.then_body, producer),
                                                                 else_body=transform(s.else_body, consumer)),
                    ClusterSync(loc=s.loc)]
        else:
            out.append(s)
    names = sorted({c.dst.buffer.name for c in walk(roles.then_body) if isinstance(c, TmaCopy) and id(c) in shared})
    note = (f"T.Kernel at {here}: clusters of {n} blocks along grid dimension {dim} ({'xyz'[dim]}); "
            f"{', '.join(names)} multicast to every block of a cluster, the others' stages released to every block")
    new = dataclasses.replace(launch, body=SeqStmt(tuple(out)), cluster=(dim, n))
    return dataclasses.replace(func, body=new), [note]


def _persistent(roles: WarpRoles) -> bool:
    """Whether the roles loop over a persistent block's tiles (software pipelining's ``tiles`` loops)."""
    return any(isinstance(f, For) and f.ann("tiles") for f in walk(roles.then_body))


def _uneven_trips(launch: Any, roles: WarpRoles, n: int) -> dict[int, For]:
    """Grid dimension -> a loop of the producer whose trip count is not the same for the ``n`` consecutive blocks
    along that dimension of every cluster (or not known at compile time): blocks that share stages must run the
    same trips (causal attention's row blocks do not, unless the key blocks are wider than ``n`` row blocks)."""
    from tilec.passes.trip_counts import NotStatic, evaluate

    sizes = [getattr(d, "value", None) for d in launch.grid]
    env = {v: np.arange(g).reshape([-1 if i == d else 1 for i in range(len(sizes))])
           for d, (v, g) in enumerate(zip(launch.block_vars, sizes)) if isinstance(g, int)}
    shape = tuple(g if isinstance(g, int) else 1 for g in sizes)
    out: dict[int, For] = {}
    for loop in (f for f in walk(roles.then_body) if isinstance(f, For)):
        try:
            trips = np.broadcast_to(evaluate(loop.extent, env), shape)
        except NotStatic:
            trips = None
        for dim, g in enumerate(sizes):
            if dim in out or not isinstance(g, int) or g % n:
                continue
            groups = None if trips is None else np.moveaxis(trips, dim, 0).reshape(g // n, n, -1)
            if groups is None or (groups != groups[:, :1]).any():
                out[dim] = loop
    return out


def _refusal(func: PrimFunc, target: Target, n: Any, roles: WarpRoles | None) -> str | None:
    launch = func.launch
    if n not in SIZES:
        return f"cluster must be one of {SIZES}, got {n!r}"
    if target.arch != "sm_90a":
        return f"thread-block clusters with TMA multicast need sm_90a, not {target.arch or target.kind}"
    if launch.swizzle is not None:
        return "T.use_swizzle remaps blocks, so consecutive blocks no longer share tiles"
    if roles is None:
        return "it needs a warp-specialized TMA pipeline (pass configs tma and warp_specialize; see the notes above)"
    return None


def shared_copies(grid: tuple, block_vars: tuple, copies: list[Copy], n: int,
                  skip: frozenset[int] = frozenset()) -> tuple[int, set[int]] | None:
    """(grid dimension, ids of the ``copies`` that ``n`` consecutive blocks along it share), the dimension sharing
    the most bytes (other than those in ``skip``), or None."""
    best: tuple[int, int, set[int]] | None = None
    for dim, (var, extent) in enumerate(zip(block_vars, grid)):
        size = getattr(extent, "value", None)
        if not isinstance(size, int) or size % n or dim in skip:
            continue
        shared = {id(c) for c in copies if shareable(c, var, n)}
        nbytes = sum(_bytes(c.dst.buffer) for c in copies if id(c) in shared)
        if nbytes and (best is None or nbytes > best[0]):
            best = (nbytes, dim, shared)
    return None if best is None else (best[1], best[2])


def shareable(c: Copy, var: Var, n: int) -> bool:
    """Whether ``n`` blocks whose tiles differ along block variable ``var`` can share copy ``c``'s tile."""
    return not any(x is var for x in walk(c.src)) and _divides(c, n)


def _divides(c: Copy, n: int) -> bool:
    """Whether ``n`` blocks can share the copy's boxes (one per swizzle panel: tilec.lower.tma): whole panels each,
    or bands of a multiple of 8 rows of every panel (where the swizzle pattern repeats). Not a 1-D tile (TMA boxes
    here are 2-D tiles, multi-buffered or not: the fp8 GEMM's scale vectors are copied otherwise)."""
    from tilec.lower.layouts import swizzle_bytes

    if len(c.dst.buffer.shape) < 2:
        return False
    rows, cols = (int(d) for d in c.dst.buffer.shape[-2:])
    sw = swizzle_bytes((rows, cols), c.dst.buffer.dtype)
    panels = cols * c.dst.buffer.dtype.bits // 8 // sw if sw else 1
    return panels % n == 0 or rows % (8 * n) == 0


def _bytes(b: Buffer) -> int:
    """Bytes of one stage of a multi-buffered tile."""
    return math.prod(int(d) for d in b.shape[-2:]) * b.dtype.bits // 8
