"""The device models and the static cost model: counts against hand-derived formulas, rejections with reasons."""

from __future__ import annotations

import math

import pytest
from conftest import load_example

from tilec.arch import TABLE, _from_properties, device_model
from tilec.passes.cost_model import estimate, estimate_kernel
from tilec.passes.pipeline import run_pipeline
from tilec.target import parse_target

# ------------------------------------------------------------------------------------------------ devices


def test_device_model_by_architecture_without_a_gpu():
    assert device_model("cuda:sm_90a").name == "H200 SXM"
    assert device_model("simt:sm_80").name == "A100 SXM"
    assert device_model("hip:gfx942").name == "MI300X"
    assert device_model("hip:gfx90a").name.startswith("MI250X")
    assert device_model("cpu").arch == "sm_90a"  # no GPU architecture: the H200 model
    assert device_model("cuda:sm_90a", "H100").hbm_bandwidth == 3.35e12


@pytest.mark.parametrize("device", [3, ["H100"]])
def test_device_model_of_a_device_that_is_no_name(device):
    """device_model(target, device=3) raised a bare AttributeError ('int' object has no attribute 'upper') from
    inside tilec; it now names the argument, what it takes and the value."""
    from tilec.errors import TilecTypeError

    with pytest.raises(TilecTypeError, match=r"device_model: device must be a table name \(H100, H200, A100, MI300X, "
                                             r"MI250X\) or a DeviceModel, got "):
        device_model("cuda:sm_90a", device)


def test_device_figures_match_the_datasheets():
    h100, a100 = TABLE["H100"], TABLE["A100"]
    assert h100.fp32_peak == pytest.approx(66.9e12, rel=0.01)
    assert a100.fp32_peak == pytest.approx(19.5e12, rel=0.01)
    assert h100.tensor_peak("wgmma", "float16") == pytest.approx(989.4e12)
    assert h100.best_tensor_peak("bfloat16") == pytest.approx(989.4e12)
    assert a100.tensor_peak("mma.sync", "float16") == pytest.approx(312e12)
    assert TABLE["MI300X"].fp32_peak == pytest.approx(163.4e12, rel=0.01)
    assert "l2_bandwidth" in h100.leads and "tensor mma.sync" in h100.leads
    assert "H200" in device_model("cuda:sm_90a").summary()


def test_device_properties_replace_the_table_counts():
    props = {"name": b"NVIDIA H100 PCIe", "major": 9, "minor": 0, "multiProcessorCount": 114,
             "sharedMemPerMultiprocessor": 233472, "sharedMemPerBlockOptin": 232448, "l2CacheSize": 52428800,
             "clockRate": 1755000, "memoryClockRate": 1593000, "memoryBusWidth": 5120}
    dev = _from_properties("sm_90a", tuple(sorted(props.items())))
    assert dev.name == "NVIDIA H100 PCIe" and dev.sms == 114 and dev.clock_ghz == pytest.approx(1.755)
    assert dev.hbm_bandwidth == pytest.approx(2 * 1593e6 * 5120 / 8)
    scale = 114 * 1.755 / (132 * 1.98)
    assert dev.tensor_peak("wgmma", "float16") == pytest.approx(989.4e12 * scale)
    assert "properties" in dev.source


# ---------------------------------------------------------------------------------------------------- GEMM


def _gemm_state(M, N, K, bm, bn, bk, stages, threads, target="cuda:sm_80"):
    func = load_example("01_gemm").matmul.fn(M, N, K, block_M=bm, block_N=bn, block_K=bk, num_stages=stages,
                                             threads=threads)
    return run_pipeline(func, parse_target(target), until="layout_inference")


GEMM = [  # M, N, K, block_M, block_N, block_K, stages, threads, warp grid (Square policy)
    (512, 512, 512, 128, 128, 32, 3, 128, (2, 2)),
    (256, 512, 256, 64, 128, 64, 2, 256, (2, 4)),
    (1024, 256, 512, 128, 64, 32, 1, 128, (4, 1)),
]


@pytest.mark.parametrize("case", GEMM, ids=lambda c: "x".join(map(str, c[:8])))
def test_gemm_counts_equal_the_formulas(case):
    M, N, K, bm, bn, bk, s, threads, (wm, wn) = case
    state = _gemm_state(M, N, K, bm, bn, bk, s, threads)
    (plan,) = state.artifacts["layout_inference"].gemms.values()
    assert (plan.warp_m, plan.warp_n) == (wm, wn)
    c = estimate(state)
    blocks, n = (M // bm) * (N // bn), K // bk
    copies = n + s - 1 if s >= 2 else n  # a pipelined loop runs n + stages - 1 trips; its producers run every trip
    tile = (bm * bk + bk * bn) * 2
    assert c.blocks == blocks and c.grid == (N // bn, M // bm, 1)
    assert c.loops == {"k": (copies, copies, copies)}
    assert c.flops["tensor"] == 2 * M * N * K and c.tensor_flops == {"mma.sync:float16": 2 * M * N * K}
    assert c.bytes["global_load"] == blocks * copies * tile
    assert c.bytes["global_store"] == M * N * 2
    assert c.per_block["global_load"] == copies * tile and c.per_block["tensor_flops"] == 2 * bm * bn * K
    assert c.bytes["dram"] == (M * K + K * N + M * N) * 2
    # the accumulators go out through shared memory where an operand's stages hold the C tile (tilec.passes.epilogue)
    staged = max(s, 1) * max(bm, bn) * bk >= bm * bn
    assert any("goes out through shared memory" in r for r in state.report) == staged
    epilogue = blocks * bm * bn * 2 if staged else 0
    assert c.bytes["smem_write"] == blocks * copies * tile + epilogue
    assert c.bytes["smem_read"] == blocks * n * (wn * bm * bk + wm * bk * bn) * 2 + epilogue  # ldmatrix, warp grid
    assert c.smem_per_block == max(s, 1) * tile
    tm, tn = bm // wm, bn // wn
    operands = (tm // 16 * 4 + tn // 8 * 2) * min(bk // 16, 3)
    assert c.regs_per_thread == min(255, bm * bn // threads + operands + 14)
    gemm_row = next(r for r in c.ops if r.kind == "gemm")
    assert gemm_row.executions == n and gemm_row.flops == 2 * M * N * K
    assert c.time_s >= c.roofline_s and 0 < c.utilization <= 1
    assert c.rejected is None


def test_gemm_ragged_k_moves_only_the_bytes_inside_the_tensors():
    c = estimate(_gemm_state(256, 256, 1000, 128, 128, 32, 2, 128))
    n = math.ceil(1000 / 32)
    inside = 1000 / (n * 32)  # the average of a K tile that moves with the loop
    assert c.bytes["global_load"] == pytest.approx(4 * (n + 1) * (128 * 32 + 32 * 128) * 2 * inside)
    assert c.flops["tensor"] == 2 * 256 * 256 * n * 32  # tensor cores compute the padded tile


def test_stores_are_not_held_to_the_loads_in_flight():
    """Little's law limits the loads a kernel keeps in flight, not its stores: a 1024 x 1024 GEMM with K=1 (tiny
    cp.async tiles: few bytes in flight) writes the same 2 MB of C as with K=16 and reads less, so it is estimated
    no slower (it was 3.3x slower: the load-latency factor applied to the stores' bytes too)."""
    gemm = load_example("01_gemm")
    cfg = dict(block_M=128, block_N=128, block_K=32, num_stages=3, threads=128)
    k1, k16 = (estimate_kernel(gemm.matmul.fn(1024, 1024, k, **cfg), "cuda:sm_90a").time_s for k in (1, 16))
    assert k1 <= k16 * 1.01


def test_occupancy_waves_and_limits():
    c = estimate(_gemm_state(4096, 4096, 4096, 128, 128, 32, 3, 128, "cuda:sm_90a"))
    dev = c.device
    assert c.smem_per_block == 3 * (128 * 32 + 32 * 128) * 2
    per_warp = math.ceil(c.regs_per_thread * 32 / 256) * 256
    assert c.blocks_per_sm == min(dev.smem_per_sm // (c.smem_per_block + 1024), 65536 // per_warp // 4, 16, 32)
    assert c.waves == pytest.approx(1024 / (132 * c.blocks_per_sm))
    slots = 132 * c.blocks_per_sm
    assert c.wave_efficiency == pytest.approx((1024 / slots) / math.ceil(1024 / slots))
    assert "estimate" in str(c) and "gemm" in c.ops_table()


# ----------------------------------------------------------------------------------------------- attention


def _attention(causal, b=1, h=2, n=256, d=64, bm=64, bn=64, stages=2, threads=128):
    fa = load_example("03_flash_attention")
    func = fa.flash_attention.fn(b, h, n, d, causal, block_M=bm, block_N=bn, num_stages=stages, threads=threads)
    return estimate_kernel(func, "cuda:sm_80")


@pytest.mark.parametrize("causal", [False, True])
def test_attention_counts_equal_the_formulas(causal):
    b, h, n, d, bm, bn = 1, 2, 256, 64, 64, 64
    c = _attention(causal)
    rows = n // bm
    trips = [min(n // bn, math.ceil((x + 1) * bm / bn)) if causal else n // bn for x in range(rows)]
    total = b * h * sum(trips)  # K/V tiles processed, over all blocks
    assert c.blocks == rows * h * b
    assert c.flops["tensor"] == total * 4 * bm * bn * d
    if not causal:
        assert c.flops["tensor"] == 4 * b * h * n * n * d
    assert c.loops["k"] == (min(trips) + 1, sum(trips) / rows + 1, max(trips) + 1)  # + stages - 1
    kv = b * h * sum(t + 1 for t in trips) * bn * d * 2 * 2  # K and V tiles, every trip of the pipelined loop
    assert c.bytes["global_load"] == kv + b * h * n * d * 2  # and Q once per block
    assert c.bytes["global_store"] == b * h * n * d * 2
    exp2 = total * (bm * bn + bm)  # the scores and the per-row rescale, per tile
    divide = b * h * n * d  # O / l: a reciprocal per element
    sfu = c.times["sfu"] * c.wave_efficiency * 108 * 16 * c.device.clock_hz
    assert sfu == pytest.approx(exp2 + divide)
    assert c.smem_per_block == bm * d * 2 + 2 * (2 * bn * d * 2)  # Q, and K and V with two stages each


def test_attention_cross_warp_reduction_adds_shared_scratch():
    """With 8 warps on 64 rows (4 x 2 warps), row maxima and sums meet in shared memory and S reaches P
    through a shared conversion tile: the smem estimate matches what lowering allocates."""
    c = _attention(False, threads=256)
    lowered = run_pipeline(load_example("03_flash_attention").flash_attention.fn(
        1, 2, 256, 64, False, block_M=64, block_N=64, num_stages=2, threads=256), parse_target("cuda:sm_80"),
        until="lower").artifacts["lower"]
    assert c.smem_per_block == lowered.smem_bytes > 64 * 64 * 2 + 2 * (2 * 64 * 64 * 2)


# ------------------------------------------------------------------------------------------------ rejected


@pytest.mark.parametrize("config, reason", [
    ((256, 256, 128, 4, 256), "shared memory per block"),
    ((256, 256, 32, 2, 128), "registers per thread"),
    ((16, 16, 32, 2, 128), "does not tile into mma.m16n8k16"),
])
def test_impossible_configs_are_rejected_with_a_reason(config, reason):
    bm, bn, bk, s, t = config
    func = load_example("01_gemm").matmul.fn(1024, 1024, 1024, block_M=bm, block_N=bn, block_K=bk, num_stages=s,
                                             threads=t)
    c = estimate_kernel(func, "cuda:sm_90a")
    assert c.rejected is not None and reason in c.rejected, c.rejected


def test_symbolic_sizes_need_values():
    import tilec.language as T
    from tilec.errors import TilecValueError

    M = T.dynamic("M")

    @T.prim_func
    def double(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * 2.0

    with pytest.raises(TilecValueError, match="sizes"):
        estimate_kernel(double, "cuda:sm_80")
    c = estimate_kernel(double, "cuda:sm_80", sizes={"M": 1 << 20})
    assert c.blocks == (1 << 20) // 128 and c.bytes["dram"] == 2 * 4 * (1 << 20) and c.bound in ("dram", "launch")


def test_the_hopper_path_is_costed_as_it_compiles():
    """On sm_90a a kernel without pass configs takes the Hopper path and is costed so: wgmma reads its shared
    operands into no registers, and a TMA pipeline overlaps its loads with the tensor work as a cp.async one does."""
    func = load_example("01_gemm").matmul.fn(4096, 4096, 4096, block_M=128, block_N=256, block_K=64, num_stages=3,
                                             threads=256)
    hopper = estimate_kernel(func, "cuda:sm_90a")
    sm80 = estimate_kernel(func, "cuda:sm_90a", options={"wgmma": False, "tma": False})
    assert set(hopper.tensor_flops) == {"wgmma:float16"} and set(sm80.tensor_flops) == {"mma.sync:float16"}
    assert hopper.factors["overlap_memory"] == 1.0 and hopper.regs_per_thread < sm80.regs_per_thread
    # the model: 0.23 ms against 0.33; measured on the H200 0.22 ms (the mma.sync path at its best tile, 256x128x64,
    # 0.36 ms; BENCHMARKS.md)
    assert hopper.time_s < 0.8 * sm80.time_s
