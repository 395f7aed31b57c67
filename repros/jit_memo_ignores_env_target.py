"""A @tilec.jit function without a target of its own memoized its kernels by the call's arguments only: after
TILEC_TARGET (or TILEC_WGMMA) changed, the same arguments returned the kernel made for the old target."""
import os

import numpy as np

import tilec
import tilec.language as T


@tilec.jit(out_idx=[-1])
def add(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(N):
                B[i] = A[i] + 1.0
    return main


@tilec.jit
def add_eager(A):
    N = T.const("N")
    A: T.Tensor[[N], T.float32]
    B = T.empty((N,), "float32")
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(N):
            B[i] = A[i] + 1.0
    return B


os.environ["TILEC_TARGET"] = "cpu"
lazy_cpu, eager_cpu = add(64), add_eager.get_kernel(np.ones(64, np.float32))
os.environ["TILEC_TARGET"] = "simt:sm_80"
lazy, eager = add(64), add_eager.get_kernel(np.ones(64, np.float32))
print("lazy:", lazy_cpu.target, "->", lazy.target, "| eager:", eager_cpu.target, "->", eager.target)
bad = str(lazy.target) != "simt:sm_80" or str(eager.target) != "simt:sm_80"
print("BUG REPRODUCED" if bad else "no failure")
