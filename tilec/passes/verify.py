"""Verify the Tile IR: the invariants every stage may rely on. Runs between stages; changes nothing.

Checked: one kernel launch; every buffer is a parameter or an allocation of the kernel; every variable is
bound where it is used; index counts match buffer ranks and are integers; stored values have the buffer's
dtype; regions of on-chip buffers lie inside them when that is known statically; tile ops are at block
level (never inside ``T.Parallel``); parallel loops are not nested.
"""

from __future__ import annotations

from tilec.errors import SourceLoc, TilecVerifyError
from tilec.ir.affine import constant
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Expr, Load, Var
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import AtomicRMW, For, IfThenElse, KernelLaunch, Parallel, SeqStmt, Stmt, Store, TileOp, WarpRoles
from tilec.ir.visit import children, walk


class _Verifier:
    def __init__(self, func: PrimFunc, stage: str) -> None:
        self.func = func
        self.stage = stage
        self.buffers: set[int] = {id(b) for b in func.buffers}
        self.bound: set[int] = {id(p) for p in func.params if isinstance(p, Var)} | {id(v) for v in func.dyn_vars}

    def fail(self, msg: str, loc: SourceLoc | None) -> None:
        where = f" (after stage {self.stage!r})" if self.stage else ""
        raise TilecVerifyError(f"invalid IR{where}: {msg}", loc)

    def run(self) -> None:
        body = self.func.body
        if not isinstance(body, KernelLaunch):
            self.fail("the kernel body must be one T.Kernel launch", self.func.loc)
        for g in body.grid:
            self.expr(g, body.loc)
        self.buffers |= {id(b) for b in body.allocs}
        self.bound |= {id(v) for v in body.block_vars}
        self.stmt(body.body, in_parallel=False)

    def stmt(self, s: Stmt, in_parallel: bool) -> None:  # noqa: C901
        loc = s.loc
        if isinstance(s, SeqStmt):
            for c in s.stmts:
                self.stmt(c, in_parallel)
        elif isinstance(s, For):
            self.expr(s.extent, loc)
            if not s.extent.dtype.is_int:
                self.fail(f"loop extent {s.extent} is not an integer", loc)
            # values bound at the start of each trip (a persistent tile loop's pipeline iterations so far, read from
            # their counter; stream-K's parts)
            lets = s.ann("lets", ())
            if lets and id(s.var) not in self.bound:
                self.bound.add(id(s.var))
                for _, e in lets:
                    self.expr(e, loc)
                self.bound.discard(id(s.var))
            self.scoped([s.var] + [v for v, _ in lets], s.body, in_parallel)
        elif isinstance(s, Parallel):
            if in_parallel:
                self.fail("T.Parallel loops must be perfectly nested (one `for i, j in T.Parallel(M, N)`); "
                          "a parallel loop inside another one's body is not supported", loc)
            for e in s.extents:
                self.expr(e, loc)
            self.scoped(list(s.vars), s.body, True)
        elif isinstance(s, WarpRoles):  # the consumers' copy index is bound in their part
            self.stmt(s.then_body, in_parallel)
            self.scoped([s.copy] if s.copy is not None else [], s.else_body, in_parallel)
        elif isinstance(s, IfThenElse):
            self.expr(s.cond, loc)
            self.stmt(s.then_body, in_parallel)
            if s.else_body is not None:
                self.stmt(s.else_body, in_parallel)
        elif isinstance(s, (Store, AtomicRMW)):
            self.access(s.buffer, s.indices, loc)
            self.expr(s.value, loc)
            if s.value.dtype is not s.buffer.dtype:
                self.fail(f"stored value {s.value} has dtype {s.value.dtype}, buffer {s.buffer.name!r} is "
                          f"{s.buffer.dtype}", loc)
        elif isinstance(s, TileOp):
            if in_parallel:
                self.fail(f"tile op {s.kind} inside T.Parallel", loc)
            for c in children(s):
                if isinstance(c, Region):
                    self.region(c, loc)
                elif isinstance(c, Expr):
                    self.expr(c, loc)
        else:
            self.fail(f"unexpected statement {type(s).__name__}", loc)

    def scoped(self, vs: list[Var], body: Stmt, in_parallel: bool) -> None:
        for v in vs:
            if id(v) in self.bound:
                self.fail(f"variable {v.name!r} is bound twice", body.loc)
            self.bound.add(id(v))
        self.stmt(body, in_parallel)
        for v in vs:
            self.bound.discard(id(v))

    def buffer(self, b: Buffer, loc: SourceLoc | None) -> None:
        if id(b) not in self.buffers:
            self.fail(f"buffer {b.name!r} is neither a parameter nor allocated in the kernel", loc)

    def access(self, b: Buffer, indices: tuple, loc: SourceLoc | None) -> None:
        self.buffer(b, loc)
        if len(indices) != b.ndim:
            self.fail(f"{b.name!r} has {b.ndim} dimension(s) but is indexed with {len(indices)}", loc)
        for i in indices:
            self.expr(i, loc)
            if not (i.dtype.is_int or i.dtype.is_bool):
                self.fail(f"index {i} of {b.name!r} is {i.dtype}, not an integer", loc)

    def region(self, r: Region, loc: SourceLoc | None) -> None:
        self.access(r.buffer, r.starts, loc)
        if len(r.extents) != r.buffer.ndim:
            self.fail(f"region of {r.buffer.name!r} has {len(r.extents)} extents for {r.buffer.ndim} dimensions", loc)
        if r.buffer.scope == "global":
            return
        for d, (s, e, n) in enumerate(zip(r.starts, r.extents, r.buffer.shape)):
            lo = constant(s)
            if isinstance(e, int) and isinstance(n, int) and lo is not None and (lo < 0 or lo + e > n):
                self.fail(f"region {r} lies outside {r.buffer.name!r} in dimension {d} (size {n})", loc)

    def expr(self, e: Expr, loc: SourceLoc | None) -> None:
        for n in walk(e):
            if isinstance(n, Var) and id(n) not in self.bound:
                self.fail(f"variable {n.name!r} is used outside its loop or kernel", loc)
            elif isinstance(n, Load):
                self.access(n.buffer, n.indices, loc)


def verify(func: PrimFunc, stage: str = "") -> PrimFunc:
    """Check ``func``; returns it unchanged, raises :class:`~tilec.errors.TilecVerifyError` naming the op."""
    _Verifier(func, stage).run()
    return func
