"""FP8 GEMM with row-wise scales: C = (A @ B^T) * scale_a[:, None] * scale_b[None, :], A and B in float8_e4m3.

A is M x K and B is N x K (both K-major, the layout fp8 tensor cores read; cuBLAS's fp8 GEMM asks the same);
the products accumulate in float32 and C is bfloat16. On sm_89+ the gemm runs on ``mma.sync.m16n8k32``, on
Hopper with the ``wgmma`` pass config on ``wgmma.m64nNk32``; elsewhere it falls back to scalar FMAs (reported).

Run: python examples/06_fp8_gemm.py [M N K]   (the CPU interpreter where there is no GPU, CUDA where there is)
"""

import sys

import numpy as np

import tilec
import tilec.language as T


@tilec.jit(out_idx=[-1])
def fp8_matmul(M, N, K, block_M=128, block_N=128, block_K=64, num_stages=3, threads=128, dtype="float8_e4m3",
               out_dtype="bfloat16", panel=0):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), scale_a: T.Tensor((M,), "float32"),
             scale_b: T.Tensor((N,), "float32"), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            T.use_swizzle(max(panel, 1), enable=panel > 0)  # panels of `panel` rows (0: the compiler's choice)
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_N, block_K), dtype)
            sa = T.alloc_shared((block_M,), "float32")
            sb = T.alloc_shared((block_N,), "float32")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * block_K], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(scale_a[by * block_M], sa)
            T.copy(scale_b[bx * block_N], sb)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = C_f[i, j] * sa[i] * sb[j]
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


def quantize(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """``x`` as float8_e4m3 with one float32 scale per row (``axis=1``): ``x ~ q * scale``."""
    import ml_dtypes

    scale = (np.abs(x).max(axis=axis) / 448.0).astype(np.float32)  # 448: the largest e4m3 value
    q = (x / np.expand_dims(scale, axis)).astype(ml_dtypes.float8_e4m3fn)
    return q, scale


USAGE = "usage: python examples/06_fp8_gemm.py [M N K]"


def _size(name: str, word: str) -> int:
    """A size argument: a positive integer, else the usage naming the argument."""
    if not (word.isdecimal() and int(word) > 0):
        sys.exit(f"{USAGE}: {name} must be a positive integer, got {word!r}")
    return int(word)


def main(argv: list[str]) -> None:
    if argv and not 3 <= len(argv) <= 3:
        sys.exit(f"{USAGE} (got {len(argv)} arguments)")
    sizes = [_size(name, x) for name, x in zip(["M", "N", "K"], argv)]
    M, N, K = sizes or (200, 136, 192)
    small = M * N * K <= 2**24
    kernel = fp8_matmul(M, N, K, block_M=64 if small else 128, block_N=64 if small else 128)
    rng = np.random.default_rng()
    a, sa = quantize(rng.standard_normal((M, K)), 1)
    b, sb = quantize(rng.standard_normal((N, K)), 1)
    if kernel.target.kind in ("cuda", "hip"):
        import torch

        dev = [torch.from_numpy(x.view(np.uint8)).cuda().view(torch.float8_e4m3fn) for x in (a, b)]
        c = kernel(*dev, torch.from_numpy(sa).cuda(), torch.from_numpy(sb).cuda()).float().cpu().numpy()
    else:
        c = kernel(a, b, sa, sb)
    ref = (a.astype(np.float64) @ b.astype(np.float64).T) * sa[:, None] * sb[None, :]
    err = np.linalg.norm(c.astype(np.float64) - ref) / np.linalg.norm(ref)
    print(f"fp8 gemm {M}x{N}x{K} on {kernel.target}: relative error {err:.2e}")
    print(kernel.ftg.summary())
    assert err < 1e-2, err  # the bfloat16 output's rounding (2^-9 relative) dominates


if __name__ == "__main__":
    main(sys.argv[1:])
