"""A GEMM whose pipelined loop's trip count depends on the tile and may be zero (block row 0 runs no trip): the
persistent kernel is refused with a note ("depends on the tile and may be zero"), which is right, but with
pass config ``stream_k`` or ``consumers=2`` beside ``persistent`` the compile then fails with a TilecVerifyError
(an internal compiler error: 'ring0' / 'tile' used outside its loop) instead of giving the non-persistent kernel.

Run: PYTHONPATH=. python3 repros/persistent_refused_zero_trips_stream_k_consumers.py
"""

import numpy as np

import tilec
import tilec.language as T

M, N, K, bM, bN, bK = 192, 64, 192, 64, 64, 64


@T.prim_func
def lower_blocks(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
    with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
        A_s = T.alloc_shared((bM, bK), "float16")
        B_s = T.alloc_shared((bK, bN), "float16")
        C_f = T.alloc_fragment((bM, bN), "float32")
        T.clear(C_f)
        for k in T.Pipelined(by, num_stages=2):  # block row by: the first by K tiles (row 0: none)
            T.copy(A[by * bM, k * bK], A_s)
            T.copy(B[k * bK, bx * bN], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[by * bM, bx * bN])


rng = np.random.default_rng(0)
a = rng.standard_normal((M, K)).astype(np.float16)
b = rng.standard_normal((K, N)).astype(np.float16)
ref = np.zeros((M, N))
for by in range(M // bM):
    ref[by * bM:(by + 1) * bM] = a[by * bM:(by + 1) * bM, :by * bK].astype(np.float64) @ b[:by * bK].astype(np.float64)

WS = {"wgmma": True, "tma": True, "warp_specialize": True}
failed = False
for extra in ({"persistent": 2}, {"persistent": 2, "stream_k": True}, {"persistent": 2, "consumers": 2}):
    try:
        kernel = tilec.JITKernel(lower_blocks, "simt:sm_90a", [-1], pass_configs={**WS, **extra})
        err = np.abs(kernel(a, b).astype(np.float64) - ref).max() / np.abs(ref).max()
        print(f"{extra}: ok, relative error {err:.2e}")
        failed |= not err < 1e-4
    except Exception as e:  # noqa: BLE001
        failed = True
        print(f"{extra}: FAILED: {type(e).__name__}: {e}")
print("BUG REPRODUCED" if failed else "no failure")
