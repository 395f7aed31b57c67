"""Layout constructors used by layout inference: defaults for free fragments and loops, projections of a
fragment onto some of its dimensions (reductions, row vectors), and the shared-memory layouts of GEMM operands."""

from __future__ import annotations

import functools
import math

import numpy as np

from tilec.dtypes import DType
from tilec.errors import TilecValueError
from tilec.layout import Fragment, Layout, row_major, swizzle


@functools.lru_cache(maxsize=1024)
def default_fragment(shape: tuple[int, ...], threads: int, vec: int = 1) -> Fragment:
    """Spread a tile over ``threads``: runs of ``vec`` consecutive elements (row-major) per thread, thread
    ``t`` taking runs ``t, t + threads, ...``; replicated when the tile has fewer elements than threads."""
    n = math.prod(shape)
    while vec > 1 and (shape[-1] % vec or n % (threads * vec)):
        vec //= 2
    if n % (threads * vec) == 0:
        per = n // (threads * vec)

        def thread(*idx):  # noqa: ANN002
            flat = _flat(idx, shape)
            return (flat // vec) % threads

        def local(*idx):  # noqa: ANN002
            flat = _flat(idx, shape)
            return (flat // (vec * threads)) * vec + flat % vec

        return Fragment(shape, thread, local, num_threads=threads, num_locals=per * vec)
    if threads % n == 0:  # fewer elements than threads: each element on threads // n threads
        r = threads // n
        if r == 1:
            return Fragment(shape, lambda *a: _flat(a, shape), lambda *a: 0, num_threads=threads, num_locals=1)
        return Fragment(shape, lambda *a: _flat(a[:-1], shape) + n * a[-1], lambda *a: 0, replicate=r,
                        num_threads=threads, num_locals=1)
    if n <= 4096:  # every thread holds the whole (small) tile
        return Fragment(shape, lambda *a: a[-1], lambda *a: _flat(a[:-1], shape), replicate=threads,
                        num_threads=threads, num_locals=n)
    raise TilecValueError(f"a tile of shape {shape} ({n} elements) cannot be spread evenly over {threads} threads; "
                          f"use sizes whose product is a multiple of {threads}")


def _flat(idx: tuple, shape: tuple[int, ...]):  # noqa: ANN202
    flat = 0
    for i, n in zip(idx, shape):
        flat = flat * n + i
    return flat


def project(frag: Fragment, dims: tuple[int, ...]) -> Fragment:
    """The fragment of a tile indexed by dimensions ``dims`` of ``frag``'s tile, held by the threads that hold
    the corresponding elements of ``frag`` (a row vector of a 2-D tile: the threads of each row).

    Every thread keeps its elements in increasing row-major order, unless then a register of ``frag`` would not
    map to one register of the result on every thread (what loops over ``frag`` and reductions of it need): the
    result's registers then follow ``frag``'s (:func:`_by_source_registers`). When threads would hold different
    numbers of elements, the result is replicated over all threads instead.
    """
    if not dims:  # no dims kept (a vector reduced to one value): a unit dim, held by every thread holding an element
        return project(frag.reshape(frag.shape + (1,)), (frag.ndim,))
    threads, _ = frag.eval_tables()  # shape + (rep,)
    shape = tuple(frag.shape[d] for d in dims)
    T = frag.num_threads
    moved = np.moveaxis(threads, list(dims), list(range(len(dims))))
    holders = moved.reshape(math.prod(shape), -1)  # per projected element: all threads holding a source
    sets = [np.unique(h) for h in holders]
    counts = {len(s) for s in sets}
    per_thread: dict[int, list[int]] = {t: [] for t in range(T)}
    for e, s in enumerate(sets):
        for t in s:
            per_thread[int(t)].append(e)
    sizes = {len(v) for v in per_thread.values()}
    if len(counts) != 1 or len(sizes) != 1:
        return default_fragment(shape, T) if math.prod(shape) < T else replicated_all(shape, T)
    rep = counts.pop()
    t_tab = np.zeros((math.prod(shape), rep), np.int64)
    l_tab = np.zeros((math.prod(shape), rep), np.int64)
    for e, s in enumerate(sets):
        for r, t in enumerate(s):
            t_tab[e, r] = t
            l_tab[e, r] = per_thread[int(t)].index(e)
    sorted_ = Fragment.from_tables(t_tab.reshape(shape + (rep,)), l_tab.reshape(shape + (rep,)), num_threads=T,
                                   num_locals=sizes.pop())
    if holds(frag, sorted_, dims):
        return sorted_
    return _by_source_registers(frag, dims, shape, rep) or sorted_


def _by_source_registers(frag: Fragment, dims: tuple[int, ...], shape: tuple[int, ...], rep: int) -> Fragment | None:
    """The projection of ``frag`` onto ``dims`` whose register ``c`` holds, on every thread, what that thread's
    registers of class ``c`` of ``frag`` project to (registers are of one class where one thread's project to
    one element); None when a class would hold two elements on one thread."""
    inv = inverse_table(frag)  # (T, L, nd [+ rep])
    T, L = inv.shape[:2]
    elem = np.ravel_multi_index(tuple(inv[:, :, d] for d in dims), shape)  # (T, L)
    parent = list(range(L))

    def root(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for t in range(T):
        first: dict[int, int] = {}
        for sl in range(L):
            a, b = root(first.setdefault(int(elem[t, sl]), sl)), root(sl)
            parent[max(a, b)] = min(a, b)
    roots = sorted({root(sl) for sl in range(L)})
    cls = np.array([roots.index(root(sl)) for sl in range(L)])
    held = np.full((T, len(roots)), -1, np.int64)  # the element in each class register of each thread
    for t in range(T):
        for sl in range(L):
            if held[t, cls[sl]] not in (-1, elem[t, sl]):
                return None
            held[t, cls[sl]] = elem[t, sl]
    t_tab = np.zeros((math.prod(shape), rep), np.int64)
    l_tab = np.zeros((math.prod(shape), rep), np.int64)
    count = np.zeros(math.prod(shape), np.int64)
    for t in range(T):
        for c in range(len(roots)):
            e = held[t, c]
            t_tab[e, count[e]], l_tab[e, count[e]] = t, c
            count[e] += 1
    return Fragment.from_tables(t_tab.reshape(shape + (rep,)), l_tab.reshape(shape + (rep,)), num_threads=T,
                                num_locals=len(roots))


def replicas_by_register(frag: Fragment) -> Fragment:
    """``frag`` (a projection, say) with each element's replicas numbered by register, then thread, where ``frag``'s
    inverse needs a lookup table, which code generation does not support, and that one has none; else ``frag``.
    A thread whose registers hold elements of different lines of a tile spread with lines not aligned to the threads
    (8 x 96 over 64 threads: a thread's 3 rows are ``(64 * register + thread) // 24``) makes the flat ``(element,
    replica)`` index a formula of ``(register, thread)``, but none of ``(thread, register)``."""
    if frag.replicate == 1 or not needs_table(frag):
        return frag
    threads, locs = frag.eval_tables()  # shape + (rep,)
    order = np.argsort(locs * frag.num_threads + threads, axis=-1, kind="stable")
    tried = Fragment.from_tables(np.take_along_axis(threads, order, -1), np.take_along_axis(locs, order, -1),
                                 num_threads=frag.num_threads, num_locals=frag.num_locals)
    return frag if needs_table(tried) else tried


def as_read_by(loop: Fragment, dims: tuple[int, ...]) -> Fragment:
    """The fragment of the tile a loop spread by ``loop`` indexes by its dimensions ``dims`` (a row vector read by a
    2-D loop), held in every register the loop runs an iteration over it in: the loop's layout with its other
    dimensions (and its replicas) folded into replicas. A loop can read it wherever it runs, at the cost of as many
    registers as the loop has; for a vector no projection serves (a thread's registers straddling rows)."""
    threads, locs = loop.eval_tables()  # loop.shape + (R,)
    shape = tuple(loop.shape[d] for d in dims)
    moved = list(dims) + [d for d in range(loop.ndim) if d not in dims]
    t, loc = (np.transpose(a, moved + [loop.ndim]).reshape(shape + (-1,)) for a in (threads, locs))
    return Fragment.from_tables(t, loc, num_threads=loop.num_threads, num_locals=loop.num_locals)


def around(frag: Fragment, dims: tuple[int, ...], shape: tuple[int, ...]) -> Fragment:
    """A layout for a loop over ``shape`` that indexes ``frag`` by its dimensions ``dims`` (a row vector read by
    a 2-D loop): each iteration runs on a thread holding ``frag`` at the iteration's ``dims``, in a register that
    does not depend on the thread.

    Iteration ``(e, k)`` (``e`` the indices at ``dims``, ``k`` the row-major index of the other dimensions) runs
    on replica ``k % g + g * s`` of ``frag[e]`` for ``s`` in ``[0, R / g)``, ``g = gcd(R, #k)``, at local
    ``frag_local + num_locals * (k // g)``: the replicas of ``frag`` share the work, and the loop is replicated
    ``R / g`` times where they cannot share it evenly.
    """
    rest = [d for d in range(len(shape)) if d not in dims]
    n_rest = math.prod(shape[d] for d in rest)
    R = frag.replicate
    g = math.gcd(R, n_rest)
    threads, locs = frag.eval_tables()  # frag.shape + (R,)
    idx = np.indices(shape)
    e = tuple(idx[d] for d in dims)
    k = np.ravel_multi_index(tuple(idx[d] for d in rest), tuple(shape[d] for d in rest)) if rest else \
        np.zeros(shape, np.int64)
    rep = (k % g)[..., None] + g * np.arange(R // g)
    t = np.take_along_axis(threads[e], rep, axis=-1)
    loc = np.take_along_axis(locs[e], rep, axis=-1) + frag.num_locals * (k // g)[..., None]
    return Fragment.from_tables(t, loc, num_threads=frag.num_threads, num_locals=frag.num_locals * (n_rest // g))


def holds(loop: Fragment, frag: Fragment, dims: tuple[int, ...]) -> bool:
    """Whether a loop spread by ``loop`` can read ``frag`` at its dimensions ``dims``: every iteration's thread
    holds the element, in a register that is the same on every thread (what lowering needs)."""
    if loop.num_threads != frag.num_threads:
        return False
    inv = loop.inverse().eval_table()
    inv = inv[..., None] if inv.ndim == 2 else inv  # (threads, locals, ndim [+ replica])
    T, L = inv.shape[:2]
    elems = tuple(inv[:, :, d] for d in dims)
    threads = frag.eval_tables()[0]
    if not (threads[elems] == np.arange(T)[:, None, None]).any(axis=-1).all():
        return False
    return common_registers(frag, elems) is not None


def common_registers(frag: Fragment, elems: tuple[np.ndarray, ...], own: np.ndarray | None = None) -> np.ndarray | None:
    """Per column ``c`` of ``elems`` (indices into ``frag``'s tile, each ``(threads, cols)``: the element thread ``t``
    reads for iteration ``c``), the register that holds it on every thread ``t``, which must hold it; None where there
    is none. Where a thread holds an element in several registers (a row vector laid out as a loop reads it,
    :func:`as_read_by`), ``own`` (per column, the loop's register) comes first, then the register of the first replica
    each thread holds, then the least register every thread holds its element in."""
    threads, locs = frag.eval_tables()
    T, cols = elems[0].shape
    match = threads[elems] == np.arange(T)[:, None, None]  # (T, cols, R)
    held = locs[elems]
    if own is not None and (match & (held == np.asarray(own)[None, :, None])).any(axis=-1).all():
        return np.asarray(own)
    local = held[np.arange(T)[:, None], np.arange(cols)[None, :], match.argmax(axis=-1)]
    if (local == local[0:1]).all():
        return local[0]
    every = np.zeros((T, cols, frag.num_locals), bool)  # thread t holds its element of column c in register r
    t, c, r = np.nonzero(match)
    every[t, c, held[t, c, r]] = True
    every = every.all(axis=0)  # (cols, locals)
    return every.argmax(axis=-1) if every.any(axis=-1).all() else None


def held_twice(frag: Fragment) -> bool:
    """Whether a thread holds an element of ``frag`` in two registers (:func:`as_read_by`): a write of the element
    must then reach every one of them."""
    if frag.replicate == 1:
        return False
    threads = np.sort(frag.eval_tables()[0].reshape(-1, frag.replicate), axis=-1)
    return bool((threads[:, 1:] == threads[:, :-1]).any())


def needs_table(frag: Fragment) -> bool:
    """Whether code for ``frag`` would need a lookup table, which code generation does not support: the element a
    thread's register holds (its inverse) is what code computes; which thread holds an element is enumerated at
    compile time."""
    from tilec.layout import Lut

    return any(e.has(Lut) for e in frag.inverse().exprs)


def replicated_all(shape: tuple[int, ...], threads: int) -> Fragment:
    """Every thread holds (runs) all of the tile."""
    return Fragment(shape, lambda *a: a[-1], lambda *a: _flat(a[:-1], shape), replicate=threads,
                    num_threads=threads, num_locals=math.prod(shape))


def operand_layout(shape: tuple[int, ...], dtype: DType) -> Layout:
    """The shared-memory layout of a tensor-core operand tile: the widest XOR swizzle its rows allow (so that
    ``ldmatrix`` rows hit distinct banks), else row-major."""
    if len(shape) == 3:  # stages of a multi-buffered operand, one after another
        return operand_layout(shape[1:], dtype).stack(shape[0])
    if len(shape) != 2:
        return row_major(*shape)
    sw = swizzle_bytes(shape, dtype)
    return row_major(*shape) if sw is None else swizzle(shape, dtype.bits, sw)


def swizzle_bytes(shape: tuple[int, ...], dtype: DType) -> int | None:
    """The XOR swizzle width (128, 64 or 32 bytes) :func:`operand_layout` gives a 2-D tile, or None."""
    row_bytes = shape[-1] * dtype.bits // 8
    for sw in (128, 64, 32):
        if row_bytes % sw == 0 and shape[-2] % 8 == 0:
            return sw
    return None


def vector_width(dtype: DType, inner: int) -> int:
    """Elements per 16-byte access, reduced until it divides the innermost extent."""
    v = max(1, 128 // dtype.bits)
    while v > 1 and inner % v:
        v //= 2
    return v


def inverse_table(frag: Fragment) -> np.ndarray:
    """``(threads, locals, outputs)``: the element index (and replica, when replicated) held in each slot."""
    table = np.asarray(frag.inverse().eval_table(), dtype=np.int64)
    return table[..., None] if table.ndim == 2 else table
