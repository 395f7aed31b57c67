"""Thread-block clusters in the thread interpreter (kernels with ``ThreadKernel.cluster``).

The blocks of a cluster run together, one coroutine each (:mod:`tilec.interp.coroutines`; a warp-specialized block
adds its two roles), so that a TMA multicast lands in every block it names and an mbarrier arrival reaches the block
whose rank it names (:mod:`tilec.interp.tma`). ``barrier.cluster`` waits until every block of the cluster reached it.

Reported: a cluster barrier some block never reaches (a deadlock), a multicast or arrival into a block before it
initialised that mbarrier (no cluster barrier after the inits), a block that exits with no cluster barrier after a
peer's last arrival on it or copy into it, or that a peer sends to after it exited (none before the end), and a
multicast into a stage a wgmma of that block still reads.
"""

from __future__ import annotations

import itertools

import numpy as np

from tilec.errors import RaceError
from tilec.interp.coroutines import BLOCK_STATE, Scheduler
from tilec.interp.thread import ThreadInterpreter, stmt_rule
from tilec.lower.tir import ClusterBarrier


def run_clusters(it: ThreadInterpreter, base: dict, grid: list[int]) -> None:
    """Every cluster of the grid, its blocks together (ranks: x fastest, as ``%cluster_ctarank``)."""
    dims = list(it.k.cluster)
    sizes = list(grid) + [1] * (3 - len(grid))
    for d, (n, c) in enumerate(zip(sizes, dims)):
        if n % c:
            it.fail(f"grid dimension {d} of {n} blocks is not a multiple of the cluster's {c}")
    with np.errstate(all="ignore"):
        for cz, cy, cx in itertools.product(*(range(n // c) for n, c in zip(reversed(sizes), reversed(dims)))):
            members = [(cx * dims[0] + x, cy * dims[1] + y, cz * dims[2] + z)
                       for z in range(dims[2]) for y in range(dims[1]) for x in range(dims[0])]
            _run_cluster(it, base, [m[: len(grid)] for m in members])


def _run_cluster(it: ThreadInterpreter, base: dict, members: list[tuple[int, ...]]) -> None:
    blocks, envs = [], []
    for b in members:
        envs.append(it.enter_block(b, base))
        blocks.append({a: getattr(it, a) for a in BLOCK_STATE})
    it.rank = len(members) - 1  # the state of the block entered last is the live one
    it.sched = sched = Scheduler(it, blocks)
    sched.barrier = [0, 0]  # blocks arrived at the cluster barrier, cluster barriers completed
    sched.sent = {}  # rank -> cluster barriers completed when a peer last arrived on it or copied into it

    def block(rank: int, env: dict) -> None:
        it.exec(it.k.body, env, np.ones(it.T, bool))
        if sched.barrier[1] <= sched.sent.get(rank, -1):  # no cluster barrier since a peer last sent to it
            it.fail(f"the cluster's block of rank {rank} exits while a peer may still arrive on its mbarriers or copy "
                    "into its shared memory (a missing cluster barrier before the end)", RaceError)
        sched.blocks[rank]["done"] = True

    try:
        for rank, env in enumerate(envs):
            sched.spawn(lambda rank=rank, env=env: block(rank, env), rank)
        sched.run_all()
    finally:
        it.sched = None
    live = it.rank
    it.check_block_end()
    for rank in range(len(members)):
        if rank != live:
            for a in BLOCK_STATE:
                setattr(it, a, blocks[rank][a])
            it.check_block_end()


@stmt_rule(ClusterBarrier)
def _cluster_barrier(it: ThreadInterpreter, s: ClusterBarrier, env: dict, mask: np.ndarray) -> None:
    if int(np.count_nonzero(mask)) != it.T:
        it.fail(f"a cluster barrier reached by {int(np.count_nonzero(mask))} of the block's {it.T} threads (every "
                "thread must arrive: a deadlock on the GPU)", RaceError)
    sched = it.sched
    if sched is not None and sched.blocks is not None:
        bar = sched.barrier
        gen = bar[1]
        bar[0] += 1
        sched.progress += 1
        if bar[0] == len(sched.blocks):
            bar[0], bar[1] = 0, gen + 1
        while bar[1] == gen:
            if not sched.hand_over():
                it.fail(f"a cluster barrier that {len(sched.blocks) - bar[0]} block(s) of the cluster never reach "
                        "(a deadlock on the GPU)", RaceError)
    it.epoch += 1  # a barrier of this block too
    it.syncs += 1
    it.unsynced[:] = 0
