"""Emulation of ``cp.async`` for the thread interpreter (:mod:`.thread`): a copy's data lands in shared memory at
the ``cp.async.wait_group`` that retires its group, and shared memory it has not landed in yet reads as pending (an
error naming the buffer)."""

from __future__ import annotations

import numpy as np

from tilec.interp.thread import ThreadInterpreter, stmt_rule
from tilec.lower.tir import CpAsync, CpAsyncCommit, CpAsyncWait


@stmt_rule(CpAsync)
def _cp_async(it: ThreadInterpreter, s: CpAsync, env: dict, mask: np.ndarray) -> None:
    lanes = s.nbytes * 8 // s.dst.dtype.bits
    pred = mask if s.pred is None else mask & np.broadcast_to(np.asarray(it.eval(s.pred, env, mask), bool), (it.T,))
    dst_off = np.broadcast_to(np.asarray(it.eval(s.dst_off, env, mask), np.int64), (it.T,))
    it.check_aligned(s.dst, dst_off[mask], lanes, "cp.async")
    vals = it.read(s.src, it.eval(s.src_off, env, mask), lanes, pred)
    vals[~pred] = 0
    t, o = it.lanes_offsets(it.eval(s.dst_off, env, mask), lanes, mask)
    sh = it.shared[s.dst]
    if o.size and (o.min() < 0 or o.max() >= sh.data.size):
        it.fail(f"cp.async writes {s.dst.name} outside its {sh.data.size} elements")
    it.track_write(sh, s.dst, t, o)
    sh.pending[o.ravel()] = True
    it.groups[-1].append((s.dst, t, o, vals[mask]))


@stmt_rule(CpAsyncCommit)
def _commit(it: ThreadInterpreter, s: CpAsyncCommit, env: dict, mask: np.ndarray) -> None:
    it.groups.append([])


@stmt_rule(CpAsyncWait)
def _wait(it: ThreadInterpreter, s: CpAsyncWait, env: dict, mask: np.ndarray) -> None:
    committed = it.groups[:-1]
    done = committed[: max(len(committed) - s.n, 0)]
    for group in done:
        for mem, t, o, vals in group:
            sh = it.shared[mem]
            sh.pending[o.ravel()] = False
            it.track_write(sh, mem, t, o)  # the data becomes visible now, written by the issuing thread
            sh.data[o.ravel()] = vals.ravel().astype(sh.data.dtype)
    it.groups = committed[len(done) :] + [it.groups[-1]]
