"""Flash attention forward (online softmax), (batch, heads, seq, dim) layout, optional causal mask.

Run: python examples/03_flash_attention.py [batch heads seq dim [causal]]

On Hopper (sm_90a) the fastest tiles measured (perf notes AX, AZ) are block_M=128, block_N=128, threads=256,
num_stages=2 at D=128, and at D=64 block_M=192, block_N=128, threads=384 (three consumer warpgroups; 128-row tiles
for causal attention at S=2048); the compiler makes the first two warp-specialized and persistent and keeps the
third's block-wide pipeline, two blocks to an SM (tilec.passes.specialize; its note in ``kernel.report()``). In float32,
``allow_tf32=True`` runs both gemms on TF32 tensor cores (``mma.sync`` m16n8k8, P staged through shared memory).
"""

import sys

import numpy as np

import tilec
import tilec.language as T


@tilec.jit(out_idx=[3])
def flash_attention(batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64, num_stages=1, threads=128,
                    dtype="float16", q_registers=False, allow_tf32=False):
    scale = (1.0 / dim) ** 0.5 * 1.4426950408889634  # softmax in base 2
    shape = (batch, heads, seq_len, dim)
    acc = "float32"

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             O: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (b, by, bz):
            bx = T.ceildiv(seq_len, block_M) - 1 - b if is_causal else b  # causal: the longest rows start first
            Q_s = T.alloc_shared((block_M, dim), dtype)
            K_s = T.alloc_shared((block_N, dim), dtype)
            V_s = T.alloc_shared((block_N, dim), dtype)
            S = T.alloc_fragment((block_M, block_N), acc)
            P = T.alloc_fragment((block_M, block_N), dtype)
            O_f = T.alloc_fragment((block_M, dim), acc)
            m = T.alloc_fragment((block_M,), acc)
            m_prev = T.alloc_fragment((block_M,), acc)
            rescale = T.alloc_fragment((block_M,), acc)
            l_tile = T.alloc_fragment((block_M,), acc)
            l = T.alloc_fragment((block_M,), acc)

            T.copy(Q[bz, by, bx * block_M : (bx + 1) * block_M, :], Q_s)
            Q_x = Q_s
            if q_registers:  # QK^T takes Q from registers (wgmma's RS form; warp-specialized kernels on sm_90a
                # do this themselves: pass config operand_registers)
                Q_x = T.alloc_fragment((block_M, dim), dtype)
                T.copy(Q_s, Q_x)
            T.fill(O_f, 0)
            T.fill(l, 0)
            T.fill(m, -T.infinity(acc))
            n_blocks = T.ceildiv(seq_len, block_N)
            if is_causal:
                n_blocks = T.min(n_blocks, T.ceildiv((bx + 1) * block_M, block_N))
            for k in T.Pipelined(n_blocks, num_stages=num_stages):
                T.copy(K[bz, by, k * block_N : (k + 1) * block_N, :], K_s)
                if is_causal and (k + 1) * block_N > bx * block_M + 1:  # a block the diagonal crosses
                    for i, j in T.Parallel(block_M, block_N):
                        S[i, j] = T.if_then_else(bx * block_M + i >= k * block_N + j, 0, -T.infinity(acc))
                elif seq_len % block_N and (k + 1) * block_N > seq_len:  # the last, partial block
                    for i, j in T.Parallel(block_M, block_N):
                        S[i, j] = T.if_then_else(k * block_N + j < seq_len, 0, -T.infinity(acc))
                else:
                    T.clear(S)
                T.gemm(Q_x, K_s, S, transpose_B=True, policy=T.GemmWarpPolicy.FullRow, allow_tf32=allow_tf32)
                T.copy(m, m_prev)
                T.reduce_max(S, m, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    rescale[i] = T.exp2((m_prev[i] - m[i]) * scale)
                for i, j in T.Parallel(block_M, block_N):
                    S[i, j] = T.exp2(S[i, j] * scale - m[i] * scale)
                T.reduce_sum(S, l_tile, dim=1)
                for i in T.Parallel(block_M):
                    l[i] = l[i] * rescale[i] + l_tile[i]
                T.copy(S, P)
                for i, j in T.Parallel(block_M, dim):
                    O_f[i, j] *= rescale[i]
                T.copy(V[bz, by, k * block_N : (k + 1) * block_N, :], V_s)
                T.gemm(P, V_s, O_f, policy=T.GemmWarpPolicy.FullRow, allow_tf32=allow_tf32)
            for i, j in T.Parallel(block_M, dim):
                O_f[i, j] /= l[i]
            T.copy(O_f, O[bz, by, bx * block_M : (bx + 1) * block_M, :])

    return main


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    if causal:
        n = q.shape[2]
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


USAGE = "usage: python examples/03_flash_attention.py [batch heads seq dim [causal]]"


def _size(name: str, word: str) -> int:
    """A size argument: a positive integer, else the usage naming the argument."""
    if not (word.isdecimal() and int(word) > 0):
        sys.exit(f"{USAGE}: {name} must be a positive integer, got {word!r}")
    return int(word)


def _flag(word: str) -> bool:
    if word.lower() in ("1", "true", "yes", "causal"):
        return True
    if word.lower() in ("0", "false", "no"):
        return False
    sys.exit(f"causal: expected 1/true/yes/causal or 0/false/no, got {word!r}")


def main(argv: list[str]) -> None:
    if argv and not 4 <= len(argv) <= 5:
        sys.exit(f"{USAGE} (got {len(argv)} arguments)")
    sizes = [_size(name, x) for name, x in zip(["batch", "heads", "seq", "dim"], argv)]
    b, h, n, d = sizes or (1, 2, 100, 64)
    causal = len(argv) > 4 and _flag(argv[4])
    kernel = flash_attention(b, h, n, d, causal)
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((b, h, n, d)).astype(np.float16) for _ in range(3))
    if kernel.target.kind in ("cuda", "hip"):  # torch on ROCm names AMD GPUs "cuda" too
        import torch

        o = kernel(*(torch.from_numpy(x).cuda() for x in (q, k, v))).cpu().numpy()
    else:
        o = kernel(q, k, v)
    ref = reference(q, k, v, causal)
    err = np.abs(o.astype(np.float64) - ref).max()
    print(f"flash attention b={b} h={h} n={n} d={d} causal={causal} on {kernel.target}: max abs error {err:.2e}")
    print(kernel.ftg.summary())
    assert err < 1e-2, err


if __name__ == "__main__":
    main(sys.argv[1:])
