"""What the modules of the pipelining stage share (:mod:`.pipelining`, :mod:`.tma_pipeline`, :mod:`.warp_specialize`,
:mod:`.persistent`): which buffers a statement reads and writes, the checks of a schedule given by hand, the shared
memory a set of versions needs, and the guards of a pipelined loop's trips."""

from __future__ import annotations

import functools
from typing import Any

from tilec.errors import TilecValueError, where
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Const, Load, Var, binop
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import AtomicRMW, BarrierArrive, Copy, For, IfThenElse, SeqStmt, Stmt, Store, TileOp
from tilec.ir.visit import children, transform, walk
from tilec.target import Target


def is_async_copy(s: Stmt) -> bool:
    """Whether ``s`` is a global->shared tile copy (one a pipeline may issue asynchronously)."""
    return type(s) is Copy and s.src.buffer.scope == "global" and s.dst.buffer.scope == "shared"


@functools.lru_cache(maxsize=4096)  # statements hash by identity; the pass asks about each pair of them
def reads(s: Stmt) -> frozenset[int]:
    out: set[int] = set()
    for n in walk(s):
        if isinstance(n, Load):
            out.add(id(n.buffer))
        if isinstance(n, TileOp):
            out |= {id(r.buffer) for r in n.reads()}
    return frozenset(out)


@functools.lru_cache(maxsize=4096)
def writes(s: Stmt) -> frozenset[int]:
    out: set[int] = set()
    for n in walk(s):
        if isinstance(n, (Store, AtomicRMW)):
            out.add(id(n.buffer))
        if isinstance(n, TileOp):
            out |= {id(r.buffer) for r in n.writes()}
    return frozenset(out)


def check_hand_schedule(body: list[Stmt], stage: list[int], order: list[int], here: str) -> None:
    """An iteration's statement may not run before one it reads from: in an earlier stage, or earlier in the order
    of the same stage (it would read what the iteration has not written yet)."""
    when = {i: (stage[i], p) for p, i in enumerate(order)}
    for j, reader in enumerate(body):
        for i, writer in enumerate(body[:j]):
            if writes(writer) & reads(reader) and when[j] < when[i]:
                at = [where(s.loc) for s in (reader, writer)]
                raise TilecValueError(f"T.Pipelined at {here}: the statement at {at[0]} (stage {stage[j]}) "
                                      f"reads what the one at {at[1]} (stage {stage[i]}) writes, but runs before "
                                      "it; give it a later stage or place", reader.loc)


def check_hand_accesses(loop: For, body: list[Stmt], stage: list[int], order: list[int],
                        versions: dict[int, tuple[Buffer, int, int]], outside: Stmt) -> None:
    """Statement ``a`` of iteration k runs in trip k + stage[a]: two statements touching one buffer (one writing it)
    must reach it in the order of the plain loop, within an iteration and between iterations that share it (every
    iteration, or every ``v``-th of a buffer in ``v`` versions). A multi-buffered tile carries no value from one
    iteration to the next (none is read before it is written) and is not used outside the loop."""
    here = where(loop.loc)
    pos = {i: p for p, i in enumerate(order)}
    at = [where(s.loc) for s in body]
    for x, (buf, a0, nv) in versions.items():
        first = next(i for i, s in enumerate(body) if x in writes(s))
        early = next((i for i, s in enumerate(body[: first + 1]) if x in reads(s)), None)
        why = f"it is written in stage {a0} and read in a later one, so it has {nv} versions"
        if early is not None:
            raise TilecValueError(f"T.Pipelined at {here}: the statement at {at[early]} reads {buf.name!r} "
                                  f"before the loop writes it (the previous iteration's value), but {why}, one per "
                                  "iteration in flight; give its statements the same stage", body[early].loc)
        if any(n is buf for n in walk(outside)):
            raise TilecValueError(f"T.Pipelined at {here}: {buf.name!r} is used outside the loop, but {why}, "
                                  "one per iteration in flight; give its statements the same stage", loop.loc)
    for b, later in enumerate(body):
        for a, earlier in enumerate(body[: b + 1]):
            shared = (writes(earlier) & (reads(later) | writes(later))) | (reads(earlier) & writes(later))
            for x in shared:
                m = versions[x][2] if x in versions else 1
                run = [(stage[a], pos[a]), (stage[b] + m, pos[b]), (stage[b], pos[b]), (stage[a] + m, pos[a])]
                # iteration k's a before its b; iteration k's a before k+m's b; k's b before k+m's a
                if (a != b and not run[0] < run[2]) or not run[0] < run[1] or not run[2] < run[3]:
                    name = next(n.name for s in (earlier, later) for n in walk(s) if isinstance(n, Buffer)
                                and id(n) == x)
                    raise TilecValueError(f"T.Pipelined at {here}: the statements at {at[a]} (stage "
                                          f"{stage[a]}) and {at[b]} (stage {stage[b]}) both use {name!r} (one "
                                          "writes it), and the schedule changes which runs first (in one iteration "
                                          "or between iterations); give them the same stage, in loop order",
                                          later.loc)


def numel(r: Region) -> int:
    return functools.reduce(lambda x, y: x * y, (int(e) for e in r.extents), 1)


def shared_bytes(func: PrimFunc, versions: dict[int, tuple[Buffer, int, int]]) -> int:
    """Shared memory of the kernel's buffers with ``versions`` copies of the multi-buffered ones."""
    total = 0
    over = {b for b, _ in func.launch.overlays}  # placed over other buffers' memory
    for b in func.launch.allocs:
        if b.scope != "shared" or not all(isinstance(d, int) for d in b.shape) or b in over:
            continue
        size = b.dtype.bits // 8 * functools.reduce(lambda x, y: x * y, b.shape, 1)
        total += size * (versions[id(b)][2] if id(b) in versions else 1)
    return total


def smem_limit(target: Target) -> int:
    """Shared memory a block may have: the table's figure for the target's architecture (as every pass reads it, so
    the code does not depend on which GPU is present)."""
    from tilec.arch import table_model

    return table_model(target.arch).smem_per_block


def into_fragment(s: Stmt, x: Buffer) -> bool:
    """Whether ``s`` copies all of shared tile ``x`` into a fragment (Q taken into registers before the loop)."""
    return type(s) is Copy and s.src.buffer is x and s.src.is_full() and s.dst.buffer.scope == "fragment"


def release_stage(slot: Region, loc: Any, after: tuple[Buffer, ...] = ()) -> Stmt:
    """Every consumer warp releases a stage (an ``empty`` barrier) once its own reads of it are done, and those of
    the wgmma groups still reading ``after``."""
    return BarrierArrive(slot, 0, per_warp=True, after=after, loc=loc)


def merge_guards(items: list[tuple[Any, Stmt]]) -> list[Stmt]:
    """Consecutive statements under the same stage guard share one ``if``."""
    out: list[Stmt] = []
    run: list[Stmt] = []
    key: Any = None
    for cond, s in items + [(object(), None)]:
        same = run and (cond is None and key is None or cond is not None and key is not None
                        and str(cond) == str(key))
        if not same and run:
            body = run[0] if len(run) == 1 else SeqStmt(tuple(run))
            out.append(body if key is None else IfThenElse(key, body, loc=run[0].loc))
            run = []
        if s is None:
            break
        run.append(s)
        key = cond
    return out


def guarded_by(cond: Any, body: Stmt, loop: For) -> Stmt:
    """``body`` under ``cond``, or alone where ``cond`` is a true constant."""
    if isinstance(cond, Const):
        return body if cond.value else SeqStmt(())
    return IfThenElse(cond, body, loc=loop.loc)


def guard(k: Var, st: int, depth: int, n: Any) -> Any:
    cond = None
    if st > 0:
        cond = binop(">=", k, st)
    if st < depth - 1:
        c = binop("<", binop("-", k, st) if st else k, n)
        cond = c if cond is None else binop("and", cond, c)
    return cond


def shape_str(dims: tuple) -> str:
    return "x".join(str(d) for d in dims)


def first_use(s: Stmt, x: Buffer) -> Stmt | None:
    """The first innermost statement of ``s`` that uses buffer ``x``, or None."""
    if not any(n is x for n in walk(s)):
        return None
    inner = (first_use(c, x) for c in children(s) if isinstance(c, Stmt))
    return next((u for u in inner if u is not None), s)


def without(body: Stmt, loop: Stmt) -> Stmt:
    """The kernel body with ``loop`` removed (to see whether a buffer is used outside the loop)."""
    return transform(body, lambda n: SeqStmt(()) if n is loop else None)
