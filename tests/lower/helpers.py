"""Helpers of the lowering tests: compile for the thread interpreter, look at the compile state."""

from __future__ import annotations

from typing import Any

import tilec
import tilec.language as T

SIMT = "simt:sm_80"


def simt(func: Any, out_idx: Any = None) -> tilec.JITKernel:
    """``func`` (a PrimFunc or a JITKernel) compiled for the thread interpreter."""
    if isinstance(func, tilec.JITKernel):
        func = func.prim_func
    return tilec.JITKernel(func, SIMT, out_idx)


def plan_of(kernel: tilec.JITKernel) -> Any:
    return kernel.state.artifacts["layout_inference"]


def thread_ir(kernel: tilec.JITKernel) -> Any:
    return kernel.state.artifacts["thread_ir"]



@T.prim_func
def tile_in_two_copies(A: T.Tensor((200, 160), "float16"), B: T.Tensor((160, 136), "float16"),
                       C: T.Tensor((200, 136), "float32")):
    """A GEMM whose A tile is filled by two copies of 64 rows each a trip: the pipeline gives it one version."""
    with T.Kernel(3, 2, threads=256) as (bx, by):
        A_s = T.alloc_shared((128, 32), "float16")
        B_s = T.alloc_shared((32, 64), "float16")
        C_f = T.alloc_fragment((128, 64), "float32")
        T.clear(C_f)
        for k in T.Pipelined(5, num_stages=2):
            T.copy(A[by * 128, k * 32], A_s[0:64, :])  # A_s in two parts: not a producer, one version
            T.copy(A[by * 128 + 64, k * 32], A_s[64:128, :])
            T.copy(B[k * 32, bx * 64], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[by * 128, bx * 64])
