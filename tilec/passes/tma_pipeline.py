"""TMA pipelines (part of the pipelining stage, :mod:`.pipelining`; sm_90a, pass config ``tma``): which global->shared
copies TMA can move, why a loop cannot be a TMA pipeline, and the rewrite of one that can into a ring of stages, one
mbarrier each, whose copies one thread issues (the block's threads keep the copies TMA cannot do, by cp.async into the
same stage). Warp specialization builds on these: :mod:`.warp_specialize`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tilec import dtypes as dt
from tilec.errors import where
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Var, binop, const
from tilec.ir.stmt import AsyncCopy, BarrierArrive, BarrierInit, BarrierWait, Copy, For, Gemm, SeqStmt, Stmt, TmaCopy
from tilec.ir.visit import substitute
from tilec.passes.pipeline_common import guard, is_async_copy, merge_guards, numel, reads

if TYPE_CHECKING:
    from tilec.passes.pipelining import Pipeliner


def tma_box_why(c: Copy) -> str | None:
    """Why TMA cannot do copy ``c`` (a global->shared tile) whatever its options, or None: the source a contiguous
    tensor of compile-time shape (rank <= 5, no size 0, 16-byte row strides), the tile 2-D with the tensor's
    innermost dimension as its columns, boxes of at most 256 rows, each 16-byte-multiple panel (or row) one box."""
    from tilec.lower.layouts import swizzle_bytes

    src, dst = c.src.buffer, c.dst.buffer
    if src.dtype is not dst.dtype or src.dtype.bits not in (8, 16, 32):
        return f"{src.name!r}: TMA copies 8-, 16- or 32-bit elements without conversion"
    shape = src.shape
    if src.strides is not None or not all(isinstance(d, int) for d in shape) or not 1 <= len(shape) <= 5:
        return f"{src.name!r}: TMA here needs a contiguous tensor of rank 1-5 with compile-time sizes"
    if 0 in shape:
        return f"{src.name!r}: it has a dimension of size 0 (a tensor map's sizes start at 1)"
    eb = src.dtype.bits // 8
    if len(shape) > 1 and int(shape[-1]) * eb % 16:  # every row stride is a multiple of the innermost one
        return f"{src.name!r}: its rows of {int(shape[-1]) * eb} bytes are not a multiple of 16"
    tile = c.dst.squeezed_extents()
    ext = c.src.extents
    if len(dst.shape) != 2 or len(tile) != 2 or not all(isinstance(e, int) for e in ext) or ext[-1] != tile[-1]:
        return f"{dst.name!r}: TMA here copies 2-D tiles whose columns are the tensor's innermost dimension"
    rows, cols = int(dst.shape[0]), int(dst.shape[1])
    if [e for e in ext if e != 1] != [rows, cols]:
        return f"{dst.name!r}: the source region's extents {tuple(ext)} do not match the tile {rows}x{cols}"
    sw = swizzle_bytes((rows, cols), dst.dtype)
    width = sw // eb if sw else cols
    if rows > 256 or width > 256 or width * eb % 16:
        return f"{dst.name!r}: a {rows}x{width} box is outside TMA's limits (256 per side, rows of 16-byte multiples)"
    return None


def tma_box_refusal(c: Copy) -> str | None:
    """Why TMA does not do copy ``c`` (a global->shared tile), or None: :func:`tma_box_why`, else its
    ``disable_tma``."""
    why = tma_box_why(c)
    return why if why is not None or not c.disable_tma else f"the T.copy at {where(c.loc)} has disable_tma=True"


def record_fate(fates: dict, c: Stmt, why: str | None) -> None:
    """Record in ``fates`` (loc -> why) what became of copy ``c`` on a TMA path that considered it, where ``c`` has
    ``disable_tma``: ``why`` TMA would not have moved it anyway, None where the option decided (which stays). A
    ``T.macro``'s line called twice has two locs (:attr:`tilec.errors.SourceLoc.site`), one fate for each use."""
    if isinstance(c, Copy) and c.disable_tma and fates.get(c.loc, "") is not None:
        fates[c.loc] = why


def by_threads(body: list[Stmt], stages: list[int]) -> dict[int, str]:
    """The first-stage copies of a TMA pipeline that TMA cannot do (id -> why, naming the copy's line): the block's
    threads move them by cp.async into the same stage."""
    out = {}
    for p in (st for st, g in zip(body, stages) if g == 0):
        why = tma_box_refusal(p)
        if why is not None:
            out[id(p)] = why if why.startswith("the T.copy at") else \
                f"the T.copy at {where(p.loc)} cannot be a TMA copy ({why})"
    return out


def tma_refusal(p: Pipeliner, loop: For, body: list[Stmt], stages: list[int],
                versions: dict[int, tuple[Buffer, int, int]]) -> str | None:
    """Why the loop cannot be a TMA pipeline, or None when it can."""
    producers = [st for st, g in zip(body, stages) if g == 0]
    why = ring_refusal(p, loop, body, producers, versions)
    for cp in producers:
        record_fate(p.fates, cp, f"the T.Pipelined loop at {where(loop.loc)} is not a TMA pipeline: {why}"
                    if why else tma_box_why(cp))
    if why is not None:
        return why
    whys = [tma_box_refusal(cp) for cp in producers]
    return whys[0] if all(whys) else None  # some by TMA: the others by cp.async on the same ring


def ring_refusal(p: Pipeliner, loop: For, body: list[Stmt], producers: list[Stmt],
                 versions: dict[int, tuple[Buffer, int, int]]) -> str | None:
    """Why the loop cannot be a TMA pipeline whatever its copies' tiles, or None."""
    if loop.ann("stage") is not None:
        return "stages given by hand"
    if not producers or any(not is_async_copy(cp) for cp in producers):
        return "a first-stage statement is not a global->shared copy"
    counts = {versions[id(cp.dst.buffer)][2] for cp in producers if id(cp.dst.buffer) in versions}
    if len(counts) != 1 or any(id(cp.dst.buffer) not in versions for cp in producers):
        return "its tiles have different numbers of versions"
    for cp in producers:
        x = id(cp.dst.buffer)
        users = [o for o in body if o is not cp and x in reads(o)]
        if not users or any(type(o) is not Gemm or x not in (id(o.A.buffer), id(o.B.buffer)) for o in users):
            return f"{cp.dst.buffer.name!r} is read by something other than T.gemm"
    return None


def rewrite_tma(p: Pipeliner, loop: For, body: list[Stmt], stages: list[int], order: list[int], depth: int,
                versions: dict[int, tuple[Buffer, int, int]], slow: dict[int, str] | None = None) -> Stmt:
    """The TMA pipeline; the first-stage copies of ``slow`` (id -> why TMA cannot do them) are the block's
    cp.async copies into the same stage, each thread arriving on the stage's mbarrier once its copies complete."""
    slow = slow or {}
    n = loop.extent
    k = Var(loop.var.name)
    nv = p.ring(versions)
    bar = Buffer(f"{loop.var.name}_full", (nv,), dt.uint64, "shared", loc=loop.loc)
    p.new_allocs.append(bar)

    def slot(i: Any) -> Region:
        return Region(bar, (binop("%", i, nv),), (1,))

    producers = [body[i] for i in order if stages[i] == 0]
    tx = sum(numel(cp.dst) * cp.dst.dtype.bits // 8 for cp in producers if id(cp) not in slow)
    items: list[tuple[Any, Stmt]] = [(binop("<", k, n), BarrierArrive(slot(k), tx, loc=loop.loc))]
    for i in order:
        j = binop("-", k, stages[i]) if stages[i] else k
        s = p.remap(substitute(body[i], {loop.var: j}), j, versions)
        if stages[i] == 0 and id(body[i]) in slow:
            s = AsyncCopy(s.src, s.dst, loc=s.loc, barrier=slot(k), **s.options())
        elif stages[i] == 0:
            s = TmaCopy(s.src, s.dst, slot(k), loc=s.loc, **s.options())
        elif not any(isinstance(x, BarrierWait) for _, x in items):
            items.append((guard(k, stages[i], depth, n), BarrierWait(slot(j), binop("%", binop("//", j, nv), 2),
                                                                     loc=loop.loc)))
        items.append((guard(k, stages[i], depth, n), s))
    here = where(loop.loc)
    p.notes.append(f"T.Pipelined at {here}: {depth} stages, "
                   + ", ".join(f"{b.name} x{v}" for b, _, v in versions.values())
                   + f" with TMA on {nv} mbarriers ({tx} bytes a trip)")
    for cp in producers:
        if id(cp) in slow:
            p.notes.append(f"T.Pipelined at {here}: {cp.dst.buffer.name} by cp.async, each thread arriving on "
                           f"the stage's mbarrier: {slow[id(cp)]}")
    new = For(k, binop("+", n, depth - 1), "serial", SeqStmt(tuple(merge_guards(items))), loc=loop.loc)
    count = 1 + len(slow) * p.func.launch.num_threads  # the TMA arrival and each thread's per cp.async copy
    return SeqStmt((BarrierInit(Region(bar, (const(0),), (nv,)), count, loc=loop.loc), new))
