"""Copies between a fragment and shared or global memory in vectors.

When every thread's registers come in runs of ``V`` elements that sit next to each other along the tile's
last dimension (an mma accumulator's pairs, a spread layout's 16-byte runs), each run moves as one access of
``V`` elements: loads and stores to shared memory go through a small register staging array (memory → staging →
registers with the dtype conversion, or the reverse); a store to global memory writes the converted values as one
vector (:class:`~tilec.lower.tir.VecPack`). Which form is used where is empirical: ptxas serializes wgmma pipelines
(C7514) for a persistent kernel's global stores through the staging array, and for shared stores of packed vectors
(perf notes P). Otherwise :mod:`tilec.lower.ops` copies element by element.

Where ``G`` neighbouring threads hold neighbouring runs (an mma accumulator's quad: 4 threads, a pair of elements
each, 8 consecutive columns), a global store exchanges them first (pass config ``store_exchange``): each thread takes
``G`` runs, the threads of a group transpose them among themselves by ``log2 G`` rounds of ``shfl_xor`` (the runs'
bits as 32-bit words, :class:`~tilec.lower.tir.Bits`), and each stores ``G`` runs in one access: 16 bytes instead
of 4 for float16 accumulators, a quarter of the store instructions (perf notes AP).
"""

from __future__ import annotations

import numpy as np

from tilec import dtypes as dt
from tilec.ir.buffer import Region
from tilec.ir.expr import Expr, Var, binop, cast, const, select
from tilec.layout import FloorMod, Fragment
from tilec.lower.context import Lowerer
from tilec.lower.layouts import inverse_table
from tilec.lower.symbolic import to_ir
from tilec.lower.tir import Bits, Decl, If, MemRef, TCall, TStmt, VecPack, Write, seq


def _run_length(frag: Fragment, table: np.ndarray, max_v: int) -> int:
    """The largest V (a power of two, <= max_v, dividing the locals) with locals ``g*V + r`` at consecutive
    positions of the last dimension, the other coordinates (and the replica) fixed, on every thread."""
    L, nd = frag.num_locals, frag.ndim
    v = max_v
    while v > 1:
        if L % v == 0:
            runs = table.reshape(table.shape[0], L // v, v, table.shape[2])
            first = runs[:, :, :1, :]
            step = np.zeros(table.shape[2], np.int64)
            step[nd - 1] = 1
            want = first + np.arange(v)[None, None, :, None] * step
            if np.array_equal(runs, want) and np.all(first[..., nd - 1] % v == 0):
                return v
        v //= 2
    return 1


def vector_fragment_copy(lw: Lowerer, frag_region: Region, other: Region, to_fragment: bool) -> TStmt | None:
    """The copy ``other -> fragment`` (``to_fragment``) or ``fragment -> other`` in vectors, or None when the
    layouts or the alignment do not allow it. A part of the fragment (static bounds) moves the runs inside it,
    when which runs those are does not depend on the thread (an accumulator's column blocks)."""
    from tilec.lower.ops import _contiguous

    if other.buffer.scope not in ("global", "shared"):
        return None
    frag = lw.fragment(frag_region.buffer)
    starts = [getattr(s, "value", None) for s in frag_region.starts]
    if not frag.shape or any(not isinstance(x, int) for x in (*starts, *frag_region.extents)):
        return None
    box = tuple(zip(starts, frag_region.extents))
    # the regions' non-unit dims pair up (a (1, N) fragment and a row of an (M, N) tensor), the last with the last
    if tuple(other.squeezed_extents()) != tuple(frag_region.squeezed_extents()) or \
            (other.extents[-1] == 1) != (frag_region.extents[-1] == 1):
        return None
    bits = other.dtype.bits
    table = inverse_table(frag)
    v = _run_length(frag, table, 128 // bits)
    while v > 1 and not (_contiguous(lw, other, v) and box[-1][0] % v == 0 and box[-1][1] % v == 0):
        v //= 2
    runs = _runs_inside(table, frag, box, v) if v > 1 else None
    if runs is None:
        return None
    plan = None
    if not to_fragment and other.buffer.scope == "global":
        plan = _exchange_plan(table, frag, runs, v, bits)
        if plan is not None and not (_contiguous(lw, other, plan[0] * v) and box[-1][0] % (plan[0] * v) == 0):
            plan = None
        lw.exchangeable = lw.exchangeable or plan is not None
        plan = plan if lw.store_exchange else None
    if other.buffer.scope == "global":
        width = v * (plan[0] if plan else 1)
        lw.align[other.buffer] = max(lw.align.get(other.buffer, 1), width * bits // 8)
    if plan is not None:
        return _emit_exchanged(lw, frag, frag_region, other, v, *plan)
    return _emit(lw, frag, frag_region, other, v, to_fragment, runs)


def _runs_inside(table: np.ndarray, frag: Fragment, box: tuple[tuple[int, int], ...], v: int) -> list[int] | None:
    """The runs ``g`` (locals ``g*v ...``) inside ``box`` ((start, extent) per dimension) on every thread; None when a
    run is inside on some threads only."""
    first = table[:, ::v, : frag.ndim]  # (threads, runs, dims): each run's first element
    lo = np.array([s for s, _ in box])
    inside = np.all((first >= lo) & (first < lo + np.array([e for _, e in box])), axis=2)
    if not np.all(inside.all(axis=0) | ~inside.any(axis=0)):
        return None
    return [int(g) for g in np.flatnonzero(inside.all(axis=0))]


def _local(coords: list[Expr], fr: Region) -> list[Expr]:
    """The position of fragment element ``coords`` within the copied part ``fr``, along its non-unit dimensions (what
    :meth:`Region.index_at` of the other side takes)."""
    return [binop("-", c, s) for c, s, e in zip(coords, fr.starts, fr.extents) if not (isinstance(e, int) and e == 1)]


def _emit(lw: Lowerer, frag: Fragment, fr: Region, other: Region, v: int, to_fragment: bool,
          runs: list[int]) -> TStmt:
    inv = frag.inverse()
    fmem, omem = lw.mem_of(fr.buffer), lw.mem_of(other.buffer)
    # loads and shared stores go through a small staging array, global stores write their values as one vector:
    # the combination with which ptxas keeps wgmma pipelines whole (C7514) in every kernel we compile (perf notes P)
    packed = not to_fragment and other.buffer.scope == "global"
    stage = None if packed else lw.scratch_reg("vec", other.dtype, v)
    lw.ranges[lw.tx] = (0, lw.T - 1)
    out: list[TStmt] = []
    for g in runs:
        env = {inv.symbols[0]: lw.tx, inv.symbols[1]: const(g * v)}
        coords = [to_ir(e, env) for e in inv.exprs]
        idx = other.index_at(_local(coords, fr))
        pred = lw.in_bounds(other.buffer, idx) if other.buffer.scope == "global" else None
        off = lw.global_offset(other.buffer, idx) if other.buffer.scope == "global" else \
            lw.shared_offset(other.buffer, idx)
        if to_fragment:
            load: TStmt = Write(stage, const(0), MemRef(omem, select(pred, off, 0) if pred is not None else off, v),
                                lanes=v)
            if pred is not None:
                load = If(pred, load, Write(stage, const(0), cast(other.dtype, 0), lanes=v))
            out.append(load)
            out += [Write(fmem, const(g * v + r), cast(fr.dtype, MemRef(stage, const(r)))) for r in range(v)]
        else:
            vals = [cast(other.dtype, MemRef(fmem, const(g * v + r))) for r in range(v)]
            if packed:
                store: TStmt = Write(omem, off, VecPack(tuple(vals), other.dtype), lanes=v)
            else:
                out += [Write(stage, const(r), x) for r, x in enumerate(vals)]
                store = Write(omem, off, MemRef(stage, const(0), v), lanes=v)
            cond: Expr | None = pred
            if frag.replicate > 1:
                rep0 = binop("==", coords[frag.ndim], 0)
                cond = rep0 if cond is None else binop("and", cond, rep0)
            out.append(store if cond is None else If(cond, store))
    return seq(out)


def _exchange_plan(table: np.ndarray, frag: Fragment, runs: list[int], v: int,
                   bits: int) -> tuple[int, list[tuple[int, ...]]] | None:
    """(G, blocks of G runs) for a store whose groups of G threads exchange their runs (the largest G, at most 16
    bytes a store), or None. It needs: every thread's run ``g`` right after its group's previous thread's (along the
    last dimension, G runs per group aligned to G), and the runs split into blocks of G that lie one after another
    along the last dimension, so that the thread at place ``p`` of its group stores the ``p``-th run of the block's
    ``G * v`` elements."""
    if frag.replicate > 1 or bits > 32 or v * bits % 32:
        return None
    nd = frag.ndim
    first = table[:, ::v, :nd].astype(np.int64)  # (threads, runs, dims): each run's first element
    T = first.shape[0]
    step = np.zeros(nd, np.int64)
    step[-1] = v
    for G in (4, 2):
        if G * v * bits > 128 or T % G or len(runs) % G:
            continue
        lane = np.arange(T) % G
        head = first[np.arange(T) - lane]  # the same runs on the group's first thread
        if not np.array_equal(first, head + lane[:, None, None] * step) or np.any(head[:, runs, -1] % (G * v)):
            continue
        order = sorted(runs, key=lambda g: tuple(first[0, g]))
        blocks = [tuple(order[i:i + G]) for i in range(0, len(order), G)]
        if all(np.array_equal(first[:, b[j]] - first[:, b[0]], np.broadcast_to(j * G * step, first[:, 0].shape))
               for b in blocks for j in range(1, G)):
            return G, blocks
    return None


def _emit_exchanged(lw: Lowerer, frag: Fragment, fr: Region, other: Region, v: int, G: int,
                    blocks: list[tuple[int, ...]]) -> TStmt:
    """The store of each block of G runs: a G x G transpose of the group's words, then one vector store a thread.

    Before round ``s`` (bit ``m = 2**s``), word slot ``i`` of the thread at place ``q`` holds the run of place
    ``q ^ (i % m)`` whose index in the block is ``q % m + i - i % m``; the round keeps the slots whose bit ``s``
    matches ``q``'s, sends the others to ``q ^ m`` and takes theirs in return. After the last, slot ``i`` holds
    place ``q ^ i``'s part of run ``q``: one select per bit puts the parts in place order."""
    inv = frag.inverse()
    fmem, omem = lw.mem_of(fr.buffer), lw.mem_of(other.buffer)
    narrow = other.dtype.bits < 32
    word = dt.uint32 if narrow else other.dtype
    per_word = 32 // other.dtype.bits
    W = v // per_word  # words a run
    lw.ranges[lw.tx] = (0, lw.T - 1)
    out: list[TStmt] = []

    def decl(name: str, value: Expr) -> Var:
        var = Var(lw.fresh(name), value.dtype)
        out.append(Decl(var, value))
        return var

    place = [decl("xq", binop("!=", binop("&", lw.tx, 1 << s), 0)) for s in range(G.bit_length() - 1)]
    for block in blocks:
        slots: list[list[Expr]] = []
        for g in block:
            vals = [cast(other.dtype, MemRef(fmem, const(g * v + r))) for r in range(v)]
            slots.append([Bits(tuple(vals[w * per_word:(w + 1) * per_word]), word) if narrow else vals[w]
                          for w in range(W)])
        for s, bit in enumerate(place):
            m = 1 << s
            for i in (i for i in range(G) if not i & m):
                for w in range(W):
                    a, b = slots[i][w], slots[i | m][w]
                    sent = TCall("shfl_xor", (select(bit, a, b), const(m), const(G)), word)
                    slots[i][w], slots[i | m][w] = decl("xk", select(bit, b, a)), decl("xr", sent)
        for s, bit in enumerate(place):  # slot i holds place q ^ i's part: put it at place i
            m = 1 << s
            slots = [[decl("xp", select(bit, slots[i ^ m][w], slots[i][w])) for w in range(W)] for i in range(G)]
        # the thread at place q stores run block[q] of its group's first thread: its own block[0] run, moved
        # along the last dimension by q * (G - 1) * v
        exprs = list(inv.exprs)
        exprs[frag.ndim - 1] += FloorMod(inv.symbols[0], G) * ((G - 1) * v)  # sympy folds it into the column
        coords = [to_ir(e, {inv.symbols[0]: lw.tx, inv.symbols[1]: const(block[0] * v)}) for e in exprs]
        idx = other.index_at(_local(coords, fr))
        store: TStmt = Write(omem, lw.global_offset(other.buffer, idx),
                             VecPack(tuple(x for part in slots for x in part), word), lanes=G * v)
        pred = lw.in_bounds(other.buffer, idx)
        out.append(store if pred is None else If(pred, store))
    return seq(out)
