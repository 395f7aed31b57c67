"""The cost model's register estimate against ptxas (offline nvcc, sm_80), for GEMM and attention tiles."""

from __future__ import annotations

import pytest
from conftest import load_example

import tilec
from tilec.passes.cost_model import estimate

from .test_nvcc import NVCC, compile_cuda

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")

CASES = {  # name -> (example, factory, args, kwargs)
    "gemm 64x64x32 128t": ("01_gemm", "matmul", (1024, 1024, 1024), dict(block_M=64, block_N=64, threads=128)),
    "gemm 128x128x32 128t": ("01_gemm", "matmul", (1024, 1024, 1024), dict(block_M=128, block_N=128)),
    "gemm 128x256x32 256t": ("01_gemm", "matmul", (1024, 1024, 1024), dict(block_M=128, block_N=256, threads=256)),
    "attention 64x64 d64": ("03_flash_attention", "flash_attention", (1, 4, 512, 64, False),
                            dict(block_M=64, block_N=64, num_stages=2)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_register_estimate_is_near_ptxas(case, tmp_path):
    example, factory, args, kwargs = CASES[case]
    jit_fn = getattr(load_example(example), factory)
    kernel = tilec.JITKernel(jit_fn.fn(*args, **kwargs), "cuda:sm_80")
    info = compile_cuda(kernel.get_kernel_source(), tmp_path)
    est = estimate(kernel.state).regs_per_thread
    print(f"{case}: estimate {est}, ptxas {info['registers']}")
    # the estimate keeps three k-steps of gemm operands live, an upper bound ptxas often undercuts: the attention
    # tile takes 101 registers (estimate 164) since a reduction's fold starts at its first element, not its identity
    assert abs(est - info["registers"]) <= 64, (est, info)
