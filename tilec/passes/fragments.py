"""Fragments as layout inference (:mod:`.layout_inference`) sees them: which fragments a ``T.Parallel`` loop indexes
by its variables and how, which fragments follow each other's rows, the row spreads it builds, a loop's vector width,
and the checks of a ``T.annotate_layout`` value."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tilec import dtypes as dt
from tilec.errors import SourceLoc, TilecValueError
from tilec.ir.buffer import Buffer
from tilec.ir.expr import Load, Var, const_value
from tilec.ir.stmt import Copy, Parallel, Reduce, Store
from tilec.ir.visit import walk
from tilec.layout import Fragment
from tilec.lower.layouts import vector_width

Dims = tuple[int | None, ...]  # per fragment dimension: the loop variable indexing it, None for a size-1 one at 0


def loop_extents(p: Parallel) -> tuple[int | None, ...]:
    """The loop's extents (None where not a constant)."""
    return tuple(e if isinstance(e, int) else None for e in p.extents)


def covers_part(buf_shape: Any, loop_shape: tuple[int | None, ...], dims: Dims) -> bool:
    """Whether a loop over ``loop_shape`` indexing a fragment of ``buf_shape`` by its variables ``dims`` runs over
    only part of it (a loop over rows 0-7 of 16)."""
    return squeezed_shape(buf_shape, dims) != tuple(loop_shape[d] for d in kept_dims(dims))


def kept_dims(dims: Dims) -> tuple[int, ...]:
    """The loop variables of an access, without its size-1 dimensions indexed by 0."""
    return tuple(d for d in dims if d is not None)


def squeezed_shape(shape: Any, dims: Dims) -> tuple[int, ...]:
    """A fragment's shape without the size-1 dimensions an access indexes by 0 (``(1, N)`` read as ``b[0, j]``:
    ``(N,)``)."""
    return tuple(int(n) for n, d in zip(shape, dims) if d is not None)


def squeeze_frag(frag: Fragment, dims: Dims) -> Fragment:
    """``frag`` seen without the size-1 dimensions the access ``dims`` indexes by 0 (the same threads and registers):
    what the rules for fragments indexed by loop variables alone take."""
    return frag if None not in dims else frag.reshape(squeezed_shape(frag.shape, dims))


def fragment_accesses(p: Parallel) -> list[tuple[Buffer, Dims]]:
    """Fragment buffers the loop body indexes by loop variables only, but for dimensions of size 1 indexed by 0 (a
    ``(1, N)`` row vector read as ``b[0, j]``, broadcast like an ``(N,)`` one): (buffer, per dimension the position
    of its variable, None for such a size-1 dimension). An access by no variable at all is not one."""
    pos = {id(v): i for i, v in enumerate(p.vars)}
    out: dict[int, tuple[Buffer, Dims]] = {}
    for n in walk(p.body):
        if isinstance(n, (Load, Store)) and n.buffer.scope == "fragment":
            dims = tuple(pos[id(i)] if isinstance(i, Var) and id(i) in pos else
                         None if const_value(i) == 0 and const_value(e) == 1 else -1
                         for i, e in zip(n.indices, n.buffer.shape))
            if -1 not in dims and kept_dims(dims):
                out.setdefault(id(n.buffer), (n.buffer, dims))
    return list(out.values())


def fragment_ties(ops: list[Any]) -> Callable[[Buffer], int]:
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
            tie([b for b, _ in fragment_accesses(op)])
        elif isinstance(op, (Reduce, Copy)):
            tie([op.src.buffer, op.dst.buffer])
    return find


def private_stores(p: Parallel) -> list[Buffer]:
    """T.alloc_local / T.alloc_var buffers the loop body writes."""
    return list({id(n.buffer): n.buffer for n in walk(p.body)
                 if isinstance(n, Store) and n.buffer.scope in ("local", "var")}.values())


def fragments_of(op: Any) -> list[Buffer]:
    bufs = []
    for n in walk(op):
        if isinstance(n, Buffer) and n.scope == "fragment" and n not in bufs:
            bufs.append(n)
    return bufs


def loop_vector(p: Parallel, shape: tuple[int, ...]) -> int:
    """Vector width for a loop over global/shared memory: 16 bytes of the narrowest element touched."""
    bits = [n.buffer.dtype.bits for n in walk(p.body) if isinstance(n, (Load, Store))]
    return vector_width(dt.float32 if not bits else dtype_of_bits(min(bits)), shape[-1])


def dtype_of_bits(bits: int) -> dt.DType:
    return {8: dt.int8, 16: dt.float16, 32: dt.float32, 64: dt.float64}.get(bits, dt.float32)


def rows_over(m: int, threads: int) -> Fragment:
    """``m`` rows over ``threads``: row ``i`` on threads ``i % g + g r`` for every ``r`` (``g = gcd(m, threads)``),
    in register ``i // g``."""
    g = math.gcd(m, threads)
    if g == threads:
        return Fragment((m,), lambda i: i % g, lambda i: i // g, num_threads=threads, num_locals=m // g)
    return Fragment((m,), lambda i, r: i % g + g * r, lambda i, r: i // g, replicate=threads // g,
                    num_threads=threads, num_locals=m // g)


def row_threads(frag: Fragment | None) -> tuple[tuple[int, ...], ...] | None:
    """The threads holding each row of a 2-D fragment (None for none)."""
    if frag is None:
        return None
    threads = frag.eval_tables()[0]
    return tuple(tuple(int(t) for t in np.unique(row)) for row in threads.reshape(threads.shape[0], -1))


def check_annotation(buf: Buffer, lay: Any, threads: int, loc: SourceLoc | None) -> None:
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
            raise TilecValueError(f"{head}: {fragment_fault(buf, lay)} in {lay}", loc)
        return
    if not lay.scalar_output:
        raise TilecValueError(f"{head}: a shared layout must give one offset per element, got {lay}", loc)
    offsets = lay.eval_table().reshape(-1)
    order = np.argsort(offsets, kind="stable")
    same = np.flatnonzero(offsets[order][1:] == offsets[order][:-1])
    if offsets.min() < 0 or same.size:
        k = int(np.argmin(offsets)) if offsets.min() < 0 else int(order[same[0]])
        other = "" if offsets.min() < 0 else f" and {element_name(buf, shape, int(order[same[0] + 1]))} both"
        raise TilecValueError(f"{head}: {element_name(buf, shape, k)}{other} at offset {int(offsets[k])} in {lay}", loc)


def fragment_fault(buf: Buffer, frag: Fragment) -> str:
    """Why ``frag`` is not valid: two elements (or replicas) in one register of one thread, or an unused register."""
    threads, locs = (t.reshape(-1) for t in frag.eval_tables())  # element-major, replicas fastest
    codes = threads * frag.num_locals + locs
    order = np.argsort(codes, kind="stable")
    same = np.flatnonzero(codes[order][1:] == codes[order][:-1])
    shape, r = tuple(frag.shape), frag.replicate
    if same.size:
        a, b = (int(order[same[0] + d]) for d in (0, 1))
        return (f"{element_name(buf, shape, a // r)} and {element_name(buf, shape, b // r)} both in register "
                f"{int(locs[a])} of thread {int(threads[a])}")
    return f"registers of {frag.num_threads} threads x {frag.num_locals} are not all used"


def element_name(buf: Buffer, shape: tuple[int, ...], flat: int) -> str:
    return f"{buf.name}[{', '.join(str(int(i)) for i in np.unravel_index(flat, shape))}]"
