"""Block-level register fragments for GEMM warp partitioning.

A block of ``warp_m x warp_n`` warps computes a ``block_m x block_n`` tile; warp
``(wm, wn)`` owns the sub-tile ``[wm*tile_m, (wm+1)*tile_m) x [wn*tile_n, (wn+1)*tile_n)`` with
``tile_m = block_m / warp_m`` and ``tile_n = block_n / warp_n``.

Conventions (used by code generation):

* **warp numbering**: warp ``(wm, wn)`` is warp ``wm * warp_n + wn`` (``wn`` fastest); its lanes
  are threads ``32 * warp + lane`` (``128 * group + t`` for warpgroups, ``64 * wave + lane``
  for AMD wavefronts).
* **register numbering**: a warp's sub-tile is covered by a grid of instruction atoms; atom
  ``(a0, a1)`` (row-major over the atom grid, the second coordinate fastest) owns locals
  ``[atom * R, (atom + 1) * R)`` with ``R`` the atom's registers per thread, in the atom's own
  (PTX) order: ``local = (a0 * atoms_1 + a1) * R + r``.
* **replication**: an A operand is needed by all ``warp_n`` warps of a warp row, so it is
  replicated ``warp_n`` times (replica ``rep`` lives in warp ``wm * warp_n + rep``); a B operand
  is replicated ``warp_m`` times (replica ``rep`` lives in warp ``rep * warp_n + wn``).
"""

from __future__ import annotations

import functools

from .expr import FloorDiv, FloorMod, index_symbols
from .fragment import Fragment
from .named import (
    mfma_16x16x16_a,
    mfma_16x16x16_b,
    mfma_16x16x16_c,
    mma_m16n8k16_a,
    mma_m16n8k16_b,
    mma_m16n8k16_c,
    wgmma_m64nNk16_c,
)

__all__ = [
    "make_mfma_a_fragment",
    "make_mfma_b_fragment",
    "make_mfma_c_fragment",
    "make_mma_a_fragment",
    "make_mma_b_fragment",
    "make_mma_c_fragment",
    "make_wgmma_c_fragment",
]


def _check_int(value: object, param: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{param} must be a positive int; got {value!r}")
    return value


def _tile(total: int, parts: int, atom: int, total_name: str, parts_name: str | None) -> int:
    _check_int(total, total_name)
    if parts_name is None:
        if total % atom:
            raise ValueError(f"{total_name} must be a multiple of {atom}; got {total}")
        return total
    _check_int(parts, parts_name)
    if total % (parts * atom):
        raise ValueError(
            f"{total_name} must be a multiple of {parts_name} * {atom} = {parts * atom} "
            f"({parts_name}={parts}); got {total}"
        )
    return total // parts


def _atoms(atom: Fragment, tile: tuple[int, int]) -> Fragment:
    reps = (tile[0] // atom.shape[0], tile[1] // atom.shape[1])
    return atom.repeat(reps, on_threads=False, lower_dim_first=False)


def _warps(per_warp: Fragment, grid: tuple[int, int]) -> Fragment:
    return per_warp.repeat(grid, on_threads=True, lower_dim_first=False)


def make_mma_c_fragment(block_m: int, block_n: int, warp_m: int, warp_n: int) -> Fragment:
    """fp32 accumulator of a ``block_m x block_n`` tile built from ``mma.m16n8k16`` atoms.

    ``warp_m * warp_n * 32`` threads; each thread holds ``(tile_m/16) * (tile_n/8) * 4`` values
    (atom order row-major over the m16n8 atom grid, ``c0..c3`` inside an atom).
    """
    tm = _tile(block_m, warp_m, 16, "block_m", "warp_m")
    tn = _tile(block_n, warp_n, 8, "block_n", "warp_n")
    return _mma_c(block_m, block_n, warp_m, warp_n, tm, tn)


@functools.lru_cache(maxsize=256)
def _mma_c(block_m: int, block_n: int, warp_m: int, warp_n: int, tm: int, tn: int) -> Fragment:
    return _warps(_atoms(mma_m16n8k16_c(), (tm, tn)), (warp_m, warp_n))


def _replicated_over_warps(
    per_warp: Fragment, shape: tuple[int, int], tile: tuple[int, int], a_side: bool, warp_m: int, warp_n: int,
    lanes: int = 32,
) -> Fragment:
    """Place ``per_warp`` (a warp's operand) on every warp that needs it (see module docstring)."""
    i, j, rep = index_symbols(3)
    inner = {i: FloorMod(i, tile[0]), j: FloorMod(j, tile[1]), per_warp.rep_symbol: 0}
    t, loc = (e.xreplace(inner) for e in (per_warp.thread_expr, per_warp.local_expr))
    if a_side:
        warp = FloorDiv(i, tile[0]) * warp_n + rep
        copies = warp_n
    else:
        warp = rep * warp_n + FloorDiv(j, tile[1])
        copies = warp_m
    return Fragment.from_exprs(
        shape, t + lanes * warp, loc, copies, num_threads=lanes * warp_m * warp_n, num_locals=per_warp.num_locals
    )


def make_mma_a_fragment(block_m: int, block_k: int, warp_m: int, warp_n: int) -> Fragment:
    """Register-resident A operand (``block_m x block_k``, f16/bf16) for ``mma.m16n8k16``.

    Warp row ``wm`` holds rows ``[wm*tile_m, (wm+1)*tile_m)`` and all of K, replicated over the
    ``warp_n`` warps of the row.  Locals: ``(mi * (block_k/16) + ki) * 8 + a_r`` for m16k16 atom
    ``(mi, ki)`` and PTX register half ``a_r``.
    """
    tm = _tile(block_m, warp_m, 16, "block_m", "warp_m")
    _tile(block_k, 1, 16, "block_k", None)
    _check_int(warp_n, "warp_n")
    return _mma_a(block_m, block_k, warp_m, warp_n, tm)


@functools.lru_cache(maxsize=256)
def _mma_a(block_m: int, block_k: int, warp_m: int, warp_n: int, tm: int) -> Fragment:
    per_warp = _atoms(mma_m16n8k16_a(), (tm, block_k))
    return _replicated_over_warps(per_warp, (block_m, block_k), (tm, block_k), True, warp_m, warp_n)


def make_mma_b_fragment(block_k: int, block_n: int, warp_m: int, warp_n: int) -> Fragment:
    """Register-resident B operand (``block_k x block_n``, K x N) for ``mma.m16n8k16``.

    Warp column ``wn`` holds columns ``[wn*tile_n, (wn+1)*tile_n)``, replicated over the
    ``warp_m`` warps of the column.  Locals: ``(ki * (tile_n/8) + ni) * 4 + b_r``.
    """
    tn = _tile(block_n, warp_n, 8, "block_n", "warp_n")
    _tile(block_k, 1, 16, "block_k", None)
    _check_int(warp_m, "warp_m")
    return _mma_b(block_k, block_n, warp_m, warp_n, tn)


@functools.lru_cache(maxsize=256)
def _mma_b(block_k: int, block_n: int, warp_m: int, warp_n: int, tn: int) -> Fragment:
    per_warp = _atoms(mma_m16n8k16_b(), (block_k, tn))
    return _replicated_over_warps(per_warp, (block_k, block_n), (block_k, tn), False, warp_m, warp_n)


def make_wgmma_c_fragment(block_m: int, block_n: int, warpgroups_m: int, warpgroups_n: int) -> Fragment:
    """fp32 accumulator of a ``block_m x block_n`` tile built from ``wgmma.m64nNk16`` atoms.

    Each warpgroup tile ``tile_m x tile_n`` (``tile_m`` a multiple of 64) uses atoms of
    ``N = tile_n`` columns when ``tile_n <= 256`` (a multiple of 8), else ``N = 256``
    (``tile_n`` must then be a multiple of 256).  Locals:
    ``(mi * atoms_n + ni) * (N/2) + d_r`` with ``d_r`` the PTX accumulator register index.
    """
    tm = _tile(block_m, warpgroups_m, 64, "block_m", "warpgroups_m")
    tn = _tile(block_n, warpgroups_n, 8, "block_n", "warpgroups_n")
    n_atom = min(tn, 256)
    if tn % n_atom:
        raise ValueError(f"block_n / warpgroups_n must be <= 256 or a multiple of 256; got {tn}")
    return _wgmma(block_m, block_n, warpgroups_m, warpgroups_n, tm, tn, n_atom)


@functools.lru_cache(maxsize=256)
def _wgmma(block_m: int, block_n: int, gm: int, gn: int, tm: int, tn: int, n_atom: int) -> Fragment:
    return _warps(_atoms(wgmma_m64nNk16_c(n_atom), (tm, tn)), (gm, gn))


def make_wgmma_a_fragment(block_m: int, block_k: int, warpgroups_m: int) -> Fragment:
    """Register-resident A operand (``block_m x block_k``, f16/bf16) of ``wgmma.mma_async.m64nNk16``.

    Each warpgroup holds ``tile_m = block_m / warpgroups_m`` rows (a multiple of 64) in 64-row atoms; in atom ``mi``
    warp ``w`` of the warpgroup holds rows ``64 mi + 16 w .. + 15`` in the ``mma.m16n8k16`` A layout (the rows
    of the accumulator it holds). Locals: ``(mi * (block_k/16) + ki) * 8 + a_r``. With 64 rows a warpgroup this is
    :func:`make_mma_a_fragment` over ``4 * warpgroups_m`` warps.
    """
    tm = _tile(block_m, warpgroups_m, 64, "block_m", "warpgroups_m")
    _tile(block_k, 1, 16, "block_k", None)
    return _wgmma_a(block_m, block_k, warpgroups_m, tm)


@functools.lru_cache(maxsize=256)
def _wgmma_a(block_m: int, block_k: int, gm: int, tm: int) -> Fragment:
    atom = mma_m16n8k16_a().repeat((4, 1), on_threads=True)  # 64 x 16: warp w holds rows 16w .. 16w+15
    return _warps(_atoms(atom, (tm, block_k)), (gm, 1))


def make_mfma_c_fragment(block_m: int, block_n: int, waves_m: int, waves_n: int, *, swapped: bool = False) -> Fragment:
    """fp32 accumulator of a tile built from AMD ``v_mfma_f32_16x16x16f16`` atoms (64-lane waves).

    Wave ``(wm, wn)`` is wave ``wm * waves_n + wn`` (threads ``64 * wave + lane``); locals
    ``(mi * atoms_n + ni) * 4 + v``.  In an atom lane ``l`` holds ``C[4 * (l // 16) + v][l % 16]``; with
    ``swapped`` (the accumulator of the instruction given B as its A operand and A as its B operand, which
    computes ``C^T += B^T A^T``) it holds ``C[l % 16][4 * (l // 16) + v]``: the A operand layout, so the
    result feeds another MFMA from registers, and four consecutive columns per lane.
    """
    tm = _tile(block_m, waves_m, 16, "block_m", "waves_m")
    tn = _tile(block_n, waves_n, 16, "block_n", "waves_n")
    return _mfma_c(block_m, block_n, waves_m, waves_n, tm, tn, bool(swapped))


@functools.lru_cache(maxsize=256)
def _mfma_c(block_m: int, block_n: int, wm: int, wn: int, tm: int, tn: int, swapped: bool) -> Fragment:
    atom = mfma_16x16x16_a() if swapped else mfma_16x16x16_c()
    return _warps(_atoms(atom, (tm, tn)), (wm, wn))


def make_mfma_a_fragment(block_m: int, block_k: int, waves_m: int, waves_n: int) -> Fragment:
    """Register-resident A operand (``block_m x block_k``, f16/bf16) for ``v_mfma_f32_16x16x16`` (64-lane waves).

    Wave row ``wm`` holds rows ``[wm*tile_m, (wm+1)*tile_m)`` and all of K, replicated over the ``waves_n`` waves
    of the row (replica ``rep`` in wave ``wm * waves_n + rep``).  Locals: ``(mi * (block_k/16) + ki) * 4 + v``
    for 16x16 atom ``(mi, ki)`` and lane value ``v``.
    """
    tm = _tile(block_m, waves_m, 16, "block_m", "waves_m")
    _tile(block_k, 1, 16, "block_k", None)
    _check_int(waves_n, "waves_n")
    return _mfma_a(block_m, block_k, waves_m, waves_n, tm)


@functools.lru_cache(maxsize=256)
def _mfma_a(block_m: int, block_k: int, wm: int, wn: int, tm: int) -> Fragment:
    per_wave = _atoms(mfma_16x16x16_a(), (tm, block_k))
    return _replicated_over_warps(per_wave, (block_m, block_k), (tm, block_k), True, wm, wn, lanes=64)


def make_mfma_b_fragment(block_k: int, block_n: int, waves_m: int, waves_n: int) -> Fragment:
    """Register-resident B operand (``block_k x block_n``, K x N) for ``v_mfma_f32_16x16x16`` (64-lane waves).

    Wave column ``wn`` holds columns ``[wn*tile_n, (wn+1)*tile_n)``, replicated over the ``waves_m`` waves of the
    column.  Locals: ``(ki * (tile_n/16) + ni) * 4 + v``.
    """
    tn = _tile(block_n, waves_n, 16, "block_n", "waves_n")
    _tile(block_k, 1, 16, "block_k", None)
    _check_int(waves_m, "waves_m")
    return _mfma_b(block_k, block_n, waves_m, waves_n, tn)


@functools.lru_cache(maxsize=256)
def _mfma_b(block_k: int, block_n: int, wm: int, wn: int, tn: int) -> Fragment:
    per_wave = _atoms(mfma_16x16x16_b(), (block_k, tn))
    return _replicated_over_warps(per_wave, (block_k, block_n), (block_k, tn), False, wm, wn, lanes=64)
