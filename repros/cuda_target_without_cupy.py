"""Calling a kernel built for target cuda:sm_80 on a machine without CuPy: a raw ModuleNotFoundError
('cupy_backends') from the disk cache's key code instead of a TilecRuntimeError saying what is missing."""
import numpy as np

import tilec
import tilec.language as T
from tilec.errors import TilecRuntimeError


@T.prim_func
def add(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(8):
            B[i] = A[i] + 1


try:
    import cupy  # noqa: F401
    print("CuPy is installed: nothing to reproduce here")
except ImportError:
    k = tilec.compile(add, target="cuda:sm_80", out_idx=[1])
    try:
        k(np.zeros(8, np.float32))
        print("no failure (ran?)")
    except TilecRuntimeError as e:
        print("no failure:", e)
    except Exception as e:  # noqa: BLE001
        print(f"BUG REPRODUCED: {type(e).__name__}: {e}")
