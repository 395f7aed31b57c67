"""Place barriers (after stage 7): a ``__syncthreads`` before each tile op's code that reads memory another
op wrote, or writes memory another op read or wrote, since the last barrier. Pre: a thread IR whose tile ops
are :class:`~tilec.lower.tir.Group` nodes, each free of races by itself. Post: the same with :class:`Sync`
nodes inserted; none is missing and, along every path, none is redundant: a barrier is placed only where
some access since the previous one needs it. Loops are analysed to a fixpoint, so a dependency from one
iteration to the next (a copy overwriting what last iteration's gemm read) gets its barrier too.

Shared and global mems are tracked; registers are private and need none. Shared mems placed over each other's
memory (an epilogue's staging tile over a loop's stages) count as one another. A TMA copy counts as a write when it
is issued (what others read or wrote before must be ordered before it) and its data is visible to every thread
that waited on its mbarrier, without a barrier (a cp.async copy completing on an mbarrier lands at the wait as
written by its thread: the others read it after a barrier); a TMA store reads its shared tile when it is issued;
mbarrier inits are writes of the barrier's mem (their lowering ends with a barrier), arrivals and waits reads of it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilec.ir.expr import Const
from tilec.ir.visit import walk
from tilec.lower.tir import (
    AtomicAddOp,
    ClusterBarrier,
    CpAsync,
    CpAsyncMbarArrive,
    CpAsyncWait,
    Group,
    HandoffBarrier,
    If,
    LdMatrix,
    Loop,
    MbarArriveTx,
    MbarInit,
    MbarWait,
    Mem,
    MemRef,
    NamedBarrier,
    Roles,
    Seq,
    Sync,
    ThreadKernel,
    TmaLoad,
    TmaStoreBox,
    TStmt,
    WgmmaOperand,
    Write,
    overlapping,
    seq,
)  # fmt: skip


@dataclass(frozen=True)
class _State:
    """Mems written and read since the last barrier, and mems with cp.async copies in flight (whose data
    counts as written once a ``cp.async.wait_group`` lets it land)."""

    written: frozenset[int] = frozenset()
    read: frozenset[int] = frozenset()
    pending: frozenset[int] = frozenset()

    def __or__(self, o: _State) -> _State:
        return _State(self.written | o.written, self.read | o.read, self.pending | o.pending)

    def after_sync(self) -> _State:
        return _State(pending=self.pending)


def _async_writes(s: TStmt) -> set[int]:
    return {id(n.dst) for n in walk(s) if isinstance(n, (CpAsync, TmaLoad))}


def _accesses(s: TStmt) -> tuple[set[int], set[int], bool]:
    """(mems read, mems written, whether the code contains a barrier), for shared and global mems."""
    reads: set[int] = set()
    writes: set[int] = set()
    has_sync = False
    for n in walk(s):
        if isinstance(n, MemRef) and n.mem.space != "reg":
            reads.add(id(n.mem))
        elif isinstance(n, (Write, AtomicAddOp)) and n.mem.space != "reg":
            writes.add(id(n.mem))
            if isinstance(n, AtomicAddOp):
                reads.add(id(n.mem))
        elif isinstance(n, (CpAsync, TmaLoad)):
            writes.add(id(n.dst))
        elif isinstance(n, TmaStoreBox):  # read at its issue (the issuer waits for the read before going on)
            reads.add(id(n.src))
            writes.add(id(n.dst))
        elif isinstance(n, MbarInit):
            writes.add(id(n.bar))
        elif isinstance(n, (MbarArriveTx, MbarWait, CpAsyncMbarArrive)):
            reads.add(id(n.bar))
        elif isinstance(n, WgmmaOperand):
            reads.add(id(n.mem))
        elif isinstance(n, LdMatrix):
            reads.add(id(n.src))
        elif isinstance(n, Sync):
            has_sync = True
    return reads, writes, has_sync


def _turn(s: TStmt) -> NamedBarrier | None:
    """The named barrier of a lowered ``WarpgroupTurn`` (``bar.sync``: a warpgroup's wait for its turn; ``bar.arrive``:
    handing it on), maybe under the condition that leaves out a block's first wait or last hand-on; else None."""
    body = s.body if isinstance(s, Group) else s
    body = body.then_body if isinstance(body, If) and body.else_body is None else body
    return body if isinstance(body, NamedBarrier) else None


def _turn_wait(s: TStmt) -> bool:
    return (t := _turn(s)) is not None and not t.arrive


def _turn_give(s: TStmt) -> bool:
    return (t := _turn(s)) is not None and t.arrive


def _after_last_sync(s: TStmt) -> _State:
    """Accesses after the last top-level barrier of ``s`` (what a following op must be ordered after)."""
    items = list(s.stmts) if isinstance(s, Seq) else [s]
    tail: list[TStmt] = []
    for it in reversed(items):
        if isinstance(it, Sync):
            break
        tail.append(it)
    r, w, _ = _accesses(Seq(tuple(tail)))
    return _State(frozenset(w), frozenset(r))


class _Placer:
    def __init__(self, tma_mems: frozenset[int] = frozenset(), aliases: dict[int, frozenset[int]] | None = None,
                 globals_: frozenset[int] = frozenset(), cp_mems: frozenset[int] = frozenset()) -> None:
        self.count = 0
        self.globals = globals_  # the kernel's global mems
        self.aliases = aliases or {}  # mem -> the mems sharing some of its memory (itself included)
        self.tma_mems = self.expand(tma_mems)  # mems TMA copies write: an mbarrier wait makes them visible
        self.cp_mems = self.expand(cp_mems)  # mems of cp.async copies completing on mbarriers: a wait lands them

    def expand(self, ids: set[int] | frozenset[int]) -> frozenset[int]:
        return frozenset().union(*(self.aliases.get(i, (i,)) for i in ids)) if ids else frozenset()

    def stmt(self, s: TStmt, st: _State) -> tuple[TStmt, _State]:
        if isinstance(s, Seq):
            out = []
            for i, c in enumerate(s.stmts):
                c2, st = self.turn_wait(c, s.stmts[i + 1:], st) if _turn_wait(c) else self.stmt(c, st)
                out.append(c2)
            return seq(out), st
        if isinstance(s, (Sync, ClusterBarrier)) or isinstance(s, Group) and isinstance(s.body, HandoffBarrier):
            return s, st.after_sync()  # a cluster barrier, a stage handoff's barrier: barriers of the block too
        if isinstance(s, CpAsyncWait) or (isinstance(s, Group) and isinstance(s.body, CpAsyncWait)):
            return s, _State(st.written | st.pending, st.read, st.pending)
        if _is_mbar_wait(s):  # TMA data is visible to the waiting threads; cp.async data lands, written by its threads
            s2, st = self.leaf(s, st)
            landed = st.pending & self.cp_mems
            return s2, _State(st.written | landed, st.read, st.pending - self.tma_mems - self.cp_mems)
        if isinstance(s, Loop):
            return self.loop(s, st)
        if isinstance(s, Roles):
            return self.roles(s, st)
        if isinstance(s, If) and not isinstance(s, Group):
            a, sa = self.stmt(s.then_body, st)
            b, sb = self.stmt(s.else_body, st) if s.else_body is not None else (None, st)
            return If(s.cond, a, b, loc=s.loc), sa | sb
        return self.leaf(s, st)

    def turn_wait(self, s: TStmt, rest: tuple[TStmt, ...], st: _State) -> tuple[TStmt, _State]:
        """A warpgroup's wait for its turn, followed by ``rest``: a barrier goes before the wait when the statements
        up to the turn's hand-on (its window, where a barrier would deadlock) need one; when the hand-on is not in
        ``rest``, whenever anything is unordered (:meth:`leaf`)."""
        end = next((i for i, c in enumerate(rest) if _turn_give(c)), None)
        if end is None:
            return self.leaf(s, st)
        r, w, _ = _accesses(Seq(tuple(rest[:end])))
        r, w = self.expand(r), self.expand(w)
        if r & st.written or w & (st.written | st.read):
            self.count += 1
            return seq([Sync(), s]), st.after_sync()
        return s, st

    def leaf(self, s: TStmt, st: _State) -> tuple[TStmt, _State]:
        if st.written and _turn_wait(s):
            # a warpgroup waiting for its turn: a barrier that what follows needs goes before the wait (a barrier of
            # all consumers while one holds the turn would wait for those waiting for the turn: a deadlock)
            self.count += 1
            return seq([Sync(), s]), st.after_sync()
        r, w, inner_sync = _accesses(s)
        if not (r or w):
            return s, st
        r, w = self.expand(r), self.expand(w)
        need = bool(r & st.written) or bool(w & (st.written | st.read))
        pre: list[TStmt] = []
        if need:
            self.count += 1
            pre.append(Sync())
            st = st.after_sync()
        aw = self.expand(_async_writes(s))
        if inner_sync:
            body = s.body if isinstance(s, Group) else s
            tail = _after_last_sync(body)
            st = _State(self.expand(tail.written), self.expand(tail.read), st.pending)
        else:
            st = st | _State(frozenset(w - aw), frozenset(r))
        if aw:
            st = st | _State(pending=frozenset(aw))
        return seq(pre + [s]), st

    def roles(self, s: Roles, st: _State) -> tuple[TStmt, _State]:
        """The producer runs beside the consumers, ordered with them by mbarriers only: it gets no barrier (it
        issues TMA copies and mbarrier operations, whose ordering the mbarriers give); the consumers' barriers
        are named barriers of their own threads."""
        from tilec.ir.visit import transform

        producer, _ = _Placer(self.tma_mems, self.aliases, self.globals, self.cp_mems).stmt(s.producer, _State())
        if any(isinstance(n, Sync) for n in walk(producer)):
            raise AssertionError("a warp-specialized producer needs a block barrier")
        consumer, end = self.stmt(s.consumer, st)
        named = Sync(threads=s.threads) if s.copies == 1 else Sync(threads=s.threads // s.copies, copy=s.copy)
        consumer = transform(consumer, lambda n: named if type(n) is Sync else None)  # (handoffs stay)
        self.count += 1  # the consumers' barriers (placed or from lowering) changed to named ones
        return dataclasses.replace(s, producer=producer, consumer=consumer), end

    def loop(self, s: Loop, st: _State) -> tuple[TStmt, _State]:
        entry = st
        carried = _State()
        if isinstance(s.extent, Const) and int(s.extent.value) <= 1:  # one trip: nothing carried to a next one
            body, end = self.stmt(s.body, entry)
            return dataclasses.replace(s, body=body), end if int(s.extent.value) == 1 else entry
        for _ in range(8):  # the state only grows: a fixpoint comes within a few rounds
            saved = self.count
            body, end = self.stmt(s.body, entry | carried)
            if s.tiles:  # another tile is another block of the original grid: its global accesses are unordered
                end = _State(end.written - self.globals, end.read - self.globals, end.pending)
            if (end | carried) == carried or end == carried:
                break
            carried = carried | end
            self.count = saved
        return dataclasses.replace(s, body=body), entry | end


def place_barriers(k: ThreadKernel) -> ThreadKernel:
    """``k`` with barriers placed (see the module docstring); ``k`` itself when it needs none."""
    placer = _Placer(frozenset(id(n.dst) for n in walk(k.body) if isinstance(n, TmaLoad)), _aliases(k),
                     frozenset(id(m) for m in k.params + k.statics if isinstance(m, Mem) and m.space == "global"),
                     _mbarrier_cp_async(k.body))
    body, _ = placer.stmt(k.body, _State())
    return dataclasses.replace(k, body=body) if placer.count else k


def _is_mbar_wait(s: TStmt) -> bool:
    """An mbarrier wait, alone or as a tile op's code (maybe followed by its proxy fence)."""
    body = s.body if isinstance(s, Group) else s
    body = body.stmts[0] if isinstance(body, Seq) and isinstance(s, Group) and body.stmts else body
    return isinstance(body, MbarWait)


def _mbarrier_cp_async(body: TStmt) -> frozenset[int]:
    """The mems of cp.async copies that complete on an mbarrier: those of the tile ops whose code arrives on one."""
    return frozenset(id(c.dst) for g in walk(body) if isinstance(g, Group) and
                     any(isinstance(n, CpAsyncMbarArrive) for n in walk(g.body))
                     for c in walk(g.body) if isinstance(c, CpAsync))


def _aliases(k: ThreadKernel) -> dict[int, frozenset[int]]:
    """Shared mems whose bytes overlap another's: each with every mem it overlaps (itself included)."""
    return {id(m): frozenset([id(m)] + [id(x) for x, _ in others]) for m, others in overlapping(k.shared).items()}


def count_syncs(s: TStmt) -> int:
    return sum(1 for n in walk(s) if isinstance(n, Sync))

