"""GEMM: C = A @ B with fp32 accumulation, tiles staged in shared memory through a software pipeline.

``transpose_B=True`` takes B stored N x K (C = A @ B.T): both operands K-major, the orientation Hopper's TF32
``wgmma`` reads (float32 with ``allow_tf32=True``).

Run: python examples/01_gemm.py [M N K]   (the CPU interpreter where there is no GPU, CUDA where there is)
"""

import sys

import numpy as np

import tilec
import tilec.language as T


@tilec.jit(out_idx=[-1])
def matmul(M, N, K, block_M=128, block_N=128, block_K=32, num_stages=3, threads=128, dtype="float16", panel=0,
           allow_tf32=False, transpose_B=False):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K) if transpose_B else (K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            T.use_swizzle(max(panel, 1), enable=panel > 0)  # panels of `panel` rows (0: the compiler's choice)
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_N, block_K) if transpose_B else (block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * block_K] if transpose_B else B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=transpose_B, allow_tf32=allow_tf32)  # TF32 tensor cores if True
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


USAGE = "usage: python examples/01_gemm.py [M N K]"


def _size(name: str, word: str) -> int:
    """A size argument: a positive integer, else the usage naming the argument."""
    if not (word.isdecimal() and int(word) > 0):
        sys.exit(f"{USAGE}: {name} must be a positive integer, got {word!r}")
    return int(word)


def main(argv: list[str]) -> None:
    if argv and not 3 <= len(argv) <= 3:
        sys.exit(f"{USAGE} (got {len(argv)} arguments)")
    sizes = [_size(name, x) for name, x in zip(["M", "N", "K"], argv)]
    M, N, K = sizes or (200, 136, 96)
    small = M * N * K <= 2**24
    kernel = matmul(M, N, K, block_M=64 if small else 128, block_N=64 if small else 128)
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    if kernel.target.kind in ("cuda", "hip"):  # torch on ROCm names AMD GPUs "cuda" too
        import torch

        c = kernel(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()).cpu().numpy()
    else:
        c = kernel(a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = np.linalg.norm(c.astype(np.float64) - ref) / np.linalg.norm(ref)
    print(f"gemm {M}x{N}x{K} on {kernel.target}: relative error {err:.2e}")
    print(kernel.ftg.summary())
    assert err < 2e-3, err


if __name__ == "__main__":
    main(sys.argv[1:])
