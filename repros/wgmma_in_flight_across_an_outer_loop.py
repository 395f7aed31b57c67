"""A T.Pipelined K loop inside an outer T.serial loop (C = sum_r A[r] @ B): with wgmma_overlap (the default on
sm_90a) the loop's last gemm leaves its wgmma group in flight past the loop, to be waited for at the first later
statement touching its operands or accumulator. In the outer loop that statement is the K loop's next run, which
the lowering never checks (it looks forward only): its first copies overwrite the operand versions the group still
reads. The interpreter names the race wherever the trip count is not a multiple of the versions (3 stages here).

Run: PYTHONPATH=. python3 repros/wgmma_in_flight_across_an_outer_loop.py
"""

import numpy as np

import tilec
import tilec.language as T

R, M, N, K = 3, 128, 64, 96


@T.prim_func
def sum_of_products(A: T.Tensor((R, M, K), "float16"), B: T.Tensor((K, N), "float16"),
                    C: T.Tensor((M, N), "float32")):
    with T.Kernel(1, 2, threads=128) as (bx, by):
        A_s = T.alloc_shared((64, 32), "float16")
        B_s = T.alloc_shared((32, 64), "float16")
        C_f = T.alloc_fragment((64, 64), "float32")
        T.clear(C_f)
        for r in T.serial(R):
            for k in T.Pipelined(K // 32, num_stages=3):
                T.copy(A[r, by * 64, k * 32], A_s)
                T.copy(B[k * 32, bx * 64], B_s)
                T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[by * 64, bx * 64])


rng = np.random.default_rng(0)
a = rng.standard_normal((R, M, K)).astype(np.float16)
b = rng.standard_normal((K, N)).astype(np.float16)
ref = a.astype(np.float64).sum(0) @ b.astype(np.float64)
failed = False
for cfg in ({"wgmma": True, "tma": True}, {"wgmma": True, "tma": False}):
    try:
        c = tilec.JITKernel(sum_of_products, "simt:sm_90a", [-1], pass_configs=cfg)(a, b)
        err = np.abs(c.astype(np.float64) - ref).max() / np.abs(ref).max()
        print(f"{cfg}: ok, relative error {err:.2e}")
        failed |= not err < 1e-4
    except Exception as e:  # noqa: BLE001
        failed = True
        print(f"{cfg}: FAILED: {type(e).__name__}: {str(e).splitlines()[0]}")
print("BUG REPRODUCED" if failed else "no failure")
