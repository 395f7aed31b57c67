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


def operand_gemm(M, N, K, block_M, block_N, block_K, threads, trans_A=False, trans_B=False, dtype="float32",
                 allow_tf32=False):
    """A GEMM over k-tiles with A and B in either orientation (``trans_A``: A stored K x M), C in float32 starting as
    garbage that the first k-tile's gemm clears (``clear_accum``)."""
    a_shape, b_shape = ((K, M) if trans_A else (M, K)), ((N, K) if trans_B else (K, N))

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_K, block_M) if trans_A else (block_M, block_K), dtype)
            B_s = T.alloc_shared((block_N, block_K) if trans_B else (block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.fill(C_f, 1e30)
            for k in T.serial(T.ceildiv(K, block_K)):
                if trans_A:
                    T.copy(A[k * block_K, by * block_M], A_s)
                else:
                    T.copy(A[by * block_M, k * block_K], A_s)
                if trans_B:
                    T.copy(B[bx * block_N, k * block_K], B_s)
                else:
                    T.copy(B[k * block_K, bx * block_N], B_s)
                if k == 0:  # C_f starts as garbage: the first k-tile's gemm clears it
                    T.gemm(A_s, B_s, C_f, transpose_A=trans_A, transpose_B=trans_B, clear_accum=True,
                           allow_tf32=allow_tf32)
                else:
                    T.gemm(A_s, B_s, C_f, transpose_A=trans_A, transpose_B=trans_B, allow_tf32=allow_tf32)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main
