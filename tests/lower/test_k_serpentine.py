"""Pass config ``k_serpentine``: a persistent GEMM's producer loads odd rounds' k-tiles in descending order. The
thread interpreter runs it against float64 numpy (outputs start as NaN) on ragged shapes with several rounds a
block, with clusters and copies of the consumers (the fp8 GEMM, its scales after the loop: test_tma_simt.py); loops
it may not reorder keep ascending k-tiles and a note says why."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, load_example, randn

import tilec

WS = {"wgmma": True, "tma": True, "warp_specialize": True}
REVERSED = "T.if_then_else(tile % 2 == 1, "


@pytest.mark.parametrize(("M", "N", "K", "tiles", "configs"), [
    (200, 200, 80, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2}, {"persistent": 3}),  # ragged K
    (300, 264, 136, {"block_M": 128, "block_N": 64, "block_K": 32, "threads": 256, "num_stages": 3, "panel": 2},
     {"persistent": 5}),
    (256, 512, 96, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2, "dtype": "bfloat16"},
     {"persistent": 4, "cluster": 2}),
    (300, 264, 104, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2}, {"persistent": 3,
                                                                                     "consumers": 2}),
], ids=["ragged", "panels", "clusters", "consumer copies"])
def test_serpentine_gemm_is_right(rng, M, N, K, tiles, configs):
    kernel = tilec.JITKernel(load_example("01_gemm").matmul(M, N, K, **tiles).prim_func, "simt:sm_90a", [-1],
                             pass_configs={**WS, **configs, "k_serpentine": True})
    assert "loads odd rounds' k-tiles in descending order (pass config 'k_serpentine')" in kernel.report()
    trips = -(-K // tiles["block_K"])
    assert f"{REVERSED}{trips - 1} - k, k)" in tilec.dump(kernel, after="pipelining")
    dtype = tiles.get("dtype", "float16")
    a, b = randn(rng, (M, K), dtype), randn(rng, (K, N), dtype)
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), dtype)


def test_loops_it_may_not_reorder_keep_their_order():
    gemm = load_example("01_gemm").matmul(300, 264, 128, block_M=64, block_N=64, block_K=32, num_stages=2)
    k = tilec.JITKernel(gemm.prim_func, "simt:sm_90a", [-1],
                        pass_configs={**WS, "persistent": 3, "stream_k": True, "k_serpentine": True})
    assert "k-tiles in ascending order in every round (pass config 'k_serpentine' acts only on loops of gemms that " \
           "add into their accumulators): stream-K shares the last round's tiles out" in k.report()
    assert REVERSED not in tilec.dump(k, after="pipelining")
    fa = load_example("03_flash_attention").flash_attention(1, 2, 256, 64, False, block_M=64, block_N=64,
                                                             threads=128, num_stages=2)
    k = tilec.JITKernel(fa.prim_func, "simt:sm_90a", [3], pass_configs={**WS, "persistent": 3, "k_serpentine": True})
    assert "k-tiles in ascending order in every round" in k.report()
    assert REVERSED not in tilec.dump(k, after="pipelining")


def test_without_the_config_or_persistence_nothing_changes():
    gemm = load_example("01_gemm").matmul(256, 256, 128, block_M=64, block_N=64, block_K=32, num_stages=2)
    k = tilec.JITKernel(gemm.prim_func, "simt:sm_90a", [-1], pass_configs={**WS, "persistent": 3})
    assert REVERSED not in tilec.dump(k, after="pipelining") and "k_serpentine" not in k.report()
    k = tilec.JITKernel(gemm.prim_func, "simt:sm_90a", [-1], pass_configs={**WS, "k_serpentine": True})
    assert REVERSED not in tilec.dump(k, after="pipelining")
    assert "pass config 'k_serpentine' has no effect: it alternates the order of the k-tiles of a persistent " \
           "kernel's rounds, and the kernel is not persistent" in k.report()
