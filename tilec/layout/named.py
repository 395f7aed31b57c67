"""Named layouts: memory layouts, XOR swizzles and tensor-core register fragments.

All constructors are cached: calling one twice with the same arguments returns the same
(immutable) object.

Register ordering conventions (``local`` index of a thread):

* ``mma_m16n8k16_a``: locals ``0..7`` are the PTX registers' halves ``a0..a7`` in order
  (``a0, a1`` = low/high half of the first ``.f16x2`` register, ...).
* ``mma_m16n8k16_b``: locals ``0..3`` = ``b0..b3``.
* ``mma_m16n8k16_c``: locals ``0..3`` = ``c0..c3`` (fp32 accumulators).
* ``wgmma_m64nNk16_c(n)``: locals ``0 .. n/2-1`` = ``d0, d1, ...`` of the PTX fragment.
* ``mfma_16x16x16_*``: locals ``0..3`` = the four values held by a lane (vector element ``v``).
* ``ldmatrix(...).dest``: local ``2*m + e`` = element ``e`` (low half first) of the destination
  register for matrix ``m``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import sympy

from .expr import bitxor
from .fragment import Fragment
from .layout import Layout, _is_int, check_shape

__all__ = [
    "LdmatrixLayout",
    "col_major",
    "ldmatrix",
    "mfma_16x16x16_a",
    "mfma_16x16x16_b",
    "mfma_16x16x16_c",
    "mma_m16n8k16_a",
    "mma_m16n8k16_b",
    "mma_m16n8k16_c",
    "padded",
    "row_major",
    "strided",
    "swizzle",
    "wgmma_m64nNk16_c",
]


def _shape_args(shape: tuple) -> tuple[int, ...]:
    if len(shape) == 1 and not _is_int(shape[0]):
        shape = tuple(shape[0])
    return check_shape(shape)


def _int_param(value: object, param: str, allowed: tuple[int, ...] | None = None, minimum: int = 0) -> int:
    if not _is_int(value) or int(value) < minimum:  # type: ignore[arg-type]
        raise ValueError(f"{param} must be an int >= {minimum}; got {value!r}")
    if allowed is not None and int(value) not in allowed:  # type: ignore[arg-type]
        raise ValueError(f"{param} must be one of {allowed}; got {value!r}")
    return int(value)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------
# Memory layouts


def row_major(*shape: int) -> Layout:
    """Row-major (C order) offsets: the last index is contiguous.  ``row_major(64, 32)``."""
    return _row_major(_shape_args(shape))


@functools.lru_cache(maxsize=512)
def _row_major(shape: tuple[int, ...]) -> Layout:
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    return Layout(shape, lambda *idx: sum(i * s for i, s in zip(idx, strides)), out_shape=(math.prod(shape),))


def col_major(*shape: int) -> Layout:
    """Column-major (Fortran order) offsets: the first index is contiguous."""
    return _col_major(_shape_args(shape))


@functools.lru_cache(maxsize=512)
def _col_major(shape: tuple[int, ...]) -> Layout:
    strides = [math.prod(shape[:d]) for d in range(len(shape))]
    return Layout(shape, lambda *idx: sum(i * s for i, s in zip(idx, strides)), out_shape=(math.prod(shape),))


def strided(shape: tuple[int, ...], strides: tuple[int, ...]) -> Layout:
    """Offsets ``sum(idx[d] * strides[d])`` with nonnegative strides; cosize ``1 + sum((n-1)*s)``."""
    dims = check_shape(shape)
    st = tuple(_int_param(s, "strides[]") for s in strides)
    if len(st) != len(dims):
        raise ValueError(f"strides must have {len(dims)} entries like shape {dims}; got {st}")
    return _strided(dims, st)


@functools.lru_cache(maxsize=512)
def _strided(shape: tuple[int, ...], strides: tuple[int, ...]) -> Layout:
    cosize = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    return Layout(shape, lambda *idx: sum(i * s for i, s in zip(idx, strides)), out_shape=(cosize,))


def padded(shape: tuple[int, ...], pad: int) -> Layout:
    """Row-major with every row (last dimension) followed by ``pad`` unused elements.

    ``out_shape`` is ``(rows * (shape[-1] + pad),)``, the allocation size including the padding of
    the last row.  Not bijective when ``pad > 0``.
    """
    dims = check_shape(shape)
    return _padded(dims, _int_param(pad, "pad"))


@functools.lru_cache(maxsize=512)
def _padded(shape: tuple[int, ...], pad: int) -> Layout:
    ld = shape[-1] + pad
    strides = [math.prod(shape[d + 1 : -1]) * ld for d in range(len(shape) - 1)] + [1]
    rows = math.prod(shape[:-1])
    return Layout(shape, lambda *idx: sum(i * s for i, s in zip(idx, strides)), out_shape=(rows * ld,))


_SWIZZLE_BYTES = (32, 64, 128)
_DTYPE_BITS = (4, 8, 16, 32, 64)


def swizzle(shape: tuple[int, int], dtype_bits: int, swizzle_bytes: int) -> Layout:
    """XOR-swizzled shared-memory layout matching the TMA / wgmma 32B, 64B and 128B swizzle modes.

    The tile ``(rows, cols)`` (``cols`` contiguous) is stored as column *panels* of
    ``W = swizzle_bytes`` bytes (``w = 8 * swizzle_bytes / dtype_bits`` elements): panel
    ``p = col // w`` occupies ``rows * w`` consecutive elements, row-major inside.  When a row is
    exactly ``swizzle_bytes`` long there is a single panel, i.e. plain row-major order.  This is
    the order in which one TMA box per panel (or the wgmma canonical K-major layouts) places data.

    The swizzle is then applied to the *byte address* ``a`` of that linear position (assuming the
    buffer is 1024-byte aligned), exactly as the hardware does::

        a' = a ^ (((a >> 7) & (S/16 - 1)) << 4)        S = swizzle_bytes

    i.e. the 16-byte chunk index (address bits 4..) is XORed with address bits 7.. over
    ``log2(S/16)`` bits; the pattern repeats every ``8 * S`` bytes (256/512/1024).  With
    ``swizzle_bytes`` rows (one panel) and row index ``r``, chunk ``c`` of a row becomes:

    * 128B: ``c ^ (r % 8)``          (8 chunks per row, atom 8 rows x 128 B)
    * 64B:  ``c ^ ((r // 2) % 4)``   (4 chunks per row, atom 8 rows x 64 B)
    * 32B:  ``c ^ ((r // 4) % 2)``   (2 chunks per row, atom 8 rows x 32 B)

    Parameters
    ----------
    shape
        ``(rows, cols)``; ``cols * dtype_bits / 8`` must be a multiple of ``swizzle_bytes``.
    dtype_bits
        Element size in bits: 4, 8, 16, 32 or 64.
    swizzle_bytes
        32, 64 or 128.

    Raises
    ------
    ValueError
        For other parameter values or when the row length is not a multiple of the swizzle width.
    """
    dims = check_shape(shape)
    if len(dims) != 2:
        raise ValueError(f"shape must be 2-D (rows, cols); got {dims}")
    bits = _int_param(dtype_bits, "dtype_bits", _DTYPE_BITS)
    sbytes = _int_param(swizzle_bytes, "swizzle_bytes", _SWIZZLE_BYTES)
    row_bits = dims[1] * bits
    if row_bits % (8 * sbytes):
        raise ValueError(
            f"row length shape[1] * dtype_bits / 8 must be a multiple of swizzle_bytes={sbytes}; "
            f"got {row_bits / 8:g} bytes for shape={dims}, dtype_bits={bits}"
        )
    return _swizzle(dims, bits, sbytes)


@functools.lru_cache(maxsize=512)
def _swizzle(shape: tuple[int, int], bits: int, sbytes: int) -> Layout:
    rows, _ = shape
    w = 8 * sbytes // bits  # elements per panel row
    chunk = 128 // bits  # elements per 16-byte chunk
    seg = 1024 // bits  # elements per 128 bytes
    phases = sbytes // 16

    def fn(i: sympy.Expr, j: sympy.Expr) -> sympy.Expr:
        lin = (j // w) * (rows * w) + i * w + j % w
        return bitxor(lin, ((lin // seg) % phases) * chunk)

    return Layout(shape, fn, out_shape=(math.prod(shape),))


# ----------------------------------------------------------------------------------------------
# NVIDIA mma.sync / ldmatrix / wgmma


@functools.lru_cache(maxsize=4)
def _pairs_8x8(trans: bool) -> Fragment:
    """An 8x8 matrix of 16-bit values, row-major, handed out two consecutive values per lane.

    ``trans=True`` describes the transposed matrix (value ``(r, c)`` of the result is value
    ``(c, r)`` of the row-major hand-out).
    """
    base = Fragment((8, 8), lambda i, j: (i * 8 + j) // 2, lambda i, j: (i * 8 + j) % 2, num_threads=32, num_locals=2)
    if not trans:
        return base
    return base.compose_layout(Layout((8, 8), lambda i, j: (j, i), out_shape=(8, 8)))


@functools.lru_cache(maxsize=1)
def mma_m16n8k16_a() -> Fragment:
    """A operand of ``mma.sync.m16n8k16`` (f16/bf16): 16x16 (M x K), 32 lanes, 8 locals.

    The tile is four 8x8 sub-matrices, each distributed like an ``ldmatrix`` result; locals
    ``2s, 2s+1`` hold sub-matrix ``s`` with ``s`` enumerating (rows 0-7, cols 0-7),
    (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15): the PTX order
    ``a0..a7``.
    """
    return _pairs_8x8(False).repeat((2, 2), on_threads=False, lower_dim_first=True)


@functools.lru_cache(maxsize=1)
def mma_m16n8k16_b() -> Fragment:
    """B operand of ``mma.sync.m16n8k16`` (f16/bf16): 16x8 (K x N), 32 lanes, locals ``b0..b3``."""
    return _pairs_8x8(True).repeat((2, 1), on_threads=False)


@functools.lru_cache(maxsize=1)
def mma_m16n8k16_c() -> Fragment:
    """C/D accumulator of ``mma.sync.m16n8k16`` (fp32): 16x8 (M x N), 32 lanes, locals ``c0..c3``."""
    return _pairs_8x8(False).repeat((2, 1), on_threads=False)


class LdmatrixLayout(NamedTuple):
    """What ``ldmatrix.sync.aligned.m8n8.x{num}[.trans].b16`` does.

    Attributes
    ----------
    address
        Layout over lanes ``(8 * num,)`` -> ``(matrix, row)`` with out_shape ``(num, 8)``: lane
        ``l`` supplies the shared-memory address of row ``l % 8`` of matrix ``l // 8`` (16
        contiguous bytes).  Lanes ``>= 8 * num`` supply no address (ignored by the hardware).
    dest
        Fragment over ``(num, 8, 8)`` = (matrix, row, col) of the matrices *as addressed in
        memory*, 32 lanes, ``2 * num`` locals: local ``2*m + e`` is element ``e`` of the
        destination register for matrix ``m``.  Without ``.trans`` lane ``t`` holds
        ``(m, t // 4, 2*(t % 4) + e)``; with ``.trans`` it holds ``(m, 2*(t % 4) + e, t // 4)``.
    """

    address: Layout
    dest: Fragment


def ldmatrix(num: int, trans: bool = False) -> LdmatrixLayout:
    """Address and destination maps of ``ldmatrix`` with ``num`` in {1, 2, 4} 8x8 matrices."""
    return _ldmatrix(_int_param(num, "num", (1, 2, 4)), bool(trans))


@functools.lru_cache(maxsize=8)
def _ldmatrix(num: int, trans: bool) -> LdmatrixLayout:
    address = Layout((8 * num,), lambda lane: (lane // 8, lane % 8), out_shape=(num, 8))
    one = _pairs_8x8(trans).compose_layout(Layout((1, 8, 8), lambda m, i, j: (i, j), out_shape=(8, 8)))
    return LdmatrixLayout(address, one.repeat((num, 1, 1), on_threads=False))


def wgmma_m64nNk16_c(n: int) -> Fragment:
    """Accumulator D of ``wgmma.mma_async.m64nNk16`` (fp32): 64 x n, 128 threads, n/2 locals.

    Warp ``w`` of the warpgroup (threads ``32w .. 32w+31``) holds rows ``16w .. 16w+15`` as an
    m16n8 accumulator repeated over the ``n / 8`` column blocks: local ``4*b + c`` is ``c_c`` of
    column block ``b`` (PTX ``d0, d1, ...`` order).  ``n`` must be a multiple of 8 in [8, 256].
    """
    n = _int_param(n, "n", minimum=8)
    if n % 8 or n > 256:
        raise ValueError(f"n must be a multiple of 8 in [8, 256]; got {n}")
    return _wgmma_c(n)


@functools.lru_cache(maxsize=32)
def _wgmma_c(n: int) -> Fragment:
    return mma_m16n8k16_c().repeat((1, n // 8), on_threads=False).repeat((4, 1), on_threads=True)


# ----------------------------------------------------------------------------------------------
# AMD MFMA (CDNA, 64-lane wavefronts)


@functools.lru_cache(maxsize=4)
def _slab(lanes_axis: int) -> Fragment:
    if lanes_axis == 0:
        return Fragment((16, 4), lambda i, j: i, lambda i, j: j, num_threads=16, num_locals=4)
    return Fragment((4, 16), lambda i, j: j, lambda i, j: i, num_threads=16, num_locals=4)


@functools.lru_cache(maxsize=1)
def mfma_16x16x16_a() -> Fragment:
    """A operand of ``v_mfma_f32_16x16x16f16``: 16x16 (M x K), 64 lanes, 4 locals.

    Four 16-row x 4-column slabs along K, slab ``s`` on lanes ``16s .. 16s+15``.
    """
    return _slab(0).repeat((1, 4), on_threads=True)


@functools.lru_cache(maxsize=1)
def mfma_16x16x16_b() -> Fragment:
    """B operand of ``v_mfma_f32_16x16x16f16``: 16x16 (K x N), 64 lanes, 4 locals."""
    return _slab(1).repeat((4, 1), on_threads=True)


@functools.lru_cache(maxsize=1)
def mfma_16x16x16_c() -> Fragment:
    """C/D of ``v_mfma_f32_16x16x16f16`` (fp32): 16x16 (M x N), 64 lanes, 4 locals."""
    return _slab(1).repeat((4, 1), on_threads=True)
