"""Row softmax in one pass over the input (online max and sum), then one pass writing the output.

Run: python examples/02_softmax.py [M N]
"""

import sys

import numpy as np

import tilec
import tilec.language as T


@tilec.jit(out_idx=[-1])
def softmax(M, N, block_M=2, block_N=512, dtype="float16"):
    log2e = 1.4426950408889634
    n_tiles = T.ceildiv(N, block_N)

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            x = T.alloc_fragment((block_M, block_N), "float32")
            y = T.alloc_fragment((block_M, block_N), dtype)
            row_max = T.alloc_fragment((block_M,), "float32")
            row_sum = T.alloc_fragment((block_M,), "float32")
            tile_max = T.alloc_fragment((block_M,), "float32")
            tile_sum = T.alloc_fragment((block_M,), "float32")
            T.fill(row_max, -T.infinity("float32"))
            T.fill(row_sum, 0)
            for k in T.serial(n_tiles):
                T.copy(X[bx * block_M, k * block_N], x)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = T.if_then_else(k * block_N + j < N, x[i, j], -T.infinity("float32"))
                T.reduce_max(x, tile_max, dim=1)
                for i in T.Parallel(block_M):
                    tile_max[i] = T.max(tile_max[i], row_max[i])
                    row_sum[i] = row_sum[i] * T.exp2((row_max[i] - tile_max[i]) * log2e)
                    row_max[i] = tile_max[i]
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = T.exp2((x[i, j] - row_max[i]) * log2e)
                T.reduce_sum(x, tile_sum, dim=1)
                for i in T.Parallel(block_M):
                    row_sum[i] += tile_sum[i]
            for k in T.serial(n_tiles):
                T.copy(X[bx * block_M, k * block_N], x)
                for i, j in T.Parallel(block_M, block_N):
                    y[i, j] = T.exp2((x[i, j] - row_max[i]) * log2e) / row_sum[i]
                T.copy(y, Y[bx * block_M, k * block_N])

    return main


USAGE = "usage: python examples/02_softmax.py [M N]"


def _size(name: str, word: str) -> int:
    """A size argument: a positive integer, else the usage naming the argument."""
    if not (word.isdecimal() and int(word) > 0):
        sys.exit(f"{USAGE}: {name} must be a positive integer, got {word!r}")
    return int(word)


def main(argv: list[str]) -> None:
    if argv and not 2 <= len(argv) <= 2:
        sys.exit(f"{USAGE} (got {len(argv)} arguments)")
    sizes = [_size(name, x) for name, x in zip(["M", "N"], argv)]
    M, N = sizes or (37, 300)
    kernel = softmax(M, N)
    x = (np.random.default_rng().standard_normal((M, N)) * 3).astype(np.float16)
    if kernel.target.kind in ("cuda", "hip"):  # torch on ROCm names AMD GPUs "cuda" too
        import torch

        y = kernel(torch.from_numpy(x).cuda()).cpu().numpy()
    else:
        y = kernel(x)
    xd = x.astype(np.float64)
    ref = np.exp(xd - xd.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    err = np.abs(y.astype(np.float64) - ref).max()
    print(f"softmax {M}x{N} on {kernel.target}: max abs error {err:.2e}")
    print(kernel.ftg.summary())
    assert err < 2e-3, err


if __name__ == "__main__":
    main(sys.argv[1:])
