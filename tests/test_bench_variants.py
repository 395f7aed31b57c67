"""The source patches of ``benchmarks/hopper_variants.py`` still apply to the CUDA tilec generates (no GPU needed):
a probe whose patch no longer matches the generated code must fail here, not on the device machine."""

import sys
from pathlib import Path

import pytest

import tilec
from tilec.target import Target

ROOT = Path(__file__).resolve().parents[1]
WS = {"wgmma": True, "tma": True, "warp_specialize": True}


@pytest.fixture(scope="module")
def hv():
    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "examples")]
    import hopper_variants

    yield hopper_variants
    del sys.path[:2]


def _gemm_source(dtype: str, **configs) -> str:
    gemm = __import__("01_gemm")
    fn = gemm.matmul.fn(512, 512, 512, block_M=128, block_N=256, block_K=64, num_stages=3, threads=256,
                        dtype=dtype, panel=16)
    return tilec.JITKernel(fn, Target("cuda", "sm_90a"), [-1],
                           pass_configs={**WS, "persistent": True, **configs}).get_kernel_source()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gemm_feed_probes_apply(hv, dtype):
    src = _gemm_source(dtype)
    for probe, kept in ((hv.no_a_loads, "32768"), (hv.no_b_loads, "16384")):
        out = probe(src, 512)
        assert f"(tile * 64 + k < 4) ? 49152 : {kept});" in out
        assert out.count("if (tile * 64 + k < 4) tl::tma_load_2d(") == (1 if kept == "32768" else 4)
    out = hv.no_loads(src, 512)
    assert "(tile * 64 + k < 4) ? 49152 : 0);" in out and out.count("if (tile * 64 + k < 4) tl::tma_load_2d(") == 5
    out = hv.a_from_registers(src, 512)
    assert out.count("tl::wgmma_m64n256k16_rs(C_f + 0, ra, ") == 4 and "{%128, %129, %130, %131}, %132" in out
    assert "tl::wgmma_desc(A_s" not in out
    out = hv.l2_prefetch(src, 512, 8)
    assert out.count("tl::tma_prefetch_2d(&A_tmap0, kq * 64, ") == 1
    assert out.count("tl::tma_prefetch_2d(&B_tmap1, ") == 4
    assert "const int kk = k + 8, tq = tile + kk / 8, kq = kk % 8;" in out and "cp.async.bulk.prefetch.tensor" in out
    out = hv.first_stage_first(src, 512, 2)
    assert out.count("if (tile == 0 && k == 2) tl::mbar_wait(k_full + 0, 0);") == 1
    out = hv.wait_profile(src, 512)
    assert out.startswith("#ifndef __CUDACC_RTC__\n#include <cstdio>") and 'printf("waits ' in out
    assert out.count("clock64()") == 3
    out = hv.prefetch_tensor_maps(src, 512)
    assert out.count("prefetch.tensormap") == 3 and "if (tx == 256) { asm" in out


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gemm_epilogue_patches_apply(hv, dtype):
    src = _gemm_source(dtype, stage_in_ring=False)  # the epilogue in chunks the patches edit (their variants ask so)
    stores = src.count("tl::tma_store_2d(&C_tmap")
    out, edit = hv.staggered_epilogue(src, 512)
    assert out.count("tma_store_2d_half(&C_tmap") == stores and "bar.sync 4, 256;" in out
    assert "bar.arrive 5, 256;" in out and "if (k >= 1) {" in out and "(tile * 8 + 7) % 4, 0);" in out
    out = hv.deferred_epilogue(src, 512)
    assert out.count("= C_p[") == 2 * 64 and "if (k == 1 && tile > 0) {" in out
    out = hv.epilogue_stmatrix(src, 512)
    assert out.count("stmatrix.sync.aligned.m8n8.x4") == 16 and "static_cast" not in out.split("stmatrix")[-1]
    for probe, gone in ((hv.epilogue_no_fences, "fence.proxy.async.shared::cta"),
                        (hv.epilogue_no_barriers, "bar.sync 1, 256"), (hv.epilogue_no_stores, "tl::tma_store_2d(")):
        assert src.count(gone) > probe(src, 512).count(gone)
    for kw in ({}, {"late": True}, {"split": True}):  # the held-stage forms measured before stage_in_ring
        out = hv.held_stage_epilogue(src, 512, **kw)
        assert out.count("tl::tma_store_2d(&C_tmap") == 4 and '&& tx == 0) asm volatile("cp.async.bulk.wait' in out


def test_stream_k_patches_apply(hv):
    gemm = __import__("01_gemm")
    fn = gemm.matmul.fn(512, 512, 512, block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, panel=16)
    src = tilec.JITKernel(fn, Target("cuda", "sm_90a"), [-1],
                          pass_configs={**WS, "persistent": 3, "stream_k": True}).get_kernel_source()
    out = hv.inline_trap(src, 512)
    assert "flag_fail();" not in out and out.count("__trap();") == src.count("flag_fail();") + 1
    out = hv.sk_no_fence(src, 512)
    assert "fence.acq_rel.gpu" in src and "fence.acq_rel.gpu" not in out and "tl::flag_signal(" in out
    out = hv.sk_no_partials(src, 512)
    assert "sk_partials[" in src and "&sk_partials[" not in out and "tl::flag_wait(" in out


@pytest.mark.parametrize("dim,causal,configs", [(128, False, {**WS, "persistent": True, "operand_registers": False}),
                                                 (64, True, {"wgmma": True, "tma": True})])
def test_attention_q_probe_applies(hv, dim, causal, configs):
    fa = __import__("03_flash_attention")
    fn = fa.flash_attention.fn(1, 2, 512, dim, causal, block_M=128, block_N=128, num_stages=2, threads=256)
    src = tilec.JITKernel(fn, Target("cuda", "sm_90a"), [3], pass_configs=configs).get_kernel_source()
    out = hv.q_from_registers(src)
    calls = out.count("tl::wgmma_qk_probe(S + 0, ra, ")
    assert calls == src.count("tl::wgmma_desc(Q_s") and calls >= dim // 16
    assert "tl::wgmma_desc(Q_s" not in out and "p, 1, 1, 0;" in out


@pytest.mark.parametrize("argv,says", [
    (["--only", "tma ws persistant"], "--only: unknown variant(s) 'tma ws persistant'"),
    (["--attention", "--attention-only", "128x128 ws persistant"], "--attention-only: unknown variant(s)"),
    (["--attention-only", "128x128 ws persistent"], "which run with --attention"),
    (["--dtype", "fp16"], "--dtype: expected float16 or bfloat16"),
    (["--rounds", "0"], "--rounds: expected at least 1, got 0"),
])
def test_misspelt_variants_are_errors_before_anything_runs(hv, argv, says, capsys):
    """A label that names no variant was dropped without a word; now a usage error before torch is imported."""
    with pytest.raises(SystemExit) as e:
        hv.main(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_variant_pass_configs_are_known(hv):
    """Every variant's pass configs are ones tilec accepts (the script's own keys stages / q_registers / chains /
    fence_ties aside), so that no variant fails only on the device machine for a misspelt config."""
    from tilec.passes.configs import check_pass_configs

    for _kw, cfg, *_ in hv.gemm_variants().values():
        check_pass_configs(cfg)
    for *_, cfg in (v[:4] for v in hv.attention_variants().values()):
        check_pass_configs({k: v for k, v in cfg.items() if k not in ("stages", "q_registers", "chains", "fence_ties")})


def test_tf32_probe_configs_build_on_wgmma():
    """Every kernel of ``benchmarks/tf32_probe.py`` builds for sm_90a as the TF32 wgmma gemm it is meant to time."""
    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "examples")]
    try:
        import run
        import tf32_probe
    finally:
        del sys.path[:2]
    for cfg in tf32_probe.CONFIGS:
        args, passes, tag = run._tilec_config(cfg)
        kernel = run.tf32_gemm(4096, 4096, 4096, args, passes, "cuda:sm_90a")
        assert "wgmma (m64n256k8, 2 warpgroup(s) along M)" in kernel.report(), tag
        assert "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32" in kernel.get_kernel_source(), tag
