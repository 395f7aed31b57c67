"""The ``simt:<arch>`` backend: runs the lowered thread IR in the thread interpreter on the CPU."""

from __future__ import annotations

from typing import Any

import numpy as np

from tilec.errors import TilecValueError
from tilec.interp.thread import ThreadInterpreter
from tilec.ir.buffer import Buffer
from tilec.lower.tir import Mem, ThreadKernel
from tilec.runtime.args import Bound
from tilec.runtime.arrays import to_numpy


def _flat(arr: np.ndarray) -> np.ndarray:
    """A flat view of an array's memory from its first element (strided arrays included)."""
    if arr.flags.c_contiguous:
        return arr.reshape(-1)
    span = 1 + sum((n - 1) * s for n, s in zip(arr.shape, arr.strides)) // arr.itemsize
    return np.lib.stride_tricks.as_strided(arr, shape=(span,), strides=(arr.itemsize,))


class SimtExecutable:
    def __init__(self, kernel: ThreadKernel, func: Any) -> None:
        self.kernel = kernel
        self.func = func
        # the module's own global memory, kept from launch to launch as on the GPU (zero at load)
        self.statics = {m: np.zeros(int(m.size), m.dtype.np) for m in kernel.statics}

    def __call__(self, bound: Bound) -> None:
        mems: dict[Mem, np.ndarray] = dict(self.statics)
        scalars: dict[Any, Any] = dict(bound.sizes)
        for p, m, v, info in zip(self.func.params, self.kernel.params, bound.values, bound.infos):
            if isinstance(p, Buffer):
                if any(s < 0 and n > 1 for s, n in zip(info.strides, info.shape)):  # memory before the first element
                    raise TilecValueError(f"argument {p.name!r}: the thread interpreter (simt targets) takes no "
                                          f"negative strides, got {info.strides} (pass a copy, or use target='cpu')")
                mems[m] = _flat(to_numpy(v))
            else:
                scalars[p] = v
        ThreadInterpreter(self.kernel).run(mems, scalars)
