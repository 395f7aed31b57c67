"""Triton peers for the benchmark suite: a blocked matmul and a flash-attention forward, written for tilec's
benchmarks (the usual structure of such kernels; autotuned over a few configurations)."""

import torch
import triton
import triton.language as tl

_MM_CONFIGS = [
    triton.Config({"BM": 128, "BN": 256, "BK": 64, "G": 8}, num_stages=3, num_warps=8),
    triton.Config({"BM": 256, "BN": 128, "BK": 64, "G": 8}, num_stages=3, num_warps=8),
    triton.Config({"BM": 128, "BN": 128, "BK": 64, "G": 8}, num_stages=4, num_warps=4),
    triton.Config({"BM": 128, "BN": 128, "BK": 32, "G": 8}, num_stages=4, num_warps=4),
]


@triton.autotune(configs=_MM_CONFIGS, key=["M", "N", "K"])
@triton.jit
def _matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
            BK: tl.constexpr, G: tl.constexpr):
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    width = G * grid_n
    group = pid // width
    first_m = group * G
    size_m = min(grid_m - first_m, G)
    pm = first_m + (pid % width) % size_m
    pn = (pid % width) // size_m
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BK)):
        kk = k0 * BK + rk
        x = tl.load(a + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)  # noqa: E731
    _matmul[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    return c


_FA_CONFIGS = [
    triton.Config({"BM": 128, "BN": 64}, num_stages=2, num_warps=8),
    triton.Config({"BM": 128, "BN": 128}, num_stages=2, num_warps=8),
    triton.Config({"BM": 64, "BN": 64}, num_stages=3, num_warps=4),
    triton.Config({"BM": 128, "BN": 64}, num_stages=3, num_warps=4),
]


@triton.autotune(configs=_FA_CONFIGS, key=["S", "D", "CAUSAL"])
@triton.jit
def _attn(q, k, v, o, S, scale, D: tl.constexpr, CAUSAL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pm, bh = tl.program_id(0), tl.program_id(1)
    base = bh * S * D
    rm = pm * BM + tl.arange(0, BM)
    rd = tl.arange(0, D)
    qt = tl.load(q + base + rm[:, None] * D + rd[None, :], mask=rm[:, None] < S, other=0.0)
    m = tl.full((BM,), float("-inf"), tl.float32)
    lsum = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    hi = tl.minimum((pm + 1) * BM, S) if CAUSAL else S
    for n0 in range(0, hi, BN):
        rn = n0 + tl.arange(0, BN)
        kt = tl.load(k + base + rn[None, :] * D + rd[:, None], mask=rn[None, :] < S, other=0.0)
        s = tl.dot(qt, kt) * scale
        valid = rn[None, :] < S
        if CAUSAL:
            valid = valid & (rm[:, None] >= rn[None, :])
        s = tl.where(valid, s, float("-inf"))
        mn = tl.maximum(m, tl.max(s, 1))
        p = tl.math.exp2(s - mn[:, None])
        alpha = tl.math.exp2(m - mn)
        lsum = lsum * alpha + tl.sum(p, 1)
        vt = tl.load(v + base + rn[:, None] * D + rd[None, :], mask=rn[:, None] < S, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt)
        m = mn
    tl.store(o + base + rm[:, None] * D + rd[None, :], (acc / lsum[:, None]).to(o.dtype.element_ty),
             mask=rm[:, None] < S)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    scale = D**-0.5 * 1.4426950408889634
    grid = lambda meta: (triton.cdiv(S, meta["BM"]), B * H)  # noqa: E731
    _attn[grid](q, k, v, o, S, scale, D=D, CAUSAL=causal)
    return o


@triton.jit
def _add(x, y, z, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(z + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)


def add(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> None:
    _add[(triton.cdiv(x.numel(), 1024),)](x, y, z, x.numel(), B=1024)


_FP8_CONFIGS = [
    triton.Config({"BM": 128, "BN": 256, "BK": 128, "G": 8}, num_stages=3, num_warps=8),
    triton.Config({"BM": 128, "BN": 128, "BK": 128, "G": 8}, num_stages=4, num_warps=8),
    triton.Config({"BM": 128, "BN": 128, "BK": 64, "G": 8}, num_stages=4, num_warps=4),
]


@triton.autotune(configs=_FP8_CONFIGS, key=["M", "N", "K"])
@triton.jit
def _matmul_fp8(a, b, sa, sb, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                G: tl.constexpr):
    """C = (A @ B^T) * sa[:, None] * sb[None, :]: A (M, K) and B (N, K) row-major fp8, C bfloat16."""
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    width = G * grid_n
    first_m = (pid // width) * G
    size_m = min(grid_m - first_m, G)
    pm = first_m + (pid % width) % size_m
    pn = (pid % width) // size_m
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BK)):
        kk = k0 * BK + rk
        x = tl.load(a + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b + rn[None, :] * K + kk[:, None], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc)
    acc = acc * tl.load(sa + rm, mask=rm < M, other=0.0)[:, None] * tl.load(sb + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul_fp8(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    """Row-wise scaled fp8 GEMM, as examples/06_fp8_gemm.py computes it (B given as N x K)."""
    M, K = a.shape
    N = b.shape[0]
    c = torch.empty((M, N), device=a.device, dtype=torch.bfloat16)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)  # noqa: E731
    _matmul_fp8[grid](a, b, sa, sb, c, M, N, K)
    return c
