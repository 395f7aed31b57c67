"""Accumulator stores exchanged within quads (pass config ``store_exchange``, tilec.lower.vector_copy): the four
threads of an mma quad transpose their pairs by ``shfl_xor`` and each stores 16 bytes. Checked on the thread
interpreter (which runs the shuffles lane by lane) against float64 numpy, and in the CUDA text."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, load_example, randn

import tilec
from tilec.ir.visit import walk
from tilec.lower.tir import Bits, TCall

DIRECT = {"block_N": 128, "block_K": 32, "threads": 128, "num_stages": 3}  # no operand can stage the tile
MMA = {"wgmma": False, "tma": False}


def _gemm(M, N, K, target, configs=None, **kw):
    func = load_example("01_gemm").matmul(M, N, K, **DIRECT, **kw).prim_func
    return tilec.JITKernel(func, target, [-1], pass_configs={**MMA, **(configs or {})})


def _shuffles(k: tilec.JITKernel) -> int:
    return sum(isinstance(n, TCall) and n.name == "shfl_xor" for n in walk(k.state.artifacts["thread_ir"].body))


@pytest.mark.parametrize(("M", "N", "dtype"), [(100, 200, "float16"), (64, 136, "bfloat16"), (70, 100, "float16")])
def test_exchanged_store_numerics(rng, M, N, dtype):
    """Ragged rows and column chunks: each 16-byte store is predicated on its first element (N a multiple of 8).
    N = 100 allows 8-byte chunks only: the plain pair stores."""
    k = _gemm(M, N, 64, "simt:sm_80", dtype=dtype)
    exchanged = N % 8 == 0
    assert (_shuffles(k) > 0) == exchanged
    assert any(isinstance(n, Bits) for n in walk(k.state.artifacts["thread_ir"].body)) == exchanged
    a, b = randn(rng, (M, 64), dtype), randn(rng, (64, N), dtype)
    assert_close(k(a, b), a.astype(np.float64) @ b.astype(np.float64), dtype)


def test_cuda_text_and_the_config_that_turns_it_off():
    on = _gemm(4096, 4096, 4096, "cuda:sm_80").get_kernel_source()
    off = _gemm(4096, 4096, 4096, "cuda:sm_80", {"store_exchange": False}).get_kernel_source()
    # a warp's 64x32 accumulator (2 x 4 mma tiles of 16x8): 16 pair stores, or 4 of 16 bytes after 16 shuffles
    assert on.count("= tl::Vec<unsigned, 4>{{") == 4 * 4 and on.count("__shfl_xor_sync") == 16 * 4
    assert "reinterpret_cast<tl::Vec<half, 2>*>(&C[" not in on
    assert off.count("reinterpret_cast<tl::Vec<half, 2>*>(&C[") == 16 * 4 and "__shfl_xor_sync" not in off


def test_attention_output_store_is_exchanged(rng):
    """The persistent warp-specialized attention's O store (the causal tile's largest fixed cost, perf notes AP)."""
    fa = load_example("03_flash_attention")
    src = tilec.JITKernel(fa.flash_attention.fn(8, 16, 2048, 128, True, block_M=128, block_N=128, num_stages=2,
                                                threads=256), "cuda:sm_90a", [3],
                          pass_configs={"wgmma": True, "tma": True, "warp_specialize": True, "persistent": True}
                          ).get_kernel_source()
    assert src.count("reinterpret_cast<tl::Vec<unsigned, 4>*>(&O[") == 8  # 64 halves a thread, 8 in each store
    b, h, n, d = 1, 2, 72, 64
    k = tilec.JITKernel(fa.flash_attention(b, h, n, d, True, block_M=64, block_N=64, threads=128, num_stages=2)
                        .prim_func, "simt:sm_90a", [3], pass_configs={"wgmma": True, "stage_epilogue": False})
    assert any(isinstance(n, Bits) for n in walk(k.state.artifacts["thread_ir"].body))
    q, kk, v = (randn(rng, (b, h, n, d), "float16") for _ in range(3))
    assert_close(k(q, kk, v), fa.reference(q, kk, v, True), "float16", scale=float(np.abs(v.astype(np.float64)).max()))
