"""Row normalizations: RMSNorm and LayerNorm of an (M, N) tensor, one tile of rows per block, statistics in fp32.

Run: python examples/05_norms.py [M N]
"""

import sys

import numpy as np

import tilec
import tilec.language as T


@tilec.jit(out_idx=[-1])
def rms_norm(M, N, block_M=4, eps=1e-6, threads=128, dtype="float16"):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            sq = T.alloc_fragment((block_M, N), "float32")
            inv = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], x)
            for i, j in T.Parallel(block_M, N):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, inv, dim=1)
            for i in T.Parallel(block_M):
                inv[i] = T.rsqrt(inv[i] / N + eps)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] * inv[i] * W[j]
            T.copy(x, Y[bx * block_M, 0])

    return main


@tilec.jit(out_idx=[-1])
def layer_norm(M, N, block_M=4, eps=1e-5, threads=128, dtype="float16"):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype),
             Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            d = T.alloc_fragment((block_M, N), "float32")
            mean = T.alloc_fragment((block_M,), "float32")
            inv = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], x)
            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(block_M):
                mean[i] = mean[i] / N
            for i, j in T.Parallel(block_M, N):
                d[i, j] = (x[i, j] - mean[i]) * (x[i, j] - mean[i])
            T.reduce_sum(d, inv, dim=1)
            for i in T.Parallel(block_M):
                inv[i] = T.rsqrt(inv[i] / N + eps)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = (x[i, j] - mean[i]) * inv[i] * W[j] + B[j]
            T.copy(x, Y[bx * block_M, 0])

    return main


def reference_rms(x: np.ndarray, w: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * w.astype(np.float64)


def reference_layer(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    x = x.astype(np.float64)
    mu = x.mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + eps) * w + b


USAGE = "usage: python examples/05_norms.py [M N]"


def _size(name: str, word: str) -> int:
    """A size argument: a positive integer, else the usage naming the argument."""
    if not (word.isdecimal() and int(word) > 0):
        sys.exit(f"{USAGE}: {name} must be a positive integer, got {word!r}")
    return int(word)


def main(argv: list[str]) -> None:
    if argv and not 2 <= len(argv) <= 2:
        sys.exit(f"{USAGE} (got {len(argv)} arguments)")
    sizes = [_size(name, x) for name, x in zip(["M", "N"], argv)]
    M, N = sizes or (37, 256)
    rng = np.random.default_rng()
    x = (rng.standard_normal((M, N)) * 2 + 0.5).astype(np.float16)
    w, b = (rng.standard_normal(N).astype(np.float16) for _ in range(2))
    rms, ln = rms_norm(M, N), layer_norm(M, N)
    if rms.target.kind in ("cuda", "hip"):
        import torch

        args = [torch.from_numpy(a).cuda() for a in (x, w, b)]
        y_rms, y_ln = rms(*args[:2]).cpu().numpy(), ln(*args).cpu().numpy()
    else:
        y_rms, y_ln = rms(x, w), ln(x, w, b)
    for name, y, ref in (("rms_norm", y_rms, reference_rms(x, w)), ("layer_norm", y_ln, reference_layer(x, w, b))):
        err = np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max()
        print(f"{name} {M}x{N} on {rms.target}: relative error {err:.2e}")  # max abs error / max |ref|
        assert err < 3e-3, err
    print(rms.ftg.summary())


if __name__ == "__main__":
    main(sys.argv[1:])
