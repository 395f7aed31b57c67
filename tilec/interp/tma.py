"""TMA copies and mbarriers in the thread interpreter, from the PTX ISA's description.

An mbarrier has a phase, the arrivals its phase still expects and a transaction count (bytes announced by
``expect_tx`` minus bytes completed by TMA copies). A phase completes when both reach zero; the copies that completed
on it land in shared memory when a thread waits for that phase (``try_wait.parity`` with the phase's parity), and
become visible to every waiting thread without a barrier. A thread's cp.async copies complete on an mbarrier when it
arrives there with ``cp.async.mbarrier.arrive.noinc`` (an arrival of the phase); they land at the wait for that phase
as ``cp.async.wait_group`` lands them: written by their threads, ordered for others by a barrier. A TMA copy
reads its box from the global tensor (zeros outside it) and writes it with the tensor map's swizzle applied to the
byte address. A TMA store reads its box from shared memory (the same swizzle) when it is issued and writes the part
inside the tensor; until its thread's ``cp.async.bulk.wait_group.read`` the box counts as being read.

Warp-specialized kernels run their producer and consumer code as two coroutines: a wait that cannot complete yet
hands over to the other role, and a wait that cannot complete while the other role is finished or itself waiting
without having changed any mbarrier is a deadlock.

Reported: reading data before the wait that lands it, a TMA copy writing what others read since the last barrier
(wgmma reads count as reads by their warpgroup's first thread), a releasing arrival (no transaction bytes) by some
threads while others' shared-memory accesses are not ordered before it (per thread: accessed since its last barrier,
and whether its warp synchronized since), a warp-specialized producer's TMA copy over a read that no release it
observed came after (each thread counts the releases it takes part in; a wait of the other role observes those of
the phase it waited for),
a wait that no arrival can ever satisfy (a deadlock on the GPU), more arrivals than a phase expects, re-initialising
a barrier with copies in flight, and a kernel that ends with copies in flight; a TMA store reading a thread's write
that thread did not fence to the async proxy (``fence.proxy.async``; wgmma operands likewise) or that no barrier
ordered before it, a write over a tile a TMA store may still read, and a kernel that ends with such stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilec.errors import RaceError
from tilec.interp.coroutines import Scheduler
from tilec.interp.thread import ThreadInterpreter, stmt_rule
from tilec.lower.tir import (
    BulkCommit,
    BulkWait,
    CpAsyncMbarArrive,
    FenceMbarInit,
    HandoffBarrier,
    MbarArriveTx,
    MbarInit,
    MbarWait,
    Mem,
    NamedBarrier,
    Roles,
    TensorMap,
    TmaLoad,
    TmaStoreBox,
)  # fmt: skip


@dataclass
class Mbarrier:
    count: int
    expected: int  # arrivals the current phase still expects
    tx: int = 0  # announced minus completed transaction bytes
    phase: int = 0  # completed phases
    in_flight: list[tuple[Mem, np.ndarray, np.ndarray]] = field(default_factory=list)  # copies of this phase
    completed: list[tuple[Mem, np.ndarray, np.ndarray]] = field(default_factory=list)  # to land at the next wait
    # cp.async copies whose threads arrived on it (cp.async.mbarrier.arrive): (mem, threads, offsets, values), of
    # this phase and to land at the next wait (written by their threads, in the generic proxy)
    cp_in_flight: list[tuple[Mem, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    cp_completed: list[tuple[Mem, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    gen: int = 0  # cluster barriers completed when it was initialised (peers may use it after the next one)
    # per thread, the sequence number of its releasing arrival in the current phase / the last completed one
    releases: np.ndarray | None = None
    released: np.ndarray | None = None


def _slot(it: ThreadInterpreter, mem: Mem, off: object, env: dict, mask: np.ndarray, what: str) -> tuple[Mem, int]:
    o = np.broadcast_to(np.asarray(it.eval(off, env, mask), np.int64), (it.T,))[mask]
    if o.size and np.any(o != o[0]):
        it.fail(f"{what}: threads name different mbarriers of {mem.name}")
    i = int(o[0]) if o.size else 0
    if not 0 <= i < int(mem.size):
        it.fail(f"{what}: mbarrier {mem.name}[{i}] outside its {mem.size} elements")
    unsynced = it.unsynced.copy()  # an mbarrier is itself the synchronization, not an access it must order
    it.read(mem, np.full(it.T, i), 1, mask)  # race checks: an init must be ordered before its uses by a barrier
    it.unsynced[:] = unsynced
    return mem, i


def _get(it: ThreadInterpreter, key: tuple[Mem, int], what: str) -> Mbarrier:
    bar = it.mbarriers.get(key)
    if bar is None:
        it.fail(f"{what} on mbarrier {key[0].name}[{key[1]}] before its mbarrier.init", RaceError)
    return bar


def _advance(it: ThreadInterpreter, bar: Mbarrier, key: tuple[Mem, int]) -> None:
    if bar.expected < 0:
        it.fail(f"mbarrier {key[0].name}[{key[1]}]: more arrivals than the {bar.count} its phase expects", RaceError)
    if bar.expected == 0 and bar.tx == 0:
        bar.completed += bar.in_flight
        bar.in_flight = []
        bar.cp_completed += bar.cp_in_flight
        bar.cp_in_flight = []
        bar.phase += 1
        bar.expected = bar.count
        bar.released, bar.releases = bar.releases, None


@stmt_rule(MbarInit)
def _init(it: ThreadInterpreter, s: MbarInit, env: dict, mask: np.ndarray) -> None:
    o = np.broadcast_to(np.asarray(it.eval(s.off, env, mask), np.int64), (it.T,))[mask]
    for i in sorted({int(x) for x in o}):
        old = it.mbarriers.get((s.bar, i))
        if old is not None and (old.in_flight or old.completed or old.cp_in_flight or old.cp_completed):
            it.fail(f"mbarrier.init of {s.bar.name}[{i}] while TMA copies completing on it are in flight", RaceError)
        it.mbarriers[(s.bar, i)] = Mbarrier(s.count, s.count, gen=_cluster_gen(it))
    it.write(s.bar, np.asarray(it.eval(s.off, env, mask)), np.zeros((it.T, 1)), 1, mask)


@stmt_rule(FenceMbarInit)
def _fence(it: ThreadInterpreter, s: FenceMbarInit, env: dict, mask: np.ndarray) -> None:
    pass


@stmt_rule(MbarArriveTx)
def _arrive(it: ThreadInterpreter, s: MbarArriveTx, env: dict, mask: np.ndarray) -> None:
    key = _slot(it, s.bar, s.off, env, mask, "mbarrier.arrive")
    covered = _check_release(it, key, mask) if s.tx == 0 and it.check_races else None
    if s.cta is None:
        targets = np.full(int(np.count_nonzero(mask)), it.rank)
    else:  # each thread on the barrier at this place in the cluster's block of the rank it names
        targets = np.broadcast_to(np.asarray(it.eval(s.cta, env, mask), np.int64), (it.T,))[mask]
    for r in np.unique(targets):
        bar = _barrier_of(it, int(r), key, "mbarrier.arrive")
        n = int(np.count_nonzero(targets == r))
        if covered is not None and int(r) == it.rank:  # what this release orders, for the waits it completes
            seq = np.where(covered, it.released, 0)
            bar.releases = seq if bar.releases is None else np.maximum(bar.releases, seq)
        bar.expected -= n
        bar.tx += n * s.tx
        _advance(it, bar, key)
    _progress(it)
    if s.tx == 0 and in_copy(it):  # a copy of the consumers releasing a stage lets the others run on right away
        it.sched.hand_over()  # (what it does next may come after anything they do: a wgmma still reading shows)


def _check_release(it: ThreadInterpreter, key: tuple[Mem, int], mask: np.ndarray) -> np.ndarray:
    """An arrival that releases shared memory (no transaction bytes: consumers freeing a pipeline stage) orders only
    the arriving thread's accesses, and those of its warp after a ``__syncwarp``; every other thread's accesses since
    its last barrier are unordered with what the waiting side does next. The threads it covers (their release count
    advanced)."""
    arrivers = it.tids[mask]
    warps = np.isin(it.tids // it.W, arrivers // it.W)
    covered = mask | ((it.unsynced == 2) & warps)
    mine = it.sched.span[it.sched.me] if in_copy(it) else True  # (another copy's accesses are its own releases')
    bad = np.flatnonzero((it.unsynced != 0) & ~covered & mine)
    if bad.size:
        t = int(bad[0])
        how = "its warp synchronized, but no thread of it arrives" if it.unsynced[t] == 2 else \
            "nothing synchronized it with an arriving thread (a missing __syncwarp or barrier)"
        it.fail(f"mbarrier {key[0].name}[{key[1]}] is released by thread(s) {arrivers[:4].tolist()} while thread {t} "
                f"accessed shared memory since its last barrier and {how}", RaceError)
    it.unsynced[covered] = 0
    it.released[covered] += 1
    return covered


@stmt_rule(MbarWait)
def _wait(it: ThreadInterpreter, s: MbarWait, env: dict, mask: np.ndarray) -> None:
    key = _slot(it, s.bar, s.off, env, mask, "mbarrier.try_wait")
    bar = _get(it, key, "mbarrier.try_wait")
    p = np.broadcast_to(np.asarray(it.eval(s.parity, env, mask), np.int64), (it.T,))[mask]
    parity = int(p[0]) & 1 if p.size else 0
    while (bar.phase & 1) == parity:  # the phase with this parity is the current one: another role may complete it
        if it.sched is not None and it.sched.hand_over():
            continue
        it.fail(f"mbarrier {key[0].name}[{key[1]}]: a wait for phase parity {parity} that nothing can complete "
                f"(the phase still expects {bar.expected} arrival(s) and {bar.tx} transaction bytes): a deadlock "
                "on the GPU", RaceError)
    if not np.all(mask):  # one role waits for the other's arrivals: ordered after its accesses (over-approximated
        it.epoch += 1  # as after everyone's, which can hide a race but never reports a false one)
        if bar.released is not None:  # precisely: after what the releases it observes ordered
            it.observed = np.maximum(it.observed, bar.released)
    for mem, o, vals in bar.completed:
        sh = it.shared[mem]
        sh.pending[o] = False
        sh.data[o] = vals.astype(sh.data.dtype)
        sh.w_epoch[o] = -1  # visible to every thread that waited: no barrier needed
    bar.completed = []
    for mem, t, o, vals in bar.cp_completed:  # as cp.async.wait_group lands them: a barrier orders them for others
        sh = it.shared[mem]
        sh.pending[o.ravel()] = False
        it.track_write(sh, mem, t, o)
        sh.data[o.ravel()] = vals.ravel().astype(sh.data.dtype)
    bar.cp_completed = []


@stmt_rule(CpAsyncMbarArrive)
def _cp_async_arrive(it: ThreadInterpreter, s: CpAsyncMbarArrive, env: dict, mask: np.ndarray) -> None:
    """Each thread's cp.async copies not yet landed (in any of its commit groups) complete on the mbarrier, and the
    thread arrives on it (``.noinc``: an arrival its count includes)."""
    key = _slot(it, s.bar, s.off, env, mask, "cp.async.mbarrier.arrive")
    bar = _get(it, key, "cp.async.mbarrier.arrive")
    groups = []
    for group in it.groups:
        kept = []
        for mem, t, o, vals in group:
            mine = mask[t]
            if np.any(mine):
                bar.cp_in_flight.append((mem, t[mine], o[mine], vals[mine]))
            if not np.all(mine):
                kept.append((mem, t[~mine], o[~mine], vals[~mine]))
        groups.append(kept)
    it.groups = groups
    bar.expected -= int(np.count_nonzero(mask))
    _advance(it, bar, key)
    _progress(it)


def _check_overwrite(it: ThreadInterpreter, sh: Any, mem: Mem, o: np.ndarray, issuer: int) -> None:
    """A warp-specialized producer's TMA copy may overwrite an element another thread read since its last barrier
    only if a release by that thread after the read was observed by the producer's waits: a stage released before
    its last read is a race the role-wide ordering of the waits would hide."""
    who = sh.r_last[o]
    live = (who >= 0) & (who != issuer) & (sh.r_sync[o] == it.syncs)
    bad = live & (it.observed[np.maximum(who, 0)] <= sh.r_rel[o])
    if np.any(bad):
        i = int(np.argmax(bad))
        it.fail(f"TMA copy into {mem.name}[{int(o[i])}] while thread {int(who[i])} may still read it: its read came "
                "after the release this copy waited for (a stage released before its last read)", RaceError)


def _box(it: ThreadInterpreter, t: TensorMap, coords: list[int]) -> np.ndarray:
    """The box at ``coords`` (innermost first) of ``t``'s tensor, zeros outside it; row-major, outermost first."""
    flat, inside = _box_index(t, coords)
    return np.where(inside, it.globals_[it.k.params[t.param]][flat], 0)


@stmt_rule(TmaLoad)
def _tma(it: ThreadInterpreter, s: TmaLoad, env: dict, mask: np.ndarray) -> None:
    t = s.tmap
    eb = t.dtype.bits // 8
    coords = [np.broadcast_to(np.asarray(it.eval(c, env, mask), np.int64), (it.T,)) for c in s.coords]
    dst = np.broadcast_to(np.asarray(it.eval(s.dst_off, env, mask), np.int64), (it.T,))
    key = _slot(it, s.bar, s.bar_off, env, mask, "TMA copy")
    ranks = [r for r in range(16) if s.multicast >> r & 1] if s.multicast else [it.rank]
    bars = {r: _barrier_of(it, r, key, "TMA multicast") for r in ranks}
    for tid in it.tids[mask]:
        start = int(dst[tid]) * eb
        if start % 128:
            it.fail(f"TMA copy into {s.dst.name} at byte {start}: the destination must be 128-byte aligned")
        vals = _box(it, t, [int(c[tid]) for c in coords])
        byte = start + np.arange(vals.size) * eb
        if t.swizzle:
            byte = byte ^ (((byte >> 7) & (t.swizzle // 16 - 1)) << 4)
        o = byte // eb
        for r, bar in bars.items():
            sh = _shared_of(it, r)[s.dst]
            if o.min() < 0 or o.max() >= sh.data.size:
                it.fail(f"TMA copy writes {s.dst.name} outside its {sh.data.size} elements")
            if r == it.rank:
                if it.sched is not None and it.check_races:
                    _check_overwrite(it, sh, s.dst, o, int(tid))
                it.track_shared_write(s.dst, np.array([tid]), o[None, :], by_threads=False)  # (and tiles over it)
            elif np.any(sh.pending[o]) or np.any(sh.wgmma_reads[o]):
                it.fail(f"TMA multicast into {s.dst.name} of the cluster's block of rank {r} while a copy to it is in "
                        "flight or a wgmma there reads it (a stage its consumers did not release)", RaceError)
            sh.pending[o] = True
            bar.in_flight.append((s.dst, o, vals))
            bar.tx -= vals.size * eb
    for bar in bars.values():
        _advance(it, bar, key)
    _progress(it)


def _box_index(t: TensorMap, coords: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(flat element index in the tensor, inside the tensor) of each element of the box at ``coords``, in the order
    TMA moves the box (outermost first)."""
    strides = (1,) + tuple(s // (t.dtype.bits // 8) for s in t.strides)
    grids = np.meshgrid(*[np.arange(b) + c for b, c in zip(t.box, coords)], indexing="ij")  # innermost first
    inside = np.ones(grids[0].shape, bool)
    flat = np.zeros(grids[0].shape, np.int64)
    for g, d, st in zip(grids, t.dims, strides):
        inside &= (g >= 0) & (g < d)
        flat += np.clip(g, 0, d - 1) * st
    return np.transpose(flat).reshape(-1), np.transpose(inside).reshape(-1)


@stmt_rule(TmaStoreBox)
def _tma_store(it: ThreadInterpreter, s: TmaStoreBox, env: dict, mask: np.ndarray) -> None:
    """Reads the swizzled box from shared memory when issued (a race with writes not ordered before it by a barrier
    is reported) and writes the part inside the tensor."""
    t = s.tmap
    eb = t.dtype.bits // 8
    coords = [np.broadcast_to(np.asarray(it.eval(c, env, mask), np.int64), (it.T,)) for c in s.coords]
    src = np.broadcast_to(np.asarray(it.eval(s.src_off, env, mask), np.int64), (it.T,))
    sh = it.shared[s.src]
    for tid in it.tids[mask]:
        start = int(src[tid]) * eb
        if start % 128:
            it.fail(f"TMA store from {s.src.name} at byte {start}: the source must be 128-byte aligned")
        flat, inside = _box_index(t, [int(c[tid]) for c in coords])
        byte = start + np.arange(flat.size) * eb
        if t.swizzle:
            byte = byte ^ (((byte >> 7) & (t.swizzle // 16 - 1)) << 4)
        o = byte // eb
        if o.min() < 0 or o.max() >= sh.data.size:
            it.fail(f"TMA store reads {s.src.name} outside its {sh.data.size} elements")
        it.track_read(sh, s.src, np.array([tid]), o[None, :])
        it.check_fenced(sh, s.src, o, "a TMA store")
        sh.bulk_reads[o] += 1  # until the issuing thread's cp.async.bulk.wait_group.read
        it.bulk_stores.setdefault(int(tid), [[]])[-1].append((s.src, o))  # into its open group
        it.globals_[s.dst][flat[inside]] = sh.data[o[inside]].astype(it.globals_[s.dst].dtype)


@stmt_rule(BulkCommit)
def _bulk_commit(it: ThreadInterpreter, s: BulkCommit, env: dict, mask: np.ndarray) -> None:
    """Each thread's stores since its last commit become a group (per thread: its groups, the open one last)."""
    for tid in it.tids[mask]:
        it.bulk_stores.setdefault(int(tid), [[]]).append([])


@stmt_rule(BulkWait)
def _bulk_wait(it: ThreadInterpreter, s: BulkWait, env: dict, mask: np.ndarray) -> None:
    """The waiting threads' committed TMA stores but the ``pending`` latest have read their tiles (the interpreter
    copied the data when they were issued): those tiles may be written again."""
    for tid in it.tids[mask]:
        groups = it.bulk_stores.get(int(tid), [[]])
        done = max(len(groups) - 1 - s.pending, 0)
        for mem, o in (x for g in groups[:done] for x in g):
            it.shared[mem].bulk_reads[o] -= 1
        it.bulk_stores[int(tid)] = groups[done:]


def _barrier_of(it: ThreadInterpreter, rank: int, key: tuple[Mem, int], what: str) -> Mbarrier:
    """The mbarrier ``key`` of the cluster's block of ``rank`` (this block's own for its rank)."""
    if rank == it.rank:
        return _get(it, key, what)
    sched = it.sched
    if sched is None or sched.blocks is None or not 0 <= rank < len(sched.blocks):
        it.fail(f"{what} to the block of rank {rank}, which is not in this block's cluster")
    sched.sent[rank] = sched.barrier[1]
    state = sched.state(rank)
    if state.get("done"):
        it.fail(f"{what} on mbarrier {key[0].name}[{key[1]}] of the cluster's block of rank {rank}, which has "
                "exited (a missing cluster barrier before the end)", RaceError)
    bar = state["mbarriers"].get(key)
    if bar is None or bar.gen >= sched.barrier[1]:  # not ordered after the peer's init by a cluster barrier
        it.fail(f"{what} on mbarrier {key[0].name}[{key[1]}] of the cluster's block of rank {rank} before its "
                "mbarrier.init (a missing cluster barrier after the inits)", RaceError)
    return bar


def _cluster_gen(it: ThreadInterpreter) -> int:
    return getattr(it.sched, "barrier", (0, 0))[1] if it.sched is not None else 0


def _shared_of(it: ThreadInterpreter, rank: int) -> dict:
    return it.shared if rank == it.rank else it.sched.state(rank)["shared"]


def _progress(it: ThreadInterpreter) -> None:
    if it.sched is not None:
        it.sched.progress += 1


@stmt_rule(Roles)
def _roles(it: ThreadInterpreter, s: Roles, env: dict, mask: np.ndarray) -> None:
    """The producer's first thread and the consumer threads, as two coroutines (see the module docstring); in a
    cluster, two more coroutines of this block beside the other blocks'."""
    branches = [(s.producer, dict(env), mask & (it.tids == s.threads))]
    per = s.threads // s.copies
    for c in range(s.copies):  # each copy of the consumers a coroutine of its own, with its thread index
        mine = env if s.copies == 1 else env | {s.copy: (it.tids // per).astype(np.int32),
                                                s.tx: (it.tids % per).astype(np.int32)}
        branches.append((s.consumer, mine, mask & (it.tids >= c * per) & (it.tids < (c + 1) * per)))
    own = [b[2] if s.copies > 1 and i > 0 else None for i, b in enumerate(branches)]  # a copy: wgmma groups its own
    if s.copies > 1:  # the copies start before the producer has issued a copy: a wait a lap ahead shows
        branches, own = branches[1:] + branches[:1], own[1:] + own[:1]
    if it.sched is not None:
        sched = it.sched
        rank = sched.rank[sched.me]
        sched.wait_for([sched.spawn(lambda b=b: it.exec(*b), rank, o) for b, o in zip(branches, own)])
        return
    it.sched = Scheduler(it)
    try:
        for b, o in zip(branches, own):
            it.sched.spawn(lambda b=b: it.exec(*b), 0, o)
        it.sched.run_all()
    finally:
        it.sched = None


@stmt_rule(NamedBarrier)
def _named_barrier(it: ThreadInterpreter, s: NamedBarrier, env: dict, mask: np.ndarray) -> None:
    """Count the threads waiting at (``bar.sync``) and arriving on (``bar.arrive``) each named barrier; the threads
    of a coroutine run in step here, so a wait within one is not held up, but at the block's end every barrier must
    have completed whole generations with as many waiting as arriving threads (``check_named_barriers``). A copy of
    the consumers (a coroutine of its own, :class:`Roles`) waits until its generation is complete."""
    _whole_warps(it, mask)
    ids = np.broadcast_to(np.asarray(it.eval(s.id, env, mask)), (it.T,))[mask]
    for i in np.unique(ids):
        count = _count(it, int(i), s.threads, True)
        done = (count[0] + count[1]) // s.threads * s.threads + s.threads  # the arrivals completing this generation
        count[1 if s.arrive else 0] += int(np.count_nonzero(ids == i))
        _progress(it)
        while not s.arrive and in_copy(it) and count[0] + count[1] < done:
            if not it.sched.hand_over():
                it.fail(f"named barrier {int(i)}: a wait for {done - count[0] - count[1]} more thread(s) that "
                        "nothing brings (a deadlock on the GPU)", RaceError)


def _whole_warps(it: ThreadInterpreter, mask: np.ndarray) -> None:
    warps = mask.reshape(-1, it.W)
    if np.any(warps.any(axis=1) & ~warps.all(axis=1)):
        it.fail("a named barrier reached by only part of a warp (a deadlock on the GPU)", RaceError)


def _count(it: ThreadInterpreter, i: int, threads: int, paired: bool) -> list:
    """Named barrier ``i``'s [threads waited, arrived, threads a generation, whether waits pair with arrivals]."""
    count = it.named.setdefault(i, [0, 0, threads, paired])
    if count[2] != threads:
        it.fail(f"named barrier {i} used with {count[2]} and {threads} threads", RaceError)
    return count


def in_copy(it: ThreadInterpreter) -> bool:
    """Whether the running coroutine is a copy of the consumers (its named-barrier waits hold it up)."""
    return it.sched is not None and it.sched.me in it.sched.own


@stmt_rule(HandoffBarrier)
def _handoff(it: ThreadInterpreter, s: HandoffBarrier, env: dict, mask: np.ndarray) -> None:
    """Counted as a named barrier whose waits need not pair with arrivals (a generation: ``threads`` threads waiting
    or arriving), and, as the barrier pass takes it, an ordering point of the block (over-approximated as after
    everyone's accesses: it can hide a race, never report a false one)."""
    _whole_warps(it, mask)
    mode = np.where(mask, np.broadcast_to(np.asarray(it.eval(s.mode, env, mask)), (it.T,)), 0)
    count = _count(it, s.id, s.threads, False)
    count[0] += int(np.count_nonzero(mode == 1))
    count[1] += int(np.count_nonzero(mode == 2))
    it.epoch += 1
    it.syncs += 1
    it.unsynced[mode != 0] = 0


def check_named_barriers(it: ThreadInterpreter) -> None:
    for i, (waited, arrived, threads, paired) in sorted(it.named.items()):
        if (paired and waited != arrived) or (waited + arrived) % threads:
            it.fail(f"named barrier {i}: {waited} threads waited and {arrived} arrived ({threads} a generation): a "
                    "wait that never completes or a barrier left half-complete on the GPU", RaceError)
