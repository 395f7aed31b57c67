"""T.copy's options on the GPU (`pytest -m gpu`): coalesced_width, disable_tma and eviction_policy change how a
copy moves, never what it computes, so each runs a GEMM (and a plain tile copy) against float64 references, outputs
poisoned with NaN. What each option emits is checked offline (tests/lower/test_copy_options.py) and compiled with
nvcc (tests/backends/test_nvcc.py)."""

import pytest

import tilec
import tilec.language as T

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def gemm(M, N, K, options_a, options_c, bm=64, bn=64, bk=32):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                T.copy(A[by * bm, k * bk], A_s, **options_a)
                T.copy(B[k * bk, bx * bn], B_s, eviction_policy="evict_last")
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn], **options_c)

    return main


def copies(M, N, width, policy):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
            S = T.alloc_shared((32, N), "float16")
            T.copy(A[bx * 32, 0], S, coalesced_width=width, eviction_policy=policy)
            T.copy(S, B[bx * 32, 0], coalesced_width=width, eviction_policy=policy)

    return main


OPTIONS = {
    "coalesced_width": ({"coalesced_width": 4}, {"coalesced_width": 2}),
    "disable_tma": ({"disable_tma": True}, {"disable_tma": True}),
    "evict_first": ({"eviction_policy": "evict_first"}, {"eviction_policy": "evict_first"}),
    "evict_last, evict_normal": ({"eviction_policy": "evict_last"}, {"eviction_policy": "evict_normal"}),
    "all": ({"coalesced_width": 8, "disable_tma": True, "eviction_policy": "evict_first"},
            {"eviction_policy": "evict_last"}),
}


@pytest.mark.parametrize("configs", [{}, {"wgmma": True, "tma": True}, {"wgmma": True, "tma": True,
                                                                         "warp_specialize": True}],
                         ids=["cp.async", "tma", "tma ws"])
@pytest.mark.parametrize("case", list(OPTIONS))
@pytest.mark.parametrize("mnk", [(256, 256, 256), (1000, 520, 328)])
def test_gemm_with_copy_options(case, configs, mnk):
    if configs and not _hopper():
        pytest.skip("TMA needs sm_90")
    M, N, K = mnk
    a = torch.randn(M, K, device="cuda").half()
    b = torch.randn(K, N, device="cuda").half()
    c = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
    tilec.JITKernel(gemm(M, N, K, *OPTIONS[case]), "cuda", pass_configs=configs)(a, b, c)
    ref = a.double() @ b.double()
    assert not torch.isnan(c).any(), "unwritten (NaN) elements in the output"
    assert (torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref)).item() < 3e-3


@pytest.mark.parametrize("width", [None, 1, 2, 4, 16, 32])
@pytest.mark.parametrize("policy", [None, "evict_first", "evict_last"])
def test_copies_with_copy_options(width, policy):
    a = torch.randn(200, 64, device="cuda").half()
    b = torch.full((200, 64), float("nan"), dtype=torch.float16, device="cuda")
    tilec.JITKernel(copies(200, 64, width, policy), "cuda")(a, b)
    assert torch.equal(a, b)


def mixed_gemm(M, N, K, operand, bm=128, bn=128, bk=64):
    """A pipelined wgmma GEMM one of whose operands TMA cannot copy: A's copy with disable_tma=True, or B a strided
    view (rows 2 N apart). That operand goes by cp.async into the TMA ring's stages, completing on their mbarriers."""
    b_type = T.StridedTensor((K, N), (2 * N, 1), "float16") if operand == "B strided" else T.Tensor((K, N), "float16")

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: b_type, C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                T.copy(A[by * bm, k * bk], A_s, disable_tma=operand == "A disable_tma")
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("configs", [{"wgmma": True, "tma": True}, {"wgmma": True, "tma": True,
                                                                    "warp_specialize": True}], ids=["tma", "tma ws"])
@pytest.mark.parametrize("operand", ["A disable_tma", "B strided"])
@pytest.mark.parametrize("mnk", [(256, 256, 256), (1000, 520, 328)])
def test_gemm_with_a_mixed_tma_and_cp_async_ring(operand, configs, mnk):
    """The operand TMA cannot copy goes by cp.async (cp.async.mbarrier.arrive.noinc on the stage's mbarrier) beside
    the other's TMA copies in one ring; the product against float64, the output poisoned with NaN."""
    if not _hopper():
        pytest.skip("TMA needs sm_90")
    M, N, K = mnk
    a = torch.randn(M, K, device="cuda").half()
    b_full = torch.full((K, 2 * N), float("nan"), dtype=torch.float16, device="cuda")
    b_full[:, :N] = torch.randn(K, N, device="cuda").half()
    b = b_full[:, :N] if operand == "B strided" else b_full[:, :N].contiguous()
    c = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
    kernel = tilec.JITKernel(mixed_gemm(M, N, K, operand), "cuda", pass_configs=configs)
    slow = "A_s" if operand == "A disable_tma" else "B_s"
    assert f"{slow} by cp.async, each thread arriving on the stage's mbarrier" in kernel.report()
    kernel(a, b, c)
    ref = a.double() @ b.double()
    assert not torch.isnan(c).any(), "unwritten (NaN) elements in the output"
    assert (torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref)).item() < 3e-3
