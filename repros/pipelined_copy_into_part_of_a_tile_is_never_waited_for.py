"""A shared tile filled by two T.copy calls (each writes half of it: not a "producer" of the pipeline, so it stays
in the consumer stage, one version) inside a T.Pipelined loop: the copies still become cp.async, but the pipeline
commits and waits only for the first-stage copies, so T.gemm reads the tile before those copies land. The thread
interpreter names it (on a GPU: a data race, wrong results). Same with stages given by hand (stage=[0, 1, 2]: the
stage-1 copy is committed with the next trip's group, after that trip's wait), and with wgmma (sm_90a, tma off; wgmma_overlap off here: see
repros/wgmma_overlap_with_an_operand_rewritten_in_place.py for the race it adds).

Run: PYTHONPATH=. python3 repros/pipelined_copy_into_part_of_a_tile_is_never_waited_for.py
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
            T.copy(A[by * 128, k * 32], A_s[0:64, :])  # the tile's rows in two copies
            T.copy(A[by * 128 + 64, k * 32], A_s[64:128, :])
            T.copy(B[k * 32, bx * 64], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[by * 128, bx * 64])


@T.prim_func
def by_hand(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
    with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
        A_s = T.alloc_shared((64, 32), "float16")
        B_s = T.alloc_shared((32, 64), "float16")
        C_f = T.alloc_fragment((64, 64), "float32")
        T.clear(C_f)
        for k in T.Pipelined(T.ceildiv(K, 32), num_stages=3, stage=[0, 1, 2]):
            T.copy(A[by * 64, k * 32], A_s)
            T.copy(B[k * 32, bx * 64], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[by * 64, bx * 64])


rng = np.random.default_rng(0)
a = rng.standard_normal((M, K)).astype(np.float16)
b = rng.standard_normal((K, N)).astype(np.float16)
ref = a.astype(np.float64) @ b.astype(np.float64)
failed = False
for name, func in (("two_halves", two_halves), ("by_hand", by_hand)):
    for target, cfg in (("simt:sm_80", None), ("simt:sm_90a", {"wgmma": True, "tma": False, "wgmma_overlap": False})):
        try:
            c = tilec.JITKernel(func, target, [-1], pass_configs=cfg)(a, b)
            err = np.abs(c.astype(np.float64) - ref).max() / np.abs(ref).max()
            print(f"{name} {target}: ok, relative error {err:.2e}")
            failed |= not err < 1e-4
        except Exception as e:  # noqa: BLE001
            failed = True
            print(f"{name} {target}: FAILED: {type(e).__name__}: {str(e).splitlines()[0]}")
print("BUG REPRODUCED" if failed else "no failure")
