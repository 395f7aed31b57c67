"""Fragment-load addresses computed on every trip of a serial loop instead of once before it (thread IR, NVIDIA
targets, pass config ``remat_addresses``, off by default: see below).

A tensor-core gemm in a loop reads its operands with unrolled ``ldmatrix`` loads, one address per (k-step, tile)
pair. With swizzled tiles each address is the thread's row and column XOR-ed together, and every one of them is
loop-invariant but for the pipeline stage, so ptxas computes them all before the loop and keeps them in
registers: 70 to 90 in flash attention's loop, which then needs 235 registers at 64x64 tiles and spills 352 bytes
at 128x64 with four warps. Reading the thread index through an opaque move (``tl::opaque``) at the top of each trip
makes those addresses loop-variant: ptxas computes each next to its load, a few integer instructions, and the
registers go to the accumulators (158 registers at 64x64, no spills at 128x32).

Fewer registers did not mean faster on an H200 (perf notes R): 64x64 flash attention 279.6 -> 244.8 TFLOP/s and the
256x128x64 mma.sync GEMM 426.6 -> 377.2 with the pass, although the loop has ~10 % fewer instructions; only the
kernels that spill without it gain (128x64 attention with four warps: 283.1). So it is opt-in.
"""

from __future__ import annotations

import dataclasses

from tilec.ir.expr import Var
from tilec.ir.visit import children, rebuild, substitute
from tilec.lower.tir import Decl, LdMatrix, Loop, Seq, TCall, ThreadKernel, TStmt
from tilec.target import Target


def remat_addresses(k: ThreadKernel, target: Target, options: dict | None = None) -> ThreadKernel:
    """``k`` with the ldmatrix addresses of each serial loop's trips recomputed in that loop (``k`` itself when it
    has none, on targets other than NVIDIA's, or without ``remat_addresses=True``)."""
    if not target.arch.startswith("sm_") or not (options or {}).get("remat_addresses", False):
        return k
    body = _stmt(k.body, k.tx)
    return k if body is k.body else dataclasses.replace(k, body=body)


def _serial(s: TStmt) -> bool:
    return isinstance(s, Loop) and not s.unroll


def _stmt(s: TStmt, tx: Var) -> TStmt:
    s = rebuild(s, lambda c: _stmt(c, tx) if isinstance(c, TStmt) else c)  # inner serial loops first
    if not _serial(s):
        return s
    loads = {id(n) for n in _direct_loads(s.body)}  # the loads no inner serial loop took
    if not loads:
        return s
    trip_tx = Var(f"{tx.name}_trip", tx.dtype)
    body = _retarget(s.body, loads, {tx: trip_tx})
    return dataclasses.replace(s, body=Seq((Decl(trip_tx, TCall("opaque", (tx,), tx.dtype), loc=s.loc), body)))


def _direct_loads(s: TStmt) -> list[LdMatrix]:
    if isinstance(s, LdMatrix):
        return [s]
    if _serial(s):
        return []
    return [n for c in children(s) if isinstance(c, TStmt) for n in _direct_loads(c)]


def _retarget(s: TStmt, loads: set[int], mapping: dict) -> TStmt:
    if id(s) in loads:
        return dataclasses.replace(s, src_off=substitute(s.src_off, mapping))
    if _serial(s):
        return s
    return rebuild(s, lambda c: _retarget(c, loads, mapping) if isinstance(c, TStmt) else c)
