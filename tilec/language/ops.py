"""Tile operations: each checks its operands and emits one tile op into the kernel being parsed."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from tilec.errors import TilecTypeError, TilecValueError
from tilec.frontend.builder import Builder, current
from tilec.ir.affine import constant
from tilec.ir.buffer import Buffer, Dim, Region, as_region
from tilec.ir.expr import Expr, Load, as_expr, cast
from tilec.ir.stmt import (
    EVICTION_POLICIES,
    GEMM_POLICIES,
    AtomicAdd,
    AtomicRMW,
    Copy,
    CumSum,
    Fill,
    Gemm,
    Print,
    Reduce,
)
from tilec.language.types import GemmWarpPolicy

BufferLike = Any  # Buffer | Region | Load


def _builder(what: str) -> Builder:
    """The builder of the kernel being parsed, checked before the operands so that a call outside a kernel says so."""
    b = current(what)
    b.require_kernel(what)
    if b.parallel_depth:
        raise TilecTypeError(f"{what} cannot be used inside T.Parallel; tile ops run at block level, "
                             "use element assignments in a T.Parallel body instead")
    return b



def _flag(what: str, name: str, value: Any) -> bool:
    """A True/False option (or 0/1): a string or another object would be taken by its Python truth ("False" is
    true)."""
    if isinstance(value, (numbers.Integral, np.bool_)) and int(value) in (0, 1):
        return bool(value)
    raise TilecTypeError(f"{what}: {name} must be True or False, got {type(value).__name__} {value!r}")


def _dims_equal(a: Dim, b: Dim) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    diff = as_expr(a) - as_expr(b)
    c = constant(diff)
    if c is None:
        from tilec.ir.arith import const_int

        c = const_int(diff)
    return c == 0


def _extents_str(ext: tuple[Dim, ...]) -> str:
    inner = ", ".join(str(e) for e in ext)
    return f"({inner},)" if len(ext) == 1 else f"({inner})"


def _with_extents(ld: Load, like: Region) -> Region:
    """The start-index form ``A[i, j]``: extents from the other operand, aligned to the trailing dimensions (its
    non-unit extents where it has more dimensions than ``ld``)."""
    n = len(ld.indices)
    if len(like.extents) <= n:
        return Region(ld.buffer, ld.indices, (1,) * (n - len(like.extents)) + tuple(like.extents))
    ext = like.squeezed_extents() or (1,)
    if len(ext) > n:
        raise TilecTypeError(f"region of {ld.buffer.name!r} has {n} dimension(s) but the other operand is "
                             f"{len(ext)}-dimensional {_extents_str(ext)}")
    extents = (1,) * (n - len(ext)) + tuple(ext)
    return Region(ld.buffer, ld.indices, extents)


def _pair_regions(what: str, a: BufferLike, b: BufferLike) -> tuple[Region, Region]:
    if isinstance(a, Load) and isinstance(b, Load):
        raise TilecTypeError(f"{what}: both operands are single elements; give at least one a shape (a buffer or "
                             "a slice)")
    ra = _with_extents(a, as_region(b, what)) if isinstance(a, Load) else as_region(a, what)
    rb = _with_extents(b, ra) if isinstance(b, Load) else as_region(b, what)
    ea, eb = ra.squeezed_extents(), rb.squeezed_extents()
    if len(ea) != len(eb) or not all(_dims_equal(x, y) for x, y in zip(ea, eb)):
        raise TilecValueError(f"{what}: operand shapes differ: {ra} has extents {_extents_str(ra.extents)}, "
                              f"{rb} has {_extents_str(rb.extents)}")
    for r in (ra, rb):
        _check_static_bounds(what, r)
    return ra, rb


def _check_static_bounds(what: str, r: Region) -> None:
    """Regions of on-chip buffers must lie inside them; a global region may overhang (it is clipped) but must
    not start past the end or before 0 when that is known at compile time."""
    for d, (s, e, n) in enumerate(zip(r.starts, r.extents, r.buffer.shape)):
        lo = constant(s)
        if isinstance(e, int) and isinstance(n, int) and e > n and r.buffer.scope != "global":
            raise TilecValueError(f"{what}: region {r} has extent {e} in dimension {d} but {r.buffer.name!r} has "
                                  f"size {n} there")
        if lo is None:
            continue
        if lo < 0 or (isinstance(n, int) and lo >= n and n > 0):
            raise TilecValueError(f"{what}: region {r} starts at {lo} in dimension {d}, outside "
                                  f"{r.buffer.name!r} (size {n})")
        if r.buffer.scope != "global" and isinstance(e, int) and isinstance(n, int) and lo + e > n:
            raise TilecValueError(f"{what}: region {r} ends at {lo + e} in dimension {d}, past the end of "
                                  f"{r.buffer.scope} buffer {r.buffer.name!r} (size {n})")


def copy(src: BufferLike, dst: BufferLike, coalesced_width: int | None = None, disable_tma: bool = False,
         eviction_policy: Any = None) -> None:
    """``T.copy(src, dst)``: copy a tile between any two scopes, converting the dtype if they differ.

    Either operand may be a buffer, a slice ``A[a:b, :]`` or a start index ``A[i, j]`` (whose extents are the
    other operand's). Global regions that overhang the tensor are clipped: reads outside are zero, writes
    outside are dropped.

    Parameters
    ----------
    src, dst : buffer, region or start index
        The tiles.
    coalesced_width : int, optional
        The run of consecutive innermost elements each thread moves where the block's threads share the copy out
        (plain loads and stores, and a pipeline's cp.async), in accesses as wide as divide it (narrower vectors, or
        several 16-byte ones). It must divide the destination's innermost extent. Where it cannot apply (TMA moves
        the tile, a fragment's layout places the elements, a run too narrow for cp.async, the CPU interpreter) the
        kernel's report says so. None: the widest access that fits.
    disable_tma : bool
        True: no pass moves this copy by the tensor-memory accelerator (sm_90a): a pipelined loop reading it stays
        a cp.async pipeline, a warp-specialized loop's producer does not preload it, an accumulator's store is not
        a TMA store. Each is noted in the report, as is the flag on a target that moves no copy by TMA.
    eviction_policy : {None, "evict_normal", "evict_first", "evict_last"}
        The L2 eviction priority of the copy's global loads and stores on CUDA targets (``.L2::cache_hint`` with a
        ``createpolicy`` policy on ld/st.global and TMA). ``"evict_normal"`` is the default priority and emits no
        hint. cp.async copies (a pipeline without TMA) take none: ptxas of CUDA 13 can drop the policy their hint
        reads, and the kernel traps (illegal instruction). Other targets (HIP, the interpreters) ignore the hint,
        which changes no result. The report says where the hint is not applied.

    Raises
    ------
    TilecTypeError, TilecValueError
        A value of the options outside the above, naming the option.
    """
    b = _builder("T.copy")
    disable_tma = _flag("T.copy", "disable_tma", disable_tma)
    if eviction_policy is not None and eviction_policy not in EVICTION_POLICIES:
        allowed = f"T.copy: eviction_policy must be None or one of {', '.join(map(repr, EVICTION_POLICIES))}"
        if not isinstance(eviction_policy, str):
            raise TilecTypeError(f"{allowed}, got {type(eviction_policy).__name__} {eviction_policy!r}")
        raise TilecValueError(f"{allowed}, got {eviction_policy!r}")
    s, d = _pair_regions("T.copy", src, dst)
    if coalesced_width is not None:
        coalesced_width = _coalesced_width(coalesced_width, d)
    b.emit(Copy(s, d, disable_tma=disable_tma, eviction_policy=eviction_policy, coalesced_width=coalesced_width,
                loc=b.loc))


def _coalesced_width(width: Any, d: Region) -> int:
    """T.copy's ``coalesced_width``: a positive int dividing the destination's innermost extent (when static)."""
    if isinstance(width, (bool, np.bool_)) or not isinstance(width, numbers.Integral) or width < 1:
        raise TilecTypeError(f"T.copy: coalesced_width must be an int >= 1, got {width!r}")
    inner = constant(d.extents[-1]) if d.extents else 1
    if inner is not None and int(inner) % int(width):
        raise TilecValueError(f"T.copy(coalesced_width={width}): runs of {width} consecutive elements need {width} to "
                              f"divide the innermost extent {inner} of the destination {d}")
    return int(width)


def _policy(policy: Any) -> str:
    if isinstance(policy, GemmWarpPolicy):
        return policy.value
    if isinstance(policy, str) and policy in GEMM_POLICIES:
        return policy
    raise TilecTypeError(f"T.gemm: policy must be a T.GemmWarpPolicy ({', '.join(GEMM_POLICIES)}), got {policy!r}")


def gemm(A: BufferLike, B: BufferLike, C: BufferLike, transpose_A: bool = False, transpose_B: bool = False,
         policy: Any = GemmWarpPolicy.Square, clear_accum: bool = False, k_pack: int = 1, wg_wait: int = 0,
         mbar: Any = None, allow_tf32: bool = False) -> None:
    """``T.gemm(A, B, C)``: ``C += A @ B`` on tiles (``A.T`` / ``B.T`` with the transpose flags).

    A and B live in shared memory or fragments, C in a fragment. ``clear_accum=True`` overwrites C. TileLang's
    ``wg_wait`` is accepted and needs nothing: tilec places the wgmma waits itself (before the first read of C).
    ``allow_tf32=True`` lets a float32 gemm (float32 A, B and C) run on TF32 tensor cores, the products summed in
    float32: ``mma.sync`` m16n8k8 on NVIDIA sm_80 and newer rounds each operand to TF32 (10 mantissa bits, to
    nearest, ties away from zero; the CPU interpreters compute the same); on sm_90a, a gemm with both operands
    K-major in shared memory (A stored M x K, B stored N x K: ``transpose_B``) runs on ``wgmma`` m64nNk8, which
    reads TF32 by ignoring the low 13 mantissa bits (``simt:sm_90a`` computes that). Elsewhere (AMD, other dtypes,
    tiles that do not split into its atoms) the gemm stays as it was, the report saying why.
    """
    if mbar is not None:
        raise TilecTypeError("T.gemm: mbar= (completion on an mbarrier) is not supported; tilec synchronizes the "
                             "gemm itself")
    bld = _builder("T.gemm")
    transpose_A, transpose_B, clear_accum = (_flag("T.gemm", n, v) for n, v in (
        ("transpose_A", transpose_A), ("transpose_B", transpose_B), ("clear_accum", clear_accum)))
    allow_tf32 = _flag("T.gemm", "allow_tf32", allow_tf32)
    if not isinstance(k_pack, numbers.Integral) or isinstance(k_pack, bool) or k_pack < 1:
        raise TilecTypeError(f"T.gemm: k_pack must be an int >= 1, got {k_pack!r}")
    if not isinstance(wg_wait, numbers.Integral) or isinstance(wg_wait, (bool, np.bool_)) or wg_wait < -1:
        raise TilecTypeError(f"T.gemm: wg_wait must be an int >= -1 (TileLang's count of wgmma groups left in "
                             f"flight), got {wg_wait!r}")
    ra, rb, rc = (as_region(x, f"T.gemm operand {n}") for x, n in ((A, "A"), (B, "B"), (C, "C")))
    for r in (ra, rb, rc):
        _check_static_bounds("T.gemm", r)
    ea, eb, ec = (r.squeezed_extents() for r in (ra, rb, rc))
    for name, e, r in (("A", ea, ra), ("B", eb, rb), ("C", ec, rc)):
        if len(e) != 2:
            raise TilecTypeError(f"T.gemm: operand {name} ({r}) must be 2-D, has extents {_extents_str(r.extents)}")
    m, k = (ea[1], ea[0]) if transpose_A else (ea[0], ea[1])
    kb, n = (eb[1], eb[0]) if transpose_B else (eb[0], eb[1])
    if not _dims_equal(k, kb):
        raise TilecValueError(f"T.gemm: reduction sizes differ: A ({ra}, transpose_A={transpose_A}) has K={k}, "
                              f"B ({rb}, transpose_B={transpose_B}) has K={kb}")
    if not (_dims_equal(ec[0], m) and _dims_equal(ec[1], n)):
        raise TilecValueError(f"T.gemm: C ({rc}) is {_extents_str(ec)} but A @ B is ({m}, {n})")
    if rc.buffer.scope != "fragment":  # the GPU lowerings place C by a fragment layout (shared or local had none)
        raise TilecTypeError(f"T.gemm: C ({rc.buffer.name}) must be a fragment (T.alloc_fragment), "
                             f"got scope {rc.buffer.scope!r}")
    for name, r in (("A", ra), ("B", rb)):
        if r.buffer.scope == "global":
            raise TilecTypeError(f"T.gemm: operand {name} ({r.buffer.name}) is a global tensor; copy it to shared "
                                 "memory or a fragment first (T.copy)")
        if r.buffer.scope not in ("shared", "fragment"):  # a thread's own array holds no tile the threads share
            raise TilecTypeError(f"T.gemm: operand {name} ({r.buffer.name}) must be in shared memory or a fragment "
                                 f"(T.alloc_shared, T.alloc_fragment), got scope {r.buffer.scope!r}")
    fp8 = ("float8_e4m3", "float8_e5m2")
    if ra.dtype is not rb.dtype and not (ra.dtype.name in fp8 and rb.dtype.name in fp8):
        raise TilecTypeError(f"T.gemm: A and B must have one dtype (or be two fp8 types), got {ra.dtype} "
                             f"({ra.buffer.name}) and {rb.dtype} ({rb.buffer.name})")
    bld.emit(Gemm(ra, rb, rc, transpose_A, transpose_B, _policy(policy), clear_accum, int(k_pack),
                  allow_tf32=allow_tf32, loc=bld.loc))


def _dim(what: str, r: Region, dim: int) -> int:
    nd = r.ndim
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool) or not -nd <= dim < nd:  # numpy ints too
        raise TilecValueError(f"{what}: dim must be an int in [{-nd}, {nd}) for {r} of shape "
                              f"{_extents_str(r.extents)}, got {dim!r}")
    return int(dim) % nd


def reduce(red: str, src: BufferLike, dst: BufferLike, dim: int = -1, clear: bool = True) -> None:
    what = f"T.reduce_{red}"
    b = _builder(what)
    rs, rd = as_region(src, what), as_region(dst, what)
    for r in (rs, rd):
        _check_static_bounds(what, r)
    d = _dim(what, rs, dim)
    want = rs.extents[:d] + rs.extents[d + 1 :]
    got = rd.extents
    sq_want = tuple(e for e in want if e != 1)
    if len(rd.squeezed_extents()) != len(sq_want) or not all(
        _dims_equal(a, b) for a, b in zip(rd.squeezed_extents(), sq_want)
    ):
        raise TilecValueError(f"{what}: dst {rd} has shape {_extents_str(got)}, expected {_extents_str(want)} "
                              f"(src {rs} of shape {_extents_str(rs.extents)} reduced over dim {d})")
    for r in (rs, rd):
        if r.buffer.scope == "global":
            raise TilecTypeError(f"{what}: {r.buffer.name} is a global tensor; reductions work on shared memory "
                                 "and fragments")
    b.emit(Reduce(red, rs, rd, d, _flag(what, "clear", clear), loc=b.loc))


def reduce_max(buffer: BufferLike, out: BufferLike, dim: int = -1, clear: bool = True) -> None:
    """``out = max(buffer, dim)`` (``max(out, ...)`` when ``clear=False``)."""
    reduce("max", buffer, out, dim, clear)


def reduce_min(buffer: BufferLike, out: BufferLike, dim: int = -1, clear: bool = True) -> None:
    """``out = min(buffer, dim)`` (``min(out, ...)`` when ``clear=False``)."""
    reduce("min", buffer, out, dim, clear)


def reduce_sum(buffer: BufferLike, out: BufferLike, dim: int = -1, clear: bool = True) -> None:
    """``out = sum(buffer, dim)`` (``out + ...`` when ``clear=False``)."""
    reduce("sum", buffer, out, dim, clear)


def reduce_abssum(buffer: BufferLike, out: BufferLike, dim: int = -1, clear: bool = True) -> None:
    """``out = sum(|buffer|, dim)`` (``out + ...`` when ``clear=False``)."""
    reduce("abssum", buffer, out, dim, clear)


def reduce_absmax(buffer: BufferLike, out: BufferLike, dim: int = -1, clear: bool = True) -> None:
    """``out = max(|buffer|, dim)`` (``max(out, ...)`` when ``clear=False``)."""
    reduce("absmax", buffer, out, dim, clear)


def cumsum(src: BufferLike, dst: BufferLike | None = None, dim: int = 0, reverse: bool = False) -> None:
    """Inclusive prefix sum of ``src`` along ``dim`` into ``dst`` (in place when ``dst`` is None)."""
    b = _builder("T.cumsum")
    if dst is None:
        rs = rd = as_region(src, "T.cumsum")
        _check_static_bounds("T.cumsum", rs)
    else:
        rs, rd = _pair_regions("T.cumsum", src, dst)
    d = _dim("T.cumsum", rs, dim)
    b.emit(CumSum(rs, rd, d, _flag("T.cumsum", "reverse", reverse), loc=b.loc))


def fill(buffer: BufferLike, value: Any) -> None:
    """Set every element of a buffer or region to ``value``."""
    b = _builder("T.fill")
    r = as_region(buffer, "T.fill")
    _check_static_bounds("T.fill", r)
    v = cast(r.dtype, as_expr(value, r.dtype, "T.fill: value"))
    b.emit(Fill(r, v, loc=b.loc))


def clear(buffer: BufferLike) -> None:
    """``T.fill(buffer, 0)``."""
    fill(buffer, 0)


def atomic_add(dst: BufferLike, value: Any, memory_order: str | None = None, return_prev: bool = False,
               use_tma: bool = False) -> None:
    """Atomic ``dst += value``: on one element (``dst`` an element, ``value`` a scalar) or on a tile.

    TileLang's ``memory_order`` may only be "relaxed", ``return_prev`` and ``use_tma`` only False: other values are
    refused."""
    if return_prev:
        raise TilecTypeError("T.atomic_add: return_prev=True is not supported")
    if _flag("T.atomic_add", "use_tma", use_tma):  # TileLang's TMA reduce (cp.reduce.async.bulk) of a tile
        raise TilecTypeError("T.atomic_add: use_tma=True (the TMA reduce path) is not supported; tilec adds the tile "
                             "with one atomic add per element (leave use_tma out)")
    if memory_order not in (None, "relaxed"):
        raise TilecTypeError(f"T.atomic_add: memory_order={memory_order!r} is not supported; atomics are relaxed")
    b = current("T.atomic_add")
    b.require_kernel("T.atomic_add")
    if isinstance(value, (Buffer, Region)) or (isinstance(value, Load) and not isinstance(dst, Load)):
        b = _builder("T.atomic_add")  # the tile form is a tile op: block level only
        rd, rs = _pair_regions("T.atomic_add", dst, value)
        _atomic_scope(rd.buffer)
        b.emit(AtomicAdd(rd, rs, loc=b.loc))
        return
    if isinstance(dst, (Buffer, Region)):
        tile = dst.name if isinstance(dst, Buffer) else str(dst)
        raise TilecTypeError(f"T.atomic_add: value must be a tile (dst {tile} is a tile), got {type(value).__name__} "
                             f"{value!r}")
    if not isinstance(dst, Load):
        raise TilecTypeError(f"T.atomic_add: dst must be an element `A[i, j]` or a tile, got {dst!r}")
    _atomic_scope(dst.buffer)
    v = cast(dst.dtype, as_expr(value, dst.dtype, "T.atomic_add: value"))
    b.emit(AtomicRMW("add", dst.buffer, dst.indices, v, loc=b.loc))


def _atomic_scope(buf: Buffer) -> None:
    """Atomics add to memory the threads share: a fragment or a T.alloc_local / T.alloc_var buffer is refused (the
    GPU targets refused it only when lowering; the CPU interpreter added to it)."""
    if buf.scope not in ("global", "shared"):
        raise TilecTypeError(f"T.atomic_add: dst must be a global or shared buffer, got {buf.name!r} in {buf.scope} "
                             "memory (add to it with a plain assignment)")


def print(value: Any, msg: str = "", warp_group_id: int = 0, warp_id: int = 0) -> None:  # noqa: A001
    """``T.print(x, msg="...")``: print a buffer (once per block) or a scalar value when the kernel runs.

    TileLang's ``warp_group_id`` / ``warp_id`` (which thread prints) may only be 0: tilec prints a shared or global
    buffer and a scalar from thread 0, and each fragment element from the thread that holds it."""
    b = current("T.print")
    b.require_kernel("T.print")
    for name, sel in (("warp_group_id", warp_group_id), ("warp_id", warp_id)):
        if not isinstance(sel, numbers.Integral) or isinstance(sel, (bool, np.bool_)):
            raise TilecTypeError(f"T.print: {name} must be an int, got {type(sel).__name__} {sel!r}")
        if sel != 0:
            raise TilecTypeError(f"T.print: {name}={sel!r} is not supported: tilec prints a shared or global buffer "
                                 "and a scalar from thread 0 of the block, and each fragment element from the thread "
                                 "that holds it (leave warp_group_id and warp_id out)")
    if isinstance(value, (Buffer, Region)):
        val: Region | Expr = as_region(value, "T.print")
    else:
        val = as_expr(value)
    b.emit(Print(val, str(msg), loc=b.loc))
