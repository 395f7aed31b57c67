"""Pass configs given by the user that have no effect on the kernel each get a note saying why (a config left at
its default says nothing): tile_order without a persistent kernel whose loop's trip count depends on the tile,
store_buffers without a staged tile of several chunks in a tile loop, stage_handoff without consumer warpgroups
taking turns around a one-chunk staged tile, and the configs of a warp-specialized pipeline (rotate, split_rings,
pingpong, preload, producer_regs) where no loop becomes one."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, example_line, load_example, randn

import tilec

TMA_WS = {"wgmma": True, "tma": True, "warp_specialize": True}
KERNEL = example_line("01_gemm", "with T.Kernel(")


def _gemm(M, N, K, configs, target="simt:sm_90a", **tiles):
    tiles = {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2, **tiles}
    func = load_example("01_gemm").matmul(M, N, K, **tiles).prim_func
    return tilec.JITKernel(func, target, pass_configs=configs)


def _check_gemm(rng, kernel, M, N, K):
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")  # C allocated NaN-poisoned (out_idx)
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")


def _inert(report: str, name: str) -> list[str]:
    return [t for t in report.splitlines() if f"pass config '{name}' has no effect" in t]


@pytest.mark.parametrize(("order", "persistent", "why"), [
    ("serpentine", False, "the kernel is not persistent"),
    ("balanced", False, "the kernel is not persistent"),
    ("serpentine", 2, "the trip count of no T.Pipelined loop depends on the tile"),
])
def test_tile_order_on_a_gemm_is_noted_as_inert(rng, order, persistent, why):
    """matmul(130, 136, 96) with tile_order printed nothing about it: it orders only the tiles of a persistent
    kernel whose loop's trip count depends on the tile (causal attention)."""
    configs = {**TMA_WS, "tile_order": order, **({"persistent": persistent} if persistent else {})}
    kernel = _gemm(130, 136, 96, configs)
    assert _inert(kernel.report(), "tile_order") == [
        f"  note: T.Kernel at line {KERNEL}: pass config 'tile_order' has no effect: it orders the tiles of a "
        f"persistent kernel whose T.Pipelined loop's trip count depends on the tile, and {why}"]
    _check_gemm(rng, kernel, 130, 136, 96)


def test_tile_order_of_causal_attention_and_defaults_say_nothing():
    fa = load_example("03_flash_attention")
    func = fa.flash_attention(1, 3, 300, 64, True, block_M=128, block_N=64, threads=256, num_stages=2).prim_func
    k = tilec.JITKernel(func, "simt:sm_90a", [3], pass_configs={**TMA_WS, "persistent": 2, "tile_order": "serpentine"})
    assert "in serpentine order" in k.report() and not _inert(k.report(), "tile_order")
    plain = _gemm(130, 136, 96, TMA_WS).report()
    assert "has no effect" not in plain


@pytest.mark.parametrize(("configs", "why"), [
    ({**TMA_WS, "store_buffers": 1}, "no accumulator is staged in a persistent kernel's tile loop"),
    ({**TMA_WS, "persistent": 2, "store_buffers": 2}, "C_f_stage is written in one chunk"),
])
def test_store_buffers_without_chunks_to_alternate_is_noted_as_inert(rng, configs, why):
    """store_buffers alternates the column chunks of a tile staged in a persistent kernel's tile loop; without
    such a tile, or with a tile of one chunk (64 columns), it changed nothing and said nothing."""
    kernel = _gemm(130, 136, 96, configs)
    assert _inert(kernel.report(), "store_buffers") == [
        f"  note: T.Kernel at line {KERNEL}: pass config 'store_buffers' has no effect: it alternates the column "
        f"chunks of an accumulator staged by TMA stores in a persistent kernel's tile loop, and {why}"]
    _check_gemm(rng, kernel, 130, 136, 96)


def test_store_buffers_of_a_tile_in_chunks_says_nothing():
    k = _gemm(300, 520, 128, {**TMA_WS, "persistent": 3, "store_buffers": 1}, block_M=128, block_N=256,
              block_K=64, threads=256, num_stages=3)
    assert "C_f_stage, 128 x 128, 2 chunks" in k.report() and not _inert(k.report(), "store_buffers")


@pytest.mark.parametrize("handoff", [True, False])
def test_stage_handoff_without_warpgroups_taking_turns_is_noted_as_inert(rng, handoff):
    """stage_handoff hands a one-chunk staged tile between the consumer warpgroups of a rotated loop taking turns;
    a gemm has none, and the config changed nothing without a word."""
    kernel = _gemm(130, 136, 96, {**TMA_WS, "persistent": 2, "stage_handoff": handoff})
    assert _inert(kernel.report(), "stage_handoff") == [
        f"  note: T.Kernel at line {KERNEL}: pass config 'stage_handoff' has no effect: it hands a one-chunk "
        "staged tile between the consumer warpgroups of a rotated loop taking turns, and no staged tile follows "
        "such a loop"]
    _check_gemm(rng, kernel, 130, 136, 96)


def test_stage_handoff_off_in_rotated_attention_says_nothing():
    fa = load_example("03_flash_attention")
    func = fa.flash_attention(1, 1, 300, 64, False, block_M=128, block_N=64, threads=256, num_stages=2).prim_func
    k = tilec.JITKernel(func, "simt:sm_90a", [3], pass_configs={**TMA_WS, "persistent": 2, "stage_handoff": False})
    assert "hand O_f_stage on by named barriers" not in k.report() and not _inert(k.report(), "stage_handoff")


@pytest.mark.parametrize(("target", "configs"), [
    ("simt:sm_90a", {"wgmma": True, "tma": True}),  # TMA without a producer warpgroup
    ("simt:sm_80", {}),
])
def test_configs_of_a_specialized_pipeline_without_one_are_noted_as_inert(rng, target, configs):
    """rotate, split_rings, pingpong, preload and producer_regs shape a warp-specialized pipeline; given where no
    loop becomes one (no warp_specialize, or no TMA), they changed nothing and the report said nothing."""
    given = {"rotate": False, "split_rings": False, "pingpong": False, "preload": False, "producer_regs": 48}
    kernel = _gemm(130, 136, 96, {**configs, **given}, target=target)
    for name in given:
        assert _inert(kernel.report(), name) == [
            f"  note: T.Kernel at line {KERNEL}: pass config {name!r} has no effect: it shapes a pipeline with a "
            "producer warpgroup (pass configs 'tma' and 'warp_specialize' on sm_90a), and the kernel has none"], \
            kernel.report()
    _check_gemm(rng, kernel, 130, 136, 96)
    specialized = _gemm(130, 136, 96, {**TMA_WS, **given})
    assert not any(_inert(specialized.report(), name) for name in given)


@pytest.mark.parametrize(("target", "configs"), [
    ("simt:sm_80", {}),
    ("simt:sm_90a", {"wgmma": False, "tma": False}),
    ("simt:gfx90a", {}),
])
def test_configs_refining_wgmma_or_tma_where_those_do_not_run_are_noted(rng, target, configs):
    """wgmma_overlap and wgmma_wait_anchor refine wgmma gemms, tma_store the TMA path: given on sm_80, AMD, or on
    sm_90a with wgmma / tma off, they changed nothing and the report said nothing (only 'wgmma' and 'tma' themselves
    were noted)."""
    given = {"wgmma_overlap": False, "wgmma_wait_anchor": True, "tma_store": False}
    kernel = _gemm(130, 136, 96, {**configs, **given}, target=target)
    lines = kernel.report().splitlines()
    for name, what in (("wgmma_overlap", "it shapes the pipelining of wgmma gemms, which run on sm_90a with pass "
                                         "config 'wgmma'"),
                       ("wgmma_wait_anchor", "it places the waits of wgmma gemms, which run on sm_90a with pass "
                                             "config 'wgmma'"),
                       ("tma_store", "it picks how staged accumulators leave by TMA, which runs on sm_90a with pass "
                                     "config 'tma'")):
        assert f"  note: pass config {name!r} has no effect: {what}" in lines, kernel.report()
    _check_gemm(rng, kernel, 130, 136, 96)
    hopper = _gemm(130, 136, 96, {"wgmma": True, "tma": True, **given})
    assert not any(_inert(hopper.report(), name) for name in given), hopper.report()
