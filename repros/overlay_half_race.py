"""A 16x16x16 fp16 GEMM with a float32 result and K=35 (A's rows misaligned for cp.async, so the tiles are copied a
half at a time): the float32 staging tile of the epilogue lies over A_s, and the thread interpreter reported
'race on shared C_f_stage[0]: two threads write it at once' for two threads writing the two halves of one float."""
import numpy as np

import tilec
import tilec.language as T

M, N, K, bm, bn, bk = 19, 21, 35, 16, 16, 16


@T.prim_func
def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
    with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=32) as (bx, by):
        A_s = T.alloc_shared((bm, bk), "float16")
        B_s = T.alloc_shared((bk, bn), "float16")
        C_f = T.alloc_fragment((bm, bn), "float32")
        T.clear(C_f)
        for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
            T.copy(A[by * bm, k * bk], A_s)
            T.copy(B[k * bk, bx * bn], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[by * bm, bx * bn])


rng = np.random.default_rng(0)
a = rng.standard_normal((M, K)).astype(np.float16)
b = rng.standard_normal((K, N)).astype(np.float16)
c = np.full((M, N), np.nan, np.float32)
try:
    tilec.JITKernel(main, "simt:sm_80")(a, b, c)
    err = np.abs(c - a.astype(np.float64) @ b.astype(np.float64)).max()
    print("BUG REPRODUCED" if not err < 1e-3 else "no failure", err)
except tilec.errors.RaceError as e:
    print("BUG REPRODUCED:", e)
