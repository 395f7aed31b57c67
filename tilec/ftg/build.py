"""Build the FTG of a kernel (pipeline stage 2). Pre: verified Tile IR. Post: the IR is unchanged.

Nodes are the block-level statements that touch data: tile ops (copy, gemm, reduce, cumsum, fill,
atomic_add, print, and each ``T.Parallel`` nest) and element stores outside parallel loops. Serial and
pipelined loops and conditions are not nodes: they are the context of the nodes inside them.

Edges: a dependency u → v on buffer X exists when u comes before v, one of them writes X and the other reads
or writes it (RAW, WAR, WAW), unless u and v sit in opposite branches of one IfThenElse (no trip of the loops
around it runs both; what one trip's branch leaves to the next trip's other branch is a carried dependency; not
so for a ``WarpRoles``, whose producer and consumer branches both run), or X is overwritten in full on every path
from u to v. A node w between them does that when w writes every element of X unconditionally (it may read X
too, as ``O[i, j] *= s[i]`` does) and w sits in the innermost loop enclosing both u and v, or in a loop of v's
nest inside it (so w runs before v whenever v runs), under no condition that v is not under. So does an
IfThenElse between them each branch of which overwrites all of X, by such a node or by such an IfThenElse inside
it, all in the same loops, with the IfThenElse under no condition that v is not under. A dependency carried by
loop L exists from u to v (v at or before u in L's body, or in the other branch of an IfThenElse; L the innermost
loop enclosing both) between one iteration of L and the next, unless nodes directly in L's body, after u or
before v, overwrite all of X as above: one under no condition that u (resp. v) is not under, or an if/else that
does it in both branches. One edge per (u, v, buffer, carried or not), of the strongest kind: RAW, else WAR, else
WAW; a node depends on itself only by RAW, carried.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from tilec.errors import where
from tilec.ftg.graph import FTG, Access, Dep, LoopCtx
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Load
from tilec.ir.kernel import PrimFunc
from tilec.ir.printer import Names, copy_options_str, element_str, expr_str, region_str
from tilec.ir.stmt import (
    AsyncCommit,
    AsyncWait,
    AtomicAdd,
    AtomicRMW,
    BarrierArrive,
    BarrierInit,
    BarrierWait,
    ClusterSync,
    Copy,
    CumSum,
    Fill,
    For,
    Gemm,
    IfThenElse,
    Parallel,
    PartialAdd,
    PartialSave,
    Print,
    Reduce,
    SeqStmt,
    StageHandoff,
    Stmt,
    Store,
    TileOp,
    TmaCopy,
    TmaStoreWait,
    WarpgroupTurn,
    WarpRoles,
)  # fmt: skip
from tilec.ir.visit import walk


@dataclass(eq=False)  # identity: nodes are compared (list.index) by what they are, not their fields
class _Node:
    nid: str
    stmt: Stmt
    kind: str
    label: str
    reads: tuple[Access, ...]
    writes: tuple[Access, ...]
    loops: tuple[LoopCtx, ...]
    conds: tuple[tuple[int, bool], ...]  # the enclosing IfThenElse statements (id, then-branch?), outermost first


class _Collector:
    def __init__(self, names: Names) -> None:
        self.names = names
        self.nodes: list[_Node] = []
        self.roles: set[int] = set()  # the WarpRoles among the IfThenElse statements: both branches run

    def walk(self, s: Stmt, loops: tuple[LoopCtx, ...], conds: tuple[tuple[int, bool], ...]) -> None:
        if isinstance(s, SeqStmt):
            for c in s.stmts:
                self.walk(c, loops, conds)
        elif isinstance(s, For):
            ctx = LoopCtx(self.names(s.var), s.kind, expr_str(s.extent, self.names), s.ann("num_stages"), s)
            self.walk(s.body, loops + (ctx,), conds)
        elif isinstance(s, IfThenElse):
            if isinstance(s, WarpRoles):
                self.roles.add(id(s))
            self.walk(s.then_body, loops, conds + ((id(s), True),))
            if s.else_body is not None:
                self.walk(s.else_body, loops, conds + ((id(s), False),))
        elif isinstance(s, (TileOp, Store, AtomicRMW)):
            self.add(s, loops, conds)

    def add(self, s: Stmt, loops: tuple[LoopCtx, ...], conds: tuple[tuple[int, bool], ...]) -> None:
        kind, label, reads, writes = self.describe(s)
        if not isinstance(s, Parallel):  # buffers read by index and value expressions (an alloc_var, a table)
            seen = {id(a.buffer) for a in reads}
            for ld in _loads(s):
                if id(ld.buffer) not in seen:
                    seen.add(id(ld.buffer))
                    reads += (Access(ld.buffer, expr_str(ld, self.names), False),)
        self.nodes.append(_Node(f"n{len(self.nodes)}", s, kind, label, reads, writes, loops, conds))

    def acc(self, r: Region, full: bool = False) -> Access:
        return Access(r.buffer, region_str(r, self.names), full and r.is_full())

    def describe(self, s: Stmt) -> tuple[str, str, tuple[Access, ...], tuple[Access, ...]]:  # noqa: C901
        n = self.names
        if isinstance(s, Copy):
            on = f" on {region_str(s.barrier, n)}{' multicast' * s.multicast}" if isinstance(s, TmaCopy) else ""
            on += copy_options_str(s)
            return s.kind, f"{region_str(s.src, n)} -> {region_str(s.dst, n)}{on}", (self.acc(s.src),), \
                (self.acc(s.dst, True),)
        if isinstance(s, Gemm):
            m, nn, k = (expr_str(x, n) for x in s.mnk)
            flags = "".join([" A^T" if s.transpose_A else "", " B^T" if s.transpose_B else "",
                             " clear_accum" if s.clear_accum else ""])
            label = f"{region_str(s.A, n)}, {region_str(s.B, n)} -> {region_str(s.C, n)}  ({m}x{nn}x{k}{flags})"
            reads = (self.acc(s.A), self.acc(s.B)) + (() if s.clear_accum else (self.acc(s.C),))
            return "gemm", label, reads, (self.acc(s.C, s.clear_accum),)
        if isinstance(s, Reduce):
            reads = (self.acc(s.src),) + (() if s.clear else (self.acc(s.dst),))
            keep = "" if s.clear else ", clear=False"  # combined with what dst holds
            return "reduce", f"{s.red}({region_str(s.src, n)}, dim={s.dim}{keep}) -> {region_str(s.dst, n)}", \
                reads, (self.acc(s.dst, s.clear),)
        if isinstance(s, CumSum):
            rev = ", reverse" if s.reverse else ""
            return "cumsum", f"{region_str(s.src, n)} -> {region_str(s.dst, n)} (dim={s.dim}{rev})", \
                (self.acc(s.src),), (self.acc(s.dst, True),)
        if isinstance(s, Fill):
            return "fill", f"{region_str(s.dst, n)} <- {expr_str(s.value, n)}", (), (self.acc(s.dst, True),)
        if isinstance(s, AtomicAdd):
            return "atomic_add", f"{region_str(s.dst, n)} += {region_str(s.src, n)}", \
                (self.acc(s.src), self.acc(s.dst)), (self.acc(s.dst),)
        if isinstance(s, (AsyncCommit, AsyncWait)):
            return s.kind, f"n={s.n}" if isinstance(s, AsyncWait) else "", (), ()
        if isinstance(s, BarrierInit):
            return s.kind, f"{region_str(s.barriers, n)} count={s.count}", (), (self.acc(s.barriers, True),)
        if isinstance(s, BarrierArrive):
            each = (" per warp" if s.per_warp else "") + (" to every block" if s.every_block else "")
            return s.kind, f"{region_str(s.barrier, n)} tx={s.tx_bytes}{each}", (self.acc(s.barrier),), ()
        if isinstance(s, BarrierWait):
            return s.kind, f"{region_str(s.barrier, n)} parity={expr_str(s.parity, n)}", (self.acc(s.barrier),), ()
        if isinstance(s, ClusterSync):
            return s.kind, "", (), ()
        if isinstance(s, WarpgroupTurn):
            edge = "" if s.edge is False else " (edge)" if s.edge is True else f" (edge when {s.edge})"
            return s.kind, f"{'give' if s.give else 'wait'}{edge}", (), ()
        if isinstance(s, TmaStoreWait):
            return s.kind, region_str(s.tile, n), (self.acc(s.tile),), ()
        if isinstance(s, StageHandoff):
            return s.kind, f"{region_str(s.tile, n)} {s.step} ({s.groups} warpgroups)", (self.acc(s.tile),), ()
        if isinstance(s, PartialSave):
            return s.kind, f"{region_str(s.C, n)} -> {n(s.workspace)}[{expr_str(s.slot, n)}]", (self.acc(s.C),), ()
        if isinstance(s, PartialAdd):
            return s.kind, f"{region_str(s.C, n)} += {n(s.workspace)}[{expr_str(s.first, n)}:{expr_str(s.last, n)}]", \
                (self.acc(s.C),), (self.acc(s.C),)
        if isinstance(s, Print):
            what = region_str(s.value, n) if isinstance(s.value, Region) else expr_str(s.value, n)
            return "print", f"{what}, msg={s.msg!r}", tuple(self.acc(r) for r in s.reads()), ()
        if isinstance(s, Parallel):
            return self.parallel(s)
        if isinstance(s, (Store, AtomicRMW)):
            text = element_str(s.buffer, s.indices, n)
            reads = ()  # the loads of the value and the indices, added by add()
            value = expr_str(s.value, n)
            if isinstance(s, Store):
                return "store", f"{text} = {value}", reads, (Access(s.buffer, text, False),)
            op = f"{text} += {value}" if s.op == "add" else f"{text} = T.{s.op}({text}, {value})"  # atomically
            return "atomic", op, reads, (Access(s.buffer, text, False),)
        raise TypeError(type(s).__name__)

    def parallel(self, s: Parallel) -> tuple[str, str, tuple[Access, ...], tuple[Access, ...]]:
        n = self.names
        reads: dict[int, Access] = {}
        writes: dict[int, Access] = {}
        for node in walk(s.body):
            if isinstance(node, Load):
                reads.setdefault(id(node.buffer), Access(node.buffer, expr_str(node, n), False))
            elif isinstance(node, (Store, AtomicRMW)):
                text = element_str(node.buffer, node.indices, n)
                full = isinstance(node, Store) and _covers(s, node)
                old = writes.get(id(node.buffer))
                writes[id(node.buffer)] = Access(node.buffer, text, full or (old is not None and old.full))
        vs = ", ".join(n(v) for v in s.vars)
        ext = ", ".join(expr_str(e, n) for e in s.extents)
        outs = ", ".join(a.text for a in writes.values())
        return "parallel", f"for {vs} in ({ext}): {outs}", tuple(reads.values()), tuple(writes.values())


def _loads(e: object) -> list[Load]:
    return [x for x in walk(e) if isinstance(x, Load)]


def _covers(p: Parallel, st: Store) -> bool:
    """The store writes every element of its buffer: indices are the loop variables, in order, over its shape,
    and it is not under a condition inside the loop."""
    if not (isinstance(p.body, Store) and p.body is st or isinstance(p.body, SeqStmt) and st in p.body.stmts):
        return False
    if len(st.indices) != len(p.vars) or not all(i is v for i, v in zip(st.indices, p.vars)):
        return False
    return all(isinstance(e, int) and e == d for e, d in zip(p.extents, st.buffer.shape))


def _common_loops(a: _Node, b: _Node) -> tuple[LoopCtx, ...]:
    out = []
    for x, y in zip(a.loops, b.loops):
        if x.node is not y.node:
            break
        out.append(x)
    return tuple(out)


def _prefix(a: tuple, b: tuple) -> bool:
    return len(a) <= len(b) and all(x.node is y.node if isinstance(x, LoopCtx) else x == y for x, y in zip(a, b))


def _overwrites(w: _Node, buf: Buffer) -> bool:
    """``w`` writes every element of ``buf`` (whatever it reads: its readers depend on it, not on earlier writers)."""
    return any(x.buffer is buf and x.full for x in w.writes)


def _placed(w: _Node, u: _Node, v: _Node) -> bool:
    """``w``'s loops lie between the loops common to ``u`` and ``v`` and ``v``'s own: ``w`` (between them in program
    order) runs after ``u`` and before ``v`` whenever ``v`` runs, if its conditions hold."""
    return _prefix(_common_loops(u, v), w.loops) and _prefix(w.loops, v.loops)


def _exclusive(u: _Node, v: _Node, roles: frozenset[int]) -> bool:
    """``u`` and ``v`` sit in opposite branches of one IfThenElse (their conditions agree up to an entry with the same
    id and another branch): one trip of the loops around it runs at most one of them. Not so for the branches of a
    ``WarpRoles`` (its id in ``roles``): producer and consumer warps run both, at the same time."""
    for a, b in zip(u.conds, v.conds):
        if a != b:
            return a[0] == b[0] and a[0] not in roles
    return False


def _covered(conds: tuple[tuple[int, bool], ...], killers: tuple[tuple[tuple[int, bool], ...], ...]) -> bool:
    """Full overwrites under the conditions ``killers`` (all in the same loops) overwrite the buffer whenever
    ``conds`` hold: one is under no condition beyond ``conds``, or both branches of an IfThenElse right inside
    ``conds`` are covered (an if/else each branch of which overwrites it, at any depth of nesting)."""
    if any(_prefix(k, conds) for k in killers):
        return True
    n = len(conds)
    ifs = {k[n][0] for k in killers if len(k) > n and k[:n] == conds}
    return any(_covered(conds + ((c, True),), killers) and _covered(conds + ((c, False),), killers) for c in ifs)


def _kill(ws: list[_Node], buf: Buffer, conds: tuple[tuple[int, bool], ...]) -> bool:
    """The nodes ``ws`` (in the same loops, each placed to run on the paths in question) overwrite all of ``buf``
    on every path to (or from) a node under ``conds``: their full overwrites cover a prefix of ``conds``."""
    killers = tuple(w.conds for w in ws if _overwrites(w, buf))
    return any(_covered(conds[:k], killers) for k in range(len(conds) + 1))


def _kills(ws: list[_Node], buf: Buffer, u: _Node, v: _Node) -> bool:
    """The nodes ``ws`` (between ``u`` and ``v`` in program order) overwrite all of ``buf`` on every path from ``u``
    to ``v``: those of one loop nest between ``u``'s and ``v``'s (:func:`_placed`) cover ``v``'s conditions, by a
    single full overwrite under none that ``v`` is not under, or by an if/else that overwrites it in both branches."""
    placed = [w for w in ws if _placed(w, u, v)]
    depths = {len(w.loops) for w in placed}  # the loops of a placed node are a prefix of v's: its depth names them
    return any(_kill([w for w in placed if len(w.loops) == d], buf, v.conds) for d in depths)


def _kinds(u: _Node, v: _Node) -> list[tuple[Buffer, str]]:
    """The dependencies of v on u, one per buffer: the strongest of RAW, WAR, WAW (only RAW for u = v)."""
    uw = {id(a.buffer): a.buffer for a in u.writes}
    ur = {id(a.buffer): a.buffer for a in u.reads}
    vw = {id(a.buffer): a.buffer for a in v.writes}
    vr = {id(a.buffer): a.buffer for a in v.reads}
    out: dict[int, tuple[Buffer, str]] = {}
    for k, b in uw.items():
        if k in vr:
            out[k] = (b, "RAW")
    if u is v:
        return list(out.values())
    for k, b in ur.items():
        if k in vw:
            out.setdefault(k, (b, "WAR"))
    for k, b in uw.items():
        if k in vw:
            out.setdefault(k, (b, "WAW"))
    return list(out.values())


def _edges(nodes: list[_Node], roles: frozenset[int]) -> list[tuple[str, str, Dep]]:
    """The dependencies among ``nodes`` (in program order); ``roles``: the ids of the ``WarpRoles`` statements."""
    out = []
    for i, u in enumerate(nodes):
        for j in range(i + 1, len(nodes)):
            v = nodes[j]
            if _exclusive(u, v, roles):  # never both in one trip: a dependency between them is carried, if any
                continue
            for buf, kind in _kinds(u, v):
                if not _kills(nodes[i + 1 : j], buf, u, v):
                    out.append((u.nid, v.nid, Dep(buf, kind)))
    pos = {id(w): k for k, w in enumerate(nodes)}
    for i, u in enumerate(nodes):  # carried by the innermost common serial loop
        for j, v in enumerate(nodes):
            if j > i and not _exclusive(u, v, roles):  # a later v follows u in its own trip, hence in later ones
                continue
            common = _common_loops(u, v)
            if not common:
                continue
            loop = common[-1]
            body = [w for w in nodes if w.loops == common]  # directly in the loop's body
            after_u = [w for w in body if pos[id(w)] > i]
            before_v = [w for w in body if pos[id(w)] < j]
            for buf, kind in _kinds(u, v):
                if not (_kill(after_u, buf, u.conds) or _kill(before_v, buf, v.conds)):
                    out.append((u.nid, v.nid, Dep(buf, kind, loop.var)))
    return out


def build_ftg(func: PrimFunc, names: Names | None = None) -> FTG:
    """The FTG of ``func``."""
    names = names or Names()
    for p in func.params:  # parameters get their names first, as in the printed IR
        names(p)
    col = _Collector(names)
    col.walk(func.launch.body, (), ())
    g = nx.DiGraph()
    for nd in col.nodes:
        loc = nd.stmt.loc
        # "where" names the file of a node from a T.macro of another file, whose line is in that file
        g.add_node(nd.nid, op=nd.stmt, kind=nd.kind, label=nd.label, line=loc.line if loc else 0, where=where(loc),
                   reads=nd.reads, writes=nd.writes, loops=nd.loops)
    for u, v, dep in _edges(col.nodes, frozenset(col.roles)):
        if g.has_edge(u, v):
            g.edges[u, v]["deps"].append(dep)
        else:
            g.add_edge(u, v, deps=[dep])
    buffers = list(func.buffers) + list(func.launch.allocs)
    return FTG(func.name, g, buffers, names)

