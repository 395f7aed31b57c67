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

import numpy as np

from tilec import dtypes as dt
from tilec.errors import LayoutConflictError, SourceLoc, TilecValueError, where
from tilec.ir.buffer import Buffer
from tilec.ir.expr import Load, Var, const_value
from tilec.ir.stmt import Copy, Gemm, Parallel, Reduce, Store, TileOp, TmaCopy, WarpRoles
from tilec.ir.visit import walk
from tilec.layout import (
    Fragment,
    Layout,
    make_mfma_a_fragment,
    make_mfma_b_fragment,
    make_mfma_c_fragment,
    make_mma_a_fragment,
    make_mma_b_fragment,
    make_mma_c_fragment,
)
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
from tilec.target import Target


@dataclass(frozen=True)
class TensorCore:
    """A tensor-core instruction family as layout inference sees it: its lanes per warp, its accumulator atom
    (rows x columns one warp's instruction covers) and the block-level fragment constructors of C, A and B
    (``(rows, cols, warp_m, warp_n) -> Fragment``)."""

    instr: str
    name: str
    unit: str  # what its warps are called in messages
    lanes: int
    atom: tuple[int, int]
    c: Callable[..., Fragment]
    a: Callable[..., Fragment] | None  # None: operands from shared memory only
    b: Callable[..., Fragment] | None
    dtypes: tuple[dt.DType, ...] = (dt.float16, dt.bfloat16)  # operand dtypes (fp8 on mma: _fp8_reasons)
    k: int = 0  # K of one instruction; 0: 16 for 16-bit operands, 32 for 8-bit ones


TENSOR_CORES = {
    "mma": TensorCore("mma", "mma.m16n8k16", "warps", 32, (16, 8), make_mma_c_fragment, make_mma_a_fragment,
                      make_mma_b_fragment),
    # float32 operands rounded to TF32 (T.gemm's allow_tf32): mma.sync.m16n8k8 with m16n8k16's accumulator layout;
    # operands from shared memory by 32- and 64-bit loads (tilec.lower.gemm)
    "mma_tf32": TensorCore("mma_tf32", "mma.m16n8k8.tf32", "warps", 32, (16, 8), make_mma_c_fragment, None, None,
                           (dt.float32,), 8),
    # MFMA accumulators are the operand-swapped product's (lane l holds C[l % 16, 4 (l // 16) + v], see
    # tilec.lower.mfma): the A operand's layout, so a gemm result (flash attention's P) feeds the next from registers
    "mfma": TensorCore("mfma", "v_mfma_f32_16x16x16", "waves", 64, (16, 16),
                       functools.partial(make_mfma_c_fragment, swapped=True), make_mfma_a_fragment,
                       make_mfma_b_fragment),
}
_INSTR_OF = {"cuda": "mma", "hip": "mfma"}  # a backend's tensor-core instruction
_TF32_OF = {"cuda": ("mma_tf32", 80)}  # a backend's TF32 tensor-core instruction (allow_tf32) and its least sm
# the plan's note on a gemm with allow_tf32 that the TF32 tensor cores cannot run (the reasons before it say why)
TF32_FALLBACK = "; allow_tf32: TF32 tensor cores cannot run it, so it stays exact float32"
EVERYWHERE_MAX = 4096  # iterations of a T.Parallel loop that every thread runs (one writing T.alloc_local arrays)


@dataclass
class GemmPlan:
    """How one ``T.gemm`` runs: a ``warp_m x warp_n`` grid of warps (64-lane wavefronts on AMD), and the
    instruction (``mma``, ``mfma`` or ``simt``)."""

    warp_m: int
    warp_n: int
    instr: str
    why: str = ""


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


class _Inference:
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
            _check_annotation(buf, lay, self.T, at.loc)
            if buf.scope == "fragment":
                self.set_fragment(buf, lay, "strict", at, "T.annotate_layout")
            else:
                self.set_shared(buf, lay, "strict", at, "T.annotate_layout")
        for op in self.ops:
            if isinstance(op, Gemm):
                self.gemm(op)

    def gemm(self, g: Gemm) -> None:
        m, n, k = (int(x) for x in g.mnk)
        plan = self.plan.gemms[g] = self.partition(g, m, n, k)
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

    def partition(self, g: Gemm, m: int, n: int, k: int) -> GemmPlan:
        not_wgmma = ""
        if self.wgmma:
            from tilec.lower.wgmma import wgmma_plan, wgmma_refusal

            plan = wgmma_plan(g, m, n, k, self.T)
            beside = self._register_a_fallback(g, m)
            if plan is not None and beside is None:
                return plan
            not_wgmma = f"; not wgmma: {wgmma_refusal(g, m, n, k, self.T) if plan is None else beside}"
        tf32, tf32_note = _tf32_instr(g, self.target) if g.allow_tf32 else (None, "")
        if tf32 is not None and self.target.sm >= 90 and not self.wgmma:
            tf32_note = "; TF32 on mma.sync, not wgmma"
        tc = TENSOR_CORES.get(tf32 or _INSTR_OF.get(self.target.backend, ""))
        lanes = tc.lanes if tc is not None else 32
        warps = self.T // lanes
        reasons = []
        if tc is None or (self.target.sm and self.target.sm < 80):
            reasons.append(f"target {self.target}")
        if g.A.dtype in _FP8 and g.B.dtype in _FP8 and tc is not None and tc.instr == "mma":
            reasons += _fp8_reasons(g, self.target)
        elif g.A.dtype not in (tc.dtypes if tc is not None else (dt.float16, dt.bfloat16)) or \
                g.B.dtype is not g.A.dtype:
            reasons.append(f"operand dtype {g.A.dtype}")
        if tc is not None and tc.a is None and "fragment" in (g.A.buffer.scope, g.B.buffer.scope):
            reasons.append(f"{tc.name} takes its operands from shared memory only")
        if g.C.dtype is not dt.float32:
            reasons.append(f"accumulator dtype {g.C.dtype}")
        if (g.A.buffer.scope == "fragment" and g.transpose_A) or (g.B.buffer.scope == "fragment" and g.transpose_B):
            reasons.append("a transposed register operand")
        if not g.C.is_full() or g.C.buffer.scope != "fragment":
            reasons.append("C is not a whole fragment")
        reasons += [f"register operand {r} is part of a fragment" for r in (g.A, g.B)
                    if r.buffer.scope == "fragment" and not r.is_full()]  # the atoms' registers are the whole one's
        k_atom = (tc.k if tc is not None else 0) or (256 // g.A.dtype.bits if g.A.dtype.bits in (8, 16) else 16)
        if self.T % lanes or k % k_atom:
            reasons.append(f"K={k} is not a multiple of {k_atom}" if k % k_atom else f"{self.T} threads")
        grid = None if reasons or tc is None else _warp_grid(g.policy, warps, m, n, tc.atom)
        if grid is None:
            if not reasons and tc is not None:
                reasons.append(f"no {g.policy} partition of {warps} {tc.unit} tiles {m}x{n} in "
                               f"{tc.atom[0]}x{tc.atom[1]} atoms")
            if tf32 is not None:
                tf32_note = TF32_FALLBACK
            return GemmPlan(1, 1, "simt", "(fallback: " + ", ".join(reasons) + tf32_note + not_wgmma + ")")
        return GemmPlan(grid[0], grid[1], tc.instr, f"({g.policy}{tf32_note}{not_wgmma})")

    @functools.cached_property
    def ties(self) -> Callable[[Buffer], int]:
        """The group of each fragment whose rows follow the others' (:func:`_fragment_ties` of the kernel's ops)."""
        return _fragment_ties(self.ops)

    def _register_a_fallback(self, g: Gemm, m: int) -> str | None:
        """Why gemm ``g`` (``m`` rows) stays off wgmma for another's sake, or None: a gemm of as many rows whose A is
        in registers, or whose accumulator is tied to ``g``'s by fragments the kernel's loops, reductions and copies
        share (MLA decode's rescale of O by the softmax of S), cannot use wgmma (its N split between warpgroups, say),
        and values computed row by row from one accumulator are used with the other (flash attention's softmax
        between QK^T and PV), so their rows must lie alike over the threads: both on mma.sync."""
        from tilec.lower.wgmma import wgmma_plan, wgmma_refusal

        tied = self.ties
        for op in self.ops:
            if op is g or not isinstance(op, Gemm):
                continue
            if op.A.buffer.scope != "fragment" and tied(op.C.buffer) != tied(g.C.buffer):
                continue
            om, on, ok = (int(x) for x in op.mnk)
            if om == m and wgmma_plan(op, om, on, ok, self.T) is None:
                return (f"the gemm at {where(op.loc)} ({om} rows too) reads A from registers off wgmma "
                        f"({wgmma_refusal(op, om, on, ok, self.T)}), and their accumulators' rows must lie alike")
        return None

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
        accesses = _fragment_accesses(p)
        loop = self.plan.loops.get(p)
        shape = _extents(p)
        if loop is None:
            for buf, dims in self._layout_first(p, accesses):
                f = self.plan.fragments.get(buf)
                if f is not None and _kept(dims) == tuple(range(len(p.vars))) and _squeezed(f.shape, dims) == shape:
                    loop = self.plan.loops[p] = _squeeze(f, dims)
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
            if _covers_part(buf.shape, shape, dims):  # its layout comes from elsewhere; the check then tells
                continue
            kept = _kept(dims)
            frag = loop if kept == tuple(range(len(p.vars))) else replicas_by_register(project(loop, kept))
            frag = frag if len(kept) == len(dims) else frag.reshape(tuple(int(d) for d in buf.shape))
            changed |= self.set_fragment(buf, frag, "common", p, f"indexed by the loop at {where(p.loc)}")
        return changed

    def _layout_first(self, p: Parallel, accesses: list[tuple[Buffer, _Dims]]) -> list[tuple[Buffer, _Dims]]:
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
        if f is loop or holds(loop, _squeeze(f, dims), _kept(dims)):
            return
        src = self.loop_src.get(p)
        how = f"the layout of {src.name}: {self.plan.origin[src][1]} ({_where(self.by[src])})" if src is not None \
            else self.plan.origin[p][1]
        part = ""
        if _covers_part(f.shape, _extents(p), dims):
            part = (f"; the loop covers only part of it (extents {tuple(_extents(p)[d] for d in _kept(dims))} of its "
                    f"shape {_squeezed(f.shape, dims)}): a loop reading a fragment's registers runs over all of it")
        elif self._reroutable(buf):
            read = as_read_by(loop, _kept(dims)).reshape(tuple(int(d) for d in buf.shape))
            if not needs_table(read):
                raise _Reroute(buf, read, f"{self.plan.origin[buf][1]}, as the loop at {where(p.loc)} reads them")
        elif src is not None and self._reroutable(src) and _kept(dims) == tuple(range(len(p.vars))) \
                and _squeezed(f.shape, dims) == _extents(p):  # the loop runs as buf is laid out, src read so
            src_dims = next(d for b, d in _fragment_accesses(p) if b is src)
            read = as_read_by(_squeeze(f, dims), _kept(src_dims)).reshape(tuple(int(d) for d in src.shape))
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
        open_ = [b for op in self.ops for b in _fragments_of(op) if b not in self.plan.fragments]
        if not open_:
            return False
        size = lambda b: math.prod(int(d) for d in b.shape)  # noqa: E731
        buf = max(open_, key=size)  # the first of the largest, in program order
        vec = vector_width(buf.dtype, int(buf.shape[-1])) if buf.shape else 1
        op = next(op for op in self.ops if buf in _fragments_of(op))
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
        """A layout for the accumulator of a scalar-fallback gemm ``g`` whose rows are tied (:func:`_fragment_ties`)
        to another gemm's accumulator of as many rows (the softmax statistics of S = Q K^T rescale O = P V), where
        their layouts would put a row on different threads, and what its rows follow; None where they would not,
        or where none is tied. Values computed row by row from one accumulator are then held where the other's rows
        are: ``g``'s is laid out around (:func:`around`: each row's columns shared out over the threads holding
        that row) the rows of the first tied one laid out already (a tensor-core accumulator), else of :func:`_rows`,
        and the others follow it."""
        c, m, tied = g.C.buffer, int(g.mnk[0]), self.ties
        if c.ndim != 2 or not g.C.is_full():
            return None
        partners = [o for o in self.plan.gemms if o.C.buffer is not c and o.C.buffer.scope == "fragment"
                    and o.C.buffer.ndim == 2 and int(o.mnk[0]) == m and tied(o.C.buffer) == tied(c)]
        laid = next((o for o in partners if o.C.buffer in self.plan.fragments), None)
        alike = [self.plan.fragments[laid.C.buffer]] if laid is not None else [self._even(o.C.buffer) for o in partners]
        if len({_row_threads(f) for f in [self._even(c), *alike]}) == 1:  # as spread, their rows lie alike
            return None
        rows = project(self.plan.fragments[laid.C.buffer], (0,)) if laid is not None else _rows(m, self.T)
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
                held = [(b, dims) for b, dims in _fragment_accesses(op) if b in self.plan.fragments]
                whole = [(b, dims) for b, dims in held if not _covers_part(b.shape, shape, dims)]
                if whole:
                    buf, dims = whole[0]
                    loop = self.plan.loops[op] = around(_squeeze(self.plan.fragments[buf], dims), _kept(dims), shape)
                    self.plan.origin[op] = ("free", f"around {buf.name}")
                    self.loop_src[op] = buf
                elif (private := _private_stores(op)) and not _fragments_of(op):
                    loop = self.plan.loops[op] = self._everywhere(shape, op, private)
                    self.plan.origin[op] = ("free", f"every thread runs all of it ({private[0].name} is private)")
                else:
                    vec = self._coalesced(op, shape) if op.coalesced_width else _loop_vector(op, shape)
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
            if isinstance(op, Parallel) and (private := _private_stores(op)):
                self.check_private(op, private)
        self.note_registers()
        return self.plan

    def note_registers(self) -> None:
        """A report note where the fragments a thread holds at once (:mod:`tilec.passes.held_fragments`: live across
        a statement, not streamed element by element) take more 32-bit registers than a thread of this block can have
        (the target table's per-thread limit, or the register file shared out over the threads): the compiler then
        spills them to local memory, correct but slow. At the line of the largest; the figures are each fragment's
        elements a thread holds times their size over 4 bytes."""
        if not self.target.arch or not self.plan.fragments or self.body is None:
            return
        from tilec.arch import table_model
        from tilec.passes.held_fragments import held_fragments

        model = table_model(self.target.arch)
        limit = model.thread_register_limit(self.T)
        if self.roles is not None:  # warp-specialized: the consumers get what setmaxnreg leaves them
            from tilec.lower.tma import consumer_registers

            limit = consumer_registers(model, self.T * self.roles.copies, self.roles.producer_threads,
                                       self.producer_regs)
        regs = {b: math.ceil(f.num_locals * b.dtype.bits / 32) for b, f in self.plan.fragments.items()}
        held = held_fragments(self.body, regs)
        total = sum(regs[b] for b in held.fragments)
        if total <= limit:
            return
        big = held.fragments
        each = ", ".join(f"{b.name!r} {regs[b]}" for b in big)
        loc = big[0].loc or getattr(self.by.get(big[0]), "loc", None)
        op = held.where
        name = f"T.{op.kind}" if isinstance(op, TileOp) and op.kind != "op" else type(op).__name__
        self.plan.notes.append(
            f"T.alloc_fragment at {where(loc)}: the fragments live at once at the {name} at {where(op.loc)} take about "
            f"{total} 32-bit registers a thread ({each}; an estimate: each fragment live across that statement, its "
            "elements a thread holds times their size over 4 bytes; fragments only streamed element by element "
            "through copies and T.Parallel loops, or reloadable from read-only inputs, and registers for addresses "
            f"are not counted), more than the {limit} a thread of a {self.T}-thread block can have on "
            f"{self.target.arch}{' after setmaxnreg (what the producer warpgroup leaves)' if self.roles else ''}: "
            "the compiler spills them to local memory, correct but slow; "
            f"smaller tiles{' or more threads' if limit == model.regs_per_thread else ''} keep them in registers")

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


def _check_annotation(buf: Buffer, lay: Any, threads: int, loc: SourceLoc | None) -> None:
    """A ``T.annotate_layout`` value (a Fragment or a Layout of its buffer's shape, which T.annotate_layout checked)
    must be a valid Fragment over the block's threads for a fragment, an offset Layout giving each element an offset
    of its own for shared memory."""
    head = f"T.annotate_layout of {buf.scope} {buf.name!r}"
    shape = tuple(int(d) for d in buf.shape)
    if isinstance(lay, Fragment):
        if lay.num_threads != threads:
            raise TilecValueError(f"{head}: the fragment spreads {buf.name!r} over {lay.num_threads} threads; the "
                                  f"block has {threads}", loc)
        if not lay.is_valid():
            raise TilecValueError(f"{head}: {_fragment_fault(buf, lay)} in {lay}", loc)
        return
    if not lay.scalar_output:
        raise TilecValueError(f"{head}: a shared layout must give one offset per element, got {lay}", loc)
    offsets = lay.eval_table().reshape(-1)
    order = np.argsort(offsets, kind="stable")
    same = np.flatnonzero(offsets[order][1:] == offsets[order][:-1])
    if offsets.min() < 0 or same.size:
        k = int(np.argmin(offsets)) if offsets.min() < 0 else int(order[same[0]])
        other = "" if offsets.min() < 0 else f" and {_element(buf, shape, int(order[same[0] + 1]))} both"
        raise TilecValueError(f"{head}: {_element(buf, shape, k)}{other} at offset {int(offsets[k])} in {lay}", loc)


def _fragment_fault(buf: Buffer, frag: Fragment) -> str:
    """Why ``frag`` is not valid: two elements (or replicas) in one register of one thread, or an unused register."""
    threads, locs = (t.reshape(-1) for t in frag.eval_tables())  # element-major, replicas fastest
    codes = threads * frag.num_locals + locs
    order = np.argsort(codes, kind="stable")
    same = np.flatnonzero(codes[order][1:] == codes[order][:-1])
    shape, r = tuple(frag.shape), frag.replicate
    if same.size:
        a, b = (int(order[same[0] + d]) for d in (0, 1))
        return (f"{_element(buf, shape, a // r)} and {_element(buf, shape, b // r)} both in register "
                f"{int(locs[a])} of thread {int(threads[a])}")
    return f"registers of {frag.num_threads} threads x {frag.num_locals} are not all used"


def _element(buf: Buffer, shape: tuple[int, ...], flat: int) -> str:
    return f"{buf.name}[{', '.join(str(int(i)) for i in np.unravel_index(flat, shape))}]"


def _extents(p: Parallel) -> tuple[int | None, ...]:
    """The loop's extents (None where not a constant)."""
    return tuple(e if isinstance(e, int) else None for e in p.extents)


_Dims = tuple[int | None, ...]  # per fragment dimension: the loop variable indexing it, None for a size-1 one at 0


def _covers_part(buf_shape: Any, loop_shape: tuple[int | None, ...], dims: _Dims) -> bool:
    """Whether a loop over ``loop_shape`` indexing a fragment of ``buf_shape`` by its variables ``dims`` runs over
    only part of it (a loop over rows 0-7 of 16)."""
    return _squeezed(buf_shape, dims) != tuple(loop_shape[d] for d in _kept(dims))


def _kept(dims: _Dims) -> tuple[int, ...]:
    """The loop variables of an access, without its size-1 dimensions indexed by 0."""
    return tuple(d for d in dims if d is not None)


def _squeezed(shape: Any, dims: _Dims) -> tuple[int, ...]:
    """A fragment's shape without the size-1 dimensions an access indexes by 0 (``(1, N)`` read as ``b[0, j]``:
    ``(N,)``)."""
    return tuple(int(n) for n, d in zip(shape, dims) if d is not None)


def _squeeze(frag: Fragment, dims: _Dims) -> Fragment:
    """``frag`` seen without the size-1 dimensions the access ``dims`` indexes by 0 (the same threads and registers):
    what the rules for fragments indexed by loop variables alone take."""
    return frag if None not in dims else frag.reshape(_squeezed(frag.shape, dims))


_FP8 = (dt.float8_e4m3, dt.float8_e5m2)


def _tf32_instr(g: Gemm, target: Target) -> tuple[str | None, str]:
    """The TF32 tensor-core instruction of a gemm with ``allow_tf32`` (None where there is none), and the report's
    note on it: why the flag changes nothing."""
    if not (g.A.dtype is g.B.dtype is dt.float32):
        return None, f"; allow_tf32 has no effect: operands are {g.A.dtype}, not float32"
    instr, least = _TF32_OF.get(target.backend, (None, 0))
    if instr is None or (target.sm and target.sm < least):
        return None, f"; allow_tf32: target {target} has no TF32 tensor cores, so it stays exact float32"
    return instr, ""


def _fp8_reasons(g: Gemm, target: Target) -> list[str]:
    """Why ``mma.sync.m16n8k32`` cannot run an fp8 gemm (none when it can): it needs sm_89+ and K-major operands
    in shared memory (ldmatrix transposes only 16-bit elements)."""
    out = []
    if target.sm < 89:
        out.append(f"fp8 tensor cores need sm_89 or newer, target {target}")
    if g.A.buffer.scope != "shared" or g.B.buffer.scope != "shared":
        out.append("an fp8 operand in registers")
    if g.transpose_A or not g.transpose_B:
        out.append("fp8 operands must be K-major (A stored M x K, B stored N x K with transpose_B=True)")
    return out


def _warp_grid(policy: str, warps: int, m: int, n: int, atom: tuple[int, int] = (16, 8)) -> tuple[int, int] | None:
    """(warp_m, warp_n) with warp_m * warp_n == warps tiling m x n in atoms (16x8 for mma, 16x16 for MFMA),
    following the policy."""
    options = [(wm, warps // wm) for wm in range(1, warps + 1) if warps % wm == 0]
    ok = [(wm, wn) for wm, wn in options if m % (atom[0] * wm) == 0 and n % (atom[1] * wn) == 0]
    if not ok:
        return None
    if policy == "FullRow":
        return max(ok, key=lambda g: g[0])
    if policy == "FullCol":
        return max(ok, key=lambda g: g[1])
    return min(ok, key=lambda g: (abs((m / g[0]) / (n / g[1]) - 1.0), -g[0]))


def _rows(m: int, threads: int) -> Fragment:
    """``m`` rows over ``threads``: row ``i`` on threads ``i % g + g r`` for every ``r`` (``g = gcd(m, threads)``),
    in register ``i // g``."""
    g = math.gcd(m, threads)
    if g == threads:
        return Fragment((m,), lambda i: i % g, lambda i: i // g, num_threads=threads, num_locals=m // g)
    return Fragment((m,), lambda i, r: i % g + g * r, lambda i, r: i // g, replicate=threads // g,
                    num_threads=threads, num_locals=m // g)


def _row_threads(frag: Fragment | None) -> tuple[tuple[int, ...], ...] | None:
    """The threads holding each row of a 2-D fragment (None for none)."""
    if frag is None:
        return None
    threads = frag.eval_tables()[0]
    return tuple(tuple(int(t) for t in np.unique(row)) for row in threads.reshape(threads.shape[0], -1))


def _fragment_ties(ops: list[Any]) -> Callable[[Buffer], int]:
    """The group of each fragment: fragments one T.Parallel loop indexes, a reduction's source and result, and a
    fragment copied to another are in one group (their layouts follow each other's rows)."""
    parent: dict[int, int] = {}

    def find(b: Any) -> int:
        k = id(b)
        while parent.get(k, k) != k:
            k = parent[k]
        return k

    def tie(bufs: list[Buffer]) -> None:
        frags = [b for b in bufs if b.scope == "fragment"]
        for b in frags[1:]:
            parent[find(b)] = find(frags[0])

    for op in ops:
        if isinstance(op, Parallel):
            tie([b for b, _ in _fragment_accesses(op)])
        elif isinstance(op, (Reduce, Copy)):
            tie([op.src.buffer, op.dst.buffer])
    return find


def _fragment_accesses(p: Parallel) -> list[tuple[Buffer, _Dims]]:
    """Fragment buffers the loop body indexes by loop variables only, but for dimensions of size 1 indexed by 0 (a
    ``(1, N)`` row vector read as ``b[0, j]``, broadcast like an ``(N,)`` one): (buffer, per dimension the position
    of its variable, None for such a size-1 dimension). An access by no variable at all is not one."""
    pos = {id(v): i for i, v in enumerate(p.vars)}
    out: dict[int, tuple[Buffer, _Dims]] = {}
    for n in walk(p.body):
        if isinstance(n, (Load, Store)) and n.buffer.scope == "fragment":
            dims = tuple(pos[id(i)] if isinstance(i, Var) and id(i) in pos else
                         None if const_value(i) == 0 and const_value(e) == 1 else -1
                         for i, e in zip(n.indices, n.buffer.shape))
            if -1 not in dims and _kept(dims):
                out.setdefault(id(n.buffer), (n.buffer, dims))
    return list(out.values())


def _private_stores(p: Parallel) -> list[Buffer]:
    """T.alloc_local / T.alloc_var buffers the loop body writes."""
    return list({id(n.buffer): n.buffer for n in walk(p.body)
                 if isinstance(n, Store) and n.buffer.scope in ("local", "var")}.values())


def _fragments_of(op: Any) -> list[Buffer]:
    bufs = []
    for n in walk(op):
        if isinstance(n, Buffer) and n.scope == "fragment" and n not in bufs:
            bufs.append(n)
    return bufs


def _loop_vector(p: Parallel, shape: tuple[int, ...]) -> int:
    """Vector width for a loop over global/shared memory: 16 bytes of the narrowest element touched."""
    bits = [n.buffer.dtype.bits for n in walk(p.body) if isinstance(n, (Load, Store))]
    return vector_width(dt.float32 if not bits else _of_bits(min(bits)), shape[-1])


def _of_bits(bits: int) -> dt.DType:
    return {8: dt.int8, 16: dt.float16, 32: dt.float32, 64: dt.float64}.get(bits, dt.float32)


def _uses_wgmma(target: Target, options: dict | None) -> bool:
    return bool((options or {}).get("wgmma")) and target.arch == "sm_90a"


def gemm_plan(g: Gemm, ops: list[Any], threads: int, target: Target, options: dict | None = None) -> GemmPlan:
    """The plan layout inference gives ``g`` among the kernel's tile ``ops`` (its FTG's, in program order): what a
    pass that rewrites a gemm by its instruction (:mod:`tilec.passes.stage_operands`) asks before."""
    inference = _Inference(ops, threads, target, {})
    inference.wgmma = _uses_wgmma(target, options)
    m, n, k = (int(x) for x in g.mnk)
    return inference.partition(g, m, n, k)


def infer_layouts(func: Any, ftg: Any, target: Target, options: dict | None = None) -> LayoutPlan:
    """The :class:`LayoutPlan` of a kernel, from its FTG's ops in program order. ``options`` are the pass
    configs: ``{"wgmma": True}`` lets ``T.gemm`` on sm_90a use wgmma where it can."""
    ops = [ftg.node(n)["op"] for n in ftg.nodes]
    launch = func.launch
    annotations = dict(launch.layout_map)
    locs = dict(zip((b for b, _ in launch.layout_map), launch.layout_locs))
    rerouted: dict[Buffer, tuple[Fragment, str]] = {}
    while True:  # again for each reduction result a loop reads where its rows' projection does not hold it
        inference = _Inference(ops, launch.num_threads, target, annotations, locs, rerouted)
        inference.wgmma = _uses_wgmma(target, options)
        inference.body = launch.body
        inference.roles = next((n for n in walk(launch.body) if isinstance(n, WarpRoles)), None)
        inference.producer_regs = (options or {}).get("producer_regs", 0)
        try:
            return inference.run()
        except _Reroute as e:
            rerouted[e.buf] = (e.frag, e.why)
