"""Lowering of the data-movement tile ops: copy, fill, tile atomic add, cumsum, print.

An op touching a fragment becomes a parallel loop over the fragment, along its layout (regions of part of a
fragment are guarded). Other ops move memory in chunks of up to 16 bytes, chunk ``c`` on thread
``c % threads``, with global regions clipped to the tensor (reads outside are zero, writes dropped).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tilec import dtypes as dt
from tilec.errors import TilecError, TilecValueError, where
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Expr, Load, Var, as_expr, binop, cast, const, select
from tilec.ir.stmt import (
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    AtomicAdd,
    AtomicRMW,
    Copy,
    CumSum,
    Fill,
    Parallel,
    Print,
    Store,
)
from tilec.lower.context import Lowerer, lower_rule
from tilec.lower.layouts import vector_width
from tilec.lower.parallel import lower_parallel
from tilec.lower.symbolic import to_ir
from tilec.lower.tir import (
    L2_HINTS,
    CpAsync,
    CpAsyncCommit,
    CpAsyncMbarArrive,
    CpAsyncWait,
    If,
    Loop,
    MemRef,
    PrintOp,
    Sync,
    TmaLoad,
    TmaStoreBox,
    TStmt,
    Write,
    seq,
)


def _frag_loop(lw: Lowerer, frag_region: Region, body_of: Any, loc: Any) -> TStmt:
    """A parallel loop over the whole fragment of ``frag_region``; ``body_of(vars, inside)`` builds the body,
    ``inside`` the condition that the element lies in the region (None for a whole fragment)."""
    buf = frag_region.buffer
    vs = tuple(Var(f"i{d}") for d in range(buf.ndim))
    inside: Expr | None = None
    if not frag_region.is_full():
        for v, s, e in zip(vs, frag_region.starts, frag_region.extents):
            inside = _and(inside, binop("and", binop(">=", v, s), binop("<", v, binop("+", s, e))))
    body = body_of(vs, inside)
    p = Parallel(vs, tuple(int(d) for d in buf.shape), body, loc=loc)
    return lower_parallel(lw, p, lw.fragment(buf))


def _and(a: Expr | None, b: Expr) -> Expr:
    return b if a is None else binop("and", a, b)


def _map_index(frm: Region, to: Region, vs: tuple[Var, ...]) -> list[Expr]:
    """Indices into ``to`` for the element at ``vs`` of ``frm``'s buffer (the regions' non-unit dims pair up)."""
    rel = [binop("-", v, s) for v, s, e in zip(vs, frm.starts, frm.extents) if not (isinstance(e, int) and e == 1)]
    return to.index_at(rel)


def _guard(inside: Expr | None, s: Any) -> Any:
    from tilec.ir.stmt import IfThenElse

    return s if inside is None else IfThenElse(inside, s)


@lower_rule(Copy)
def lower_copy(lw: Lowerer, c: Copy) -> TStmt:
    s, d = c.src, c.dst
    if s.buffer.scope == d.buffer.scope == "fragment" and s.is_full() and d.is_full():
        fs, fd = lw.fragment(s.buffer), lw.fragment(d.buffer)
        if not (fs is fd or fs.equals(fd)):
            from tilec.lower.convert import convert

            return convert(lw, lw.mem_of(s.buffer), fs, lw.mem_of(d.buffer), fd, d.dtype, f"T.copy at {where(c.loc)}")
    if d.buffer.scope == "fragment" or s.buffer.scope == "fragment":
        side, other = (d, s) if d.buffer.scope == "fragment" else (s, d)
        if other.buffer.scope != "fragment":
            from tilec.lower.vector_copy import vector_fragment_copy

            vec = vector_fragment_copy(lw, side, other, to_fragment=side is d)
            if vec is not None:
                return vec

        def body(vs: tuple[Var, ...], inside: Expr | None) -> Any:
            here = list(vs)
            there = _map_index(side, other, vs)
            src_idx, dst_idx = (there, here) if side is d else (here, there)
            return _guard(inside, Store(d.buffer, tuple(dst_idx), cast(d.dtype, Load(s.buffer, tuple(src_idx)))))

        if other.buffer.scope != "fragment":
            return _frag_loop(lw, side, body, c.loc)
        try:
            return _frag_loop(lw, side, body, c.loc)
        except TilecError:  # another thread holds the source element: through shared memory
            return _through_shared(lw, c)
    every = d.buffer.scope in ("local", "var")
    return _chunked(lw, d, lambda idx: _copy_value(lw, s, d, idx), s, every_thread=every,
                    run=None if every else c.coalesced_width)


def hint_global_accesses(body: TStmt, c: Copy, lw: Lowerer) -> TStmt:
    """The lowered copy ``body`` with its global loads and stores (plain and TMA) marked with the L2 eviction priority
    of ``c.eviction_policy`` (CUDA targets; ``evict_normal``, the default priority, marks nothing).

    cp.async copies go unmarked, with a note: ptxas of CUDA 13 can drop the ``createpolicy`` whose policy
    ``cp.async ... .L2::cache_hint`` reads (IST-DASLab/marlin#44 on sm_90; Triton stopped emitting it too), leaving
    an instruction that traps at run time (illegal instruction), as seen on an H100 with tilec's own kernels."""
    if c.eviction_policy not in L2_HINTS or lw.target.kind != "cuda":
        return body
    from tilec.ir.visit import transform, walk

    def mark(node: Any) -> Any:
        if isinstance(node, (MemRef, Write)) and node.mem.space == "global" or isinstance(node, (TmaLoad, TmaStoreBox)):
            return dataclasses.replace(node, hint=c.eviction_policy)
        return None

    if any(isinstance(n, CpAsync) for n in walk(body)):
        lw.notes.append(f"T.copy at {where(c.loc)}: eviction_policy={c.eviction_policy!r} is not applied to its "
                        "cp.async copies: ptxas (CUDA 13) can drop the cache policy that cp.async's L2 hint reads, "
                        "an illegal instruction at run time (plain loads and stores and TMA copies take the hint)")
    return transform(body, mark)


def coalesced_note(lw: Lowerer, c: Copy) -> None:
    """A report note for a copy whose ``coalesced_width`` has no effect: TMA moves it, or a fragment's layout
    places its elements, or each thread copies all of it (a T.alloc_local side)."""
    if c.coalesced_width is None:
        return
    from tilec.ir.stmt import TmaCopy, TmaStore

    scopes = (c.src.buffer.scope, c.dst.buffer.scope)
    if isinstance(c, (TmaCopy, TmaStore)):
        why = "the tensor-memory accelerator moves the tile (disable_tma=True keeps the copy on the threads)"
    elif "fragment" in scopes:
        frag = c.src.buffer if scopes[0] == "fragment" else c.dst.buffer
        why = f"the layout of fragment {frag.name!r} places its elements on the threads"
    elif c.dst.buffer.scope in ("local", "var"):
        why = f"each thread copies all of it ({c.dst.buffer.name!r} is private to each thread)"
    else:
        return
    lw.notes.append(f"T.copy at {where(c.loc)}: coalesced_width={c.coalesced_width} has no effect: {why}")


def _through_shared(lw: Lowerer, c: Copy) -> TStmt:
    """A copy between parts of two fragments whose elements lie on different threads: the source part into a shared
    scratch tile of its shape and type, then the scratch into the destination part."""
    scratch = Buffer(lw.fresh("part"), tuple(int(e) for e in c.src.extents), c.src.dtype, "shared")
    whole = scratch.full_region()
    return seq([lower_copy(lw, Copy(c.src, whole, loc=c.loc)), Sync(), lower_copy(lw, Copy(whole, c.dst, loc=c.loc))])


def _copy_value(lw: Lowerer, s: Region, d: Region, didx: list[Expr]) -> tuple[list[Expr], Buffer]:
    """(source indices, source buffer) of the destination element ``didx``."""
    vs = [binop("-", i, st) for i, st in zip(didx, d.starts)]
    rel = [v for v, e in zip(vs, d.extents) if not (isinstance(e, int) and e == 1)]
    return s.index_at(rel), s.buffer


def _chunked(lw: Lowerer, d: Region, src_of: Any, s: Region | None, fill: Expr | None = None,
             asynchronous: int = 0, every_thread: bool = False, run: int | None = None) -> TStmt:
    """Write region ``d`` chunk by chunk: from ``s`` (a copy, possibly vectorized; with cp.async of
    ``asynchronous`` bytes per access when that is set) or with ``fill``. The block's threads share the chunks out,
    or with ``every_thread`` each thread writes all of them (a T.alloc_local destination: each thread has its own).
    A chunk is one access, or with ``run`` (a copy's ``coalesced_width``, dividing the last extent) ``run``
    consecutive elements of a row moved by accesses as wide as divide it."""
    ext = [int(e) if isinstance(e, int) else None for e in d.extents]
    if any(e is None for e in ext):
        raise TilecError(f"region {d} needs static extents on the GPU targets", lw.loc)
    n = math.prod(ext)
    if run is not None and ext[-1] % run:
        raise TilecValueError(f"T.copy(coalesced_width={run}): runs of {run} consecutive elements need {run} to divide "
                              f"the innermost extent {ext[-1]} of {d}", lw.loc)
    v = _vector(lw, d, s, ext, run) if s is not None else 1
    w = run or v  # elements of a chunk
    chunks = n // w
    T, tx = (1, const(0)) if every_thread else (lw.T, lw.tx)
    q = Var(lw.fresh("q"))
    c = binop("+", binop("*", q, T), tx)
    first = [binop("+", st, x) for st, x in zip(d.starts, _chunk_coords(ext, w, T, q, tx))]
    lw.ranges[q] = (0, -(-chunks // T) - 1)
    lw.ranges[lw.tx] = (0, lw.T - 1)
    parts = []
    for k in range(w // v):  # the chunk's accesses, along the last dimension
        didx = first if not k else first[:-1] + [binop("+", first[-1], k * v)]
        parts.append(_access(lw, d, didx, src_of, s, fill, v, asynchronous))
    stmt = seq(parts)
    if chunks % T:
        stmt = If(binop("<", c, chunks), stmt)
    trips = -(-chunks // T)
    return Loop(q, const(trips), stmt, unroll=trips <= 16 or every_thread) if trips > 1 else _subst_q(stmt, q)


def _access(lw: Lowerer, d: Region, didx: list[Expr], src_of: Any, s: Region | None, fill: Expr | None, v: int,
            asynchronous: int) -> TStmt:
    """One access of :func:`_chunked`: ``v`` elements of ``d`` from ``didx`` on, clipped to a global tensor."""
    dmem = lw.mem_of(d.buffer)
    dpred = lw.in_bounds(d.buffer, didx) if d.buffer.scope == "global" else None
    doff = _offset(lw, d.buffer, didx)
    if s is None:
        stmt: TStmt = Write(dmem, doff, cast(d.dtype, fill))
    else:
        sidx, sbuf = src_of(didx)
        smem = lw.mem_of(sbuf)
        spred = lw.in_bounds(sbuf, sidx) if sbuf.scope == "global" else None
        soff = _offset(lw, sbuf, sidx)
        if asynchronous:
            src_off = select(spred, soff, 0) if spred is not None else soff
            stmt = CpAsync(dmem, doff, smem, src_off, asynchronous, spred)
        elif v > 1:
            value: Expr = MemRef(smem, select(spred, soff, 0) if spred is not None else soff, v)
            stmt = Write(dmem, doff, value, lanes=v)
            if spred is not None:
                stmt = If(spred, stmt, Write(dmem, doff, cast(d.dtype, 0), lanes=v))
        else:
            ref = MemRef(smem, select(spred, soff, 0) if spred is not None else soff)
            val = cast(d.dtype, ref if spred is None else select(spred, ref, cast(sbuf.dtype, 0)))
            stmt = Write(dmem, doff, val)
    return stmt if dpred is None else If(dpred, stmt)


def _unravel(flat: Expr, ext: list[int]) -> list[Expr]:
    """Row-major coordinates of ``flat`` over ``ext`` (unit dimensions are 0; no modulo on the outermost)."""
    out: list[Expr] = []
    first = True
    for dim, e in enumerate(ext):
        if e == 1:
            out.append(const(0))
            continue
        coord = binop("//", flat, math.prod(ext[dim + 1 :]))
        out.append(coord if first else binop("%", coord, e))
        first = False
    return out


def _chunk_coords(ext: list[int], v: int, T: int, q: Var, tx: Var) -> list[Expr]:
    """Coordinates of element ``(q * T + tx) * v`` of a tile of extents ``ext``, split so that the inner
    dimensions depend on the thread only and ``q`` (the chunk round) only moves the outer ones."""
    step = T * v
    P, split = 1, len(ext)
    for d in reversed(range(len(ext))):
        if step % (P * ext[d]):
            break
        P *= ext[d]
        split = d
    t = binop("*", tx, v) if v > 1 else tx
    inner = [binop("%", binop("//", t, math.prod(ext[d + 1 :])), ext[d]) if ext[d] > 1 else const(0)
             for d in range(split, len(ext))]
    outer_flat = binop("+", binop("*", q, step // P), binop("//", t, P))
    return _unravel(outer_flat, ext[:split]) + inner


def _subst_q(stmt: TStmt, q: Var) -> TStmt:
    from tilec.ir.visit import substitute

    return substitute(stmt, {q: const(0)})


def _offset(lw: Lowerer, buf: Buffer, idx: list[Expr]) -> Expr:
    if buf.scope == "global":
        return lw.global_offset(buf, idx)
    if buf.scope == "shared":
        return lw.shared_offset(buf, idx)
    return lw.private_offset(buf, idx)


def _vector(lw: Lowerer, d: Region, s: Region, ext: list[int], run: int | None = None) -> int:
    """The widest chunk (elements) both sides can move as one 16/8/4-byte access (dividing ``run`` if given)."""
    if s.dtype is not d.dtype or d.dtype.bits < 8 or d.buffer.scope in ("local", "var") or \
            s.buffer.scope in ("local", "var"):
        return 1
    v = widest_vector(d.dtype, ext[-1], run, lambda v: _contiguous(lw, d, v) and _contiguous(lw, s, v))
    nbytes = v * d.dtype.bits // 8
    for r in (s, d):
        if v > 1 and r.buffer.scope == "global":  # the launch checks that the tensor's data is this aligned
            lw.align[r.buffer] = max(lw.align.get(r.buffer, 1), nbytes)
    return v


def widest_vector(dtype: dt.DType, inner: int, run: int | None, ok: Callable[[int], bool]) -> int:
    """The widest access (elements, 16 bytes down to one element) dividing the innermost extent ``inner`` and
    ``run`` (a copy's ``coalesced_width``, if given) for which ``ok`` holds (both sides contiguous)."""
    v = vector_width(dtype, inner)
    while v > 1 and not ((run or v) % v == 0 and ok(v)):
        v //= 2
    return v


def global_contiguous(r: Region, v: int) -> bool:
    """Chunks of ``v`` elements along the last dimension of region ``r`` of a global tensor are contiguous and
    ``v``-aligned in memory (the staged epilogue's note names the width this allows, :mod:`tilec.passes.epilogue`)."""
    if not _start_aligned(r, v):
        return False
    buf = r.buffer
    if buf.strides is not None and not (buf.strides[-1] == 1 and all(isinstance(x, int) and x % v == 0
                                                                       for x in buf.strides[:-1])):
        return False
    inner = buf.shape[-1]
    return isinstance(inner, int) and inner % v == 0 and all(isinstance(x, int) for x in buf.shape[1:])


def _start_aligned(r: Region, v: int) -> bool:
    from tilec.ir.affine import linear

    form = linear(as_expr(r.starts[-1]))
    return form is not None and not any(k is not None and c % v for k, c in form.items()) and \
        not form.get(None, 0) % v


def _contiguous(lw: Lowerer, r: Region, v: int) -> bool:
    """Chunks of ``v`` elements along the region's last dimension are contiguous and ``v``-aligned in memory."""
    buf = r.buffer
    if buf.scope == "global":
        return global_contiguous(r, v)
    if not _start_aligned(r, v):
        return False
    table = lw.shared_layout(buf).eval_table().reshape(tuple(int(x) for x in buf.shape))
    rows = table.reshape(-1, table.shape[-1])
    if rows.shape[1] % v:
        return False
    blocks = rows.reshape(rows.shape[0], -1, v)
    return bool(np.all(blocks[:, :, 1:] - blocks[:, :, :-1] == 1) and np.all(blocks[:, :, 0] % v == 0))


@lower_rule(Fill)
def lower_fill(lw: Lowerer, f: Fill) -> TStmt:
    r = f.dst
    if r.buffer.scope == "fragment":
        return _frag_loop(lw, r, lambda vs, inside: _guard(inside, Store(r.buffer, vs, f.value)), f.loc)
    if r.buffer.scope in ("local", "var"):  # the region's elements (a var: its one element)
        mem = lw.mem_of(r.buffer)
        return seq([Write(mem, lw.private_offset(r.buffer, [binop("+", st, i) for st, i in zip(r.starts, pos)]),
                          f.value) for pos in np.ndindex(*(int(e) for e in r.extents))])
    return _chunked(lw, r, None, None, fill=f.value)


@lower_rule(AtomicAdd)
def lower_atomic_add(lw: Lowerer, a: AtomicAdd) -> TStmt:
    s, d = a.src, a.dst
    if s.buffer.scope == "fragment":
        def body(vs: tuple[Var, ...], inside: Expr | None) -> Any:
            didx = _map_index(s, d, vs)
            return _guard(inside, AtomicRMW("add", d.buffer, tuple(didx), cast(d.dtype, Load(s.buffer, vs))))

        return _frag_loop(lw, s, body, a.loc)
    vs = tuple(Var(f"i{k}") for k in range(len(s.squeezed_extents())))
    ext = tuple(int(e) for e in s.squeezed_extents())
    src_idx = s.index_at(vs)
    dst_idx = d.index_at(vs)
    body = AtomicRMW("add", d.buffer, tuple(dst_idx), cast(d.dtype, Load(s.buffer, tuple(src_idx))))
    from tilec.lower.layouts import default_fragment

    p = Parallel(vs, ext, body, loc=a.loc)
    return lower_parallel(lw, p, default_fragment(ext, lw.T))


def private_operand(src: Region, dst: Region, what: str, loc: Any) -> None:
    """Refuses a tile op that would need other threads' elements of a T.alloc_local / T.alloc_var buffer (each
    thread has its own, and a tile copy writes each element on one thread only)."""
    for r in (src, dst):
        if r.buffer.scope in ("local", "var"):
            raise TilecError(f"{what} of T.alloc_local arrays are not supported on GPU targets ({r.buffer.name!r} is "
                             "private to each thread); use a fragment or a shared buffer", loc)


@lower_rule(CumSum)
def lower_cumsum(lw: Lowerer, c: CumSum) -> TStmt:
    """Each thread scans whole lines along ``dim``, summing in the destination's type (float32 for 16-bit floats, as
    the tile interpreter does); fragments go through a shared scratch buffer of that type."""
    s, d = c.src, c.dst
    private_operand(s, d, "prefix sums", c.loc)
    shape = [int(e) for e in s.extents]
    parts: list[TStmt] = []
    src_buf, dst_buf = s, d
    work = dt.work_type(d.dtype)
    if s.buffer.scope == "fragment" or d.buffer.scope == "fragment":
        scratch = Buffer(lw.fresh("scan"), tuple(shape), work, "shared")
        whole = scratch.full_region()
        parts += [lower_copy(lw, Copy(s, whole, loc=c.loc)), Sync()]
        src_buf = whole
        dst_buf = whole if d.buffer.scope == "fragment" else d  # a shared destination takes the scan directly
    parts.append(_scan(lw, src_buf, dst_buf, c.dim, c.reverse, shape, work))
    if d.buffer.scope == "fragment":
        parts += [Sync(), lower_copy(lw, Copy(src_buf, d, loc=c.loc))]
    return seq(parts)


def _scan(lw: Lowerer, s: Region, d: Region, dim: int, reverse: bool, shape: list[int], work: dt.DType) -> TStmt:
    n = shape[dim]
    lines = math.prod(shape) // n
    T = lw.T
    q, k = Var(lw.fresh("q")), Var(lw.fresh("k"))
    line = binop("+", binop("*", q, T), lw.tx)
    other = [x for i, x in enumerate(shape) if i != dim]
    coords, rem = [], line
    for i, e in enumerate(other):
        stride = math.prod(other[i + 1 :])
        coords.append(binop("%", binop("//", rem, stride), e) if i else binop("//", rem, stride))
    pos = binop("-", n - 1, k) if reverse else k
    rel = coords[:dim] + [pos] + coords[dim:]
    sidx = [binop("+", st, r) for st, r in zip(s.starts, rel)]
    if d.ndim != len(rel):  # the regions differ in unit dims (s[1, :, :] into a 2-D tile): match the others
        it = iter(r for r, e in zip(rel, shape) if e != 1)
        rel = [const(0) if int(e) == 1 else next(it) for e in d.extents]
    didx = [binop("+", st, r) for st, r in zip(d.starts, rel)]
    acc = lw.scratch_reg("acc", work, 1)
    val = cast(work, MemRef(lw.mem_of(s.buffer), _offset(lw, s.buffer, sidx)))
    step = seq([Write(acc, const(0), binop("+", MemRef(acc, const(0)), val)),
                Write(lw.mem_of(d.buffer), _offset(lw, d.buffer, didx), cast(d.dtype, MemRef(acc, const(0))))])
    body: TStmt = seq([Write(acc, const(0), cast(work, 0)), Loop(k, const(n), step)])
    if lines % T:
        body = If(binop("<", line, lines), body)
    trips = -(-lines // T)
    return Loop(q, const(trips), body) if trips > 1 else _subst_q(body, q)


@lower_rule(Print)
def lower_print(lw: Lowerer, p: Print) -> TStmt:
    msg = p.msg.replace("%", "%%") + " " if p.msg else ""  # the message is part of a printf format
    if not isinstance(p.value, Region):
        v = p.value
        if any(isinstance(n, Load) for n in _walk(v)):
            v = _block_expr(lw, v)
        return If(binop("==", lw.tx, 0), PrintOp(f"{msg}{_printf_spec(v.dtype)}", (v,)))
    r = p.value
    fmt = f"{msg}{r.buffer.name}[" + ", ".join(["%lld"] * r.buffer.ndim) + f"] = {_printf_spec(r.buffer.dtype)}"
    if r.buffer.scope == "fragment":
        frag = lw.fragment(r.buffer)
        inv = frag.inverse()
        out = []
        for l in range(frag.num_locals):
            env = {inv.symbols[0]: lw.tx, inv.symbols[1]: const(l)}
            exprs = [to_ir(e, env) for e in inv.exprs]
            stmt: TStmt = PrintOp(fmt, tuple(exprs[: r.buffer.ndim]) + (MemRef(lw.mem_of(r.buffer), const(l)),))
            if frag.replicate > 1:
                stmt = If(binop("==", exprs[-1], 0), stmt)
            out.append(stmt)
        return seq(out)
    ext = [int(e) for e in r.extents]
    vs = [Var(lw.fresh("p")) for _ in ext]
    idx = [binop("+", s, v) for s, v in zip(r.starts, vs)]
    body: TStmt = PrintOp(fmt, tuple(idx) + (MemRef(lw.mem_of(r.buffer), _offset(lw, r.buffer, idx)),))
    for v, e in reversed(list(zip(vs, ext))):
        body = Loop(v, const(e), body)
    return If(binop("==", lw.tx, 0), body)


def _printf_spec(d: dt.DType) -> str:
    """The printf conversion of a value of ``d`` (as the emitter passes it: a double, or a 64-bit int)."""
    return "%g" if d.is_float else "%llu" if d.kind == "uint" and d.bits == 64 else "%lld"


def _walk(e: Any) -> Any:
    from tilec.ir.visit import walk

    return walk(e)


def _block_expr(lw: Lowerer, e: Expr) -> Expr:
    from tilec.passes.lower import block_expr

    return block_expr(lw, e)


@lower_rule(AsyncCopy)
def lower_async_copy(lw: Lowerer, c: AsyncCopy) -> TStmt:
    """cp.async in 4/8/16-byte chunks; narrower chunks fall back to an ordinary copy (reported)."""
    ext = [int(e) for e in c.dst.extents]
    v = _vector(lw, c.dst, c.src, ext, c.coalesced_width)
    nbytes = v * c.dst.dtype.bits // 8
    if nbytes < 4:
        why = "rows too narrow or misaligned for cp.async" if not (c.coalesced_width or 0) * c.dst.dtype.bits % 32 \
            else f"coalesced_width={c.coalesced_width} leaves accesses of {nbytes} bytes, and cp.async moves 4, 8 or 16"
        lw.notes.append(f"T.copy at {where(c.loc)}: {why}; a synchronous copy")
        body = lower_copy(lw, Copy(c.src, c.dst, loc=c.loc, **c.options()))
    else:
        body = _chunked(lw, c.dst, lambda idx: _copy_value(lw, c.src, c.dst, idx), c.src, asynchronous=nbytes,
                        run=c.coalesced_width)
    if c.barrier is None:
        return body
    # every thread (copies or none) arrives once on the stage's mbarrier, whose count includes the block's threads
    return seq([body, CpAsyncMbarArrive(lw.mem_of(c.barrier.buffer), c.barrier.starts[0])])


@lower_rule(AsyncCommit)
def lower_async_commit(lw: Lowerer, c: AsyncCommit) -> TStmt:
    return CpAsyncCommit()


@lower_rule(AsyncWait)
def lower_async_wait(lw: Lowerer, w: AsyncWait) -> TStmt:
    return CpAsyncWait(w.n)
