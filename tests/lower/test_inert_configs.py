"""Pass configs given by the user that have no effect on the kernel each get a note saying why (a config left at
its default says nothing): tile_order without a persistent kernel whose loop's trip count depends on the tile,
store_buffers without a staged tile of several chunks in a tile loop (or beside stage_in_ring's halves),
stage_in_ring without a main loop holding a stage (copies of the consumers), stage_handoff without consumer warpgroups
taking turns around a one-chunk staged tile, and the configs of a warp-specialized pipeline (rotate, split_rings,
pingpong, preload, producer_regs) where no loop becomes one, and rotate, split_rings, pingpong, preload and
operand_registers in a specialized pipeline with nothing for them to act on (a GEMM: no second gemm to delay, no tile
loaded before the loop), store_exchange where the accumulators go out through shared memory, and pdl (either value)
anywhere but CUDA on sm_90."""

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
    k = _gemm(300, 520, 128, {**TMA_WS, "persistent": 3, "store_buffers": 1, "stage_in_ring": False}, block_M=128,
              block_N=256, block_K=64, threads=256, num_stages=3)
    assert "C_f_stage, 128 x 128, 2 chunks" in k.report() and not _inert(k.report(), "store_buffers")
    assert not _inert(k.report(), "stage_in_ring")  # it would have staged half in the held stage


def test_store_buffers_beside_the_held_stage_and_stage_in_ring_without_one_are_noted_as_inert(rng):
    """With stage_in_ring (the default) the persistent GEMM's tile goes out in two halves, so store_buffers has no
    chunks to alternate; stage_in_ring given where no main loop holds a stage (copies of the consumers) says so."""
    k = _gemm(300, 520, 128, {**TMA_WS, "persistent": 3, "store_buffers": 1}, block_M=128, block_N=256,
              block_K=64, threads=256, num_stages=3)
    assert _inert(k.report(), "store_buffers") == [
        f"  note: T.Kernel at line {KERNEL}: pass config 'store_buffers' has no effect: it alternates the column "
        "chunks of an accumulator staged by TMA stores in a persistent kernel's tile loop, and C_f goes out in two "
        "halves instead, the first through the stage its main loop read last (stage_in_ring; False stages it in "
        "chunks)"]
    _check_gemm(rng, k, 300, 520, 128)
    k = _gemm(300, 520, 128, {**TMA_WS, "persistent": 3, "consumers": 2, "stage_in_ring": True}, block_M=128,
              block_N=128, block_K=64, threads=128, num_stages=3)
    assert len(_inert(k.report(), "stage_in_ring")) == 1
    _check_gemm(rng, k, 300, 520, 128)


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
    assert "shapes a pipeline with a producer warpgroup" not in specialized.report()


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
    assert not any(_inert(hopper.report(), name) for name in given if name != "wgmma_wait_anchor"), hopper.report()
    # on sm_90a with wgmma the anchor has a say only where a wait is deferred past register-only statements (a GEMM
    # defers none: test_wait_anchor_with_no_deferred_wait_to_anchor_is_noted)
    assert all("no wait of the kernel is deferred" in t for t in _inert(hopper.report(), "wgmma_wait_anchor"))


FA_KERNEL = example_line("03_flash_attention", "with T.Kernel(")
DELAY = "it delays a loop's second wgmma gemm by one iteration, beside the next iteration's first"
SPLIT = "it gives the tiles that only a delayed gemm reads an mbarrier ring apart"
TURNS = "it has the consumer warpgroups of a loop with a delayed gemm issue their gemms in turn"
PRELOAD = "it has the producer warpgroup load the tiles copied before the loop that only its gemms read, or that " \
    "are copied into fragments there"
REGISTERS = "it takes into registers a shared tile loaded before a T.Pipelined loop and read in it only as T.gemm's A"


def _flash(configs, block_M=128, threads=256):
    fa = load_example("03_flash_attention")
    func = fa.flash_attention(1, 2, 200, 64, False, block_M=block_M, block_N=64, threads=threads,
                              num_stages=2).prim_func
    return tilec.JITKernel(func, "simt:sm_90a", [3], pass_configs=configs)


def _check_flash(rng, kernel):
    q, k, v = (randn(rng, (1, 2, 200, 64), "float16") for _ in range(3))
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(64)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v.astype(np.float64))
    assert_close(kernel(q, k, v), ref, "float16")


@pytest.mark.parametrize("value", [True, False])
def test_configs_of_a_specialized_gemm_with_nothing_to_shape_are_noted(rng, value):
    """In a warp-specialized GEMM (one gemm in the loop, no copies before it) rotate, split_rings and pingpong have
    no second gemm to delay, preload no tile copied before the loop, operand_registers no shared A tile loaded
    before it: each changed nothing, and the report said nothing."""
    given = {"rotate": value, "split_rings": value, "pingpong": value, "preload": value, "operand_registers": value}
    kernel = _gemm(130, 136, 96, {**TMA_WS, **given}, threads=256, block_M=128)
    at = f"  note: T.Kernel at line {KERNEL}: pass config"
    assert "warp-specialized" in kernel.report()
    for name, what in (("rotate", f"{DELAY}, and no warp-specialized loop has a second wgmma gemm to delay"),
                       ("split_rings", f"{SPLIT}, and no loop's gemm is delayed"),
                       ("pingpong", f"{TURNS}, and no loop's gemm is delayed"),
                       ("preload", f"{PRELOAD}, and the kernel has none"),
                       ("operand_registers", f"{REGISTERS}, and the kernel has none")):
        assert _inert(kernel.report(), name) == [f"{at} {name!r} has no effect: {what}"], kernel.report()
    _check_gemm(rng, kernel, 130, 136, 96)
    assert "has no effect" not in _gemm(130, 136, 96, TMA_WS, threads=256, block_M=128).report()


@pytest.mark.parametrize("value", [True, False])
def test_configs_of_specialized_flash_attention_act_and_say_nothing(rng, value):
    """Flash attention (QK^T, then PV delayed; Q loaded before the loop, taken into registers) is what these
    configs shape: given either way, none is noted as inert."""
    given = {"rotate": True, "split_rings": value, "pingpong": value, "preload": value, "operand_registers": value}
    kernel = _flash({**TMA_WS, **given})
    assert "has no effect" not in kernel.report(), kernel.report()
    _check_flash(rng, kernel)
    assert not _inert(_flash({**TMA_WS, "rotate": False}).report(), "rotate")


def test_turns_of_one_consumer_warpgroup_and_configs_off_the_specialized_path_are_noted(rng):
    """pingpong with a delayed gemm but one consumer warpgroup; split_rings and pingpong with rotate off; and
    operand_registers where no pipeline has a producer warpgroup."""
    one = _flash({**TMA_WS, "pingpong": True}, block_M=64, threads=128)
    assert _inert(one.report(), "pingpong") == [f"  note: T.Kernel at line {FA_KERNEL}: pass config 'pingpong' has "
                                                f"no effect: {TURNS}, and the kernel has one consumer warpgroup"]
    _check_flash(rng, one)
    off = _flash({**TMA_WS, "rotate": False, "split_rings": True, "pingpong": False})
    assert [t for n in ("split_rings", "pingpong") for t in _inert(off.report(), n)] == [
        f"  note: T.Kernel at line {FA_KERNEL}: pass config 'split_rings' has no effect: {SPLIT}, and no loop's "
        "gemm is delayed",
        f"  note: T.Kernel at line {FA_KERNEL}: pass config 'pingpong' has no effect: {TURNS}, and no loop's gemm "
        "is delayed"]
    plain = _flash({"wgmma": True, "tma": True, "operand_registers": True})
    assert _inert(plain.report(), "operand_registers") == [
        f"  note: T.Kernel at line {FA_KERNEL}: pass config 'operand_registers' has no effect: {REGISTERS}, and it "
        "acts only beside a producer warpgroup (pass configs 'wgmma', 'tma' and 'warp_specialize' on sm_90a)"]
    _check_flash(rng, plain)


EXCHANGE = "it has the threads of a quad exchange accumulator pairs by shuffles before they store them to global " \
    "memory, and the kernel stores no such pairs from registers (an accumulator staged by pass config " \
    "'stage_epilogue' goes out through shared memory)"


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:sm_90a"])
@pytest.mark.parametrize("value", [True, False])
def test_store_exchange_of_a_staged_accumulator_is_noted_as_inert(rng, target, value):
    """With stage_epilogue (the default) the GEMM's accumulator leaves through shared memory: no register-to-global
    stores of accumulator pairs are left for store_exchange, which changed nothing and said nothing."""
    kernel = _gemm(130, 136, 96, {"store_exchange": value}, target=target)
    assert _inert(kernel.report(), "store_exchange") == [
        f"  note: T.Kernel at line {KERNEL}: pass config 'store_exchange' has no effect: {EXCHANGE}"], kernel.report()
    _check_gemm(rng, kernel, 130, 136, 96)


@pytest.mark.parametrize("value", [True, False])
def test_store_exchange_of_accumulators_stored_from_registers_says_nothing(rng, value):
    kernel = _gemm(130, 136, 96, {"stage_epilogue": False, "store_exchange": value}, target="simt:sm_80")
    assert "has no effect" not in kernel.report(), kernel.report()
    assert ("__shfl_xor_sync" in kernel.get_kernel_source()) == value
    _check_gemm(rng, kernel, 130, 136, 96)
    assert "store_exchange" not in _gemm(130, 136, 96, {}, target="simt:sm_80").report()


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:gfx90a", "cuda:sm_89", "hip:gfx90a"])
@pytest.mark.parametrize("value", [True, False])
def test_pdl_where_it_cannot_act(target, value):
    """pdl acts only on CUDA sm_90 (a launch attribute and griddepcontrol in the kernel): pdl=True elsewhere is
    noted; pdl=False there is what the kernel does anyway, like wgmma=False or tma=False off sm_90a, and says
    nothing."""
    kernel = _gemm(130, 136, 96, {"pdl": value}, target=target)
    assert _inert(kernel.report(), "pdl") == [f"  note: pass config 'pdl' has no effect on {target}: programmatic "
                                              "dependent launches need CUDA on sm_90 or later"] * value, kernel.report()
    if target.startswith("cuda"):
        assert "griddepcontrol" not in kernel.get_kernel_source()


@pytest.mark.parametrize("value", [True, False])
def test_pdl_on_sm_90_acts_and_says_nothing(value):
    kernel = _gemm(130, 136, 96, {"pdl": value}, target="cuda:sm_90a")
    assert not _inert(kernel.report(), "pdl")
    assert ("griddepcontrol" in kernel.get_kernel_source()) == value


def test_every_config_given_to_the_cpu_interpreter_is_noted_once(rng):
    """The CPU interpreter runs the tile program as written, skipping every GPU pass: pass configs given there
    changed nothing, and only the Hopper-path ones and pdl were noted (warp_specialize, persistent, stage_epilogue,
    store_exchange... said nothing)."""
    given = {"wgmma": True, "tma": True, "warp_specialize": True, "persistent": 2, "stream_k": True,
             "stage_epilogue": False, "store_exchange": False, "rotate": False, "pdl": True, "wgmma_overlap": False}
    kernel = _gemm(130, 136, 96, given, target="cpu")
    for name in given:
        assert _inert(kernel.report(), name) == [
            f"  note: pass config {name!r} has no effect on cpu: the CPU interpreter runs the tile program as "
            "written (pass configs shape the code built for GPUs, and the thread interpreters')"], kernel.report()
    _check_gemm(rng, kernel, 130, 136, 96)
    for quiet in ({}, {"wgmma": False, "tma": False, "pdl": False}):  # features off where there are none: as asked
        assert "has no effect" not in _gemm(130, 136, 96, quiet, target="cpu").report()




def test_wait_anchor_with_no_deferred_wait_to_anchor_is_noted(rng):
    """wgmma_wait_anchor keeps a wgmma wait deferred past register-only statements below them; a warp-specialized
    GEMM defers none past such a statement, so the config changed nothing without a word. Flash attention's rotated
    loop, where it acts, says nothing."""
    kernel = _gemm(130, 136, 96, {**TMA_WS, "wgmma_wait_anchor": True})
    assert _inert(kernel.report(), "wgmma_wait_anchor") == [
        f"  note: T.Kernel at line {KERNEL}: pass config 'wgmma_wait_anchor' has no effect: it keeps a wgmma wait "
        "deferred past register-only statements below them, and no wait of the kernel is deferred past such a "
        "statement"], kernel.report()
    assert kernel.get_kernel_source() == _gemm(130, 136, 96, TMA_WS).get_kernel_source()
    _check_gemm(rng, kernel, 130, 136, 96)
    for value in (True, False):
        flash = _flash({**TMA_WS, "wgmma_wait_anchor": value})
        assert not _inert(flash.report(), "wgmma_wait_anchor"), flash.report()
    assert "wait_anchor" in _flash({**TMA_WS, "wgmma_wait_anchor": True}).get_kernel_source()
