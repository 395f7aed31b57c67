"""The ``cpu`` backend: runs the verified Tile IR in the tile interpreter."""

from __future__ import annotations

from typing import Any

import numpy as np

from tilec import dtypes as dt
from tilec.interp import tile_ops  # noqa: F401 - registers the tile op rules
from tilec.interp.tile import TileInterpreter
from tilec.ir.buffer import Buffer
from tilec.ir.evaluate import eval_int
from tilec.ir.kernel import PrimFunc
from tilec.runtime.args import Bound, written_params
from tilec.runtime.arrays import to_numpy


def unpack_int4(packed: np.ndarray, n: int) -> np.ndarray:
    """Two signed 4-bit values per byte, low nibble first, along the last dimension → int8 values in [-8, 7]."""
    b = packed.view(np.uint8)
    lo = (b & 0xF).astype(np.int8)
    hi = (b >> 4).astype(np.int8)
    out = np.stack([lo, hi], axis=-1).reshape(packed.shape[:-1] + (packed.shape[-1] * 2,))[..., :n]
    return np.where(out >= 8, out - 16, out).astype(np.int8)


def pack_int4(values: np.ndarray, out: np.ndarray) -> None:
    """Inverse of :func:`unpack_int4`, written into ``out`` (int8, last dimension halved)."""
    v = values.astype(np.int16) & 0xF
    if v.shape[-1] % 2:
        v = np.concatenate([v, np.zeros(v.shape[:-1] + (1,), v.dtype)], axis=-1)
    pairs = v.reshape(v.shape[:-1] + (v.shape[-1] // 2, 2))
    out.view(np.uint8)[...] = (pairs[..., 0] | (pairs[..., 1] << 4)).astype(np.uint8)


class CpuExecutable:
    """Runs a kernel on host arrays."""

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.written = written_params(func)  # int4 tensors packed back after a run: only those the kernel writes

    def __call__(self, bound: Bound) -> None:
        arrays: dict[Buffer, np.ndarray] = {}
        scalars: dict[Any, Any] = dict(bound.sizes)
        packed: list[tuple[Buffer, np.ndarray]] = []
        for i, (p, v) in enumerate(zip(self.func.params, bound.values)):
            if not isinstance(p, Buffer):
                scalars[p] = v
                continue
            arr = to_numpy(v)
            if p.dtype is dt.int4:
                if i in self.written:
                    packed.append((p, arr))
                arr = unpack_int4(arr, eval_int(p.shape[-1], bound.sizes))
            arrays[p] = arr
        TileInterpreter(self.func).run(arrays, scalars)
        for p, arr in packed:
            pack_int4(arrays[p], arr)
