"""Multi-head latent attention (DeepSeek MLA), decode step: each query head attends to one shared latent KV cache.

Scores are Q K^T over the 512 latent dimensions plus Q_pe K_pe^T over the 64 rotary ones; the values are the latent
cache itself (V = KV), so a block of ``block_H`` heads reads each KV tile once for both gemms. Layouts: Q
(batch, heads, dv), Q_pe (batch, heads, dpe), KV (batch, seqlen, kv_heads, dv), K_pe (batch, seqlen, kv_heads, dpe),
O (batch, heads, dv); heads // kv_heads query heads share a KV head.

Run: python examples/07_mla_decode.py [batch heads seqlen]   (the CPU interpreter without a GPU, CUDA with one)

heads is a multiple of 16 (a block takes 16, 32 or 64 of them).
"""

import sys

import numpy as np

import tilec
import tilec.language as T


@tilec.jit(out_idx=[4])
def mla_decode(batch, heads, kv_heads, seqlen, dv=512, dpe=64, block_H=64, block_N=64, num_stages=1, threads=256,
               dtype="float16"):
    scale = (1.0 / (dv + dpe)) ** 0.5 * 1.4426950408889634  # softmax in base 2
    group = heads // kv_heads
    acc = "float32"
    assert group % block_H == 0, f"block_H={block_H} must divide the {group} query heads of a KV head"

    @T.prim_func
    def main(Q: T.Tensor((batch, heads, dv), dtype), Q_pe: T.Tensor((batch, heads, dpe), dtype),
             KV: T.Tensor((batch, seqlen, kv_heads, dv), dtype), K_pe: T.Tensor((batch, seqlen, kv_heads, dpe), dtype),
             O: T.Tensor((batch, heads, dv), dtype)):
        with T.Kernel(heads // block_H, batch, threads=threads) as (bx, by):
            Q_s = T.alloc_shared((block_H, dv), dtype)
            Qpe_s = T.alloc_shared((block_H, dpe), dtype)
            KV_s = T.alloc_shared((block_N, dv), dtype)
            Kpe_s = T.alloc_shared((block_N, dpe), dtype)
            P_s = T.alloc_shared((block_H, block_N), dtype)
            S = T.alloc_fragment((block_H, block_N), acc)
            O_f = T.alloc_fragment((block_H, dv), acc)
            m = T.alloc_fragment((block_H,), acc)
            m_prev = T.alloc_fragment((block_H,), acc)
            rescale = T.alloc_fragment((block_H,), acc)
            l_tile = T.alloc_fragment((block_H,), acc)
            l = T.alloc_fragment((block_H,), acc)
            kvh = bx * block_H // group

            T.copy(Q[by, bx * block_H : (bx + 1) * block_H, :], Q_s)
            T.copy(Q_pe[by, bx * block_H : (bx + 1) * block_H, :], Qpe_s)
            T.fill(O_f, 0)
            T.fill(l, 0)
            T.fill(m, -T.infinity(acc))
            for k in T.Pipelined(T.ceildiv(seqlen, block_N), num_stages=num_stages):
                T.copy(KV[by, k * block_N : (k + 1) * block_N, kvh, :], KV_s)
                T.copy(K_pe[by, k * block_N : (k + 1) * block_N, kvh, :], Kpe_s)
                if seqlen % block_N:
                    for i, j in T.Parallel(block_H, block_N):
                        S[i, j] = T.if_then_else(k * block_N + j < seqlen, 0, -T.infinity(acc))
                else:
                    T.clear(S)
                T.gemm(Q_s, KV_s, S, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.gemm(Qpe_s, Kpe_s, S, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(m, m_prev)
                T.reduce_max(S, m, dim=1, clear=False)
                for i in T.Parallel(block_H):
                    rescale[i] = T.exp2((m_prev[i] - m[i]) * scale)
                for i, j in T.Parallel(block_H, block_N):
                    S[i, j] = T.exp2(S[i, j] * scale - m[i] * scale)
                T.reduce_sum(S, l_tile, dim=1)
                for i in T.Parallel(block_H):
                    l[i] = l[i] * rescale[i] + l_tile[i]
                T.copy(S, P_s)
                for i, j in T.Parallel(block_H, dv):
                    O_f[i, j] *= rescale[i]
                T.gemm(P_s, KV_s, O_f, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(block_H, dv):
                O_f[i, j] /= l[i]
            T.copy(O_f, O[by, bx * block_H : (bx + 1) * block_H, :])

    return main


def reference(q: np.ndarray, q_pe: np.ndarray, kv: np.ndarray, k_pe: np.ndarray) -> np.ndarray:
    """float64 MLA decode: softmax((Q KV^T + Q_pe K_pe^T) / sqrt(dv + dpe)) KV, per KV head's query group."""
    q, q_pe, kv, k_pe = (x.astype(np.float64) for x in (q, q_pe, kv, k_pe))
    b, h, dv = q.shape
    kvh = kv.shape[2]
    g = h // kvh
    kv_h = np.repeat(kv.transpose(0, 2, 1, 3), g, axis=1)  # (b, h, s, dv)
    kpe_h = np.repeat(k_pe.transpose(0, 2, 1, 3), g, axis=1)
    s = (np.einsum("bhd,bhsd->bhs", q, kv_h) + np.einsum("bhd,bhsd->bhs", q_pe, kpe_h)) / np.sqrt(dv + q_pe.shape[-1])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("bhs,bhsd->bhd", p / p.sum(axis=-1, keepdims=True), kv_h)


USAGE = "usage: python examples/07_mla_decode.py [batch heads seqlen]"


def _size(name: str, word: str) -> int:
    """A size argument: a positive integer, else the usage naming the argument."""
    if not (word.isdecimal() and int(word) > 0):
        sys.exit(f"{USAGE}: {name} must be a positive integer, got {word!r}")
    return int(word)


def main(argv: list[str]) -> None:
    if argv and not 3 <= len(argv) <= 3:
        sys.exit(f"{USAGE} (got {len(argv)} arguments)")
    sizes = [_size(name, x) for name, x in zip(["batch", "heads", "seqlen"], argv)]
    b, h, s = sizes or (1, 64, 100)
    if h % 16:
        sys.exit(f"{USAGE}: heads={h} is not a multiple of 16 (a block takes 16, 32 or 64 heads)")
    amd = tilec.target.parse_target(None).backend == "hip"  # 64 KB of LDS a block: 16 heads x 32 keys a tile
    if amd:
        tiles = dict(block_H=16, block_N=32, threads=128)
    else:  # the default 64 heads a block where they divide the heads, else 32 or 16 heads on four warps
        block_H = next(n for n in (64, 32, 16) if h % n == 0)
        tiles = {} if block_H == 64 else dict(block_H=block_H, threads=128)
    kernel = mla_decode(b, h, 1, s, **tiles)
    rng = np.random.default_rng()
    q, q_pe = (rng.standard_normal((b, h, d)).astype(np.float16) for d in (512, 64))
    kv, k_pe = (rng.standard_normal((b, s, 1, d)).astype(np.float16) for d in (512, 64))
    if kernel.target.kind in ("cuda", "hip"):
        import torch

        o = kernel(*(torch.from_numpy(x).cuda() for x in (q, q_pe, kv, k_pe))).cpu().numpy()
    else:
        o = kernel(q, q_pe, kv, k_pe)
    err = np.abs(o.astype(np.float64) - reference(q, q_pe, kv, k_pe)).max()
    print(f"mla decode b={b} h={h} seqlen={s} on {kernel.target}: max abs error {err:.2e}")
    print(kernel.ftg.summary())
    assert err < 1e-2, err


if __name__ == "__main__":
    main(sys.argv[1:])
