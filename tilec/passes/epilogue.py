"""Stage accumulator stores through shared memory (after pipelining, NVIDIA targets, pass config ``stage_epilogue``,
on by default).

Pre: pipelined Tile IR. Post: a copy ``T.copy(C_f, C[tile])`` of a whole 2-D fragment to a global tensor, where
``C_f`` is the accumulator of a ``T.gemm`` in a loop earlier in the same statement sequence (the kernel's body, or
the consumers' part of a warp-specialized one), becomes ``T.copy(C_f, C_f_stage)`` then ``T.copy(C_f_stage,
C[tile])``: ``C_f_stage`` is a shared tile of ``C``'s dtype placed over a shared operand of that gemm which nothing
uses after the loop (``KernelLaunch.overlays``; its pipeline stages are idle by then), so it costs no shared
memory. Layout inference swizzles it, so the accumulators' registers go out in stores that hit distinct banks, and
the tile reaches global memory in 16-byte vectors along its rows: a warp writes whole 128-byte lines, where the
direct store writes 8 rows x 16 bytes per instruction. The barrier pass orders the staging writes after the
gemm's last reads of the operand they overlay.

With the ``tma`` pass config on sm_90a (and ``tma_store`` not False) the shared tile goes out by a TMA store
instead (:class:`TmaStore`: one thread issues a box per swizzle panel, the copy engine writes them, clipped to the
tensor), where the tensor allows a tensor map (static shape, rows a multiple of 16 bytes) and the tile's rows fit a
box (at most 256).

Inside a loop (a persistent kernel's loop over its tiles) the operands' stages hold the next trip's loads. All but
one: where the consumers release each stage one step late (the pipeliner marks that loop ``held_last``), the stage
of the main loop's last step stays theirs until the next trip's first. With pass config ``stage_in_ring`` (on) the
tile's first columns, as many as one operand's stage holds and at most half, are staged there (``C_f_held``, a
tile over that operand's ring) and the rest in a tile of their own: two copies and two TMA stores, no wait between
them, and the held stage's release waits for the first store (thirty-third session). Otherwise the tile gets shared
memory of its own, in column chunks as wide as fit (swizzle panels): each chunk is written, stored by TMA without
waiting, and the next write of the tile first waits (:class:`TmaStoreWait`) for the store before it to have read
it, so the stores overlap the next chunk's writes and the next tile's main loop; one more wait after the loop.
Done with TMA stores only (else the direct store stays). Where the consumer warpgroups of a rotated loop
take turns, a one-chunk tile is handed between them by named barriers instead of barriers of them all
(:class:`StageHandoff`, pass config ``stage_handoff``): the last warpgroup issues the store and waits for the previous
one before the rotated loop's last part. With copies of the consumers (``consumers``) each copy stages in a tile of
its own.

Only accumulators of tensor-core gemms (operands of 16 bits or fewer) are staged: those hold pairs of elements,
which a direct store writes 4 bytes at a time. Skipped (with a note) when no such operand is large enough.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from tilec.errors import where
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Const, binop, const
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import (
    BarrierArrive,
    Copy,
    For,
    Gemm,
    IfThenElse,
    KernelLaunch,
    SeqStmt,
    StageHandoff,
    Stmt,
    TileOp,
    TmaStore,
    TmaStoreWait,
    WarpgroupTurn,
    WarpRoles,
)  # fmt: skip
from tilec.ir.visit import substitute, transform, walk
from tilec.lower.layouts import swizzle_bytes
from tilec.passes.tma_pipeline import record_fate
from tilec.target import Target


def stage_epilogues(func: PrimFunc, target: Target, options: dict | None = None,
                    fates: dict | None = None) -> tuple[PrimFunc, list[str]]:
    """``func`` with its accumulator stores staged (the same object when none is); ``fates`` gets what became of the
    stores with ``disable_tma`` that could go by TMA stores (:func:`tilec.passes.tma_pipeline.record_fate`)."""
    launch = func.launch
    opts = options or {}
    if not target.arch.startswith("sm_") or not opts.get("stage_epilogue", True):
        return func, _inert(launch, opts, None)
    tma = bool(opts.get("tma")) and opts.get("tma_store", True) and target.arch == "sm_90a"
    from tilec.passes.pipeline_common import smem_limit

    st = _Stager(launch, tma, smem_limit(target) if tma else 0, opts.get("stage_handoff", True),
                 opts.get("store_buffers", 2), opts.get("stage_in_ring", True))
    st.fates = {} if fates is None else fates
    body = st.seq(launch.body, top=True)
    if st.held_waits:  # main loops whose held stage's release now waits for the store out of it
        body = transform(body, lambda n: _wait_before_release(n, st.held_waits[id(n.var)]) if isinstance(n, For)
                         and n.ann("held_last") and id(n.var) in st.held_waits else None)
    if not st.new and not st.own:
        return func, st.notes + _inert(launch, opts, st)
    new = dataclasses.replace(launch, body=body, allocs=launch.allocs + tuple(b for b, _ in st.new) + tuple(st.own),
                              overlays=launch.overlays + tuple(st.new))
    return dataclasses.replace(func, body=new), st.notes + _inert(launch, opts, st)


def _wait_before_release(loop: For, wait: Stmt) -> For:
    """``loop`` (a ``held_last`` main loop) with ``wait`` placed before its consumers' release of a stage (the
    ``IfThenElse`` around a ``BarrierArrive`` that gives the previous step's stage back)."""
    def release(s: Stmt) -> Stmt:
        if isinstance(s, IfThenElse) and isinstance(s.then_body, BarrierArrive) and s.else_body is None:
            return dataclasses.replace(s, then_body=SeqStmt((wait, s.then_body)))
        return s
    body = loop.body
    new = dataclasses.replace(loop, body=dataclasses.replace(body, stmts=tuple(map(release, body.stmts))))
    assert new.body.stmts != body.stmts, "the held stage's release is gone"
    return new


def _inert(launch: KernelLaunch, opts: dict, st: _Stager | None) -> list[str]:
    """A note for each of pass configs ``store_buffers``, ``stage_in_ring`` and ``stage_handoff`` the user gave
    where no staged tile gave it a choice (:meth:`_Stager.stage_in_loop`)."""
    at = f"T.Kernel at {where(launch.loc)}"
    notes = []
    if "store_buffers" in opts and (st is None or not st.chunked):
        why = st.unchunked if st is not None and st.unchunked else \
            "no accumulator is staged in a persistent kernel's tile loop"
        notes.append(f"{at}: pass config 'store_buffers' has no effect: it alternates the column chunks of an "
                     f"accumulator staged by TMA stores in a persistent kernel's tile loop, and {why}")
    if "stage_in_ring" in opts and (st is None or not st.ringable):
        notes.append(f"{at}: pass config 'stage_in_ring' has no effect: it stages half of an accumulator stored in a "
                     "persistent kernel's tile loop in the operand stage its main loop read last, and no such tile "
                     "and stage fit (a warp-specialized loop whose stages the consumers release one step late, not "
                     "copies of the consumers; a stage of whole swizzle panels, at most half the tile)")
    if "stage_handoff" in opts and (st is None or not st.handed):
        notes.append(f"{at}: pass config 'stage_handoff' has no effect: it hands a one-chunk staged tile between "
                     "the consumer warpgroups of a rotated loop taking turns, and no staged tile follows such a loop")
    return notes


def _after_rotated(stmts: list[Stmt], early: list[Stmt]) -> list[Stmt]:
    """``stmts`` with ``early`` placed after the steady loop of a rotated loop among them (before its last part)."""
    if not early:
        return stmts

    def place(s: Stmt) -> Stmt | None:
        for i, c in enumerate(s.stmts if isinstance(s, SeqStmt) else ()):
            if isinstance(c, For) and c.ann("rotated"):
                return dataclasses.replace(s, stmts=s.stmts[:i + 1] + tuple(early) + s.stmts[i + 1:])
            new = place(c)
            if new is not None:
                return dataclasses.replace(s, stmts=s.stmts[:i] + (new,) + s.stmts[i + 1:])
        return None

    for i in range(len(stmts) - 1, -1, -1):
        new = place(stmts[i])
        if new is not None:
            return stmts[:i] + [new] + stmts[i + 1:]
    raise AssertionError("the rotated loop the handoff was planned for is gone")


def _whole(b: Buffer) -> Region:
    return Region(b, tuple(const(0) for _ in b.shape), tuple(int(d) for d in b.shape))


def _tma_refusal(g: Buffer, tile: tuple[int, ...]) -> str | None:
    """Why no tensor map can describe ``g`` (static shape, no size 0, contiguous: the map's strides are the
    row-major ones, every row stride a multiple of 16 bytes) with a box of the tile's rows (at most 256), or None
    where one can. A ``T.StridedTensor`` keeps the staged stores, which follow its strides."""
    shape = g.static_shape
    if shape is None:
        return f"'{g.name}' has a symbolic shape (a tensor map's sizes are fixed at compile time)"
    if g.strides is not None:
        return f"'{g.name}' is a T.StridedTensor (a tensor map's rows would be row-major)"
    if 0 in shape:
        return f"'{g.name}' has a dimension of size 0 (a tensor map's sizes start at 1)"
    row = shape[-1] * g.dtype.bits // 8
    if row % 16:
        return f"'{g.name}' has rows of {row} bytes, not a multiple of 16 (a tensor map's row pitch)"
    if tile[0] > 256:
        return f"the tile's {tile[0]} rows pass a TMA box's 256"
    return None


def _vectors(c: Copy) -> str:
    """The stores of the staged tile to ``c``'s destination, in words: as wide as the lowering makes them
    (:func:`tilec.lower.ops.widest_vector`; the staging tile's swizzle keeps 16-byte runs of a row contiguous, so
    the global side and ``coalesced_width`` decide)."""
    from tilec.lower.ops import global_contiguous, widest_vector

    g = c.dst.buffer
    v = widest_vector(g.dtype, int(c.dst.extents[-1]), c.coalesced_width, lambda v: global_contiguous(c.dst, v))
    nbytes = v * g.dtype.bits // 8
    return f"in {nbytes}-byte vectors" if v > 1 else f"one element ({nbytes} bytes) a store"


SLACK = 2048  # bytes kept free for the arena's 1024-byte alignment and the mbarriers


def _bytes(b: Buffer) -> int:
    return math.prod(int(d) for d in b.shape) * b.dtype.bits // 8


def _uses(s: Stmt) -> set[int]:
    out: set[int] = set()
    for n in walk(s):
        if isinstance(n, TileOp):
            out |= {id(r.buffer) for r in n.reads() + n.writes()}
        buf = getattr(n, "buffer", None)
        if isinstance(buf, Buffer):
            out.add(id(buf))
    return out


class _Stager:
    def __init__(self, launch: KernelLaunch, tma: bool, smem_limit: int, handoff: bool = True,
                 buffers: int = 2, held: bool = True) -> None:
        self.launch = launch
        self.handoff = handoff  # pass config stage_handoff
        self.buffers = buffers  # pass config store_buffers
        self.tma = tma  # TMA stores where the tensor allows them
        self.smem_limit = smem_limit
        self.own: list[Buffer] = []  # staging tiles of their own (in loops)
        self.new: list[tuple[Buffer, tuple[Buffer, ...]]] = []
        self.notes: list[str] = []
        self.copies: tuple[int, Any] = (1, None)  # the consumers' copies (WarpRoles.copies) and their index var
        self.by: dict[int, int] = {}  # staging tiles (id) whose stores a warpgroup issues -> that warpgroup
        self.early: list[Stmt] = []  # a handoff's first statements, for the rotated loop's last part (stage_in_loop)
        # whether pass configs store_buffers and stage_handoff had a choice to make (stage_in_loop), and why not
        self.chunked = self.handed = False
        self.unchunked = ""
        self.fates: dict = {}  # stores with disable_tma a TMA store was considered for (record_fate)
        self.held = held  # pass config stage_in_ring
        self.ringable = False  # whether a staged tile could go out through a held stage (stage_in_ring had a choice)
        self.held_waits: dict[int, Stmt] = {}  # held_last main loops (their var's id) -> the wait before the release

    def seq(self, s: Stmt, top: bool = False, looped: bool = False) -> Stmt:
        """The statement sequence ``s`` with its eligible stores staged (recursing into the consumers' part and into
        loops; ``looped``: ``s`` is a loop's body)."""
        items = list(s.stmts) if isinstance(s, SeqStmt) else [s]
        out: list[Stmt] = []
        for i, item in enumerate(items):
            if isinstance(item, WarpRoles) and top:  # the producer's copies into the stages end with the loop
                self.copies = (item.copies, item.copy)
                item = dataclasses.replace(item, else_body=self.seq(item.else_body))
            elif isinstance(item, For) and self.tma:
                mine = len(self.own)
                item = dataclasses.replace(item, body=self.seq(item.body, looped=True))
                if len(self.own) > mine:  # the last trip's stores must have read their tiles before the block ends
                    out.append(item)
                    out.extend(TmaStoreWait(_whole(b), self.by.get(id(b)), loc=item.loc) for b in self.own[mine:])
                    continue
            elif isinstance(item, IfThenElse) and looped and self.copies[0] > 1 and item.else_body is None:
                item = dataclasses.replace(item, then_body=self.seq(item.then_body, looped=True))  # a copy's tile
            elif isinstance(item, Copy):
                staged = (self.stage_in_loop if looped else self.stage)(item, items[:i], items[i + 1:])
                if staged is not None:
                    out = _after_rotated(out, self.early) + staged
                    self.early = []
                    continue
            out.append(item)
        return SeqStmt(tuple(out)) if isinstance(s, SeqStmt) or len(out) != 1 else out[0]

    def stage_in_loop(self, c: Copy, before: list[Stmt], after: list[Stmt]) -> list[Stmt] | None:
        """A store in a loop's body: through a tile of its own, in column chunks, by TMA stores that the next write
        of the tile waits for (see the module docstring)."""
        f, g = c.src.buffer, c.dst.buffer
        shape = self.tma_stageable(c, before)
        if shape is None:
            return None
        rows, cols = shape
        panel = (swizzle_bytes(shape, g.dtype) or cols * g.dtype.bits // 8) * 8 // g.dtype.bits
        free = self.smem_limit - SLACK - sum(_bytes(b) for b in self.launch.allocs + tuple(self.own)
                                             if b.scope == "shared" and b.static_shape is not None
                                             and not any(b is o for o, _ in self.launch.overlays))
        copies, copy = self.copies  # each copy of the consumer threads stages in a tile of its own
        held = self.in_ring(c, before, rows, panel, free) if copies == 1 else None
        if held is not None:
            return held
        width = cols
        while copies * width * rows * g.dtype.bits // 8 > free and width % (2 * panel) == 0:
            width //= 2
        here = where(c.loc)
        if copies * width * rows * g.dtype.bits // 8 > free:
            self.notes.append(f"T.copy at {here}: the accumulator is stored directly: a staging tile of "
                              f"{rows} x {width} needs {width * rows * g.dtype.bits // 8} bytes of shared memory"
                              + (f" for each of {copies} copies of the consumers" if copies > 1 else "")
                              + f", {max(free, 0)} are free")
            return None
        # chunks in two buffers of half the width, in turn: a chunk's write waits for the store two chunks back
        halves = copies == 1 and cols // width >= 2 and width % (2 * panel) == 0
        self.chunked |= halves
        self.unchunked = self.unchunked or ("" if halves else f"each of the {copies} copies of the consumers stages "
                                            "in a tile of its own" if copies > 1 else f"{f.name}_stage is written in "
                                            "one chunk" if width == cols else f"{f.name}_stage's chunks are one "
                                            "swizzle panel wide")
        double = self.buffers == 2 and halves
        width //= 2 if double else 1
        lead = (copies,) if copies > 1 else (2,) if double else ()
        stage = Buffer(f"{f.name}_stage", lead + (rows, width), g.dtype, "shared", loc=c.loc)

        def part(j: int) -> Region:  # the tile (copy's, or buffer's) chunk j is written to
            first = (copy,) if copies > 1 else (const(j % 2),) if double else ()
            return Region(stage, first + (const(0), const(0)), (1,) * len(lead) + (rows, width))

        mine = part(0)
        self.own.append(stage)
        chunks = cols // width
        self.notes.append(f"T.copy at {here}: {f.name} goes out through shared memory of its own ({stage.name}, "
                          f"{'two buffers of ' if double else ''}{rows} x {width}"
                          f"{f', {chunks} chunks' if chunks > 1 else ''}{' in turn' if double else ''}"
                          f"{f', one for each of {copies} copies of the consumers' if copies > 1 else ''}) by TMA "
                          "stores that overlap what follows")
        groups = self.turns(before)
        self.handed |= chunks == 1 and groups > 1
        if chunks == 1 and groups > 1 and self.handoff:
            return self.handed_on(c, mine, groups)
        out: list[Stmt] = []
        for j in range(chunks):
            src = Region(f, (const(0), const(j * width)), (rows, width))
            dst = Region(g, c.dst.starts[:-1] + (binop("+", c.dst.starts[-1], j * width),),
                         c.dst.extents[:-1] + (width,))
            out += [TmaStoreWait(part(j), pending=int(double), loc=c.loc), Copy(src, part(j), loc=c.loc),
                    TmaStore(part(j), dst, wait=False, loc=c.loc, **c.options())]
        return out

    def tma_stageable(self, c: Copy, before: list[Stmt]) -> tuple[int, int] | None:
        """The 2-D shape of the accumulator store ``c`` in a loop's body where it can go out by TMA stores through a
        staging tile, or None (with a note saying why, where TMA stores are what stands in the way)."""
        shape = self.eligible(c, before)
        if shape is None or c.dst.extents[-1] != shape[-1]:
            return None
        why = _tma_refusal(c.dst.buffer, shape)
        record_fate(self.fates, c, why)
        if why is not None:
            self.notes.append(f"T.copy at {where(c.loc)}: the accumulator is stored directly, not by TMA stores: {why}")
            return None
        if c.disable_tma:
            self.notes.append(f"T.copy at {where(c.loc)}: the accumulator is stored directly: disable_tma=True, and "
                              "staging it in a loop needs TMA stores")
            return None
        return shape

    def handed_on(self, c: Copy, mine: Region, groups: int) -> list[Stmt]:
        """The store through staging tile ``mine`` (one chunk) by warpgroups taking turns, which hand the tile on by
        named barriers rather than a barrier of them all: the last one issues the TMA stores."""
        stage = mine.buffer
        self.by[id(stage)] = last = groups - 1
        self.early = [TmaStoreWait(mine, last, loc=c.loc), StageHandoff(mine, "freed", groups, loc=c.loc)]
        self.notes.append(f"T.copy at {where(c.loc)}: the {groups} consumer warpgroups hand {stage.name} on by named "
                          f"barriers (the last issues its TMA stores, waiting for the previous one before its "
                          "last part), not by a barrier of them all")
        return [StageHandoff(mine, "wait_free", groups, loc=c.loc), Copy(c.src, mine, loc=c.loc),
                StageHandoff(mine, "written", groups, loc=c.loc),
                TmaStore(mine, c.dst, False, last, loc=c.loc, **c.options())]

    def in_ring(self, c: Copy, before: list[Stmt], rows: int, width: int, free: int) -> list[Stmt] | None:
        """The tile's first half staged in the ring stage of the main loop's last iteration, which the consumers keep
        until the next trip's first (pass config ``stage_in_ring``; the pipeliner marks such loops ``held_last``),
        the second half in a tile of its own: each half is written whole and stored at once (one barrier before
        each store, no wait inside the epilogue), and the held stage's release first waits for the first half's
        store (the second half's is waited for at the next epilogue's start, a tile later). Where one operand's
        stage holds exactly some whole swizzle panels of the tile (``width`` columns each), no more than half."""
        f, g = c.src.buffer, c.dst.buffer
        loop = next((s for s in before if isinstance(s, For) and s.ann("held_last")), None)
        if loop is None or not (isinstance(loop.extent, Const) and loop.extent.value >= 1):  # a last step to hold
            return None
        cols = int(f.shape[1])
        panel = rows * width * g.dtype.bits // 8
        gemm = next(n for n in walk(loop.body) if isinstance(n, Gemm) and n.C.buffer is f)
        rings = [r for r in (gemm.B, gemm.A) if r.buffer.scope == "shared" and r.buffer.ndim == 3
                 and r.buffer.static_shape is not None and r.extents[0] == 1]
        ring = next((r for r in rings if _bytes(r.buffer) // int(r.buffer.shape[0]) % panel == 0), None)
        if ring is None:
            return None
        stages = int(ring.buffer.shape[0])
        first = _bytes(ring.buffer) // stages // panel * width  # the columns a stage holds
        if first > cols // 2 or (cols - first) * rows * g.dtype.bits // 8 > free:
            return None
        self.ringable = True
        if not self.held:
            return None
        last = substitute(ring.starts[0], {loop.var: binop("-", loop.extent, 1)})  # the stage it keeps
        held = Buffer(f"{f.name}_held", (stages, rows, first), g.dtype, "shared", loc=c.loc)
        own = Buffer(f"{f.name}_stage", (rows, cols - first), g.dtype, "shared", loc=c.loc)
        self.new.append((held, (ring.buffer,)))
        self.own.append(own)
        self.unchunked = self.unchunked or f"{f.name} goes out in two halves instead, the first through the stage " \
            "its main loop read last (stage_in_ring; False stages it in chunks)"
        halves = [(Region(held, (last, const(0), const(0)), (1, rows, first)), 0, first), (_whole(own), first, cols)]
        out: list[Stmt] = [TmaStoreWait(_whole(own), loc=c.loc)]  # the previous trip's store, a tile ago
        for part, a, b in halves:
            dst = Region(g, c.dst.starts[:-1] + (binop("+", c.dst.starts[-1], a),), c.dst.extents[:-1] + (b - a,))
            out += [Copy(Region(f, (const(0), const(a)), (rows, b - a)), part, loc=c.loc),
                    TmaStore(part, dst, wait=False, loc=c.loc, **c.options())]
        # the held stage goes back (at the next trip's first step) once its store has read it: all but the latest
        self.held_waits[id(loop.var)] = IfThenElse(binop("==", loop.var, 0), TmaStoreWait(_whole(held), pending=1,
                                                                                          loc=c.loc), loc=c.loc)
        self.notes.append(f"T.copy at {where(c.loc)}: {f.name} goes out by two TMA stores, its first {first} columns "
                          f"staged in the stage of {ring.buffer.name} the main loop read last ({held.name}, over "
                          f"{ring.buffer.name}, released once the store has read it), the other {cols - first} in "
                          f"{own.name}; neither waits for the other")
        return out

    def turns(self, before: list[Stmt]) -> int:
        """The consumer warpgroups taking turns in a rotated loop among ``before`` whose last part it can hand the
        tile's first step to (:func:`_after_rotated`), or 0."""
        if not any(isinstance(n, For) and n.ann("rotated") for s in before for n in walk(s)):
            return 0
        return max((n.groups for s in before for n in walk(s) if isinstance(n, WarpgroupTurn) and n.copy is None),
                   default=0)

    def eligible(self, c: Copy, before: list[Stmt]) -> tuple[int, int] | None:
        """The 2-D shape of the accumulator ``c`` stores whole to a global tile, when a tensor-core gemm before it
        in the sequence computes it."""
        f, g = c.src.buffer, c.dst.buffer
        shape = f.static_shape
        if f.scope != "fragment" or g.scope != "global" or shape is None or len(shape) != 2 or \
                not c.src.is_full() or tuple(c.dst.squeezed_extents()) != shape or g.dtype.bits not in (16, 32):
            return None
        gemms = [n for s in before for n in walk(s) if isinstance(n, Gemm) and n.C.buffer is f
                 and n.A.dtype.bits <= 16 and n.B.dtype.bits <= 16]  # tensor cores: accumulators in pairs
        return (int(shape[0]), int(shape[1])) if gemms else None

    def stage(self, c: Copy, before: list[Stmt], after: list[Stmt]) -> list[Stmt] | None:
        f, g = c.src.buffer, c.dst.buffer
        shape = self.eligible(c, before)
        if shape is None:
            return None
        gemms = [n for s in before for n in walk(s) if isinstance(n, Gemm) and n.C.buffer is f]
        loop = next(s for s in reversed(before) if any(n is gemms[-1] for n in walk(s)))
        later = set().union(*(_uses(s) for s in before[before.index(loop) + 1:] + after))
        under = list(dict.fromkeys(r.buffer for gm in gemms for r in (gm.A, gm.B) if r.buffer.scope == "shared"
                                   and r.buffer.static_shape is not None and id(r.buffer) not in later | self.taken()))
        stage = Buffer(f"{f.name}_stage", shape, g.dtype, "shared", loc=c.loc)
        fits = [u for u in under if _bytes(u) >= _bytes(stage)]
        here = where(c.loc)
        if not fits:
            self.notes.append(f"T.copy at {here}: the accumulator is stored directly: no shared operand of its "
                              f"gemm idle after the loop has the {_bytes(stage)} bytes a staging tile needs")
            return None
        self.new.append((stage, tuple(fits)))
        why = _tma_refusal(g, shape) if self.tma else None
        if self.tma:
            record_fate(self.fates, c, why)
        tma = self.tma and why is None and not c.disable_tma
        self.notes.append(f"T.copy at {here}: {f.name} goes out through shared memory ({stage.name}, over "
                          f"{', '.join(u.name for u in fits)}), " + ("by TMA stores" if tma else _vectors(c))
                          + (f", not by TMA stores: {why}" if why else " (disable_tma=True)" if self.tma and
                             c.disable_tma else ""))
        zero = tuple(const(0) for _ in shape)
        out = (TmaStore if tma else Copy)(Region(stage, zero, shape), c.dst, loc=c.loc, **c.options())
        return [Copy(c.src, Region(stage, zero, shape), loc=c.loc), out]

    def taken(self) -> set[int]:
        return {id(u) for _, under in self.new for u in under}
