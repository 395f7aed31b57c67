"""Emulation of ``wgmma.mma_async.m64nNk16`` (f16/bf16 → f32), ``m64nNk32`` (e4m3/e5m2 → f32) and ``m64nNk8``
(tf32 → f32: float32 operands with their low 13 mantissa bits ignored) for the thread interpreter.

Written from the PTX ISA's text, independently of :mod:`tilec.layout` and of the lowering:

* shared-memory operands in the canonical layouts of the descriptor: K-major, element (row, k) at byte
  ``start + (row % 8) S + (row // 8) SBO + k e``; N-major (B stored K x N), element (k, n) at byte
  ``start + (k % 8) S + (k // 8) SBO + (n % (S / e)) e + (n // (S / e)) LBO`` (S the swizzle width, e the element
  bytes); then the swizzle XORs byte-address bits [4, 4 + log2(S/16)) with bits [7, ...) — the mems start on 1024-byte
  boundaries, so offsets from a mem's start swizzle as absolute addresses do;
* A in registers: each warp w of the warpgroup holds rows 16w..16w+15 in the mma.m16n8k16 A layout;
* D: thread ``t`` of the warpgroup, register ``i``: row ``16 (t // 32) + (t % 32) // 4 + 8 ((i % 4) // 2)``,
  column ``8 (i // 4) + 2 (t % 4) + i % 2``.

The emulation computes D at issue but keeps the asynchrony's hazards: until the ``wgmma.wait_group`` that retires
its group, a wgmma's shared operand elements may not be written (by any thread: stores, cp.async), its accumulator
registers may not be read or written by other instructions (a later wgmma chaining on them may) and its register A
operand may not be overwritten; a kernel may not end with a group in flight. A shared operand element a thread
wrote must have been fenced to the async proxy by that thread (``fence.proxy.async``); ``wgmma.fence``, which
orders register accesses only, is a no-op here.
"""

from __future__ import annotations

import functools

import numpy as np

from tilec.dtypes import float32, truncate_tf32, typed
from tilec.errors import RaceError
from tilec.interp.mma import MMA_M16N8K16
from tilec.interp.thread import ThreadInterpreter, full_warps, stmt_rule, uniform_offset
from tilec.lower.tir import FenceProxyAsync, Mem, Wgmma, WgmmaCommit, WgmmaFence, WgmmaOperand, WgmmaWait

GROUP = 128


@functools.cache
def _d_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(thread in the warpgroup, register) of every element of the 64 x n accumulator (read-only: shared by every
    wgmma of that width)."""
    thread, reg = np.zeros((64, n), int), np.zeros((64, n), int)
    for t in range(GROUP):
        for i in range(n // 2):
            row = 16 * (t // 32) + (t % 32) // 4 + 8 * ((i % 4) // 2)
            col = 8 * (i // 4) + 2 * (t % 4) + i % 2
            thread[row, col], reg[row, col] = t, i
    thread.flags.writeable = reg.flags.writeable = False
    return thread, reg


def _gather(it: ThreadInterpreter, op: WgmmaOperand, start: int, rows: int, cols: int,
            is_b: bool) -> tuple[np.ndarray, np.ndarray]:
    """The ``rows x cols`` operand matrix (A: M x K; B: K x N) the descriptor describes, and its elements' indices
    in the mem."""
    sh = it.shared[op.mem]
    eb = op.mem.dtype.bits // 8
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    if not op.k_major:  # N-major B: r is k, c is n
        per = op.swizzle // eb
        byte = start + (r % 8) * op.swizzle + (r // 8) * op.sbo + (c % per) * eb + (c // per) * op.lbo
    elif is_b:  # K-major B (stored N x K): element (k = r, n = c) sits in row n
        byte = start + (c % 8) * op.swizzle + (c // 8) * op.sbo + r * eb
    else:  # K-major A: element (m = r, k = c)
        byte = start + (r % 8) * op.swizzle + (r // 8) * op.sbo + c * eb
    mask = op.swizzle // 16 - 1
    byte = byte ^ (((byte >> 7) & mask) << 4)
    idx = byte // eb
    if idx.min() < 0 or idx.max() >= sh.data.size or np.any(byte % eb):
        it.fail(f"wgmma operand in {op.mem.name} outside its {sh.data.size} elements or misaligned")
    if np.any(sh.pending[idx]):
        it.fail(f"wgmma reads {op.mem.name} before the asynchronous copy writing it has landed", RaceError)
    vals = sh.data[idx].astype(np.float32)
    return (truncate_tf32(vals) if op.mem.dtype is float32 else vals), idx  # .tf32: the low 13 bits unread


@stmt_rule(Wgmma)
def _wgmma(it: ThreadInterpreter, s: Wgmma, env: dict, mask: np.ndarray) -> None:
    warps = full_warps(it, mask, "wgmma")
    groups = warps.reshape(-1, 4)
    if np.any(groups.any(axis=1) & ~groups.all(axis=1)):
        it.fail("wgmma reached by only part of a warpgroup (all 128 threads must execute it)")
    c_off = uniform_offset(it, s.c_off, env, mask, "wgmma")
    d_thread, d_reg = _d_tables(s.n)
    reads: list[tuple[Mem, np.ndarray]] = []
    for g in np.flatnonzero(groups.all(axis=1)):
        base = g * GROUP
        ka = 256 // s.dtype.bits  # the instruction's K: 16 (16-bit types), 32 (fp8) or 8 (TF32)
        if s.a is not None:
            a, idx = _gather(it, s.a, _start(it, s.a, env, mask, base), 64, ka, False)
            reads.append((s.a.mem, idx))
        else:
            a = _register_a(it, s, env, mask, base)
        b, idx = _gather(it, s.b, _start(it, s.b, env, mask, base), ka, s.n, True)
        reads.append((s.b.mem, idx))
        for mem, i in reads[-2 if s.a is not None else -1:]:  # race checks: the warpgroup (its first thread) reads
            it.track_read(it.shared[mem], mem, np.array([base]), i.reshape(1, -1))
            it.check_fenced(it.shared[mem], mem, i, "a wgmma")
        regs = it.regs[s.c]
        acc = regs[base + d_thread, c_off + d_reg].astype(np.float32) + a @ b
        regs[base + d_thread, c_off + d_reg] = typed(acc, s.c.dtype)
    held = [(s.c, range(c_off, c_off + s.n // 2), 2)]
    if s.a_regs is not None:
        a_off = uniform_offset(it, s.a_off, env, mask, "wgmma")
        held.append((s.a_regs, range(a_off, a_off + 8), 1))
    it.wgmma_groups[-1].append((reads, held))
    _count_reads(it, reads, +1)
    _hold_registers(it)


def _count_reads(it: ThreadInterpreter, reads: list[tuple[Mem, np.ndarray]], step: int) -> None:
    """One more (+1) or one fewer (-1) in-flight wgmma reads each of these shared elements."""
    for mem, idx in reads:
        np.add.at(it.shared[mem].wgmma_reads, idx.ravel(), step)


def _hold_registers(it: ThreadInterpreter) -> None:
    """The register states of the wgmmas in flight: 2 for accumulators, 1 for register A operands."""
    it.wgmma_regs = {}
    for group in it.wgmma_groups:
        for _, held in group:
            for mem, cols, state in held:
                arr = it.wgmma_regs.setdefault(mem, np.zeros(int(mem.size), np.int8))
                arr[cols.start: cols.stop] = np.maximum(arr[cols.start: cols.stop], state)


def _start(it: ThreadInterpreter, op: WgmmaOperand, env: dict, mask: np.ndarray, base: int) -> int:
    v = np.broadcast_to(np.asarray(it.eval(op.byte_off, env, mask), np.int64), (it.T,))[base: base + GROUP]
    if not np.all(v == v[0]):
        it.fail(f"wgmma descriptor of {op.mem.name} differs between the threads of a warpgroup")
    return int(v[0])


def _register_a(it: ThreadInterpreter, s: Wgmma, env: dict, mask: np.ndarray, base: int) -> np.ndarray:
    a_lane, a_reg = MMA_M16N8K16[0], MMA_M16N8K16[1]
    off = uniform_offset(it, s.a_off, env, mask, "wgmma")
    regs = it.regs[s.a_regs]
    a = np.zeros((64, 16), np.float32)
    for w in range(4):
        a[16 * w: 16 * w + 16] = regs[base + 32 * w + a_lane, off + a_reg]
    return a


@stmt_rule(WgmmaCommit)
def _commit(it: ThreadInterpreter, s: WgmmaCommit, env: dict, mask: np.ndarray) -> None:
    it.wgmma_groups.append([])


@stmt_rule(WgmmaWait)
def _wait(it: ThreadInterpreter, s: WgmmaWait, env: dict, mask: np.ndarray) -> None:
    """Retire every committed group but the newest ``n``."""
    committed = it.wgmma_groups[:-1]
    done = committed[: max(len(committed) - s.n, 0)]
    it.wgmma_groups = committed[len(done):] + [it.wgmma_groups[-1]]
    for group in done:
        for reads, _ in group:
            _count_reads(it, reads, -1)
    _hold_registers(it)


@stmt_rule(WgmmaFence)
def _fence_registers(it: ThreadInterpreter, s: WgmmaFence, env: dict, mask: np.ndarray) -> None:
    """Orders register accesses around wgmma (not modelled: the interpreter computes a wgmma at issue). It is no
    proxy fence: the PTX ISA asks for fence.proxy.async between writes to shared-memory matrices and wgmma's reads
    of them."""


@stmt_rule(FenceProxyAsync)
def _fence_proxy(it: ThreadInterpreter, s: FenceProxyAsync, env: dict, mask: np.ndarray) -> None:
    """The fencing threads' shared-memory writes become visible to the async proxy."""
    fencing = it.tids[mask]
    for sh in it.shared.values():
        sh.unfenced &= ~np.isin(sh.w_thread, fencing)
