"""Coroutines for the thread interpreter: the roles of a warp-specialized block and the blocks of a cluster run
as Python threads of which exactly one runs at a time, handing over in a fixed round-robin order (deterministic).

A coroutine runs until it must wait for another (an mbarrier phase, a cluster barrier, the end of its children)
and then hands over. ``hand_over`` returns whether anything changed meanwhile (``progress``: arrivals, copies,
barrier arrivals, coroutines ending); a wait that a whole round of the others cannot advance is a deadlock, which
the waiting rule reports. Each coroutine belongs to a block of the cluster (its rank): the interpreter's per-block
state (shared memory, registers, mbarriers, race-tracking epochs) is swapped in when a coroutine of another block
takes its turn. A copy of a block's consumer threads (``Roles.copies``) also has wgmma groups of its own in flight.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

# the interpreter's attributes that belong to one block (tilec.interp.thread.ThreadInterpreter)
BLOCK_STATE = ("block", "shared", "regs", "groups", "wgmma_groups", "wgmma_regs", "mbarriers", "named", "bulk_stores",
               "epoch", "unsynced", "released", "observed", "syncs")
# the attributes a coroutine spawned with ``own`` state keeps to itself: its warpgroups' wgmma groups in flight (a
# copy of a block's consumer threads, running beside the other copies: tilec.lower.tir.Roles)
OWN_STATE = ("wgmma_groups", "wgmma_regs")


class Abort(Exception):
    """Raised in a coroutine when another failed: that error is the one reported."""


class Scheduler:
    def __init__(self, it: Any, blocks: list[dict] | None = None) -> None:
        self.it = it
        self.blocks = blocks  # per rank: the saved state of each block of a cluster (None: one block)
        self.cv = threading.Condition()
        self.alive: list[int] = []  # coroutine ids in round-robin order
        self.rank: dict[int, int] = {}
        self.turn: int | None = None
        self.error: BaseException | None = None
        self.progress = 0
        self.local = threading.local()
        self.threads: list[threading.Thread] = []
        self._ids = itertools.count()
        self.own: dict[int, dict] = {}  # the coroutines with OWN_STATE of their own -> it, while another runs
        self.span: dict[int, np.ndarray] = {}  # ... -> the mask of their threads
        self.stash: dict = {}  # the block's OWN_STATE while a coroutine with its own runs
        self.current: int | None = None

    @property
    def me(self) -> int:
        return self.local.me

    def spawn(self, fn: Callable[[], None], rank: int = 0, own: np.ndarray | None = None) -> int:
        """A new coroutine running ``fn`` in the block of ``rank`` (it starts when its turn comes), with the block's
        wgmma groups or, for ``own`` (the mask of its threads: a copy of the consumers), its own (OWN_STATE)."""
        cid = next(self._ids)
        with self.cv:
            self.rank[cid] = rank
            if own is not None:
                self.own[cid] = {"wgmma_groups": [[]], "wgmma_regs": {}}
                self.span[cid] = own
            self.alive.append(cid)
            self.progress += 1  # a waiter must give the new coroutine its turn before calling a deadlock
        t = threading.Thread(target=self._main, args=(cid, fn), daemon=True)
        self.threads.append(t)
        t.start()
        return cid

    def run_all(self) -> None:
        """From the thread that made them: run the coroutines until all have ended; raise the first error."""
        with self.cv:
            self.turn = self.alive[0]
            self.cv.notify_all()
            self.cv.wait_for(lambda: not self.alive)
        for t in self.threads:
            t.join()
        if self.error is not None:
            raise self.error

    def hand_over(self) -> bool:
        """Let the others run until the turn comes back; whether anything progressed meanwhile."""
        me = self.me
        with self.cv:
            if len(self.alive) == 1:
                return False
            mark = self.progress
            self.turn = self._next(me)
            self.cv.notify_all()
            self.cv.wait_for(lambda: self.turn == me or self.error is not None)
        if self.error is not None:
            raise Abort()
        self._enter(me)
        return self.progress != mark

    def wait_for(self, children: list[int]) -> None:
        """Hand over until the coroutines ``children`` have ended (their deadlocks are reported by them)."""
        while any(c in self.alive for c in children):
            self.hand_over()

    # ----------------------------------------------------------------------------------------------- internals

    def _next(self, cid: int) -> int:
        i = self.alive.index(cid)
        return self.alive[(i + 1) % len(self.alive)]

    def _main(self, cid: int, fn: Callable[[], None]) -> None:
        self.local.me = cid
        with self.cv:
            self.cv.wait_for(lambda: self.turn == cid or self.error is not None)
        try:
            if self.error is None:
                self._enter(cid)
                with np.errstate(all="ignore"):
                    fn()
        except Abort:
            pass
        except BaseException as e:  # noqa: BLE001 - reported by run_all
            self.error = self.error or e
        finally:
            self._leave()
            with self.cv:
                nxt = self._next(cid) if len(self.alive) > 1 else None
                self.alive.remove(cid)
                self.progress += 1
                self.turn = nxt
                self.cv.notify_all()

    def _leave(self) -> None:
        """Put away the state of the coroutine that ran last, if it has its own (the block's back in its place)."""
        it, cid = self.it, self.current
        if cid is not None and cid in self.own:
            self.own[cid] = {a: getattr(it, a) for a in OWN_STATE}
            for a in OWN_STATE:
                setattr(it, a, self.stash[a])
        self.current = None

    def _enter(self, cid: int) -> None:
        """Swap in the state of the coroutine's block (a cluster's blocks share the interpreter), then its own."""
        self._leave()
        it, rank = self.it, self.rank[cid]
        if self.blocks is not None and it.rank != rank:
            self.blocks[it.rank].update({a: getattr(it, a) for a in BLOCK_STATE})
            for a in BLOCK_STATE:
                setattr(it, a, self.blocks[rank][a])
            it.rank = rank
        if cid in self.own:
            self.stash = {a: getattr(it, a) for a in OWN_STATE}
            for a in OWN_STATE:
                setattr(it, a, self.own[cid][a])
        self.current = cid

    def state(self, rank: int) -> dict:
        """The state of the block of ``rank`` (the live one for the block running now)."""
        it = self.it
        if self.blocks is None or rank == it.rank:
            return {a: getattr(it, a) for a in BLOCK_STATE}
        return self.blocks[rank]
