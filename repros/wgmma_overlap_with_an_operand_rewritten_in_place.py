"""wgmma_overlap (on by default on sm_90a) lets a pipelined loop's gemm keep its wgmma group in flight into the next
trip, giving its multi-buffered operands one more version. It checks only that *some* operand is multi-buffered:
a gemm whose other shared operand is rewritten in the loop without versions (a tile filled by two T.copy calls,
or a copy in the gemm's own stage given by hand), or whose A operand in registers is copied anew every trip,
gets in_flight too, so the next trip's copy overwrites that tile
while the previous trip's wgmma still reads it. With TMA, warp-specialized or not, and with cp.async.

Run: PYTHONPATH=. python3 repros/wgmma_overlap_with_an_operand_rewritten_in_place.py
"""

import numpy as np

import tilec
import tilec.language as T

M, N, K = 200, 136, 160


@T.prim_func
def two_halves(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
    with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 128), threads=256) as (bx, by):
        A_s = T.alloc_shared((128, 32), "float16")
        B_s = T.alloc_shared((32, 64), "float16")
        C_f = T.alloc_fragment((128, 64), "float32")
        T.clear(C_f)
        for k in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
            T.copy(A[by * 128, k * 32], A_s[0:64, :])  # the tile's rows in two copies: one version of A_s
            T.copy(A[by * 128 + 64, k * 32], A_s[64:128, :])
            T.copy(B[k * 32, bx * 64], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[by * 128, bx * 64])


@T.prim_func
def a_in_registers(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
    with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 128), threads=256) as (bx, by):
        A_s = T.alloc_shared((128, 32), "float16")
        A_x = T.alloc_fragment((128, 32), "float16")
        B_s = T.alloc_shared((32, 64), "float16")
        C_f = T.alloc_fragment((128, 64), "float32")
        T.clear(C_f)
        for k in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
            T.copy(A[by * 128, k * 32], A_s)
            T.copy(B[k * 32, bx * 64], B_s)
            T.copy(A_s, A_x)  # A in registers (wgmma's RS form), rewritten every trip
            T.gemm(A_x, B_s, C_f)
        T.copy(C_f, C[by * 128, bx * 64])


rng = np.random.default_rng(0)
a = rng.standard_normal((M, K)).astype(np.float16)
b = rng.standard_normal((K, N)).astype(np.float16)
ref = a.astype(np.float64) @ b.astype(np.float64)
failed = False
for func in (two_halves, a_in_registers):
    for cfg in ({"wgmma": True, "tma": True}, {"wgmma": True, "tma": True, "warp_specialize": True},
                {"wgmma": True, "tma": True, "warp_specialize": True, "persistent": 2}, {"wgmma": True, "tma": False}):
        name = f"{func.name if hasattr(func, 'name') else ''} {cfg}"
        try:
            c = tilec.JITKernel(func, "simt:sm_90a", [-1], pass_configs=cfg)(a, b)
            err = np.abs(c.astype(np.float64) - ref).max() / np.abs(ref).max()
            print(f"{name}: ok, relative error {err:.2e}")
            failed |= not err < 1e-4
        except Exception as e:  # noqa: BLE001
            failed = True
            print(f"{name}: FAILED: {type(e).__name__}: {str(e).splitlines()[0]}")
print("BUG REPRODUCED" if failed else "no failure")
