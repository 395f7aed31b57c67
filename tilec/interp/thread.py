"""The thread interpreter: runs the thread IR on the CPU, numpy-vectorized over the threads of a block.

Every per-thread value is an array over the block's threads; ``if`` on a per-thread condition becomes a
lane mask. Shared memory, ``__syncthreads`` and warp shuffles are emulated here; each other instruction family has a
module of rules that registers with :func:`stmt_rule`: ``mma.sync`` and ``ldmatrix`` (:mod:`.mma`), ``cp.async``
(:mod:`.cp_async`), wgmma (:mod:`.wgmma`), TMA and mbarriers (:mod:`.tma`), MFMA (:mod:`.mfma`), with the lane layouts
of the ISA written from its text, independently of :mod:`tilec.layout`, so the interpreter checks the lowering rather
than repeating it.

It reports, as errors naming the buffer and the kernel line: out-of-bounds accesses and vector accesses not
aligned to their width (``ldmatrix`` rows and ``cp.async`` chunks included); shared-memory races (two
threads touching one address between two barriers, at least one writing); barriers or shuffles reached by
only part of the threads; reads of shared memory that a ``cp.async`` has not yet landed in.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from tilec.dtypes import round_tf32, typed
from tilec.errors import RaceError, SourceLoc, TilecBoundsError, TilecError
from tilec.interp.atomics import add_at
from tilec.interp.tile import _BIN, _CALL
from tilec.ir.evaluate import check_grid_sign
from tilec.ir.expr import BinOp, Call, Cast, Const, Select, Table, UnOp, Var
from tilec.lower.tir import (
    AtomicAddOp,
    Bits,
    Comment,
    Decl,
    Group,
    If,
    Loop,
    Mem,
    MemRef,
    PrintOp,
    Seq,
    Sync,
    SyncWarp,
    TCall,
    ThreadKernel,
    TStmt,
    VecPack,
    Write,
    overlapping,
)  # fmt: skip

STMT_RULES: dict[type, Callable[[ThreadInterpreter, Any, np.ndarray], None]] = {}


def stmt_rule(cls: type) -> Callable:
    def deco(fn: Callable) -> Callable:
        STMT_RULES[cls] = fn
        return fn

    return deco


class _Shared:
    """One shared mem with its race-tracking state: the last writer and reader(s) of each element this epoch."""

    def __init__(self, mem: Mem) -> None:
        n = int(mem.size)
        self.data = np.full(n, np.nan, dtype=mem.dtype.np) if mem.dtype.is_float else np.zeros(n, mem.dtype.np)
        self.w_thread = np.full(n, -1, np.int64)
        self.w_epoch = np.full(n, -1, np.int64)
        self.r_thread = np.full(n, -1, np.int64)  # -2: several readers
        self.r_epoch = np.full(n, -1, np.int64)
        # the last read of each element: its thread, that thread's releasing arrivals before it, the barriers before
        self.r_last = np.full(n, -1, np.int64)
        self.r_rel = np.zeros(n, np.int64)
        self.r_sync = np.full(n, -1, np.int64)
        self.pending = np.zeros(n, bool)
        self.wgmma_reads = np.zeros(n, np.int32)  # in-flight wgmma groups reading each element
        self.unfenced = np.zeros(n, bool)  # written by a thread that has not fenced it to the async proxy since
        self.bulk_reads = np.zeros(n, np.int32)  # TMA stores issued that may still be reading each element


class ThreadInterpreter:
    """Runs a :class:`ThreadKernel` on host arrays."""

    def __init__(self, kernel: ThreadKernel, check_races: bool = True) -> None:
        self.k = kernel
        self.T = kernel.threads
        self.W = kernel.warp_size  # lanes of a warp (NVIDIA) or wavefront (AMD)
        self.check_races = check_races
        self.loc: SourceLoc | None = None
        self.block: tuple[int, ...] = ()
        self.epoch = 0
        self.globals_: dict[Mem, np.ndarray] = {}
        self.shared: dict[Mem, _Shared] = {}
        self.regs: dict[Mem, np.ndarray] = {}
        self.groups: list[list[tuple[Mem, np.ndarray, np.ndarray, np.ndarray]]] = [[]]
        # wgmma groups (the last one open): per wgmma, the shared elements it reads and its registers
        self.wgmma_groups: list[list[tuple[list[tuple[Mem, np.ndarray]], list[tuple[Mem, range, int]]]]] = [[]]
        self.wgmma_regs: dict[Mem, np.ndarray] = {}  # per register column: 2 accumulator, 1 A operand in flight
        self.mbarriers: dict[tuple[Mem, int], Any] = {}  # (mem, index) -> tilec.interp.tma.Mbarrier
        # per issuing thread, its TMA stores' groups (the open one last): what each store reads
        self.bulk_stores: dict[int, list[list[tuple[Mem, np.ndarray]]]] = {}
        self.aliases = overlapping(kernel.shared)  # shared mem -> [(mem sharing some of its bytes, byte offset)]
        self.batched = False  # running a loop's trips at once (tilec.interp.batch): lanes are (trip, thread)
        self.batch_plans: dict[Any, Any] = {}  # per loop, whether and how its trips may run at once
        self.sched: Any = None  # tilec.interp.coroutines.Scheduler while roles or a cluster's blocks run
        self.rank = 0  # this block's rank in its cluster
        self.tids = np.arange(self.T)
        # per thread: 0 no shared accesses since its last barrier, 1 some, 2 some but its warp synchronized since
        # (what one thread's mbarrier arrival may release for others: see tilec.interp.tma)
        self.unsynced = np.zeros(self.T, np.int8)
        self._fresh_release_state()

    def _fresh_release_state(self) -> None:
        """Per thread, the releasing mbarrier arrivals it took part in (its own, or its warp's after a __syncwarp)
        and the latest of them another role's waits have observed; the barriers met so far (see tilec.interp.tma:
        a TMA copy may overwrite a read only if its issuer observed a release that came after the read)."""
        self.released = np.zeros(self.T, np.int64)
        self.observed = np.zeros(self.T, np.int64)
        self.syncs = 0

    # ------------------------------------------------------------------------------------------------- driver

    def run(self, globals_: dict[Mem, np.ndarray], scalars: dict[Var, Any]) -> None:
        """``globals_`` maps each global mem to a flat array; ``scalars`` binds scalar params and sizes."""
        self.globals_ = globals_
        for m in self.k.statics:  # the module's own global memory, zero at load (callers may keep it across runs)
            globals_.setdefault(m, np.zeros(int(m.size), m.dtype.np))
        base = {v: typed(x, v.dtype) for v, x in scalars.items()}
        grid = [int(self.eval(g, base, None)) for g in self.k.grid]
        check_grid_sign(grid, self.k.name)
        if self.k.cluster != (1, 1, 1):
            _cluster.run_clusters(self, base, grid)
            return
        with np.errstate(all="ignore"):
            for idx in itertools.product(*(range(g) for g in reversed(grid))):
                env = self.enter_block(tuple(reversed(idx)), base)
                self.exec(self.k.body, env, np.ones(self.T, bool))
                self.check_block_end()

    def enter_block(self, block: tuple[int, ...], base: dict) -> dict:
        """Fresh per-block state for ``block`` (its shared memory, registers, mbarriers, ...); the block's env."""
        self.block = block
        env = dict(base)
        env[self.k.tx] = self.tids.astype(np.int32)
        for v, i in zip(self.k.block_idx, block):
            env[v] = np.asarray(i, np.int32)
        self.shared = {m: _Shared(m) for m, _ in self.k.shared}
        self.regs = {m: _poison((self.T, int(m.size)), m) for m in self.k.regs}
        self.groups = [[]]
        self.wgmma_groups, self.wgmma_regs, self.mbarriers = [[]], {}, {}
        self.named: dict[int, list] = {}  # named barrier id -> [threads waited, arrived, per generation, paired]
        # per issuing thread, its TMA stores' groups (the open one last): what each store reads
        self.bulk_stores: dict[int, list[list[tuple[Mem, np.ndarray]]]] = {}
        self.epoch = 0
        self.unsynced = np.zeros(self.T, np.int8)
        self._fresh_release_state()
        return env

    def check_block_end(self) -> None:
        if any(any(g) for v in self.bulk_stores.values() for g in v):
            t = next(t for t, v in self.bulk_stores.items() if any(v))
            self.fail(f"the kernel ends while thread {t}'s TMA stores may still read shared memory (no "
                      "cp.async.bulk.wait_group.read after them)", RaceError)
        if any(self.wgmma_groups):
            self.fail("the kernel ends with wgmma operations in flight (no wgmma.wait_group after them)", RaceError)
        if self.named:
            from tilec.interp.tma import check_named_barriers

            check_named_barriers(self)
        for (mem, i), bar in self.mbarriers.items():
            if bar.in_flight or bar.completed:
                self.fail(f"the kernel ends with TMA copies completing on mbarrier {mem.name}[{i}] that no "
                          "thread waited for", RaceError)

    def fail(self, msg: str, cls: type = TilecBoundsError) -> None:
        blk = ", ".join(str(b) for b in self.block)
        raise cls(f"{msg} (block ({blk}))", self.loc)

    # --------------------------------------------------------------------------------------------- statements

    def exec(self, s: TStmt, env: dict, mask: np.ndarray) -> None:
        saved = self.loc
        if s.loc is not None:
            self.loc = s.loc
        try:
            STMT_RULES[type(s)](self, s, env, mask)
        finally:
            self.loc = saved

    # ------------------------------------------------------------------------------------------------ memory

    def lanes_offsets(self, off: Any, lanes: int, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(thread ids, element offsets) of the active lanes, one row per element of a vector access."""
        off = np.broadcast_to(np.asarray(off, np.int64), (self.T,))
        t = self.tids[mask]
        o = off[mask][:, None] + np.arange(lanes)[None, :]
        return t, o

    def check_aligned(self, mem: Mem, first: np.ndarray, elems: int, what: str) -> None:
        """Vector accesses of ``elems`` elements must start at a multiple of their size (the GPU faults otherwise;
        mems start 16-byte aligned)."""
        if elems > 1 and first.size and np.any(first % elems):
            bad = int(first[first % elems != 0][0])
            self.fail(f"{what} of {elems} elements at {mem.space} {mem.name}[{bad}] is not aligned to its "
                      f"{elems * mem.dtype.bits // 8} bytes")

    def read(self, mem: Mem, off: Any, lanes: int, mask: np.ndarray) -> np.ndarray:
        """Values (threads, lanes) of ``mem[off : off + lanes]`` for every thread (garbage where masked off)."""
        if lanes > 1:
            self.check_aligned(mem, np.broadcast_to(np.asarray(off, np.int64), (self.T,))[mask], lanes, "vector read")
        if mem.space == "reg":
            o = np.broadcast_to(np.asarray(off, np.int64), (self.T,))[:, None] + np.arange(lanes)
            arr = self.regs[mem]
            if mem in self.wgmma_regs:
                self.check_wgmma_regs(mem, o[mask], "reads")
            if np.any(mask) and (o[mask].min() < 0 or o[mask].max() >= arr.shape[1]):
                self.fail(f"register array {mem.name} indexed out of bounds (size {arr.shape[1]})")
            return arr[self.tids[:, None], np.clip(o, 0, arr.shape[1] - 1)]
        out = np.zeros((self.T, lanes), dtype=mem.dtype.np)
        t, o = self.lanes_offsets(off, lanes, mask)
        if t.size == 0:
            return out
        data = self.globals_[mem] if mem.space == "global" else self.shared[mem].data
        if o.min() < 0 or o.max() >= data.size:
            bad = int(o[(o < 0) | (o >= data.size)][0])
            self.fail(f"read of {mem.space} {mem.name}[{bad}] outside its {data.size} elements")
        if mem.space == "shared":
            self.track_read(self.shared[mem], mem, t, o)
            for other, tt, oo in self.alias_accesses(mem, t, o):
                self.track_read(self.shared[other], other, tt, oo)
        out[mask] = data[o]
        return out

    def write(self, mem: Mem, off: Any, values: np.ndarray, lanes: int, mask: np.ndarray) -> None:
        values = np.broadcast_to(np.asarray(values), (self.T, lanes)) if np.ndim(values) < 2 else values
        if lanes > 1:
            self.check_aligned(mem, np.broadcast_to(np.asarray(off, np.int64), (self.T,))[mask], lanes, "vector write")
        if mem.space == "reg":
            o = np.broadcast_to(np.asarray(off, np.int64), (self.T,))
            arr = self.regs[mem]
            t = self.tids[mask]
            oo = o[mask][:, None] + np.arange(lanes)
            if t.size and (oo.min() < 0 or oo.max() >= arr.shape[1]):
                self.fail(f"register array {mem.name} written out of bounds (size {arr.shape[1]})")
            if mem in self.wgmma_regs:
                self.check_wgmma_regs(mem, oo, "writes")
            arr[t[:, None], oo] = typed(values[mask], mem.dtype)
            return
        t, o = self.lanes_offsets(off, lanes, mask)
        if t.size == 0:
            return
        data = self.globals_[mem] if mem.space == "global" else self.shared[mem].data
        if o.min() < 0 or o.max() >= data.size:
            bad = int(o[(o < 0) | (o >= data.size)][0])
            self.fail(f"write of {mem.space} {mem.name}[{bad}] outside its {data.size} elements")
        if mem.space == "shared":
            self.track_shared_write(mem, t, o)
        data[o] = typed(values[mask], mem.dtype)

    def track_shared_write(self, mem: Mem, t: np.ndarray, o: np.ndarray, by_threads: bool = True) -> None:
        """:meth:`track_write` of a write of shared ``mem``, seen from it and from every mem placed over its bytes."""
        self.track_write(self.shared[mem], mem, t, o, by_threads)
        for other, tt, oo in self.alias_accesses(mem, t, o):
            self.track_write(self.shared[other], other, tt, oo, by_threads)

    def alias_accesses(self, mem: Mem, t: np.ndarray, o: np.ndarray) -> list[tuple[Mem, np.ndarray, np.ndarray]]:
        """The same accesses (threads, element offsets) seen from each mem overlapping ``mem``'s bytes, for the race
        checks (each mem keeps its own values: nothing reads through one what it wrote through another).

        A mem of wider elements is skipped: two threads writing the two halves of one of its elements do not race,
        which its element-wise state could not tell. The pair is checked in the narrower mem's state instead, which
        accesses through either update (the wider one's accesses cover several of its elements)."""
        out = []
        eb = mem.dtype.bits // 8
        for other, delta in self.aliases.get(mem, ()):
            ob = other.dtype.bits // 8
            if ob > eb:
                continue
            per = eb // ob
            x = ((o * eb + delta) // ob)[..., None] + np.arange(per)
            tt = np.broadcast_to(t.reshape(-1, *([1] * (x.ndim - 1))), x.shape).ravel()
            x = x.ravel()
            keep = (x >= 0) & (x < int(other.size))
            if keep.any():
                out.append((other, tt[keep], x[keep][:, None]))
        return out

    def check_wgmma_regs(self, mem: Mem, cols: np.ndarray, what: str) -> None:
        """Until its wait_group, an in-flight wgmma's accumulators are off limits to other instructions (state 2)
        and its register A operand may not be overwritten (state 1)."""
        state = self.wgmma_regs[mem][np.clip(cols, 0, self.wgmma_regs[mem].size - 1)]
        busy = state >= (2 if what == "reads" else 1)
        if np.any(busy):
            role = "accumulator" if np.max(state[busy]) == 2 else "operand"
            self.fail(f"{what} wgmma {role} {mem.name}[{int(cols[busy].ravel()[0])}] while the wgmma is in flight "
                      "(a missing wgmma.wait_group)", RaceError)

    def track_read(self, sh: _Shared, mem: Mem, t: np.ndarray, o: np.ndarray) -> None:
        tt = np.broadcast_to(t[:, None], o.shape).ravel()
        oo = o.ravel()
        if np.any(sh.pending[oo]):
            self.fail(f"read of shared {mem.name}[{int(oo[sh.pending[oo]][0])}] before the asynchronous copy writing "
                      "it has landed (a missing cp.async.wait_group or mbarrier wait)", RaceError)
        if not self.check_races:
            return
        self.unsynced[t] = 1
        clash = (sh.w_epoch[oo] == self.epoch) & (sh.w_thread[oo] != tt)
        if np.any(clash):
            i = int(np.argmax(clash))
            self.fail(f"race on shared {mem.name}[{int(oo[i])}]: thread {int(tt[i])} reads what thread "
                      f"{int(sh.w_thread[oo[i]])} wrote with no barrier between", RaceError)
        fresh = sh.r_epoch[oo] != self.epoch
        other = ~fresh & (sh.r_thread[oo] != tt)
        sh.r_thread[oo[other]] = -2
        sh.r_thread[oo[fresh]] = tt[fresh]
        sh.r_epoch[oo] = self.epoch
        sh.r_last[oo], sh.r_rel[oo], sh.r_sync[oo] = tt, self.released[tt], self.syncs
        if len(oo) > 1:  # several threads reading one address in this access
            order = np.argsort(oo, kind="stable")
            so, st = oo[order], tt[order]
            dup = (so[1:] == so[:-1]) & (st[1:] != st[:-1])
            sh.r_thread[so[1:][dup]] = -2

    def check_fenced(self, sh: _Shared, mem: Mem, o: np.ndarray, reader: str) -> None:
        """The async proxy (wgmma, TMA stores) reads ``o``: each element's last writer must have fenced it
        (``fence.proxy.async``) since writing it."""
        bad = sh.unfenced[o.ravel()]
        if self.check_races and np.any(bad):
            i = int(o.ravel()[bad][0])
            self.fail(f"{reader} reads shared {mem.name}[{i}], which thread {int(sh.w_thread[i])} wrote without a "
                      "fence.proxy.async after it (the async proxy may not see the write)", RaceError)

    def track_write(self, sh: _Shared, mem: Mem, t: np.ndarray, o: np.ndarray, by_threads: bool = True) -> None:
        """Race checks of a write by threads ``t`` (``by_threads=False``: a TMA copy they issued, which mbarriers
        order rather than the threads' synchronization)."""
        tt = np.broadcast_to(t[:, None], o.shape).ravel()
        oo = o.ravel()
        if np.any(sh.pending[oo]):
            self.fail(f"write of shared {mem.name}[{int(oo[sh.pending[oo]][0])}] while an asynchronous copy "
                      "(cp.async or TMA) to it is in flight", RaceError)
        if np.any(sh.wgmma_reads[oo]):
            self.fail(f"write of shared {mem.name}[{int(oo[sh.wgmma_reads[oo] > 0][0])}] while a wgmma reading it "
                      "is in flight (a missing wgmma.wait_group)", RaceError)
        if np.any(sh.bulk_reads[oo]):
            self.fail(f"write of shared {mem.name}[{int(oo[sh.bulk_reads[oo] > 0][0])}] while a TMA store may still "
                      "read it (a missing cp.async.bulk.wait_group.read by its issuing thread)", RaceError)
        if not self.check_races:
            return
        if by_threads:
            self.unsynced[t] = 1
        sh.unfenced[oo] = by_threads  # a thread's store is in the generic proxy; a TMA copy's in the async one
        order = np.argsort(oo, kind="stable")
        so, st = oo[order], tt[order]
        dup = (so[1:] == so[:-1]) & (st[1:] != st[:-1])
        if np.any(dup):
            self.fail(f"race on shared {mem.name}[{int(so[1:][dup][0])}]: two threads write it at once", RaceError)
        ww = (sh.w_epoch[oo] == self.epoch) & (sh.w_thread[oo] != tt)
        rr = (sh.r_epoch[oo] == self.epoch) & (sh.r_thread[oo] != tt) & (sh.r_thread[oo] != -1)
        for clash, what in ((ww, "wrote"), (rr, "read")):
            if np.any(clash):
                i = int(np.argmax(clash))
                other = sh.w_thread[oo[i]] if what == "wrote" else sh.r_thread[oo[i]]
                who = "several threads" if other == -2 else f"thread {int(other)}"
                self.fail(f"race on shared {mem.name}[{int(oo[i])}]: thread {int(tt[i])} writes what {who} "
                          f"{what} with no barrier between", RaceError)
        sh.w_thread[oo] = tt
        sh.w_epoch[oo] = self.epoch

    # --------------------------------------------------------------------------------------------- expressions

    def eval(self, e: Any, env: dict, mask: np.ndarray | None) -> Any:  # noqa: C901
        if isinstance(e, Const):
            return typed(e.value, e.dtype)
        if isinstance(e, Var):
            try:
                return env[e]
            except KeyError:
                raise TilecError(f"thread IR variable {e.name!r} is used before it is declared", self.loc) from None
        if isinstance(e, MemRef):
            m = np.ones(self.T, bool) if mask is None else mask
            vals = self.read(e.mem, self.eval(e.offset, env, mask), e.lanes, m)
            return vals[:, 0] if e.lanes == 1 else vals
        if isinstance(e, BinOp):
            a = self.eval(e.a, env, mask)
            if e.op in ("and", "or") and np.ndim(a) == 0 and bool(a) == (e.op == "or"):
                return typed(a, e.dtype)  # C's && and || do not evaluate the right side
            b = self.eval(e.b, env, mask)
            if e.a.dtype.is_float and e.a.dtype.bits < 32 and e.op not in ("and", "or"):
                a, b = a.astype(np.float32), b.astype(np.float32)
            if e.op in ("//", "%") and e.a.dtype.is_int:
                b = np.where(b == 0, 1, b)
            return typed(_BIN[e.op](a, b), e.dtype)
        if isinstance(e, Cast):
            return typed(self.eval(e.value, env, mask), e.dtype)
        if isinstance(e, Table):
            return typed(e.at(self.eval(e.index, env, mask)), e.dtype)
        if isinstance(e, Select):  # C's ?: reads memory only on the side it takes (a tensor may have no elements)
            c = self.eval(e.cond, env, mask)
            if np.ndim(c) == 0:
                return typed(self.eval(e.a if c else e.b, env, mask), e.dtype)
            if np.ndim(c) != 1:
                return typed(np.where(c, self.eval(e.a, env, mask), self.eval(e.b, env, mask)), e.dtype)
            m = np.ones(self.T, bool) if mask is None else mask
            c = np.asarray(c, bool)
            return typed(np.where(c, self.eval(e.a, env, m & c), self.eval(e.b, env, m & ~c)), e.dtype)
        if isinstance(e, UnOp):
            x = self.eval(e.a, env, mask)
            if e.op == "not":
                return np.logical_not(x)
            if e.op == "~":
                return np.invert(x)
            return typed(np.negative(x.astype(np.float32) if e.dtype.is_float and e.dtype.bits < 32 else x), e.dtype)
        if isinstance(e, Call):
            args = [self.eval(a, env, mask) for a in e.args]
            if e.args[0].dtype.is_float and e.args[0].dtype.bits < 32:
                args = [a.astype(np.float32) for a in args]
            return typed(_CALL[e.name](*args), e.dtype)
        if isinstance(e, TCall):
            if e.name == "cvt_tf32":  # cvt.rna.tf32.f32: a value of this thread, no other lane's
                return round_tf32(np.asarray(self.eval(e.args[0], env, mask), np.float32))
            return self.shuffle(e, env, mask)
        if isinstance(e, VecPack):
            return np.stack([np.broadcast_to(self.eval(v, env, mask), (self.T,)) for v in e.values], axis=1)
        if isinstance(e, Bits):
            narrow = np.stack([np.broadcast_to(typed(self.eval(v, env, mask), v.dtype), (self.T,)) for v in e.values],
                              axis=1)
            return np.ascontiguousarray(narrow).view(e.dtype.np)[:, 0]
        raise TypeError(f"the thread interpreter cannot evaluate {type(e).__name__}")

    def shuffle(self, e: TCall, env: dict, mask: np.ndarray | None) -> np.ndarray:
        W = self.W
        value = np.broadcast_to(self.eval(e.args[0], env, mask), (self.T,))
        arg = np.broadcast_to(np.asarray(self.eval(e.args[1], env, mask), np.int64), (self.T,))
        width = int(self.eval(e.args[2], env, mask)) if len(e.args) > 2 else W
        if width > W or W % width:
            self.fail(f"{e.name} of width {width} on {W}-lane warps")
        wave = self.tids // W  # a block of fewer threads than a warp (32 on AMD) has one partial warp
        if mask is not None:
            active = np.bincount(wave, weights=mask, minlength=int(wave[-1]) + 1)
            if not np.all((active == 0) | (active == np.bincount(wave))):
                self.fail(f"{e.name} reached by only part of a warp (all {W} lanes must execute it)", RaceError)
        lane = self.tids % W
        seg = (lane // width) * width
        if e.name == "shfl_xor":
            src_lane = seg + ((lane % width) ^ arg) % width
        elif e.name == "shfl_idx":
            src_lane = seg + arg % width
        elif e.name == "shfl_down":
            src_lane = np.where(lane % width + arg < width, lane + arg, lane)
        else:
            raise TypeError(f"unknown value intrinsic {e.name}")
        src = wave * W + src_lane
        if (src >= self.T).any():
            self.fail(f"{e.name} reads lane {int(src[src >= self.T][0]) % W} of a warp whose block has only "
                      f"{self.T} threads (that lane does not exist)")
        return value[src]


def _poison(shape: tuple[int, ...], m: Mem) -> np.ndarray:
    if m.dtype.is_float:
        return np.full(shape, np.nan, m.dtype.np)
    return np.zeros(shape, m.dtype.np)


# ------------------------------------------------------------------------------------------- statement rules


@stmt_rule(Seq)
def _seq(it: ThreadInterpreter, s: Seq, env: dict, mask: np.ndarray) -> None:
    for c in s.stmts:
        it.exec(c, env, mask)


@stmt_rule(Group)
def _group(it: ThreadInterpreter, s: Group, env: dict, mask: np.ndarray) -> None:
    it.exec(s.body, env, mask)


@stmt_rule(Comment)
def _comment(it: ThreadInterpreter, s: Comment, env: dict, mask: np.ndarray) -> None:
    pass


@stmt_rule(Decl)
def _decl(it: ThreadInterpreter, s: Decl, env: dict, mask: np.ndarray) -> None:
    env[s.var] = it.eval(s.value, env, mask)


@stmt_rule(Loop)
def _loop(it: ThreadInterpreter, s: Loop, env: dict, mask: np.ndarray) -> None:
    ext = np.asarray(it.eval(s.extent, env, mask))
    uniform = ext.ndim == 0 or np.all(ext[mask] == ext[mask][0]) if np.any(mask) else True
    top = int(ext if ext.ndim == 0 else (np.max(ext[mask]) if np.any(mask) else 0))
    if uniform and top > 1 and not it.batched and (plan := _batch.plan_of(it, s)) is not None:
        if _batch.run_batched(it, s, plan, env, mask, top):  # independent trips, run at once
            return
    for i in range(top):
        env[s.var] = np.asarray(i, np.int32)
        it.exec(s.body, env, mask if uniform else mask & (i < ext))


@stmt_rule(If)
def _if(it: ThreadInterpreter, s: If, env: dict, mask: np.ndarray) -> None:
    c = np.broadcast_to(np.asarray(it.eval(s.cond, env, mask), bool), (it.T,))
    then = mask & c
    if np.any(then):
        it.exec(s.then_body, env, then)
    if s.else_body is not None:
        other = mask & ~c
        if np.any(other):
            it.exec(s.else_body, env, other)


@stmt_rule(Write)
def _write(it: ThreadInterpreter, s: Write, env: dict, mask: np.ndarray) -> None:
    off = it.eval(s.offset, env, mask)
    v = it.eval(s.value, env, mask)
    v = np.broadcast_to(np.asarray(v), (it.T,))[:, None] if s.lanes == 1 else v
    if isinstance(s.value, VecPack) and s.value.dtype is not s.mem.dtype:  # words holding the elements' bits
        v = np.ascontiguousarray(typed(v, s.value.dtype)).view(s.mem.dtype.np)
    it.write(s.mem, off, v, s.lanes, mask)


@stmt_rule(Sync)
def _sync(it: ThreadInterpreter, s: Sync, env: dict, mask: np.ndarray) -> None:
    need = it.T if s.threads is None else s.threads
    from tilec.interp.tma import in_copy

    blocked = [i for i, (waited, arrived, _, paired) in it.named.items() if paired and waited > arrived]
    if blocked and not in_copy(it):  # (a copy of the consumers meets its own threads while another waits its turn)
        it.fail(f"a barrier of {need} threads while threads wait on named barrier {blocked[0]} for arrivals that "
                "come after it (a warpgroup holding its turn meets a barrier: a deadlock on the GPU)", RaceError)
    first = 0 if s.copy is None else int(np.argmax(mask)) // need * need  # a copy's: its own threads
    if np.count_nonzero(mask) != need or not np.all(mask[first:first + need]):
        what = "__syncthreads" if s.threads is None else f"the barrier of the first {s.threads} threads" \
            if s.copy is None else f"the barrier of a copy's {s.threads} consumer threads"
        it.fail(f"{what} reached by {int(np.count_nonzero(mask))} of {need} threads (a deadlock on the GPU)",
                RaceError)
    it.epoch += 1
    it.syncs += 1
    it.unsynced[mask] = 0


@stmt_rule(SyncWarp)
def _sync_warp(it: ThreadInterpreter, s: SyncWarp, env: dict, mask: np.ndarray) -> None:
    warps = mask.reshape(-1, it.W)
    if np.any(warps.any(axis=1) & ~warps.all(axis=1)):
        it.fail("__syncwarp reached by only part of a warp (a deadlock on the GPU)", RaceError)
    it.unsynced[mask & (it.unsynced == 1)] = 2


@stmt_rule(AtomicAddOp)
def _atomic(it: ThreadInterpreter, s: AtomicAddOp, env: dict, mask: np.ndarray) -> None:
    off = np.broadcast_to(np.asarray(it.eval(s.offset, env, mask), np.int64), (it.T,))[mask]
    val = np.broadcast_to(np.asarray(it.eval(s.value, env, mask)), (it.T,))[mask]
    data = it.globals_[s.mem] if s.mem.space == "global" else it.shared[s.mem].data
    if off.size and (off.min() < 0 or off.max() >= data.size):
        it.fail(f"atomic add on {s.mem.name} outside its {data.size} elements")
    add_at(data, (off,), val)


@stmt_rule(PrintOp)
def _print(it: ThreadInterpreter, s: PrintOp, env: dict, mask: np.ndarray) -> None:
    vals = [np.broadcast_to(np.asarray(it.eval(a, env, mask)), (it.T,)) for a in s.args]
    fmt = _PRINTF_LLD.sub(lambda m: "%%" if m.group(1) == "%" else "%d", s.fmt)  # C's printf format in Python's
    for t in np.flatnonzero(mask):
        print(fmt % tuple(v[t].item() if hasattr(v[t], "item") else v[t] for v in vals))


_PRINTF_LLD = re.compile(r"%(%|lld|llu)")


def uniform_offset(it: ThreadInterpreter, e: Any, env: dict, mask: np.ndarray, what: str) -> int:
    """A register offset, which must be the same on every thread."""
    v = np.asarray(it.eval(e, env, mask))
    if v.ndim and not np.all(v[mask] == v[mask][0]):
        it.fail(f"{what}: register offset differs between threads")
    return int(v if v.ndim == 0 else v[mask][0])


def full_warps(it: ThreadInterpreter, mask: np.ndarray, what: str, lanes: int = 32) -> np.ndarray:
    """Which ``lanes``-lane warps execute a warp-wide instruction (a partly active warp is an error)."""
    per_warp = mask.reshape(-1, lanes)
    full, any_ = per_warp.all(axis=1), per_warp.any(axis=1)
    if np.any(any_ & ~full):
        it.fail(f"{what} reached by only part of a warp (all {lanes} lanes must execute it)", RaceError)
    return full


from tilec.interp import batch as _batch  # noqa: E402
from tilec.interp import cluster as _cluster  # noqa: E402, F401 - registers the cluster barrier rule
from tilec.interp import cp_async as _cp_async  # noqa: E402, F401 - registers the cp.async rules
from tilec.interp import flags as _flags  # noqa: E402, F401 - registers the flag rules (stream-K)
from tilec.interp import mfma as _mfma  # noqa: E402, F401 - registers the MFMA rule (it imports this module)
from tilec.interp import mma as _mma  # noqa: E402, F401 - registers the mma.sync and ldmatrix rules
from tilec.interp import tma as _tma  # noqa: E402, F401 - registers the TMA and mbarrier rules
from tilec.interp import wgmma as _wgmma  # noqa: E402, F401 - registers the wgmma rules
