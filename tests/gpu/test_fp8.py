"""The fp8 gemm (examples/06_fp8_gemm.py) on the GPU against a float64 reference of the same quantized inputs:
``mma.sync.m16n8k32`` (sm_89+) and, on Hopper, ``wgmma.m64nNk32``; torch's ``_scaled_mm`` (cuBLAS) on the same
inputs agrees within bfloat16 rounding."""

import numpy as np
import pytest

import tilec

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def _cc() -> tuple[int, int]:
    return torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)


def _inputs(fp8, M, N, K):
    rng = np.random.default_rng()
    a, sa = fp8.quantize(rng.standard_normal((M, K)), 1)
    b, sb = fp8.quantize(rng.standard_normal((N, K)), 1)
    ref = (a.astype(np.float64) @ b.astype(np.float64).T) * sa[:, None] * sb[None, :]
    dev = [torch.from_numpy(x.view(np.uint8)).cuda().view(torch.float8_e4m3fn) for x in (a, b)]
    return (*dev, torch.from_numpy(sa).cuda(), torch.from_numpy(sb).cuda()), torch.from_numpy(ref)


def _rel(out, ref):
    out = out.double().cpu()
    assert not torch.isnan(out).any()
    return (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()


@pytest.mark.skipif(_cc() < (8, 9), reason="fp8 tensor cores need sm_89+")
@pytest.mark.parametrize("mnk", [(1000, 1000, 1024), (512, 768, 256)])
def test_fp8_gemm_mma(examples, mnk):
    fp8 = examples["06_fp8_gemm"]
    k = tilec.JITKernel(fp8.fp8_matmul.fn(*mnk, threads=256), "cuda", [-1])
    assert "mma (" in k.report()
    args, ref = _inputs(fp8, *mnk)
    assert _rel(k(*args), ref) < 8e-3


@pytest.mark.skipif(_cc() != (9, 0), reason="wgmma needs sm_90")
@pytest.mark.parametrize("feed", ["cp.async", "tma", "tma ws"])
@pytest.mark.parametrize("cfg", [(128, 256, 128, 3, 256), (128, 128, 64, 4, 128)])
def test_fp8_gemm_wgmma(examples, cfg, feed):
    fp8 = examples["06_fp8_gemm"]
    bm, bn, bk, st, th = cfg
    M, N, K = 1000, 1008, 1024  # ragged against every tile; N a multiple of 16, as cuBLAS's fp8 GEMM requires
    k = tilec.JITKernel(fp8.fp8_matmul.fn(M, N, K, block_M=bm, block_N=bn, block_K=bk, num_stages=st, threads=th),
                        "cuda", [-1], pass_configs={"wgmma": True, "tma": feed != "cp.async",
                                                    "warp_specialize": feed == "tma ws"})
    assert any("T.Pipelined" in t and "TMA" in t for t in k.report().splitlines()) == (feed != "cp.async")
    assert "wgmma (m64n" in k.report()
    args, ref = _inputs(fp8, M, N, K)
    out = k(*args)
    assert _rel(out, ref) < 8e-3
    if hasattr(torch, "_scaled_mm"):
        a, b, sa, sb = args
        peer = torch._scaled_mm(a, b.t(), scale_a=sa[:, None], scale_b=sb[None, :], out_dtype=torch.bfloat16)
        assert _rel(out, peer.double().cpu()) < 8e-3


@pytest.mark.skipif(_cc() != (9, 0), reason="wgmma needs sm_90")
@pytest.mark.parametrize("stream_k", [False, True])
def test_fp8_gemm_persistent(examples, stream_k):
    """Persistent blocks in panels of 4 tile rows (the example's ``panel``), with stream-K or not: the partial sums
    are added before the epilogue applies the row and column scales. 2000 x 4000 in tiles of 128 x 256: 256 tiles on
    132 SMs, the last 124 shared out with stream-K; ragged M and N; launched twice."""
    fp8 = examples["06_fp8_gemm"]
    M, N, K = 2000, 4000, 1024
    k = tilec.JITKernel(fp8.fp8_matmul.fn(M, N, K, block_M=128, block_N=256, block_K=128, threads=256, panel=4),
                        "cuda", [-1], pass_configs={"wgmma": True, "tma": True, "warp_specialize": True,
                                                    "persistent": True, "stream_k": stream_k})
    assert "in panels of 4 rows" in k.report()
    assert ("1 round of whole tiles, then the last 124 tiles shared out" in k.report()) == stream_k
    for _ in range(2):
        args, ref = _inputs(fp8, M, N, K)
        assert _rel(k(*args), ref) < 8e-3


@pytest.mark.skipif(_cc() != (9, 0), reason="wgmma needs sm_90")
def test_fp8_e5m2_gemm_warp_specialized(examples):
    """Both operands in e5m2 (the example's ``dtype``), quantized to e5m2's range: ``wgmma...e5m2.e5m2`` fed by TMA
    from a producer warpgroup, ragged M and N."""
    import ml_dtypes

    fp8 = examples["06_fp8_gemm"]
    M, N, K = 1000, 1008, 1024
    k = tilec.JITKernel(fp8.fp8_matmul.fn(M, N, K, block_M=128, block_N=256, block_K=128, threads=256,
                                          dtype="float8_e5m2"),
                        "cuda", [-1], pass_configs={"wgmma": True, "tma": True, "warp_specialize": True})
    assert "e5m2" in k.get_kernel_source() and "wgmma (m64n" in k.report()
    rng = np.random.default_rng()
    q, s = [], []
    for rows in (M, N):
        x = rng.standard_normal((rows, K))
        scale = (np.abs(x).max(axis=1) / 57344.0).astype(np.float32)  # 57344: the largest e5m2 value
        q.append((x / scale[:, None]).astype(ml_dtypes.float8_e5m2))
        s.append(scale)
    ref = (q[0].astype(np.float64) @ q[1].astype(np.float64).T) * s[0][:, None] * s[1][None, :]
    dev = [torch.from_numpy(x.view(np.uint8)).cuda().view(torch.float8_e5m2) for x in q]
    out = k(*dev, *(torch.from_numpy(x).cuda() for x in s))
    assert _rel(out, torch.from_numpy(ref)) < 8e-3
