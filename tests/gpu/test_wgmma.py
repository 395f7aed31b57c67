"""The experimental wgmma path (pass config ``wgmma``) on a Hopper GPU, against float64 references."""

import pytest

import tilec

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _rel(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    assert not torch.isnan(out).any()
    return (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("cfg", [(128, 128, 64, 3, 128), (128, 256, 64, 3, 256), (64, 64, 32, 2, 128)])
@pytest.mark.parametrize("mnk", [(512, 512, 512), (1000, 1000, 1000)])
def test_wgmma_gemm(examples, cfg, mnk):
    bm, bn, bk, st, th = cfg
    M, N, K = mnk
    g = examples["01_gemm"]
    k = tilec.JITKernel(g.matmul.fn(M, N, K, block_M=bm, block_N=bn, block_K=bk, num_stages=st, threads=th),
                        "cuda", [-1], pass_configs={"wgmma": True})
    assert "wgmma" in k.report()
    a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
    assert _rel(k(a, b), a.double() @ b.double()) < 3e-3


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("causal", [False, True])
def test_wgmma_flash_attention(examples, causal):
    fa = examples["03_flash_attention"]
    b, h, n, d = 2, 4, 512, 128
    k = tilec.JITKernel(fa.flash_attention.fn(b, h, n, d, causal, block_M=128, block_N=64, threads=256,
                                              num_stages=2), "cuda", [3], pass_configs={"wgmma": True})
    assert "wgmma" in k.report()
    q, k_, v = (torch.randn(b, h, n, d, device="cuda").half() for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k_.double(), v.double(), is_causal=causal)
    assert _rel(k(q, k_, v), ref) < 3e-3
