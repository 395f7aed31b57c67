"""Lowering of ``T.reduce_*``.

From a fragment: each thread folds the elements it holds into its part of the result (straight-line code,
registers known at compile time), then the threads holding one result element combine their partials with
XOR shuffles over the lane bits that tell them apart (the bits below the warp size: 32 lanes on NVIDIA, 64 on
AMD wavefronts), and, when they sit in several warps, through a shared scratch buffer; where shuffles cannot
combine them (the holders keep a line's elements in different registers, or are no XOR pattern of thread ids), the
fragment is copied to a shared scratch tile and reduced from there. From shared memory: the
threads holding each result element loop over the reduced dimension. Which threads and registers take part is
worked out by enumerating the layouts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tilec import dtypes as dt
from tilec.errors import TilecError, where
from tilec.ir.expr import Expr, Var, binop, call, cast, const, select
from tilec.ir.stmt import Reduce
from tilec.layout import Fragment
from tilec.lower.context import Lowerer, lower_rule
from tilec.lower.layouts import inverse_table
from tilec.lower.ops import private_operand
from tilec.lower.symbolic import to_ir
from tilec.lower.tir import If, Loop, MemRef, Sync, TCall, TStmt, Write, seq

_COMBINE = {"sum": "+", "abssum": "+", "max": "max", "absmax": "max", "min": "min"}


def _init(red: str, d: dt.DType) -> Expr:
    if red in ("sum", "abssum", "absmax"):
        return const(0, d)
    if d.is_float:
        return const(-math.inf if red == "max" else math.inf, d)
    info = np.iinfo(d.np)
    return const(int(info.min if red == "max" else info.max), d)


def _fold(red: str, acc: Expr, x: Expr) -> Expr:
    if red in ("abssum", "absmax"):
        x = call("abs", x)
    return binop(_COMBINE[red], acc, x)


# a thread folds its elements of one result in this many interleaved chains, combined at the end; one, because four
# (perf notes BA) measured no faster in flash attention (an H100: -1.6 % on average over eight rows, -8.9 to +4.2 %)
CHAINS = 1


def _chains(red: str, terms: list[Expr], work: dt.DType) -> Expr:
    """The fold of ``terms`` as ``CHAINS`` independent chains (terms ``c, c + CHAINS, ...``) combined pairwise: the
    same operations as one chain, in a dependent sequence ``CHAINS`` times shorter (a 32-element row max in four
    chains: 8 + 2 steps instead of 32), which is what a warp waits on before it can use the result. Sums are added
    in another order (no less accurate: each chain holds a share of the terms)."""
    if not terms:
        return _init(red, work)
    parts = []
    for c in range(min(CHAINS, len(terms))):
        e = call("abs", terms[c]) if red in ("abssum", "absmax") else terms[c]
        for t in terms[c + CHAINS :: CHAINS]:
            e = _fold(red, e, t)
        parts.append(e)
    while len(parts) > 1:
        parts = [binop(_COMBINE[red], parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return parts[0]


# a thread's fold of more terms than this is written as several statements, each adding the next terms to the
# partial: the emitters and the thread interpreter recurse over an expression, and one chain of 1000 terms (a 1 x 1000
# fragment every thread holds whole) raised RecursionError; the terms are folded in the same order
FOLD_TERMS = 256


def _fold_into(acc: Any, dl: int, red: str, terms: list[Expr], work: dt.DType) -> list[TStmt]:
    """Writes of register ``dl`` of ``acc``: the fold of ``terms`` (:func:`_chains`), in pieces of ``FOLD_TERMS``."""
    out: list[TStmt] = [Write(acc, const(dl), _chains(red, terms[:FOLD_TERMS], work))]
    for start in range(FOLD_TERMS, len(terms), FOLD_TERMS):
        e: Expr = MemRef(acc, const(dl))
        for t in terms[start : start + FOLD_TERMS]:
            e = _fold(red, e, t)
        out.append(Write(acc, const(dl), e))
    return out


def _holders(D: Fragment) -> np.ndarray:
    threads, _ = D.eval_tables()
    return threads.reshape(-1, threads.shape[-1])


def _xor_masks(D: Fragment) -> list[int] | None:
    """The thread-id bits (as masks) that tell apart the holders of each result element; None if the holders of some
    element are not the span of such bits."""
    hold = _holders(D)
    diff = np.bitwise_or.reduce(hold ^ hold[:, :1], axis=1)
    bits = int(np.bitwise_or.reduce(diff)) if diff.size else 0
    masks = [1 << b for b in range(bits.bit_length()) if bits >> b & 1]
    want = len(masks)
    for h in hold:
        if len(set(h.tolist())) != (1 << want) or set((h ^ h[0]).tolist()) != _span(masks):
            return None  # held by threads that no XOR pattern connects
    return masks


def _span(masks: list[int]) -> set[int]:
    out = {0}
    for m in masks:
        out |= {x ^ m for x in out}
    return out


@lower_rule(Reduce)
def lower_reduce(lw: Lowerer, r: Reduce) -> TStmt:
    private_operand(r.src, r.dst, "reductions", r.loc)
    if r.src.buffer.scope != "fragment":
        return _from_memory(lw, r)
    if not r.src.is_full():
        raise TilecError("reductions of part of a fragment are not supported; reduce the whole fragment", r.loc)
    if r.dst.buffer.scope == "fragment" and not r.dst.is_full():
        raise TilecError("reductions into part of a fragment are not supported; reduce into a whole fragment (or a "
                         "shared buffer's region)", r.loc)
    from tilec.lower.layouts import needs_table, project

    F = lw.fragment(r.src.buffer)
    natural = project(F, tuple(i for i in range(F.ndim) if i != r.dim))
    if needs_table(natural):  # no formula tells which threads hold the source's lines: reduced from shared memory
        return _through_shared(lw, r)
    D = lw.fragment(r.dst.buffer) if r.dst.buffer.scope == "fragment" else natural
    if D.shape != natural.shape and D.size == natural.size:  # a result keeping unit dims: the same registers
        D = D.reshape(natural.shape)
    if not (D is natural or D.equals(natural)):
        return _converted(lw, r, natural, D)
    groups, masks = _groups(lw, F, D, r.dim), _xor_masks(D)
    dlocals = D.eval_tables()[1]  # shape + (replica,)
    if groups is None or masks is None or not (dlocals == dlocals[..., :1]).all():
        # the threads holding a result element cannot combine their partials by shuffles: their elements of its line
        # sit in different registers (a spread wrapping around mid-line), or they are no XOR pattern of thread ids
        return _through_shared(lw, r)
    work = dt.work_type(r.dst.dtype)
    acc = lw.scratch_reg("red", work, D.num_locals)
    src = lw.mem_of(r.src.buffer)
    out: list[TStmt] = []
    for dl, members in enumerate(groups):
        out += _fold_into(acc, dl, r.red, [_source(lw, F, r.red, src, sl, work) for sl in members], work)
    ws = lw.target.warp_size  # thread-id bits below it are lanes of one warp (wavefront): shuffles reach them
    for m in (m for m in masks if m < ws):
        for dl in range(D.num_locals):
            mine = MemRef(acc, const(dl))
            shfl = TCall("shfl_xor", (mine, const(m), const(ws)), work)
            out.append(Write(acc, const(dl), binop(_COMBINE[r.red], mine, shfl)))
    warp_bits = [m for m in masks if m >= ws]
    if warp_bits:
        out.append(_across_warps(lw, D, acc, warp_bits, [m for m in masks if m < ws], r.red, work))
    out.append(_store(lw, r, D, acc))
    return seq(out)


def _source(lw: Lowerer, F: Fragment, red: str, src: Any, sl: int, work: dt.DType) -> Expr:
    """Source register ``sl`` as a term of the fold. The partials of all holders of a result element are
    combined, so where the source is replicated a sum takes each element from its replica 0 only (max and
    min do not mind duplicates)."""
    x: Expr = cast(work, MemRef(src, const(sl)))
    if F.replicate == 1 or red not in ("sum", "abssum"):
        return x
    inv = F.inverse()
    rep = to_ir(inv.exprs[F.ndim], {inv.symbols[0]: lw.tx, inv.symbols[1]: const(sl)})
    return select(binop("==", rep, 0), x, _init(red, work))


def _converted(lw: Lowerer, r: Reduce, natural: Fragment, D: Fragment) -> TStmt:
    """Reduce into a scratch fragment of the natural layout, then convert it to the destination's layout."""
    import dataclasses

    from tilec.ir.buffer import Buffer
    from tilec.lower.convert import convert

    # combined with what dst holds, the scratch keeps the work type, so the result is rounded to dst's dtype once
    kept = r.dst.dtype if r.clear else dt.work_type(r.dst.dtype)
    tmp = Buffer(lw.fresh(r.dst.buffer.name), tuple(r.dst.buffer.shape), kept, "fragment")
    lw.plan.fragments[tmp] = natural
    inner = lower_reduce(lw, dataclasses.replace(r, dst=tmp.full_region(), clear=True))
    tmp_dst = lw.scratch_reg("red_out", kept, D.num_locals)
    what = f"T.reduce_{r.red} at {where(r.loc)}"
    parts = [inner, convert(lw, lw.mem_of(tmp), natural, tmp_dst, D, kept, what)]
    dmem = lw.mem_of(r.dst.buffer)
    for dl in range(D.num_locals):
        v: Expr = MemRef(tmp_dst, const(dl))
        if not r.clear:
            v = cast(r.dst.dtype, binop(_COMBINE[r.red], cast(kept, MemRef(dmem, const(dl))), v))
        parts.append(Write(dmem, const(dl), v))
    return seq(parts)


def _through_shared(lw: Lowerer, r: Reduce) -> TStmt:
    """The fragment copied to a shared scratch tile, reduced from there (each result element by the threads holding
    it)."""
    import dataclasses

    from tilec.ir.buffer import Buffer
    from tilec.ir.stmt import Copy
    from tilec.lower.ops import lower_copy

    tmp = Buffer(lw.fresh(r.src.buffer.name), tuple(r.src.buffer.shape), r.src.dtype, "shared")
    return seq([lower_copy(lw, Copy(r.src, tmp.full_region(), loc=r.loc)), Sync(),
                _from_memory(lw, dataclasses.replace(r, src=tmp.full_region()))])


def _groups(lw: Lowerer, F: Fragment, D: Fragment, dim: int) -> list[list[int]] | None:
    """For each result register of a thread: the source registers folded into it (the same for all threads); None
    where they differ between threads."""
    inv = inverse_table(F)  # (T, L, nd [+rep])
    T, L = inv.shape[0], inv.shape[1]
    keep = [d for d in range(F.ndim) if d != dim]
    dthreads, dlocals = D.eval_tables()
    elems = tuple(inv[:, :, d] for d in keep) if keep else (np.zeros((T, L), np.int64),)  # one value: D of shape (1,)
    holders = dthreads[elems]  # (T, L, R)
    match = holders == np.arange(T)[:, None, None]
    if not match.any(axis=-1).all():
        raise TilecError("the reduction's result layout does not hold each row on the threads that hold the row's "
                         "elements", lw.loc)
    dl = dlocals[elems][np.arange(T)[:, None], np.arange(L)[None, :], match.argmax(axis=-1)]
    if not (dl == dl[0:1]).all():
        return None
    groups: list[list[int]] = [[] for _ in range(D.num_locals)]
    for sl, d in enumerate(dl[0]):
        groups[int(d)].append(sl)
    return groups


def _across_warps(lw: Lowerer, D: Fragment, acc: Any, warp_bits: list[int], lane_bits: list[int], red: str,
                  work: dt.DType) -> TStmt:
    """Combine the per-warp partials of each element through shared memory (one slot per warp)."""
    K = 1 << len(warp_bits)
    n = math.prod(D.shape)
    scratch = lw.scratch_shared("red_x", work, n * K)
    inv = D.inverse()
    tx = lw.tx
    kidx: Expr = const(0)
    for j, m in enumerate(warp_bits):
        kidx = binop("+", kidx, binop("*", binop("&", binop(">>", tx, m.bit_length() - 1), 1), 1 << j))
    lane_mask = sum(lane_bits)
    writer = binop("==", binop("&", tx, lane_mask), 0) if lane_mask else None
    writes, reads = [], []
    for dl in range(D.num_locals):
        env = {inv.symbols[0]: tx, inv.symbols[1]: const(dl)}
        coords = [to_ir(e, env) for e in inv.exprs[: D.ndim]]
        flat: Expr = const(0)
        for c, size in zip(coords, D.shape):
            flat = binop("+", binop("*", flat, size), c)
        base = binop("*", flat, K)
        w: TStmt = Write(scratch, binop("+", base, kidx), MemRef(acc, const(dl)))
        writes.append(w if writer is None else If(writer, w))
        e: Expr = MemRef(scratch, base)
        for k in range(1, K):
            e = binop(_COMBINE[red], e, MemRef(scratch, binop("+", base, k)))
        reads.append(Write(acc, const(dl), e))
    return seq(writes + [Sync()] + reads + [Sync()])


def _store(lw: Lowerer, r: Reduce, D: Fragment, acc: Any) -> TStmt:
    dmem = lw.mem_of(r.dst.buffer)
    if r.dst.buffer.scope == "fragment":
        out = []
        for dl in range(D.num_locals):
            v: Expr = MemRef(acc, const(dl))
            if not r.clear:
                v = binop(_COMBINE[r.red], cast(acc.dtype, MemRef(dmem, const(dl))), v)
            out.append(Write(dmem, const(dl), cast(r.dst.dtype, v)))
        return seq(out)
    inv = D.inverse()
    out = []
    for dl in range(D.num_locals):
        env = {inv.symbols[0]: lw.tx, inv.symbols[1]: const(dl)}
        exprs = [to_ir(e, env) for e in inv.exprs]
        idx = _place(r.dst, exprs[: D.ndim])
        off = lw.shared_offset(r.dst.buffer, idx) if r.dst.buffer.scope == "shared" else \
            lw.global_offset(r.dst.buffer, idx)
        v = MemRef(acc, const(dl))
        if not r.clear:
            v = binop(_COMBINE[r.red], cast(acc.dtype, MemRef(dmem, off)), v)
        w: TStmt = Write(dmem, off, cast(r.dst.dtype, v))
        if D.replicate > 1:
            w = If(binop("==", exprs[-1], 0), w)
        out.append(w)
    return seq(out)


def _place(region: Any, coords: list[Expr]) -> list[Expr]:
    out, k = [], 0
    for s, e in zip(region.starts, region.extents):
        if isinstance(e, int) and e == 1 and region.ndim > len(coords):
            out.append(s)
        else:
            out.append(binop("+", s, coords[k]))
            k += 1
    return out


def _from_memory(lw: Lowerer, r: Reduce) -> TStmt:
    """Source in shared memory: each result element is computed by the threads holding it."""
    from tilec.lower.layouts import default_fragment

    s = r.src
    ext = [int(e) for e in s.extents]
    n = ext[r.dim]
    out_shape = tuple(e for i, e in enumerate(ext) if i != r.dim)
    workers = lw.T
    if r.dst.buffer.scope == "fragment":
        D = lw.fragment(r.dst.buffer)
    else:  # a line per thread: where the lines do not divide the threads nor they them, on the first `workers` only
        lines = math.prod(int(e) for e in r.dst.extents)  # (the default spread gave every thread all the lines)
        if lines % lw.T and lw.T % lines:
            workers = max(d for d in range(1, min(lines, lw.T) + 1) if lines % d == 0)
        D = default_fragment(tuple(int(e) for e in r.dst.extents), workers)
    work = dt.work_type(r.dst.dtype)
    acc = lw.scratch_reg("red", work, D.num_locals)
    inv = D.inverse()
    smem = lw.mem_of(s.buffer)
    out: list[TStmt] = []
    for dl in range(D.num_locals):
        env = {inv.symbols[0]: lw.tx, inv.symbols[1]: const(dl)}
        coords = [to_ir(e, env) for e in inv.exprs[: D.ndim]]
        if tuple(D.shape) != out_shape:  # the result and the source differ in unit dims (a pipeline's version)
            it = iter(c for c, e in zip(coords, D.shape) if e != 1)
            coords = [const(0) if e == 1 else next(it) for e in out_shape]
        k = Var(lw.fresh("k"))

        def val(pos: Expr, coords: list[Expr] = coords) -> Expr:
            full = coords[: r.dim] + [pos] + coords[r.dim :]
            idx = [binop("+", st, c) for st, c in zip(s.starts, full)]
            return cast(work, MemRef(smem, lw.shared_offset(s.buffer, idx)))

        mine = MemRef(acc, const(dl))
        if r.red in ("sum", "abssum"):
            out += [Write(acc, const(dl), _init(r.red, work)),
                    Loop(k, const(n), Write(acc, const(dl), _fold(r.red, mine, val(k))))]
            continue
        # max / min start from the first element, not the identity: a line of nothing but NaN gives NaN (fmaxf skips
        # NaN against any number, -inf included), as on a fragment and in the tile interpreter
        first = val(const(0))
        out.append(Write(acc, const(dl), call("abs", first) if r.red == "absmax" else first))
        if n > 1:
            out.append(Loop(k, const(n - 1), Write(acc, const(dl), _fold(r.red, mine, val(binop("+", k, 1))))))
    out.append(_store(lw, r, D, acc))
    return seq(out) if workers == lw.T else If(binop("<", lw.tx, const(workers)), seq(out))
