"""Layout inference (stage 4): where each fragment lives across threads, how each shared buffer is laid out,
and how each ``T.Parallel`` loop is spread over the threads. Pre: verified Tile IR and its FTG.
Post: a :class:`LayoutPlan`; the IR is unchanged.

Constraint propagation in three levels, each a fixpoint over the FTG's ops in program order:

* *strict*: ``T.annotate_layout``; ``T.gemm`` operands and accumulators (the instruction's fragment layouts
  for the chosen warp partition, swizzled shared memory for tensor-core operands): ``mma.m16n8k16`` on CUDA
  (``mma.m16n8k8`` on float32 operands rounded to TF32 where the gemm allows it: ``allow_tf32``),
  ``v_mfma_f32_16x16x16`` over 64-lane wavefronts on HIP (:data:`TENSOR_CORES`);
* *common*: through fragment-to-fragment copies, reductions (the result lives on the threads of its rows)
  and parallel loops (a loop takes the layout of a fragment it indexes by exactly its variables; row
  vectors it indexes by some of them take the projection). A dimension of size 1 indexed by 0 counts as
  absent: ``b[0, j]`` of a ``(1, N)`` fragment is ``b[j]`` of an ``(N,)`` one, laid out the same. A reduction's
  result that a loop reads where the projection does not hold it (a thread's registers straddling rows) is laid
  out as the loop reads it instead, a row in each register the loop runs it in, and inference starts again; the
  reduction converts its rows to that through shared memory. A loop writing such a result runs as it is laid out,
  and another reduction's result that loop reads where that layout does not hold it is laid out alike;
* *free*: fragments still open get an even spread over the threads, then loops without fragments too. The
  accumulator of a gemm on the scalar FMA path whose rows are tied to another gemm's accumulator of as many rows
  (flash attention and MLA decode: S's softmax statistics rescale O) is laid out around that one's rows where the
  two spreads would put a row on different threads: each row's columns shared out over the threads holding that
  row of the other (a tensor-core accumulator, or a scalar one laid out so before), else row ``i`` on threads
  ``i % g + g r`` (``g = gcd(rows, threads)``) for the first of them.

A buffer given two different layouts raises :class:`~tilec.errors.LayoutConflictError` naming both ops.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tilec.errors import LayoutConflictError, SourceLoc, TilecValueError, where
from tilec.ir.buffer import Buffer
from tilec.ir.stmt import Copy, Gemm, Parallel, Reduce, Store, TmaCopy, WarpRoles
from tilec.ir.visit import walk
from tilec.layout import Fragment, Layout
from tilec.lower.layouts import (
    around,
    as_read_by,
    default_fragment,
    held_twice,
    holds,
    needs_table,
    operand_layout,
    project,
    replicas_by_register,
    replicated_all,
    swizzle_bytes,
    vector_width,
)
from tilec.passes.fragments import (
    Dims,
    check_annotation,
    covers_part,
    fragment_accesses,
    fragment_ties,
    fragments_of,
    kept_dims,
    loop_extents,
    loop_vector,
    private_stores,
    row_threads,
    rows_over,
    squeeze_frag,
    squeezed_shape,
)
from tilec.passes.gemm_select import TENSOR_CORES, GemmPlan, partition
from tilec.target import Target

EVERYWHERE_MAX = 4096  # iterations of a T.Parallel loop that every thread runs (one writing T.alloc_local arrays)


@dataclass
class LayoutPlan:
    fragments: dict[Buffer, Fragment] = field(default_factory=dict)
    shared: dict[Buffer, Layout] = field(default_factory=dict)
    loops: dict[Parallel, Fragment] = field(default_factory=dict)
    gemms: dict[Gemm, GemmPlan] = field(default_factory=dict)
    origin: dict[Any, tuple[str, str]] = field(default_factory=dict)  # buffer or loop -> (level, why)
    threads: int = 0
    notes: list[str] = field(default_factory=list)  # for the report

    def __str__(self) -> str:
        lines = ["layouts:"]
        for b, f in self.fragments.items():
            lvl, why = self.origin.get(b, ("", ""))
            lines.append(f"  {b.name:<12} fragment {lvl:<6} {f.num_threads} threads x {f.num_locals} locals"
                         f"{f' x{f.replicate} replicas' if f.replicate > 1 else ''}  ({why})")
        for b, lay in self.shared.items():
            lvl, why = self.origin.get(b, ("", ""))
            lines.append(f"  {b.name:<12} shared   {lvl:<6} {lay}  ({why})")
        for g, p in self.gemms.items():
            lines.append(f"  gemm {where(g.loc)}: {p.instr} with {p.warp_m}x{p.warp_n} warps {p.why}")
        return "\n".join(lines)


@dataclass(frozen=True)
class _Annotation:
    """A ``T.annotate_layout`` entry, as the op that fixed a layout (for error messages)."""

    loc: SourceLoc | None


def _where(op: Any) -> str:
    loc: SourceLoc | None = getattr(op, "loc", None)
    what = "" if isinstance(op, _Annotation) else type(op).__name__.lower()
    if loc is None:
        return what or "T.annotate_layout"
    return f"{what} at {where(loc)}".lstrip()


class _Reroute(Exception):  # noqa: N818 - not an error: inference starts again
    """A reduction's result that a loop reads where the projection of the reduced rows does not hold it: inference
    starts again with the result laid out as the loop reads it (``frag``), which the reduction converts its rows to
    through shared memory."""

    def __init__(self, buf: Buffer, frag: Fragment, why: str) -> None:
        super().__init__(buf.name)
        self.buf, self.frag, self.why = buf, frag, why


class Inference:
    """Layout inference over one kernel's ops: the plan so far, which op fixed each layout (for the errors that name
    both of two conflicting ops), and the three levels of rules; :mod:`.gemm_select` takes it as ``inf``."""

    def __init__(self, ops: list[Any], threads: int, target: Target, annotations: dict,
                 annotation_locs: dict | None = None, rerouted: dict | None = None) -> None:
        self.ops = ops
        self.T = threads
        self.target = target
        self.plan = LayoutPlan(threads=threads)
        self.annotations = annotations
        self.annotation_locs = annotation_locs or {}
        self.loop_src: dict[Parallel, Buffer] = {}  # the fragment a loop took its layout from
        self.checked: set[tuple[Parallel, Buffer]] = set()
        self.wgmma = False  # T.gemm may use wgmma (sm_90a with the "wgmma" pass config)
        self.body: Any = None  # the kernel's body (the register note's liveness)
        self.roles: WarpRoles | None = None  # warp specialization: the consumers' registers come from setmaxnreg
        self.producer_regs = 0  # pass config producer_regs
        self.by: dict[Any, Any] = {}  # buffer -> op that fixed its layout
        self.rerouted: dict[Buffer, tuple[Fragment, str]] = rerouted or {}  # reduction results laid out as read

    # ---------------------------------------------------------------------------------------- recording

    def set_fragment(self, buf: Buffer, frag: Fragment, level: str, op: Any, why: str) -> bool:
        old = self.plan.fragments.get(buf)
        if old is not None:
            if old is frag or old.equals(frag):
                return False
            raise LayoutConflictError(
                f"fragment {buf.name!r} needs two different layouts: {self.plan.origin[buf][1]} "
                f"({_where(self.by[buf])}) and {why} ({_where(op)}); copy it through a shared buffer "
                "(T.copy) or change one op", getattr(op, "loc", None))
        if tuple(frag.shape) != tuple(buf.shape):
            raise LayoutConflictError(f"layout of shape {frag.shape} given to {buf.name!r} of shape {buf.shape}",
                                      getattr(op, "loc", None))
        self.plan.fragments[buf] = frag
        self.plan.origin[buf] = (level, why)
        self.by[buf] = op
        return True

    def set_shared(self, buf: Buffer, lay: Layout, level: str, op: Any, why: str) -> None:
        old = self.plan.shared.get(buf)
        if old is not None and not (old is lay or old.equals(lay)):
            raise LayoutConflictError(f"shared buffer {buf.name!r} needs two layouts: {self.plan.origin[buf][1]} "
                                      f"({_where(self.by[buf])}) and {why} ({_where(op)})", getattr(op, "loc", None))
        self.plan.shared[buf] = lay
        self.plan.origin[buf] = (level, why)
        self.by[buf] = op

    # ------------------------------------------------------------------------------------------- strict

    def strict(self) -> None:
        for buf, lay in self.annotations.items():
            at = _Annotation(self.annotation_locs.get(buf))
            check_annotation(buf, lay, self.T, at.loc)
            if buf.scope == "fragment":
                self.set_fragment(buf, lay, "strict", at, "T.annotate_layout")
            else:
                self.set_shared(buf, lay, "strict", at, "T.annotate_layout")
        for op in self.ops:
            if isinstance(op, Gemm):
                self.gemm(op)

    def gemm(self, g: Gemm) -> None:
        m, n, k = (int(x) for x in g.mnk)
        plan = self.plan.gemms[g] = partition(self, g, m, n, k)
        if plan.instr == "wgmma":
            from tilec.lower.wgmma import wgmma_layouts

            for buf, lay, why in wgmma_layouts(g, m, n, k, plan):
                if buf.scope == "fragment":
                    self.set_fragment(buf, lay, "strict", g, why)
                elif buf not in self.annotations:
                    self.set_shared(buf, lay, "strict", g, why)
            return
        tc = TENSOR_CORES.get(plan.instr)
        if tc is None:
            return
        c, a, b = g.C.buffer, g.A.buffer, g.B.buffer
        self.set_fragment(c, tc.c(m, n, plan.warp_m, plan.warp_n), "strict", g,
                          f"{tc.name} accumulator, {plan.warp_m}x{plan.warp_n} {tc.unit}")
        for buf, is_a in ((a, True), (b, False)):
            if buf.scope == "shared" and buf not in self.annotations:
                self.set_shared(buf, operand_layout(tuple(buf.shape), buf.dtype), "strict", g, "tensor-core operand")
            elif buf.scope == "fragment":
                frag = tc.a(m, k, plan.warp_m, plan.warp_n) if is_a else tc.b(k, n, plan.warp_m, plan.warp_n)
                self.set_fragment(buf, frag, "strict", g, f"{tc.name} {'A' if is_a else 'B'} operand")

    @functools.cached_property
    def ties(self) -> Callable[[Buffer], int]:
        """The group of each fragment whose rows follow the others' (:func:`fragment_ties` of the kernel's ops)."""
        return fragment_ties(self.ops)

    # ------------------------------------------------------------------------------------------- common

    def common(self) -> bool:
        changed = False
        for op in self.ops:
            if isinstance(op, Copy):
                changed |= self.copy(op)
            elif isinstance(op, Reduce):
                changed |= self.reduce(op)
            elif isinstance(op, Parallel):
                changed |= self.parallel(op)
        return changed

    def copy(self, c: Copy) -> bool:
        s, d = c.src.buffer, c.dst.buffer
        if s.scope == d.scope == "fragment" and c.src.is_full() and c.dst.is_full() and s.shape == d.shape:
            fs, fd = self.plan.fragments.get(s), self.plan.fragments.get(d)
            if fs is not None and fd is None:
                return self.set_fragment(d, fs, "common", c, f"copied from {s.name}")
            if fd is not None and fs is None:
                return self.set_fragment(s, fd, "common", c, f"copied to {d.name}")
        return False

    def reduce(self, r: Reduce) -> bool:
        s, d = r.src.buffer, r.dst.buffer
        fs = self.plan.fragments.get(s)
        if s.scope == d.scope == "fragment" and fs is not None and d not in self.plan.fragments and r.dst.is_full():
            if d in self.rerouted:
                return self.set_fragment(d, self.rerouted[d][0], "common", r, self.rerouted[d][1])
            keep = tuple(i for i in range(s.ndim) if i != r.dim)
            rows = project(fs, keep)
            if rows.shape != tuple(int(e) for e in d.shape):  # the result keeps unit dims, e.g. (M, 1)
                rows = rows.reshape(tuple(int(e) for e in d.shape))
            if needs_table(rows):  # no formula gives its holders: left to the free rule (an even spread), the
                return False  # reduction then converts its result to that
            return self.set_fragment(d, rows, "common", r, f"rows of {s.name}")
        return False

    def parallel(self, p: Parallel) -> bool:
        changed = False
        accesses = fragment_accesses(p)
        loop = self.plan.loops.get(p)
        shape = loop_extents(p)
        if loop is None:
            for buf, dims in self._layout_first(p, accesses):
                f = self.plan.fragments.get(buf)
                if f is not None and kept_dims(dims) == tuple(range(len(p.vars))) and \
                        squeezed_shape(f.shape, dims) == shape:
                    loop = self.plan.loops[p] = squeeze_frag(f, dims)
                    self.plan.origin[p] = ("common", f"from {buf.name}")
                    self.loop_src[p] = buf
                    changed = True
                    break
        if loop is None:
            return changed
        for buf, dims in accesses:
            if buf in self.plan.fragments:
                self.check_loop(p, loop, buf, dims)
                continue
            if covers_part(buf.shape, shape, dims):  # its layout comes from elsewhere; the check then tells
                continue
            kept = kept_dims(dims)
            frag = loop if kept == tuple(range(len(p.vars))) else replicas_by_register(project(loop, kept))
            frag = frag if len(kept) == len(dims) else frag.reshape(tuple(int(d) for d in buf.shape))
            changed |= self.set_fragment(buf, frag, "common", p, f"indexed by the loop at {where(p.loc)}")
        return changed

    def _layout_first(self, p: Parallel, accesses: list[tuple[Buffer, Dims]]) -> list[tuple[Buffer, Dims]]:
        """The loop's fragments in the order it takes its layout from them: first those it writes that a thread holds
        in several registers (a row vector laid out as a loop over a larger tile reads it, :func:`as_read_by`), as
        only a loop running an iteration in each of those registers updates every copy; then program order."""
        written = {id(n.buffer) for n in walk(p.body) if isinstance(n, Store)}
        twice = [(b, d) for b, d in accesses if id(b) in written and b in self.plan.fragments
                 and held_twice(self.plan.fragments[b])]
        return twice + [a for a in accesses if a not in twice]

    def _reroutable(self, buf: Buffer) -> bool:
        """Whether ``buf`` is a reduction's result laid out as its rows' projection, which a loop may lay out anew."""
        return isinstance(self.by[buf], Reduce) and self.plan.origin[buf][0] == "common" and buf not in self.rerouted

    def check_loop(self, p: Parallel, loop: Fragment, buf: Buffer, dims: tuple[int, ...]) -> None:
        """A fragment the loop reads or writes must be held where the loop runs (checked once per pair)."""
        key = (p, buf)
        if key in self.checked:
            return
        self.checked.add(key)
        f = self.plan.fragments[buf]
        if f is loop or holds(loop, squeeze_frag(f, dims), kept_dims(dims)):
            return
        src = self.loop_src.get(p)
        how = f"the layout of {src.name}: {self.plan.origin[src][1]} ({_where(self.by[src])})" if src is not None \
            else self.plan.origin[p][1]
        part = ""
        if covers_part(f.shape, loop_extents(p), dims):
            extents, whole = tuple(loop_extents(p)[d] for d in kept_dims(dims)), squeezed_shape(f.shape, dims)
            part = (f"; the loop covers only part of it (extents {extents} of its shape {whole}): a loop reading a "
                    "fragment's registers runs over all of it")
        elif self._reroutable(buf):
            read = as_read_by(loop, kept_dims(dims)).reshape(tuple(int(d) for d in buf.shape))
            if not needs_table(read):
                raise _Reroute(buf, read, f"{self.plan.origin[buf][1]}, as the loop at {where(p.loc)} reads them")
        elif src is not None and self._reroutable(src) and kept_dims(dims) == tuple(range(len(p.vars))) \
                and squeezed_shape(f.shape, dims) == loop_extents(p):  # the loop runs as buf is laid out, src read so
            src_dims = next(d for b, d in fragment_accesses(p) if b is src)
            read = as_read_by(squeeze_frag(f, dims), kept_dims(src_dims)).reshape(tuple(int(d) for d in src.shape))
            if not needs_table(read):
                raise _Reroute(src, read, f"{self.plan.origin[src][1]}, laid out as {buf.name} at {where(p.loc)}")
        raise LayoutConflictError(
            f"fragment {buf.name!r} ({self.plan.origin[buf][1]}, {_where(self.by[buf])}) is not held where the loop "
            f"at {where(p.loc)} runs ({how}){part}; copy one of them through a shared buffer (T.copy) or change one "
            "op", p.loc)

    # --------------------------------------------------------------------------------------------- free

    def free(self) -> bool:
        """Give the largest fragment still open an even spread (smaller ones, such as row vectors, are then
        usually derived from it by the common rules)."""
        open_ = [b for op in self.ops for b in fragments_of(op) if b not in self.plan.fragments]
        if not open_:
            return False
        size = lambda b: math.prod(int(d) for d in b.shape)  # noqa: E731
        buf = max(open_, key=size)  # the first of the largest, in program order
        vec = vector_width(buf.dtype, int(buf.shape[-1])) if buf.shape else 1
        op = next(op for op in self.ops if buf in fragments_of(op))
        gemm = next((g for g, p in self.plan.gemms.items() if g.C.buffer is buf and p.instr == "simt"), None)
        # a scalar-fallback gemm's accumulator: an error or a layout conflict with it names the gemm, and why
        of = f"the accumulator of T.gemm at {where(gemm.loc)} in scalar code " \
            f"{self.plan.gemms[gemm].why}" if gemm else ""
        shape = tuple(int(d) for d in buf.shape)
        tied = self._tied_rows(gemm, shape) if gemm is not None else None
        if tied is not None:
            frag, why = tied[0], f"laid out as {of}, around {tied[1]}, to which its rows are tied"
        else:
            frag = self._spread(shape, vec, gemm or op, f"fragment {buf.name!r}" + (f" ({of})" if of else ""))
            why = "spread over the threads" + (f", {of}" if of else "")
        n = size(buf)
        if n > 1 and frag.replicate == self.T:  # the tile does not spread evenly: every thread holds all of it
            self.plan.notes.append(
                f"T.alloc_fragment at {where(buf.loc or op.loc)}: {buf.name!r} ({n} elements) does not spread evenly "
                f"over the {self.T} threads, so every thread holds and computes the whole tile ({n} registers a "
                f"thread, the work {self.T} times over); a tile whose size is a multiple of the thread count spreads")
        self.set_fragment(buf, frag, "free", op, why)
        return True

    def _tied_rows(self, g: Gemm, shape: tuple[int, ...]) -> tuple[Fragment, str] | None:
        """A layout for the accumulator of a scalar-fallback gemm ``g`` whose rows are tied (:func:`fragment_ties`)
        to another gemm's accumulator of as many rows (the softmax statistics of S = Q K^T rescale O = P V), where
        their layouts would put a row on different threads, and what its rows follow; None where they would not,
        or where none is tied. Values computed row by row from one accumulator are then held where the other's rows
        are: ``g``'s is laid out around (:func:`around`: each row's columns shared out over the threads holding
        that row) the rows of the first tied one laid out already (a tensor-core accumulator), else of
        :func:`.fragments.rows_over`, and the others follow it."""
        c, m, tied = g.C.buffer, int(g.mnk[0]), self.ties
        if c.ndim != 2 or not g.C.is_full():
            return None
        partners = [o for o in self.plan.gemms if o.C.buffer is not c and o.C.buffer.scope == "fragment"
                    and o.C.buffer.ndim == 2 and int(o.mnk[0]) == m and tied(o.C.buffer) == tied(c)]
        laid = next((o for o in partners if o.C.buffer in self.plan.fragments), None)
        alike = [self.plan.fragments[laid.C.buffer]] if laid is not None else [self._even(o.C.buffer) for o in partners]
        if len({row_threads(f) for f in [self._even(c), *alike]}) == 1:  # as spread, their rows lie alike
            return None
        rows = project(self.plan.fragments[laid.C.buffer], (0,)) if laid is not None else rows_over(m, self.T)
        frag = around(rows, (0,), shape)
        if needs_table(frag):
            return None
        d = math.gcd(m, self.T)
        return frag, (f"the rows of {laid.C.buffer.name} (the accumulator of T.gemm at {where(laid.loc)})"
                      if laid is not None else f"{m} rows over {self.T} threads (row i on threads i % {d} + {d} r)")

    def _even(self, buf: Buffer) -> Fragment | None:
        """The even spread the free rule gives ``buf`` (None where there is none)."""
        shape = tuple(int(d) for d in buf.shape)
        try:
            return default_fragment(shape, self.T, vector_width(buf.dtype, shape[-1]))
        except TilecValueError:
            return None

    def _spread(self, shape: tuple[int, ...], vec: int, op: Any, what: str) -> Fragment:
        """``default_fragment``, its error naming ``what`` is spread and where (``op``'s line)."""
        try:
            return default_fragment(shape, self.T, vec)
        except TilecValueError as e:
            raise TilecValueError(f"{what}: {e.message}", op.loc) from None

    def _everywhere(self, shape: tuple[int, ...], op: Parallel, private: list[Buffer]) -> Fragment:
        """A loop writing a T.alloc_local / T.alloc_var buffer runs all its iterations on every thread, as each
        thread has its own copy (spread over the threads, each copy would hold only its thread's elements); the
        copies of the loop write shared and global memory from one thread."""
        n = math.prod(shape)
        if n > EVERYWHERE_MAX:
            raise TilecValueError(f"the T.Parallel loop writes {private[0].name!r}, which each thread holds a copy of "
                                  f"(T.alloc_local), so every thread runs all its {n} iterations; at most "
                                  f"{EVERYWHERE_MAX}: use a fragment (T.alloc_fragment) to spread it over the "
                                  "threads", op.loc)
        return replicated_all(shape, self.T)

    def free_shared(self) -> None:
        """A 2-D shared tile written from a fragment, written by TMA or read into a fragment, and otherwise
        unconstrained: the XOR swizzle of tensor-core operands, under which a warp's accesses to fragment rows (8
        rows apart in row-major order: one bank) spread over all banks, while 16-byte runs along a row stay
        contiguous for vector copies; it is also the layout TMA's boxes write (a tile that only copies into
        fragments read, such as Q taken into registers)."""
        read_into_fragments = {id(r.src.buffer) for r in self.ops
                               if isinstance(r, Copy) and r.dst.buffer.scope == "fragment"}
        for op in self.ops:
            if not isinstance(op, Copy) or op.dst.buffer.scope != "shared":
                continue
            if op.src.buffer.scope == "fragment":
                why = f"written from fragment {op.src.buffer.name}: swizzled against bank conflicts"
            elif isinstance(op, TmaCopy):
                why = "written by TMA: the swizzle of its boxes"
            elif id(op.dst.buffer) in read_into_fragments:
                why = "read into a fragment: swizzled against bank conflicts"
            else:
                continue
            buf = op.dst.buffer
            shape = buf.static_shape
            if buf in self.plan.shared or shape is None or not (
                    op.dst.is_full() if len(shape) == 2 else  # or one version of a stack of them, whole
                    len(shape) == 3 and tuple(int(e) for e in op.dst.extents) == (1,) + shape[1:]):
                continue
            if swizzle_bytes(shape[-2:], buf.dtype) is not None:
                self.set_shared(buf, operand_layout(shape, buf.dtype), "free", op, why)

    def free_loops(self) -> None:
        """Loops still open: around a fragment they index by some of their variables (a row vector broadcast
        along a row), else an even spread."""
        for op in self.ops:
            if isinstance(op, Parallel) and op not in self.plan.loops:
                symbolic = [str(e) for e in op.extents if not isinstance(getattr(e, "value", e), int)]
                if symbolic:  # a spread over the threads needs its extents (the CPU interpreter runs any)
                    raise TilecValueError(f"T.Parallel over a symbolic extent ({', '.join(symbolic)}): the GPU "
                                          "targets spread a T.Parallel loop's iterations over the threads at compile "
                                          "time, so its extents must be constants (loop over fixed-size tiles of the "
                                          "symbolic size, guarding the last one with an if)", op.loc)
                shape = tuple(int(e) for e in op.extents)
                held = [(b, dims) for b, dims in fragment_accesses(op) if b in self.plan.fragments]
                whole = [(b, dims) for b, dims in held if not covers_part(b.shape, shape, dims)]
                if whole:
                    buf, dims = whole[0]
                    loop = self.plan.loops[op] = around(squeeze_frag(self.plan.fragments[buf], dims), kept_dims(dims),
                                                        shape)
                    self.plan.origin[op] = ("free", f"around {buf.name}")
                    self.loop_src[op] = buf
                elif (private := private_stores(op)) and not fragments_of(op):
                    loop = self.plan.loops[op] = self._everywhere(shape, op, private)
                    self.plan.origin[op] = ("free", f"every thread runs all of it ({private[0].name} is private)")
                else:
                    vec = self._coalesced(op, shape) if op.coalesced_width else loop_vector(op, shape)
                    loop = self.plan.loops[op] = self._spread(shape, vec, op, "the T.Parallel loop")
                    self.plan.origin[op] = ("free", "spread over the threads")
                for b, d in held:
                    self.check_loop(op, loop, b, d)
        for op in self.ops:
            if isinstance(op, Parallel) and op.coalesced_width and self.plan.origin[op][1] != "spread over the threads":
                self.plan.notes.append(f"T.Parallel at {where(op.loc)}: coalesced_width={op.coalesced_width} has no "
                                       f"effect: the loop runs on a layout it does not choose "
                                       f"({self.plan.origin[op][1]})")

    def _coalesced(self, op: Parallel, shape: tuple[int, ...]) -> int:
        """The user's ``coalesced_width``, which must split the innermost extent and spread evenly."""
        w, n = op.coalesced_width, math.prod(shape)
        if shape[-1] % w or n % (self.T * w):
            raise TilecValueError(f"T.Parallel(coalesced_width={w}): runs of {w} consecutive elements of the "
                                  f"innermost extent {shape[-1]} spread over {self.T} threads need {w} to divide it "
                                  f"and {self.T * w} to divide the loop's {n} iterations", op.loc)
        return w

    def run(self) -> LayoutPlan:
        self.strict()
        while True:
            while self.common():
                pass
            if not self.free():
                break
        self.free_shared()
        self.free_loops()
        for op in self.ops:
            if isinstance(op, Parallel) and (private := private_stores(op)):
                self.check_private(op, private)
        self.note_registers()
        return self.plan

    def note_registers(self) -> None:
        """The report's note where the fragments a thread holds at once take more registers than it can have
        (:func:`.held_fragments.register_note`)."""
        if not self.target.arch or not self.plan.fragments or self.body is None:
            return
        from tilec.passes.held_fragments import register_note

        note = register_note(self.body, self.plan.fragments, self.by, self.target.arch, self.T, self.roles,
                             self.producer_regs)
        if note is not None:
            self.plan.notes.append(note)

    def check_private(self, op: Parallel, private: list[Buffer]) -> None:
        """A loop whose threads share out the iterations (it runs on a fragment's layout) cannot write a
        T.alloc_local / T.alloc_var buffer: each thread's copy would get only that thread's elements."""
        loop = self.plan.loops[op]
        if loop.replicate == self.T and loop.num_locals == math.prod(int(e) for e in op.extents):
            return
        raise LayoutConflictError(
            f"the T.Parallel loop at {where(op.loc)} writes {private[0].name!r}, which each thread holds a copy of "
            f"(T.alloc_local), while it runs on {self.plan.origin[op][1]}: each thread would write only its own "
            f"iterations' elements of its copy; make {private[0].name!r} a fragment (T.alloc_fragment)", op.loc)


def _uses_wgmma(target: Target, options: dict | None) -> bool:
    return bool((options or {}).get("wgmma")) and target.arch == "sm_90a"


def gemm_plan(g: Gemm, ops: list[Any], threads: int, target: Target, options: dict | None = None) -> GemmPlan:
    """The plan layout inference gives ``g`` among the kernel's tile ``ops`` (its FTG's, in program order): what a
    pass that rewrites a gemm by its instruction (:mod:`tilec.passes.stage_operands`) asks before."""
    inference = Inference(ops, threads, target, {})
    inference.wgmma = _uses_wgmma(target, options)
    m, n, k = (int(x) for x in g.mnk)
    return partition(inference, g, m, n, k)


def infer_layouts(func: Any, ftg: Any, target: Target, options: dict | None = None) -> LayoutPlan:
    """The :class:`LayoutPlan` of a kernel, from its FTG's ops in program order. ``options`` are the pass
    configs: ``{"wgmma": True}`` lets ``T.gemm`` on sm_90a use wgmma where it can."""
    ops = [ftg.node(n)["op"] for n in ftg.nodes]
    launch = func.launch
    annotations = dict(launch.layout_map)
    locs = dict(zip((b for b, _ in launch.layout_map), launch.layout_locs))
    rerouted: dict[Buffer, tuple[Fragment, str]] = {}
    while True:  # again for each reduction result a loop reads where its rows' projection does not hold it
        inference = Inference(ops, launch.num_threads, target, annotations, locs, rerouted)
        inference.wgmma = _uses_wgmma(target, options)
        inference.body = launch.body
        inference.roles = next((n for n in walk(launch.body) if isinstance(n, WarpRoles)), None)
        inference.producer_regs = (options or {}).get("producer_regs", 0)
        try:
            return inference.run()
        except _Reroute as e:
            rerouted[e.buf] = (e.frag, e.why)
