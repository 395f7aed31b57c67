"""TileLang peers for the benchmark suite (TileLang 0.1.15 from PyPI): the same GEMM and flash-attention
kernels as tilec's examples, written in TileLang's language, with the configurations of ../shared/ANCHORS.md."""

import functools

import tilelang
import tilelang.language as T


@functools.cache
def _gemm(M, N, K, bm, bn, bk, stages, threads, dtype):
    @tilelang.jit(out_idx=[-1])
    def build():
        @T.prim_func
        def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
                A_s = T.alloc_shared((bm, bk), dtype)
                B_s = T.alloc_shared((bk, bn), dtype)
                C_f = T.alloc_fragment((bm, bn), "float32")
                T.clear(C_f)
                for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                    T.copy(A[by * bm, k * bk], A_s)
                    T.copy(B[k * bk, bx * bn], B_s)
                    T.gemm(A_s, B_s, C_f)
                T.copy(C_f, C[by * bm, bx * bn])

        return main

    return build()


def gemm_impls(M, N, K, dtype):
    return {f"tilelang {bm}x{bn}x{bk}": _gemm(M, N, K, bm, bn, bk, 3, th, dtype)
            for bm, bn, bk, th in ((128, 128, 32, 128), (128, 256, 64, 256))}


@functools.cache
def _attention(b, h, n, d, causal, bm=128, bn=128, stages=2, threads=256):
    scale = (1.0 / d) ** 0.5 * 1.4426950408889634
    shape = (b, h, n, d)
    dtype, acc = "float16", "float32"

    @tilelang.jit(out_idx=[3], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
    def build():
        @T.prim_func
        def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
                 O: T.Tensor(shape, dtype)):
            with T.Kernel(T.ceildiv(n, bm), h, b, threads=threads) as (bx, by, bz):
                Q_s = T.alloc_shared((bm, d), dtype)
                K_s = T.alloc_shared((bn, d), dtype)
                V_s = T.alloc_shared((bn, d), dtype)
                S = T.alloc_fragment((bm, bn), acc)
                P = T.alloc_fragment((bm, bn), dtype)
                O_f = T.alloc_fragment((bm, d), acc)
                m = T.alloc_fragment((bm,), acc)
                m_prev = T.alloc_fragment((bm,), acc)
                r = T.alloc_fragment((bm,), acc)
                ls = T.alloc_fragment((bm,), acc)
                l = T.alloc_fragment((bm,), acc)
                T.copy(Q[bz, by, bx * bm : (bx + 1) * bm, :], Q_s)
                T.fill(O_f, 0)
                T.fill(l, 0)
                T.fill(m, -T.infinity(acc))
                loop = T.min(T.ceildiv(n, bn), T.ceildiv((bx + 1) * bm, bn)) if causal else T.ceildiv(n, bn)
                for k in T.Pipelined(loop, num_stages=stages):
                    T.copy(K[bz, by, k * bn : (k + 1) * bn, :], K_s)
                    if causal:
                        for i, j in T.Parallel(bm, bn):
                            S[i, j] = T.if_then_else(bx * bm + i >= k * bn + j, 0, -T.infinity(acc))
                    else:
                        T.clear(S)
                    T.gemm(Q_s, K_s, S, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                    T.copy(m, m_prev)
                    T.reduce_max(S, m, dim=1, clear=False)
                    for i in T.Parallel(bm):
                        r[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
                    for i, j in T.Parallel(bm, bn):
                        S[i, j] = T.exp2(S[i, j] * scale - m[i] * scale)
                    T.reduce_sum(S, ls, dim=1)
                    for i in T.Parallel(bm):
                        l[i] = l[i] * r[i] + ls[i]
                    T.copy(S, P)
                    for i, j in T.Parallel(bm, d):
                        O_f[i, j] *= r[i]
                    T.copy(V[bz, by, k * bn : (k + 1) * bn, :], V_s)
                    T.gemm(P, V_s, O_f, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(bm, d):
                    O_f[i, j] /= l[i]
                T.copy(O_f, O[bz, by, bx * bm : (bx + 1) * bm, :])

        return main

    return build()


def attention_impls(b, h, n, d, causal):
    return {"tilelang 128x128": _attention(b, h, n, d, causal)}


@functools.cache
def _fp8_gemm(M, N, K, bm, bn, bk, stages, threads):
    """Row-wise scaled fp8 GEMM, the kernel of examples/06_fp8_gemm.py in TileLang's language."""
    fp8, acc = "float8_e4m3", "float32"

    @tilelang.jit(out_idx=[-1])
    def build():
        @T.prim_func
        def main(A: T.Tensor((M, K), fp8), B: T.Tensor((N, K), fp8), SA: T.Tensor((M,), acc),
                 SB: T.Tensor((N,), acc), C: T.Tensor((M, N), "bfloat16")):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
                A_s = T.alloc_shared((bm, bk), fp8)
                B_s = T.alloc_shared((bn, bk), fp8)
                C_f = T.alloc_fragment((bm, bn), acc)
                T.clear(C_f)
                for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                    T.copy(A[by * bm, k * bk], A_s)
                    T.copy(B[bx * bn, k * bk], B_s)
                    T.gemm(A_s, B_s, C_f, transpose_B=True)
                for i, j in T.Parallel(bm, bn):
                    C_f[i, j] = C_f[i, j] * SA[by * bm + i] * SB[bx * bn + j]
                T.copy(C_f, C[by * bm, bx * bn])

        return main

    return build()


def fp8_gemm_impls(M, N, K):
    return {f"tilelang {bm}x{bn}x{bk}": _fp8_gemm(M, N, K, bm, bn, bk, 3, th)
            for bm, bn, bk, th in ((128, 128, 128, 128), (128, 256, 128, 256))}


@functools.cache
def _mla_decode(batch, heads, kv_heads, seqlen, dv=512, dpe=64, bh=64, bn=64, stages=2, threads=256):
    """MLA decode (examples/07_mla_decode.py) in TileLang's language, with the block sizes of its own example
    (block_N 64, block_H 64); one block per (head group, batch), no split over the KV sequence."""
    scale = (1.0 / (dv + dpe)) ** 0.5 * 1.4426950408889634
    group = heads // kv_heads
    dtype, acc = "float16", "float32"

    @tilelang.jit(out_idx=[4], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
    def build():
        @T.prim_func
        def main(Q: T.Tensor((batch, heads, dv), dtype), Q_pe: T.Tensor((batch, heads, dpe), dtype),
                 KV: T.Tensor((batch, seqlen, kv_heads, dv), dtype),
                 K_pe: T.Tensor((batch, seqlen, kv_heads, dpe), dtype), O: T.Tensor((batch, heads, dv), dtype)):
            with T.Kernel(heads // bh, batch, threads=threads) as (bx, by):
                Q_s = T.alloc_shared((bh, dv), dtype)
                Qpe_s = T.alloc_shared((bh, dpe), dtype)
                KV_s = T.alloc_shared((bn, dv), dtype)
                Kpe_s = T.alloc_shared((bn, dpe), dtype)
                P_s = T.alloc_shared((bh, bn), dtype)
                S = T.alloc_fragment((bh, bn), acc)
                O_f = T.alloc_fragment((bh, dv), acc)
                m = T.alloc_fragment((bh,), acc)
                m_prev = T.alloc_fragment((bh,), acc)
                r = T.alloc_fragment((bh,), acc)
                ls = T.alloc_fragment((bh,), acc)
                l = T.alloc_fragment((bh,), acc)
                kvh = bx * bh // group
                T.copy(Q[by, bx * bh : (bx + 1) * bh, :], Q_s)
                T.copy(Q_pe[by, bx * bh : (bx + 1) * bh, :], Qpe_s)
                T.fill(O_f, 0)
                T.fill(l, 0)
                T.fill(m, -T.infinity(acc))
                for k in T.Pipelined(T.ceildiv(seqlen, bn), num_stages=stages):
                    T.copy(KV[by, k * bn : (k + 1) * bn, kvh, :], KV_s)
                    T.copy(K_pe[by, k * bn : (k + 1) * bn, kvh, :], Kpe_s)
                    T.clear(S)
                    T.gemm(Q_s, KV_s, S, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)
                    T.gemm(Qpe_s, Kpe_s, S, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)
                    T.copy(m, m_prev)
                    T.reduce_max(S, m, dim=1, clear=False)
                    for i in T.Parallel(bh):
                        r[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
                    for i, j in T.Parallel(bh, bn):
                        S[i, j] = T.exp2(S[i, j] * scale - m[i] * scale)
                    T.reduce_sum(S, ls, dim=1)
                    for i in T.Parallel(bh):
                        l[i] = l[i] * r[i] + ls[i]
                    T.copy(S, P_s)
                    for i, j in T.Parallel(bh, dv):
                        O_f[i, j] *= r[i]
                    T.gemm(P_s, KV_s, O_f, policy=T.GemmWarpPolicy.FullCol)
                for i, j in T.Parallel(bh, dv):
                    O_f[i, j] /= l[i]
                T.copy(O_f, O[by, bx * bh : (bx + 1) * bh, :])

        return main

    return build()


def mla_decode_impls(batch, heads, kv_heads, seqlen):
    return {"tilelang 64x64": _mla_decode(batch, heads, kv_heads, seqlen)}
