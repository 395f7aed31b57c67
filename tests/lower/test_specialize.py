"""Warp specialization and persistence chosen by the compiler (tilec.passes.specialize) where the pass configs leave
them open: the kernels it picks compile to what the explicit pass configs give, the others keep their block-wide
pipeline, and the report says which and why."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, example_line, load_example, poisoned, randn

import tilec

CHOSEN = "chosen by the compiler"
LOOP = example_line("01_gemm", "for k in T.Pipelined(")
KERNEL = example_line("01_gemm", "with T.Kernel(")


def _gemm(configs=None, target="cuda:sm_90a", M=4096, **tiles):
    tiles = {"block_M": 128, "block_N": 256, "block_K": 64, "num_stages": 3, "threads": 256, **tiles}
    return tilec.JITKernel(load_example("01_gemm").matmul.fn(M, M, M, **tiles), target, [-1], pass_configs=configs)


def _notes(k):
    return [line.strip() for line in k.report().splitlines() if CHOSEN in line and "specialization" in line]


def test_a_gemm_that_keeps_its_sm_to_itself_is_specialized_and_persistent():
    k = _gemm()
    assert _notes(k) == [
        f"note: T.Kernel at line {KERNEL}: warp specialization and persistence {CHOSEN}: the T.Pipelined loop at line "
        f"{LOOP} runs a gemm and its tiles in flight take 144 KB of shared memory, more than half an SM's, so the "
        "block runs alone on its SM (pass config 'warp_specialize': False keeps the block-wide pipeline)"]
    assert k.get_kernel_source() == _gemm({"warp_specialize": True, "persistent": True}).get_kernel_source()
    assert "setmaxnreg" in k.get_kernel_source()


@pytest.mark.parametrize("case", ["gemm panel16", "attention D=128", "attention D=128 causal",
                                  "attention D=64 192x128"])
def test_the_suites_warp_specialized_persistent_rows_are_the_default_kernels(case):
    """The benchmark suite's fastest rows, timed with explicit pass configs (and the GEMM's ``panel=16``), are what
    the examples compile to with none (the same CUDA; the GEMM's panels chosen by tilec.passes.panels), so their
    figures are the plain examples' with only tile sizes chosen."""
    if case.startswith("gemm"):
        fn = load_example("01_gemm").matmul.fn(4096, 4096, 4096, block_M=128, block_N=256, block_K=64, num_stages=3,
                                               threads=256)
        row = load_example("01_gemm").matmul.fn(4096, 4096, 4096, block_M=128, block_N=256, block_K=64, num_stages=3,
                                                threads=256, panel=16)
        out = [-1]
    else:
        bm = 192 if "192" in case else 128
        fn = row = load_example("03_flash_attention").flash_attention.fn(8, 16, 2048, 64 if "D=64" in case else 128,
                                                                         "causal" in case, block_M=bm, block_N=128,
                                                                         num_stages=2, threads=2 * bm)
        out = [3]
    default = tilec.JITKernel(fn, "cuda:sm_90a", out)
    given = tilec.JITKernel(row, "cuda:sm_90a", out, pass_configs={"wgmma": True, "tma": True,
                                                                   "warp_specialize": True, "persistent": True})
    assert default.get_kernel_source() == given.get_kernel_source()


def test_a_gemm_whose_blocks_share_an_sm_keeps_the_block_wide_pipeline():
    k = _gemm(block_N=128, block_K=32, threads=128)
    assert _notes(k) == [
        f"note: T.Kernel at line {KERNEL}: no warp specialization, {CHOSEN}: its tiles in flight take 48 KB of shared "
        "memory and its accumulators and addresses about 160 registers a thread, so two blocks share an SM and "
        "overlap each other's copies and gemms (pass config 'warp_specialize': True specializes it)"]
    assert k.get_kernel_source() == _gemm({"warp_specialize": False}, block_N=128, block_K=32,
                                          threads=128).get_kernel_source()
    assert "setmaxnreg" not in k.get_kernel_source()


def test_pass_configs_given_are_kept():
    plain = _gemm({"warp_specialize": False})
    assert not _notes(plain) and "setmaxnreg" not in plain.get_kernel_source()
    alone = _gemm({"persistent": False})  # specialization still chosen, persistence as given
    assert _notes(alone)[0].startswith(f"note: T.Kernel at line {KERNEL}: warp specialization {CHOSEN}:")
    assert alone.get_kernel_source() == _gemm({"warp_specialize": True}).get_kernel_source()
    assert not _notes(_gemm({"warp_specialize": True}))


@pytest.mark.parametrize("case", ["sm_80", "mma.sync path", "one stage", "scalar float32"])
def test_nothing_is_chosen_off_the_hopper_path(case):
    k = {"sm_80": lambda: _gemm(target="cuda:sm_80"),
         "mma.sync path": lambda: _gemm({"wgmma": False, "tma": False}),
         "one stage": lambda: _gemm(num_stages=1),
         "scalar float32": lambda: _gemm(block_M=240, block_N=128, block_K=32, threads=128, dtype="float32")}[case]()
    assert not _notes(k) and "setmaxnreg" not in k.get_kernel_source()


def test_registers_and_rows_decide_too():
    """Flash attention at D=64: 128x128 tiles at 256 threads (80 KB, ~128 registers a thread) share an SM; 192x128
    tiles at 384 threads (88 KB) do not, by registers. MLA decode's 64 rows on two warpgroups stay unspecialized."""
    fa = load_example("03_flash_attention").flash_attention

    def attention(block_M, threads):
        return tilec.JITKernel(fa.fn(2, 2, 1024, 64, False, block_M=block_M, block_N=128, num_stages=2,
                                     threads=threads), "cuda:sm_90a", [3])

    (shared,) = _notes(attention(128, 256))
    assert "no warp specialization" in shared and "80 KB of shared memory" in shared
    (alone,) = _notes(attention(192, 384))
    assert "warp specialization and persistence" in alone and "its 384 threads need about 128 registers each" in alone
    mla = tilec.JITKernel(load_example("07_mla_decode").mla_decode.fn(4, 128, 1, 1024, num_stages=2),
                          "cuda:sm_90a", [4])
    (rows,) = _notes(mla)
    assert "no warp specialization" in rows
    assert "its gemms' 64 rows leave its 2 warpgroups less than 64 rows each" in rows


def test_the_chosen_kernel_computes_the_product(rng):
    """The default kernel, warp-specialized and persistent, in the thread interpreter on a ragged GEMM."""
    M, N, K = 200, 296, 136  # rows of whole 16 bytes: TMA
    k = tilec.JITKernel(load_example("01_gemm").matmul.fn(M, N, K, block_M=128, block_N=256, block_K=64,
                                                           num_stages=3, threads=256), "simt:sm_90a")
    assert "warp specialization and persistence" in _notes(k)[0] and "persistent, 4 blocks loop" in k.report()
    a, b, c = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16"), poisoned((M, N), "float16")
    k(a, b, c)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), "float16")
