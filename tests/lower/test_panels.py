"""Panels chosen by the compiler for a persistent kernel's tiles (tilec.passes.panels): the GEMM example with no
``T.use_swizzle`` compiles to the suite's panels-of-16 kernel, the thread interpreter runs a chosen order right, and
where the rule does not apply (row-major asked for, clusters, attention, one round, no persistence) nothing changes."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, example_line, load_example, randn

import tilec

CHOSEN = "chosen by the compiler: a round of"
KERNEL = example_line("01_gemm", "with T.Kernel(")
WS = {"wgmma": True, "tma": True, "warp_specialize": True}


def _gemm(M=4096, configs=None, target="cuda:sm_90a", **tiles):
    tiles = {"block_M": 128, "block_N": 256, "block_K": 64, "num_stages": 3, "threads": 256, **tiles}
    return tilec.JITKernel(load_example("01_gemm").matmul.fn(M, M, M, **tiles), target, [-1], pass_configs=configs)


def _panel_notes(k):
    return [line.strip() for line in k.report().splitlines() if CHOSEN in line]


@pytest.mark.parametrize(("M", "dtype"), [(4096, "float16"), (8192, "bfloat16")])
def test_the_gemm_example_gets_panels_of_16(M, dtype):
    k = _gemm(M, dtype=dtype)
    assert _panel_notes(k) == [
        f"note: T.Kernel at line {KERNEL}: tiles in panels of 16 rows, {CHOSEN} up to 132 blocks then spans 16 rows of "
        "tiles and about 9 columns, the fewest operand bytes a step (16384 a row's tile, 32768 a column's; "
        "T.use_swizzle(n) gives panels of n rows, T.use_swizzle(1) row-major order)"]
    assert k.get_kernel_source() == _gemm(M, dtype=dtype, panel=16).get_kernel_source()


def test_fp8_gemm_gets_panels_of_16():
    fp8 = load_example("06_fp8_gemm")
    fn = fp8.fp8_matmul.fn(8192, 8192, 8192, block_M=128, block_N=256, block_K=128, num_stages=3, threads=256)
    k = tilec.JITKernel(fn, "cuda:sm_90a", [-1])
    assert "tiles in panels of 16 rows, chosen by the compiler" in k.report()
    row = fp8.fp8_matmul.fn(8192, 8192, 8192, block_M=128, block_N=256, block_K=128, num_stages=3, threads=256,
                            panel=16)
    assert k.get_kernel_source() == tilec.JITKernel(row, "cuda:sm_90a", [-1]).get_kernel_source()


@pytest.mark.parametrize("case", ["row-major asked for", "clusters", "one round", "not persistent", "sm_80"])
def test_where_the_rule_does_not_apply_nothing_is_chosen(case):
    k = {"row-major asked for": lambda: _gemm(panel=1),
         "clusters": lambda: _gemm(configs={**WS, "persistent": True, "cluster": 2}),
         "one round": lambda: _gemm(1000),
         "not persistent": lambda: _gemm(configs={**WS, "persistent": False}),
         "sm_80": lambda: _gemm(target="cuda:sm_80", block_N=128, block_K=32)}[case]()
    assert not _panel_notes(k)
    assert ("in panels of" in k.report()) == (case == "row-major asked for")  # T.use_swizzle(1): panels of 1 row


def test_attention_keeps_its_order():
    fa = load_example("03_flash_attention")
    k = tilec.JITKernel(fa.flash_attention.fn(8, 16, 2048, 128, False, block_M=128, block_N=128, num_stages=2,
                                              threads=256), "cuda:sm_90a", [3])
    assert "persistent, " in k.report() and "in panels of" not in k.report()


def test_the_interpreter_runs_a_chosen_order_right(rng):
    """Three blocks on 64x64 tiles: panels of 2 rows (sqrt(3 x 1) rounded to a power of two); a ragged 5 x 4 grid
    whose last panel is one row; every tile computed once (outputs start as NaN)."""
    M, N, K = 300, 200, 96
    g = load_example("01_gemm").matmul(M, N, K, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    k = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs={**WS, "persistent": 3})
    assert "tiles in panels of 2 rows, chosen by the compiler: a round of 3 blocks" in k.report()
    assert "3 blocks loop over the tiles of the grid in panels of 2 rows" in k.report()
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    assert_close(k(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")
