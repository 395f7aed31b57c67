"""TMA tensor maps on the host: ``cuTensorMapEncodeTiled`` from the CUDA driver, through ctypes (no cuda.h).

A kernel's :class:`~tilec.lower.tir.TensorMap` fixes everything but the tensor's address (its sizes are compile-time
constants), so each launch needs only the pointer: :class:`TensorMapCache` encodes a map once per address and keeps
the 128-byte, 64-byte aligned result for the launch's argument block.
"""

from __future__ import annotations

import ctypes
from typing import Any

from tilec.errors import TilecRuntimeError, TilecValueError

_DTYPE = {8: 0, 16: 1, 32: 2}  # CU_TENSOR_MAP_DATA_TYPE_UINT8/16/32 by element bits: TMA moves bits unchanged
_DTYPE_NAMED = {"float16": 6, "float32": 7, "bfloat16": 9, "int32": 3}
_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}  # CU_TENSOR_MAP_SWIZZLE_NONE/32B/64B/128B
_L2_PROMOTION_128B = 2
_KEEP = 1024  # encoded maps kept per tensor map (addresses a kernel is called with)


def _aligned_desc() -> tuple[Any, int]:
    """(owner, address) of 128 bytes aligned to 64 (ctypes does not align structures beyond 16 by itself)."""
    raw = (ctypes.c_uint8 * (128 + 64))()
    addr = ctypes.addressof(raw)
    return raw, addr + (-addr % 64)


def check(tmap: Any) -> None:
    """Raise :class:`~tilec.errors.TilecValueError`, naming the parameter and its value, where ``tmap`` breaks a
    rule of ``cuTensorMapEncodeTiled`` (tiled, non-interleaved): which the driver answers with a bare
    ``CUDA_ERROR_INVALID_VALUE``, or this module could not even express (64-bit elements)."""
    rank, eb = len(tmap.dims), tmap.dtype.bits // 8

    def bad(what: str) -> TilecValueError:
        return TilecValueError(f"tensor map {tmap.name}: {what} (sizes {tmap.dims}, byte strides {tmap.strides}, "
                               f"box {tmap.box}, swizzle {tmap.swizzle})")

    if tmap.dtype.name not in _DTYPE_NAMED and tmap.dtype.bits not in _DTYPE:
        raise bad(f"tensorDataType: {tmap.dtype.name} elements have no TMA data type here (8, 16 or 32 bits)")
    if not 1 <= rank <= 5 or len(tmap.box) != rank or len(tmap.strides) != rank - 1:
        raise bad(f"tensorRank {rank}: TMA maps have rank 1 to 5, with one box size a dimension")
    for d, n in enumerate(tmap.dims):
        if not 0 < n <= 2**32:
            raise bad(f"globalDim[{d}] = {n}: must be in [1, 2^32]")
    for d, st in enumerate(tmap.strides):
        if st % 16 or st >= 2**40:
            raise bad(f"globalStrides[{d}] = {st} bytes: must be a multiple of 16 and below 2^40")
    for d, b in enumerate(tmap.box):
        if not 0 < b <= 256:
            raise bad(f"boxDim[{d}] = {b}: must be in [1, 256]")
    if tmap.swizzle not in _SWIZZLE:
        raise bad(f"swizzle {tmap.swizzle}: must be 0, 32, 64 or 128 bytes")
    inner = tmap.box[0] * eb
    if inner % 16 or (tmap.swizzle and inner > tmap.swizzle):
        raise bad(f"boxDim[0] = {tmap.box[0]} ({inner} bytes): the inner box must be a multiple of 16 bytes"
                  + (f" and at most the {tmap.swizzle}-byte swizzle span" if tmap.swizzle else ""))


def encode(tmap: Any, ptr: int) -> tuple[Any, int]:
    """(owner, address) of the encoded map of :class:`~tilec.lower.tir.TensorMap` ``tmap`` for data at ``ptr``."""
    check(tmap)
    rank = len(tmap.dims)
    owner, addr = _aligned_desc()
    dims = (ctypes.c_uint64 * rank)(*tmap.dims)
    strides = (ctypes.c_uint64 * max(1, rank - 1))(*tmap.strides)
    box = (ctypes.c_uint32 * rank)(*tmap.box)
    ones = (ctypes.c_uint32 * rank)(*([1] * rank))
    dtype = _DTYPE_NAMED.get(tmap.dtype.name, _DTYPE[tmap.dtype.bits])
    from tilec.backends.cuda.driver import lib

    rc = lib().cuTensorMapEncodeTiled(addr, dtype, rank, ptr, dims, strides, box, ones, 0, _SWIZZLE[tmap.swizzle],
                      _L2_PROMOTION_128B, 0)
    if rc != 0:
        raise TilecRuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {rc}) for {tmap.name}: address {ptr:#x}, "
                                f"sizes {tmap.dims}, byte strides {tmap.strides}, box {tmap.box}, swizzle "
                                f"{tmap.swizzle} (TMA needs a 16-byte aligned address and 16-byte multiple strides)")
    return owner, addr


class TensorMapCache:
    """Encoded maps of one :class:`~tilec.lower.tir.TensorMap` by tensor address."""

    def __init__(self, tmap: Any) -> None:
        self.tmap = tmap
        self.maps: dict[int, tuple[Any, int]] = {}

    def __call__(self, ptr: int) -> int:
        """The address of the encoded map for data at ``ptr``."""
        hit = self.maps.get(ptr)
        if hit is None:
            if len(self.maps) >= _KEEP:
                self.maps.clear()
            hit = self.maps[ptr] = encode(self.tmap, ptr)
        return hit[1]
