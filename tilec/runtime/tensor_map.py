"""TMA tensor maps on the host: ``cuTensorMapEncodeTiled`` from the CUDA driver, through ctypes (no cuda.h).

A kernel's :class:`~tilec.lower.tir.TensorMap` fixes everything but the tensor's address (its sizes are compile-time
constants), so each launch needs only the pointer: :class:`TensorMapCache` encodes a map once per address and keeps
the 128-byte, 64-byte aligned result for the launch's argument block.
"""

from __future__ import annotations

import ctypes
from typing import Any

from tilec.errors import TilecRuntimeError

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


def encode(tmap: Any, ptr: int) -> tuple[Any, int]:
    """(owner, address) of the encoded map of :class:`~tilec.lower.tir.TensorMap` ``tmap`` for data at ``ptr``."""
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
