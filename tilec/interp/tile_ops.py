"""Tile interpreter rules, one per tile op (registered in :data:`tilec.interp.tile.TILE_RULES`)."""

from __future__ import annotations

import numpy as np

from tilec.dtypes import round_tf32, typed, work_type
from tilec.interp.tile import TileInterpreter, tile_rule
from tilec.ir.buffer import Region
from tilec.ir.stmt import (
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    AtomicAdd,
    BarrierArrive,
    BarrierInit,
    BarrierWait,
    ClusterSync,
    Copy,
    CumSum,
    Fill,
    Gemm,
    PartialAdd,
    PartialSave,
    Print,
    Reduce,
    StageHandoff,
    TmaCopy,
    TmaStore,
    TmaStoreWait,
    WarpgroupTurn,
)  # fmt: skip


def _bounds(it: TileInterpreter, r: Region, env: dict) -> tuple[list[int], list[int]]:
    starts = [int(it.eval(s, env)) for s in r.starts]
    exts = [int(e) if isinstance(e, int) else int(it.eval(e, env)) for e in r.extents]
    return starts, exts


def _window(it: TileInterpreter, r: Region, env: dict) -> tuple[tuple[slice, ...], tuple[slice, ...], list[int]]:
    """(slices of the buffer, slices of the tile, tile extents): the part of the region inside the buffer.

    Regions of global tensors are clipped; any other region must lie inside its buffer.
    """
    starts, exts = _bounds(it, r, env)
    shape = it.mem[r.buffer].shape
    src, dst = [], []
    for d, (s, e, n) in enumerate(zip(starts, exts, shape)):
        lo, hi = max(s, 0), min(s + e, n)
        if r.buffer.scope != "global" and (s < 0 or s + e > n):
            it.fail(f"region {r} spans [{s}, {s + e}) in dimension {d} of {r.buffer.name}, whose size is {n}")
        hi = max(hi, lo)
        src.append(slice(lo, hi))
        dst.append(slice(lo - s, hi - s))
    return tuple(src), tuple(dst), exts


def read(it: TileInterpreter, r: Region, env: dict) -> np.ndarray:
    """The region as an array of its extents (zeros where a global region overhangs its tensor)."""
    src, dst, exts = _window(it, r, env)
    arr = it.mem[r.buffer]
    if all(s.start == 0 and s.stop == e for s, e in zip(dst, exts)):
        return arr[src]
    out = np.zeros(exts, dtype=arr.dtype)
    out[dst] = arr[src]
    return out


def write(it: TileInterpreter, r: Region, value: np.ndarray, env: dict) -> None:
    """Store ``value`` (shaped like the region, unit dimensions aside) into the region, rounding to its dtype."""
    src, dst, exts = _window(it, r, env)
    v = typed(value, r.buffer.dtype)
    v = np.broadcast_to(v, exts) if v.ndim == 0 else v.reshape(exts)
    it.mem[r.buffer][src] = v[dst]


def _squeeze2(x: np.ndarray) -> np.ndarray:
    sq = x.reshape([n for n in x.shape if n != 1]) if x.ndim > 2 else x
    if sq.ndim != 2:
        sq = x.reshape(x.shape[-2:])
    return sq


@tile_rule(Copy)
def _copy(it: TileInterpreter, op: Copy, env: dict) -> None:
    write(it, op.dst, read(it, op.src, env), env)


@tile_rule(Fill)
def _fill(it: TileInterpreter, op: Fill, env: dict) -> None:
    write(it, op.dst, it.eval(op.value, env), env)


@tile_rule(Gemm)
def _gemm(it: TileInterpreter, op: Gemm, env: dict) -> None:
    a = _squeeze2(read(it, op.A, env))
    b = _squeeze2(read(it, op.B, env))
    if op.transpose_A:
        a = a.T
    if op.transpose_B:
        b = b.T
    cdt = op.C.buffer.dtype
    acc = np.float64 if cdt.name == "float64" else (np.int64 if cdt.is_int else np.float32)
    if op.allow_tf32 and a.dtype == b.dtype == np.float32 and cdt.name == "float32":  # as TF32 tensor cores do
        a, b = round_tf32(a), round_tf32(b)
    prod = a.astype(acc) @ b.astype(acc)
    if not op.clear_accum:
        prod = read(it, op.C, env).reshape(prod.shape).astype(acc) + prod
    write(it, op.C, prod, env)


# max and min skip NaN as the GPU's tl::max / tl::min (fmaxf / fminf) do; NaN only where every value is NaN
_REDUCE = {"sum": np.sum, "abssum": np.sum, "max": np.fmax.reduce, "absmax": np.fmax.reduce, "min": np.fmin.reduce}
_COMBINE = {"sum": np.add, "abssum": np.add, "max": np.fmax, "absmax": np.fmax, "min": np.fmin}


@tile_rule(Reduce)
def _reduce(it: TileInterpreter, op: Reduce, env: dict) -> None:
    work = work_type(op.dst.buffer.dtype)
    x = typed(read(it, op.src, env), work)  # each element converted as a cast converts it (floats to ints saturate)
    if op.red in ("abssum", "absmax"):
        x = np.abs(x)
    r = _REDUCE[op.red](x, axis=op.dim)
    if not op.clear:
        r = _COMBINE[op.red](read(it, op.dst, env).reshape(r.shape).astype(work.np), r)
    write(it, op.dst, r, env)


@tile_rule(CumSum)
def _cumsum(it: TileInterpreter, op: CumSum, env: dict) -> None:
    x = typed(read(it, op.src, env), work_type(op.dst.buffer.dtype))
    if op.reverse:
        r = np.flip(np.cumsum(np.flip(x, op.dim), axis=op.dim), op.dim)
    else:
        r = np.cumsum(x, axis=op.dim)
    write(it, op.dst, r, env)


@tile_rule(AtomicAdd)
def _atomic_add(it: TileInterpreter, op: AtomicAdd, env: dict) -> None:
    cur = read(it, op.dst, env)
    add = typed(read(it, op.src, env).reshape(cur.shape), op.dst.buffer.dtype)  # converted as atomicAdd takes it
    work = np.float32 if cur.dtype.kind in "fV" and cur.dtype.itemsize < 4 else cur.dtype
    write(it, op.dst, cur.astype(work) + add.astype(work), env)


@tile_rule(Print)
def _print(it: TileInterpreter, op: Print, env: dict) -> None:
    value = read(it, op.value, env) if isinstance(op.value, Region) else it.eval(op.value, env)
    blk = ", ".join(str(b) for b in it.block)
    msg = f"{op.msg} " if op.msg else ""
    print(f"[block ({blk})] {msg}{value}")


@tile_rule(AsyncCopy)
@tile_rule(TmaCopy)
@tile_rule(TmaStore)
def _async_copy(it: TileInterpreter, op: AsyncCopy, env: dict) -> None:
    """At tile level an asynchronous copy (cp.async or TMA) has the semantics of a copy (the waits order it)."""
    _copy(it, op, env)


@tile_rule(AsyncCommit)
@tile_rule(AsyncWait)
@tile_rule(BarrierInit)
@tile_rule(BarrierArrive)
@tile_rule(BarrierWait)
@tile_rule(ClusterSync)
@tile_rule(TmaStoreWait)
@tile_rule(WarpgroupTurn)
@tile_rule(StageHandoff)
def _async_sync(it: TileInterpreter, op: object, env: dict) -> None:
    pass


@tile_rule(PartialSave)
def _partial_save(it: TileInterpreter, op: PartialSave, env: dict) -> None:
    """Stream-K at tile level: a block's partial sums kept by slot until the block adding them takes them."""
    slot = int(it.eval(op.slot, env))
    if slot in it.partials:
        it.fail(f"slot {slot} of {op.workspace.name} is saved again before its partial sums were added")
    it.partials[slot] = np.array(read(it, op.C, env), dtype=np.float32)


@tile_rule(PartialAdd)
def _partial_add(it: TileInterpreter, op: PartialAdd, env: dict) -> None:
    acc = np.array(read(it, op.C, env), dtype=np.float32)
    for q in range(int(it.eval(op.first, env)), int(it.eval(op.last, env))):
        if q not in it.partials:
            it.fail(f"the partial sums of slot {q} of {op.workspace.name} are added before any block saved them")
        acc += it.partials.pop(q)
    write(it, op.C, acc, env)
