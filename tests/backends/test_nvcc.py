"""The CUDA source emitted for every example (target ``cuda:sm_80``; the Hopper and fp8 paths for ``sm_90a``)
compiles offline with nvcc, and ptxas's register and spill counts are reported (and printed at the end of the run).
Where cuobjdump is present too, the SASS must hold the tensor-core instruction the path promises. Skipped where
nvcc is absent."""

from __future__ import annotations

import re
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest
from conftest import EXAMPLES, load_example

import tilec
import tilec.language as T

from .conftest import PTXAS

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")

CASES = {  # name -> (example, factory, args, kwargs)
    "gemm 1024^3 64x64x32": ("01_gemm", "matmul", (1024, 1024, 1024), {"block_M": 64, "block_N": 64}),
    "gemm 1000x1000x1000 64x64x32 (ragged)": ("01_gemm", "matmul", (1000, 1000, 1000),
                                              {"block_M": 64, "block_N": 64}),
    "gemm 4096^3 128x128x32": ("01_gemm", "matmul", (4096, 4096, 4096), {}),
    "softmax 1024x1000": ("02_softmax", "softmax", (1024, 1000), {}),
    "rms_norm 1000x1024": ("05_norms", "rms_norm", (1000, 1024), {}),
    "layer_norm 1000x1024": ("05_norms", "layer_norm", (1000, 1024), {}),
    "flash attention 1x8x1000x64": ("03_flash_attention", "flash_attention", (1, 8, 1000, 64, False), {}),
    "flash attention 1x8x1000x128 causal": ("03_flash_attention", "flash_attention", (1, 8, 1000, 128, True), {}),
    "mla decode 64x128x1x8192": ("07_mla_decode", "mla_decode", (64, 128, 1, 8192), {}),
    "mla decode 64x128x1x8191 2 stages": ("07_mla_decode", "mla_decode", (64, 128, 1, 8191),
                                          {"num_stages": 2, "block_N": 32}),  # 64 keys: 225 KB, over sm_80's 163
    "fp8 gemm 1000^3 64x64x64 (sm_89)": ("06_fp8_gemm", "fp8_matmul", (1000, 1000, 1000),
                                          {"block_M": 64, "block_N": 64}),
}
HOPPER = {  # name -> (example, factory, args, kwargs, pass configs, SASS instruction)
    "gemm 4096^3 128x256x64 wgmma": ("01_gemm", "matmul", (4096, 4096, 4096),
                                     {"block_N": 256, "block_K": 64, "threads": 256}, {"wgmma": True, "tma": False},
                                     "HGMMA.64x256x16.F32"),
    "flash attention 1x8x1000x128 wgmma": ("03_flash_attention", "flash_attention", (1, 8, 1000, 128, False),
                                           {"block_M": 128, "block_N": 64, "threads": 256, "num_stages": 2},
                                           {"wgmma": True, "tma": False}, "HGMMA.64x64x16.F32"),
    "mla decode 64x128x1x8192 wgmma": ("07_mla_decode", "mla_decode", (64, 128, 1, 8192), {"num_stages": 2},
                                       {"wgmma": True, "tma": False}, "HGMMA.64x256x16.F32"),
    "fp8 gemm 4096^3 128x256x128 wgmma": ("06_fp8_gemm", "fp8_matmul", (4096, 4096, 4096),
                                          {"block_N": 256, "block_K": 128, "threads": 256},
                                          {"wgmma": True, "tma": False}, "QGMMA.64x256x32.F32.E4M3.E4M3"),
    "fp8 gemm 4096^3 128x256x128 wgmma e5m2": ("06_fp8_gemm", "fp8_matmul", (4096, 4096, 4096),
                                               {"block_N": 256, "block_K": 128, "threads": 256,
                                                "dtype": "float8_e5m2"},
                                               {"wgmma": True, "tma": False}, "QGMMA.64x256x32.F32.E5M2.E5M2"),
    # TMA pipelines: the copies are UTMALDG (tensor rank as in the source), the wgmma the same as with cp.async
    "gemm 4096^3 128x256x64 wgmma tma": ("01_gemm", "matmul", (4096, 4096, 4096),
                                         {"block_N": 256, "block_K": 64, "threads": 256},
                                         {"wgmma": True, "tma": True, "warp_specialize": False},
                                         ("HGMMA.64x256x16.F32", "UTMALDG.2D")),
    "flash attention 1x8x1000x128 wgmma tma": ("03_flash_attention", "flash_attention", (1, 8, 1000, 128, False),
                                               {"block_M": 128, "block_N": 64, "threads": 256, "num_stages": 2},
                                               {"wgmma": True, "tma": True}, ("HGMMA.64x64x16.F32", "UTMALDG.4D")),
    "fp8 gemm 4096^3 128x256x128 wgmma tma": ("06_fp8_gemm", "fp8_matmul", (4096, 4096, 4096),
                                              {"block_N": 256, "block_K": 128, "threads": 256},
                                              {"wgmma": True, "tma": True, "warp_specialize": False},
                                              ("QGMMA.64x256x32.F32.E4M3.E4M3", "UTMALDG.2D")),
    # warp specialization: a producer warpgroup (TMA) beside the consumers, registers moved by setmaxnreg
    "gemm 4096^3 128x256x64 wgmma tma ws": ("01_gemm", "matmul", (4096, 4096, 4096),
                                            {"block_N": 256, "block_K": 64, "threads": 256},
                                            {"wgmma": True, "tma": True, "warp_specialize": True},
                                            ("HGMMA.64x256x16.F32", "UTMALDG.2D", "USETMAXREG")),
    "flash attention 1x8x1000x128 wgmma tma ws": ("03_flash_attention", "flash_attention", (1, 8, 1000, 128, False),
                                                  {"block_M": 128, "block_N": 64, "threads": 256, "num_stages": 2},
                                                  {"wgmma": True, "tma": True, "warp_specialize": True},
                                                  ("HGMMA.64x64x16.F32", "UTMALDG.4D", "USETMAXREG")),
    # rotated with the warpgroups taking turns (named barriers); ptxas must not serialize the wgmmas left in flight
    "flash attention 1x8x1000x128 wgmma tma ws 128x128": ("03_flash_attention", "flash_attention",
                                                          (1, 8, 1000, 128, True),
                                                          {"block_M": 128, "block_N": 128, "threads": 256,
                                                           "num_stages": 2},
                                                          {"wgmma": True, "tma": True, "warp_specialize": True},
                                                          ("HGMMA.64x128x16.F32", "UTMALDG.4D", "BAR.ARV")),
    # persistent: both roles loop over tiles; the epilogue's stores inside that loop must not serialize the wgmma
    # pipeline (ptxas C7514; compile_cuda fails on it)
    "gemm 4096^3 128x256x64 wgmma tma ws persistent": ("01_gemm", "matmul", (4096, 4096, 4096),
                                                       {"block_N": 256, "block_K": 64, "threads": 256},
                                                       {"wgmma": True, "tma": True, "warp_specialize": True,
                                                        "persistent": True},
                                                       ("HGMMA.64x256x16.F32", "UTMALDG.2D", "USETMAXREG")),
    # stream-K: the last round's tiles shared out by iterations, partial sums through the module's workspace; the
    # wgmma waits before the partial sums are saved or added are tilec's, not injected by ptxas
    "gemm 8192^3 128x256x64 wgmma tma ws persistent stream-k": ("01_gemm", "matmul", (8192, 8192, 8192),
                                                                {"block_N": 256, "block_K": 64, "threads": 256,
                                                                 "panel": 8},
                                                                {"wgmma": True, "tma": True, "warp_specialize": True,
                                                                 "persistent": True, "stream_k": True},
                                                                ("HGMMA.64x256x16.F32", "UTMALDG.2D", "UTMASTG.2D")),
    # clusters of two blocks sharing B's tile by TMA multicast, releases to both blocks (mapa + remote arrive)
    "gemm 4096^3 128x256x64 wgmma tma ws cluster2": ("01_gemm", "matmul", (4096, 4096, 4096),
                                                     {"block_N": 256, "block_K": 64, "threads": 256},
                                                     {"wgmma": True, "tma": True, "warp_specialize": True,
                                                      "cluster": 2},
                                                     ("HGMMA.64x256x16.F32", "UTMALDG.2D", "USETMAXREG")),
    # persistent blocks in clusters of two: neighbouring tiles each round, B multicast (perf notes AI)
    "gemm 4096^3 128x256x64 wgmma tma ws persistent cluster2": ("01_gemm", "matmul", (4096, 4096, 4096),
                                                                {"block_N": 256, "block_K": 64, "threads": 256},
                                                                {"wgmma": True, "tma": True, "warp_specialize": True,
                                                                 "persistent": True, "cluster": 2},
                                                                ("HGMMA.64x256x16.F32", "UTMALDG.2D.MULTICAST",
                                                                 "USETMAXREG")),
    # two copies of one consumer warpgroup on alternate tiles (ping-pong: perf notes AL), each storing its own
    # staging tile by TMA, their turns on named barriers
    "gemm 4096^3 128x128x64 wgmma tma ws persistent x2 consumers": ("01_gemm", "matmul", (4096, 4096, 4096),
                                                                    {"block_N": 128, "block_K": 64, "threads": 128},
                                                                    {"wgmma": True, "tma": True,
                                                                     "warp_specialize": True, "persistent": True,
                                                                     "consumers": 2},
                                                                    ("HGMMA.64x128x16.F32", "UTMASTG.2D", "BAR.ARV")),
    # persistent attention on split rings (K and V rings of two stages, two versions of Q, O staged: perf notes AK)
    "flash attention 8x16x2048x128 wgmma tma ws persistent": ("03_flash_attention", "flash_attention",
                                                              (8, 16, 2048, 128, False),
                                                              {"block_M": 128, "block_N": 128, "threads": 256,
                                                               "num_stages": 2},
                                                              {"wgmma": True, "tma": True, "warp_specialize": True,
                                                               "persistent": True},
                                                              ("HGMMA.64x128x16.F32", "UTMALDG.4D", "UTMASTG.4D")),
    # 192 keys a tile (O from registers: no room to stage it): the consumers need the 240 registers a producer of
    # 24 leaves them (ptxas spills 48 bytes at the default 232; the producer's code fits in 24)
    "flash attention 2x16x8192x128 128x192 ws persistent": ("03_flash_attention", "flash_attention",
                                                            (2, 16, 8192, 128, False),
                                                            {"block_M": 128, "block_N": 192, "threads": 256,
                                                             "num_stages": 2},
                                                            {"wgmma": True, "tma": True, "warp_specialize": True,
                                                             "persistent": True, "producer_regs": 24},
                                                            ("HGMMA.64x192x16.F32", "UTMALDG.4D", "USETMAXREG")),
    # three consumer warpgroups (512 threads: 128 registers a thread for ptxas): by default Q stays in shared memory
    # and the producer keeps 24 registers, which holds D=64's tiles without spills (48 bytes with the producer at 40)
    "flash attention 2x16x8192x64 192x128 ws persistent": ("03_flash_attention", "flash_attention",
                                                           (2, 16, 8192, 64, True),
                                                           {"block_M": 192, "block_N": 128, "threads": 384,
                                                            "num_stages": 2},
                                                           {"wgmma": True, "tma": True, "warp_specialize": True,
                                                            "persistent": True},
                                                           ("HGMMA.64x128x16.F32", "UTMALDG.4D", "USETMAXREG")),
    # Hopper has no fp8 mma.sync unit: ptxas runs m16n8k32 e4m3 as conversions and two fp16 HMMAs
    "fp8 gemm 4096^3 128x128x64 mma": ("06_fp8_gemm", "fp8_matmul", (4096, 4096, 4096), {"threads": 256},
                                       {"wgmma": False, "tma": False}, "HMMA.16816.F32"),
    # no pass configs: on sm_90a the Hopper path (wgmma fed by TMA, the staged epilogue by TMA stores) is the default,
    # warp-specialized and persistent where the block has its SM to itself (tilec.passes.specialize)
    "gemm 4096^3 128x256x64 default": ("01_gemm", "matmul", (4096, 4096, 4096),
                                       {"block_N": 256, "block_K": 64, "threads": 256}, None,
                                       ("HGMMA.64x256x16.F32", "UTMALDG.2D", "UTMASTG.2D", "USETMAXREG")),
    "flash attention 1x8x1000x128 default": ("03_flash_attention", "flash_attention", (1, 8, 1000, 128, False),
                                             {"block_M": 128, "block_N": 64, "threads": 256, "num_stages": 2}, None,
                                             ("HGMMA.64x64x16.F32", "UTMALDG.4D")),
}


def ptxas_info(text: str) -> dict[str, int]:
    """Registers, spill stores/loads (bytes) and stack frame from ``nvcc -Xptxas -v`` output (one kernel; the
    registers are the kernel's, the stack and spills summed over it and the device functions it calls)."""
    regs = re.search(r"Used (\d+) registers", text)
    spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", text)
    assert regs and spills, text
    stack, stores, loads = (sum(int(f[i]) for f in spills) for i in range(3))
    return {"registers": int(regs.group(1)), "stack": stack, "spill_stores": stores, "spill_loads": loads}


def compile_cuda(source: str, tmp_path, arch: str = "sm_80") -> dict[str, int]:  # noqa: ANN001
    cu = tmp_path / "kernel.cu"
    cu.write_text(source)
    cmd = [NVCC, f"-gencode=arch=compute_{arch[3:]},code={arch}", "-std=c++17", "-cubin", "-Xptxas", "-v", "-o",
           str(tmp_path / "kernel.cubin"), str(cu)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"nvcc failed:\n{res.stderr}\n--- source ---\n{source}"
    log = res.stdout + res.stderr
    # ptxas found the wgmma pipeline ill-formed ("... are serialized") or had to add waits ("... is injected")
    assert "are serialized" not in log and "warpgroup.wait is injected" not in log, log
    return ptxas_info(log)


def record(label: str, info: dict[str, int]) -> str:
    """``info``'s ptxas figures as one line of the run's summary (printed, and kept in PTXAS)."""
    line = (f"{label:<46} {info['registers']:>3} registers, {info['spill_stores']} B spill stores, "
            f"{info['spill_loads']} B spill loads, {info['stack']} B stack")
    print(line)
    PTXAS.append(line)
    return line


def test_ptxas_output_is_parsed():
    text = ("ptxas info    : Compiling entry function 'main_kernel' for 'sm_80'\nptxas info    : Function properties "
            "for main_kernel\n    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\nptxas info    : "
            "Used 255 registers, used 1 barriers, 16 bytes cumulative stack size, 384 bytes cmem[0]\n")
    assert ptxas_info(text) == {"registers": 255, "stack": 16, "spill_stores": 8, "spill_loads": 12}


NO_KERNEL_OF_THEIR_OWN = {"04_recommend"}  # examples that use the kernels of the others


def test_every_example_is_compiled():
    assert {c[0] for c in CASES.values()} == {p.stem for p in EXAMPLES.glob("*.py")} - NO_KERNEL_OF_THEIR_OWN


@pytest.mark.parametrize("case", list(CASES))
def test_example_compiles_with_nvcc(case, tmp_path):
    example, factory, args, kwargs = CASES[case]
    arch = "sm_89" if example == "06_fp8_gemm" else "sm_80"  # fp8 tensor cores start with Ada
    kernel = getattr(load_example(example), factory)(*args, **kwargs)
    source = tilec.JITKernel(kernel.prim_func, f"cuda:{arch}").get_kernel_source()
    assert 'extern "C" __global__' in source
    info = compile_cuda(source, tmp_path, arch)
    line = record(case, info)
    assert info["registers"] <= 255
    if case.startswith("gemm") and "64x64" in case:
        assert info["spill_stores"] == info["spill_loads"] == 0, line


@pytest.mark.parametrize("case", list(HOPPER))
def test_hopper_path_compiles_with_nvcc(case, tmp_path):
    example, factory, args, kwargs, configs, sass_op = HOPPER[case]
    kernel = getattr(load_example(example), factory)(*args, **kwargs)
    jk = tilec.JITKernel(kernel.prim_func, "cuda:sm_90a", pass_configs=configs)
    source = jk.get_kernel_source()
    assert ("TMA" in jk.report()) == (configs or {}).get("tma", True)
    info = compile_cuda(source, tmp_path, "sm_90a")
    line = record(f"{case} (sm_90a)", info)
    if (configs or {}).get("wgmma", True):  # the wgmma kernels hold their accumulators without spilling
        assert info["spill_stores"] == info["spill_loads"] == 0, line
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump is not None:
        sass = subprocess.run([cuobjdump, "-sass", str(tmp_path / "kernel.cubin")], capture_output=True,
                              text=True, timeout=120).stdout
        for op in (sass_op,) if isinstance(sass_op, str) else sass_op:
            assert op in sass, f"{op} not in the SASS of {case}"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_tf32_gemm_compiles_without_spills(tmp_path, arch):
    """The plain GEMM example on float32 with allow_tf32=True (128 x 128 x 32 tiles, 128 threads): mma.sync m16n8k8 on
    TF32 operands rounded by cvt.rna.tf32.f32 (on sm_90a too), no spills; the SASS holds the TF32 HMMA where
    cuobjdump is present."""
    kernel = load_example("01_gemm").matmul(4096, 4096, 4096, dtype="float32", allow_tf32=True)
    jk = tilec.JITKernel(kernel.prim_func, f"cuda:{arch}")
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in jk.report()
    info = compile_cuda(jk.get_kernel_source(), tmp_path, arch)
    line = record(f"gemm 4096^3 128x128x32 float32 tf32 ({arch})", info)
    assert info["spill_stores"] == info["spill_loads"] == 0, line
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump is not None:
        sass = subprocess.run([cuobjdump, "-sass", str(tmp_path / "kernel.cubin")], capture_output=True,
                              text=True, timeout=120).stdout
        assert "HMMA.1688.F32.TF32" in sass, "no TF32 HMMA in the SASS"


def test_wgmma_tf32_gemm_compiles_without_spills(tmp_path):
    """The GEMM example on float32 with allow_tf32=True and B stored N x K on sm_90a's Hopper path (TMA, a producer
    warpgroup, persistent, 128 x 256 x 32 tiles): wgmma m64n256k8 on TF32, no spills."""
    kernel = load_example("01_gemm").matmul(4096, 4096, 4096, block_N=256, threads=256, dtype="float32",
                                           allow_tf32=True, transpose_B=True, panel=16)
    jk = tilec.JITKernel(kernel.prim_func, "cuda:sm_90a",
                         pass_configs={"tma": True, "warp_specialize": True, "persistent": True})
    assert "wgmma (m64n256k8, 2 warpgroup(s) along M)" in jk.report()
    info = compile_cuda(jk.get_kernel_source(), tmp_path, "sm_90a")
    line = record("gemm 4096^3 128x256x32 float32 tf32 wgmma tma ws persistent (sm_90a)", info)
    assert info["spill_stores"] == info["spill_loads"] == 0, line
    assert "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32" in jk.get_kernel_source()


def test_fence_ties_keep_register_writes_above_the_wgmma_fence(tmp_path, monkeypatch):
    """With ``FENCE_TIES`` the MLA decode kernel's rescale of O (``O_f *= rescale``) stays above the fence of the PV
    wgmma, which reads O: without the ties LLVM sinks the multiplies below the fence and ptxas injects a
    ``warpgroup.arrive`` (C7519)."""
    from tilec.lower import wgmma

    monkeypatch.setattr(wgmma, "FENCE_TIES", True)
    kernel = load_example("07_mla_decode").mla_decode(64, 128, 1, 8192, num_stages=2)
    source = tilec.JITKernel(kernel.prim_func, "cuda:sm_90a", pass_configs={"tma": False}).get_kernel_source()
    fence = 'asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");'
    pv = source.index("T.gemm(P_s")
    assert source.index(fence, pv) > source.index('asm volatile("" : "+f"(O_f[96])', pv)
    (tmp_path / "kernel.cu").write_text(source)
    res = subprocess.run([NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-cubin", "-Xptxas", "-v",
                          "-o", str(tmp_path / "kernel.cubin"), str(tmp_path / "kernel.cu")], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "C7519" not in res.stdout + res.stderr, res.stdout + res.stderr


@pytest.mark.parametrize("persistent", [False, True])
def test_attention_divides_by_each_rows_sum_once(persistent, tmp_path):
    """``O_f[i, j] /= l[i]`` over a thread's 64 elements of O: a float division is emitted as a multiply by the
    reciprocal, which NVVM computes once per distinct divisor (2 rows a thread), not 64 IEEE divisions with their
    slow-path calls (perf notes AN)."""
    kernel = load_example("03_flash_attention").flash_attention(8, 16, 2048, 128, True, block_M=128, block_N=128,
                                                                num_stages=2, threads=256)
    configs = {"warp_specialize": True, "persistent": True} if persistent else {"warp_specialize": False}
    source = tilec.JITKernel(kernel.prim_func, "cuda:sm_90a", pass_configs=configs).get_kernel_source()
    (tmp_path / "kernel.cu").write_text(source)
    res = subprocess.run([NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-ptx", "-o",
                          str(tmp_path / "kernel.ptx"), str(tmp_path / "kernel.cu")], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    ptx = (tmp_path / "kernel.ptx").read_text()
    assert re.findall(r"\b(?:div|rcp)\.rn\.f32\b", ptx) == ["rcp.rn.f32"] * 2


def test_unsigned_floor_division_and_abs(tmp_path):
    """``//`` and ``%`` on unsigned values are C's ``/`` and ``%`` (tl::floordiv takes int or long long: the call
    was ambiguous, or divided values >= 2**31 as negative ints); ``T.abs`` of one is the value (C's abs has no
    unsigned overload)."""
    import tilec.language as T

    @T.prim_func
    def main(U: T.Tensor((64,), "uint32"), V: T.Tensor((64,), "uint32"), O: T.Tensor((64,), "uint32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                O[i] = U[i] // V[i] + U[i] % V[i] + T.abs(U[i])

    source = tilec.JITKernel(main, "cuda:sm_80").get_kernel_source()
    assert "U[tx] / V[tx] + U[tx] % V[tx] + U[tx]" in source
    compile_cuda(source, tmp_path)


def test_abs_of_an_int_types_minimum_is_defined(tmp_path, rng):
    """``T.abs`` and ``T.reduce_absmax`` of 32- and 64-bit ints go through tl::iabs: C's abs of INT_MIN is undefined
    (the compiler may take abs(x) >= 0 for granted), where the interpreters wrap it to itself; the thread interpreter
    gives that wrap."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((4, 16), "int32"), B: T.Tensor((4,), "int32"), C: T.Tensor((4, 16), "int64"),
             D: T.Tensor((4, 16), "int64")):
        with T.Kernel(1, threads=32) as bx:
            a = T.alloc_shared((4, 16), "int32")
            b = T.alloc_shared((4,), "int32")
            T.copy(A, a)
            T.reduce_absmax(a, b, dim=1)
            T.copy(b, B)
            for i, j in T.Parallel(4, 16):
                D[i, j] = T.abs(C[i, j])

    source = tilec.JITKernel(main, "cuda:sm_80").get_kernel_source()
    body = source[source.index('extern "C" __global__'):]
    assert not re.findall(r"(?<![\w:])abs\(", body) and body.count("tl::iabs(") >= 3, body
    compile_cuda(source, tmp_path)
    a = rng.integers(-1000, 1000, (4, 16)).astype(np.int32)
    a[1, 3] = np.iinfo(np.int32).min
    c = rng.integers(-(2**40), 2**40, (4, 16)).astype(np.int64)
    c[2, 5] = np.iinfo(np.int64).min
    b, d = np.zeros(4, np.int32), np.zeros((4, 16), np.int64)
    tilec.JITKernel(main, "simt:sm_80")(a, b, c, d)
    wrapped = np.abs(a.astype(np.int64))
    wrapped[1, 3] = np.iinfo(np.int32).min  # |INT_MIN| wraps to INT_MIN
    np.testing.assert_array_equal(b, wrapped.max(axis=1))
    np.testing.assert_array_equal(d, np.abs(c))  # numpy's abs wraps the minimum too


@pytest.mark.parametrize("dtype", ["int32", "uint8", "int64"])
def test_shifts_by_counts_out_of_range(tmp_path, rng, dtype):
    """Shift counts that are not constants go through tl::shl / tl::shr (numpy's results for any count, as the
    interpreters give; C leaves counts outside [0, bits) undefined and GPUs differ); the thread interpreter runs
    the kernel right and nvcc compiles it. Constant counts in range stay plain C shifts."""
    from conftest import shift_inputs, shift_kernel

    jk = tilec.JITKernel(shift_kernel(dtype), "cuda:sm_80")
    source = jk.get_kernel_source()
    assert "tl::shl<" in source and "tl::shr<" in source
    compile_cuda(source, tmp_path)
    a, s = shift_inputs(rng, dtype)
    o, p = (np.full(256, 7, dtype) for _ in range(2))
    tilec.JITKernel(shift_kernel(dtype), "simt:sm_80")(a, s, o, p)
    np.testing.assert_array_equal(o, np.left_shift(a, s))
    np.testing.assert_array_equal(p, np.right_shift(a, s))


def test_narrow_floor_division_wraps_before_use(tmp_path):
    """``//`` of int8s that needs the floor (signs differ, or -128 // -1) is tl::floordiv, computed in int: its
    result is cast back to int8 where it is made, so -128 // -1 compares as -128 (numpy's wrap), not 128."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((4,), "int8"), B: T.Tensor((4,), "int8"), O: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(4):
                O[i] = T.if_then_else(A[i] // B[i] < 0, 1, 0)

    source = tilec.JITKernel(main, "cuda:sm_80").get_kernel_source()
    assert "static_cast<signed char>(tl::floordiv(" in source
    compile_cuda(source, tmp_path)
    a, b = np.array([-128, -7, 7, 100], np.int8), np.array([-1, 2, -2, 3], np.int8)
    o = np.full(4, 5, np.int32)
    with np.errstate(over="ignore"):
        want = (a // b < 0).astype(np.int32)
    tilec.JITKernel(main, "simt:sm_80")(a, b, o)
    np.testing.assert_array_equal(o, want)
    assert want[0] == 1


def test_extreme_integer_constants(tmp_path):
    """-2**63 was emitted as ``-9223372036854775808LL``, whose 9223372036854775808LL C takes as unsigned: a
    comparison with it compared unsigned (false for every value >= 0); -2**31's 2**31 is a long (tl::max(int,
    long) found no overload); 64-bit unsigned constants need ``ull``."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((64,), "int64"), O: T.Tensor((64,), "int32"), P: T.Tensor((64,), "uint64"),
             Q: T.Tensor((64,), "int32"), R: T.Tensor((64,), "uint32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                O[i] = T.if_then_else(A[i] > T.min_value("int64"), 1, 0)
                P[i] = T.cast(A[i], "uint64") + T.max_value("uint64")
                Q[i] = T.max(O[i], T.min_value("int32"))
                R[i] = T.cast(A[i], "uint32") * 4000000000

    source = tilec.JITKernel(main, "cuda:sm_80").get_kernel_source()
    assert "(-9223372036854775807LL - 1)" in source and "18446744073709551615ull" in source
    assert "(-2147483647 - 1)" in source and "4000000000u" in source
    cu = tmp_path / "kernel.cu"
    cu.write_text(source)
    res = subprocess.run([NVCC, "-arch=sm_80", "-std=c++17", "-cubin", "-o", str(tmp_path / "k.cubin"), str(cu)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "integer literal is too large" not in res.stderr, res.stderr


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_float_floor_division(dtype, tmp_path):
    """``//`` and ``%`` on 16-bit floats: the float helpers' result is rounded back (float + half was an
    ambiguous operator+); on float64 they are the helpers' double overloads (the float ones rounded the operands to
    float): ``tl::ffloordiv(A[i], B[i])`` on doubles, no cast to float."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((64,), dtype), B: T.Tensor((64,), dtype), O: T.Tensor((64,), dtype)):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                O[i] = A[i] // B[i] + A[i] % B[i] + A[i]

    source = tilec.JITKernel(main, "cuda:sm_80").get_kernel_source()
    assert "tl::ffloordiv" in source and ("static_cast<float>" in source) == (dtype != "float64")
    compile_cuda(source, tmp_path)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16"])
def test_min_max_reductions_of_narrow_ints(dtype, tmp_path):
    """A shuffle of an 8- or 16-bit int returns an int: it is cast back, or tl::max(signed char, int) matches no
    template."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((16, 64), dtype), O: T.Tensor((16,), dtype), P: T.Tensor((16,), dtype)):
        with T.Kernel(1, threads=128) as bx:
            f = T.alloc_fragment((16, 64), dtype)
            r = T.alloc_fragment((16,), dtype)
            T.copy(A, f)
            T.reduce_max(f, r, dim=1)
            T.copy(r, O)
            T.reduce_min(f, r, dim=1)
            T.copy(r, P)

    compile_cuda(tilec.JITKernel(main, "cuda:sm_80").get_kernel_source(), tmp_path)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_int_to_bfloat16_compiles(tmp_path, arch):
    """int32 / int64 / float64 to bfloat16 through the header's tl::bf16_rn (rounded once)."""
    from test_interp import int_to_bf16_kernel

    source = tilec.JITKernel(int_to_bf16_kernel(64), f"cuda:{arch}").get_kernel_source()
    assert source.count("tl::bf16_rn(static_cast<double>(") == 3
    compile_cuda(source, tmp_path, arch)


def test_atomic_adds_of_8_and_16_bit_ints_compile(tmp_path):
    """CUDA's atomicAdd has no 8/16-bit int overloads (nvcc: no instance of overloaded function "atomicAdd"): the
    common header's tl::atomic_add does them by CAS of the 32-bit word."""
    from test_interp import narrow_int_atomic_kernel

    source = tilec.JITKernel(narrow_int_atomic_kernel(), "cuda:sm_80").get_kernel_source()
    assert source.count("tl::atomic_add(&") == 4
    compile_cuda(source, tmp_path)


@pytest.mark.parametrize(("block_M", "threads", "instr"), [(128, 128, "wgmma"), (64, 256, "mma")])
def test_attention_rows_and_warpgroups_compile_for_sm_90a(tmp_path, monkeypatch, block_M, threads, instr):
    """128 rows on one warpgroup: both gemms on wgmma, PV reading P from registers in two 64-row steps; 64 rows on
    two warpgroups: both on mma.sync (wgmma's register A cannot split N between warpgroups, and QK^T's rows must lie
    like PV's). Layout inference refused both on the default sm_90a target once; no spills. The fences tie their
    registers: without, LLVM copies accumulators between fence and wgmma and ptxas injects waits (C7517)."""
    from tilec.lower import wgmma

    monkeypatch.setattr(wgmma, "FENCE_TIES", True)
    fa = load_example("03_flash_attention")
    kernel = fa.flash_attention(1, 4, 512, 64, True, block_M=block_M, block_N=64, threads=threads, num_stages=2)
    jk = tilec.JITKernel(kernel.prim_func, "cuda:sm_90a")
    notes = [line for line in jk.report().splitlines() if "note: T.gemm" in line]
    assert len(notes) == 2 and all(f": {instr} (" in line for line in notes), notes
    info = compile_cuda(jk.get_kernel_source(), tmp_path, "sm_90a")
    assert info["spill_stores"] == info["spill_loads"] == 0, info


def test_int64_atomic_add(tmp_path):
    """atomicAdd has no long long overload: an int64 add goes to the unsigned long long one (the same bits)."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((64, 32), "int64"), O: T.Tensor((64,), "int64"), O2: T.Tensor((64, 32), "int64")):
        with T.Kernel(2, threads=64) as bx:
            f = T.alloc_fragment((64, 32), "int64")
            T.copy(A, f)
            for i in T.Parallel(64):
                T.atomic_add(O[i], A[i, 3])
            T.atomic_add(O2, f)

    compile_cuda(tilec.JITKernel(main, "cuda:sm_80").get_kernel_source(), tmp_path)


@pytest.mark.parametrize("dtype", ["int8", "uint16"])
def test_narrow_int_arithmetic_is_wrapped_in_the_c(tmp_path, dtype):
    """C promotes 8/16-bit operands to int: a sum, product, shift or negation read by a cast, a comparison or
    tl::max (which took (int, signed char) and did not compile) is cast back to its type first, as the interpreters
    compute it."""
    from test_interp import narrow_int_arithmetic_kernel

    source = tilec.JITKernel(narrow_int_arithmetic_kernel(dtype), "cuda:sm_80").get_kernel_source()
    ctype = {"int8": "signed char", "uint16": "unsigned short"}[dtype]
    body = source[source.index('extern "C"'):]
    for op in "+-":
        assert re.search(rf"static_cast<{ctype}>\(A\[[^\]]+\] \{op} B\[", body), (op, body)
    # products and shifts in unsigned: 65535 * 65535, or a shift past int's top bit, would overflow int (undefined)
    assert re.search(rf"static_cast<{ctype}>\(static_cast<unsigned>\(A\[[^\]]+\]\) \* B\[", body), body
    assert f"static_cast<{ctype}>(-A[" in body, body
    assert f"static_cast<{ctype}>(static_cast<unsigned>(A[tx % 8]) << 4)" in body, body
    if dtype == "int8":  # abs(-128) is 128 in int; an int8's is -128 (uint16's abs is the value itself)
        assert f"static_cast<{ctype}>(abs(A[" in body, body
    compile_cuda(source, tmp_path)


@pytest.mark.parametrize("dtype", ["float8_e4m3", "float8_e5m2"])
def test_fp8_arithmetic_and_comparisons_compile(dtype, tmp_path):
    """cuda_fp8.h's types have no arithmetic, comparison or negation operators: A[i] * B[i] - A[i], A[i] < B[i] and
    -A[i] on fp8 values (which the interpreters compute in float, rounded back) failed in nvcc with 'no operator "*"
    matches these operands'; they are computed in float, as interpreted."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((64,), dtype), B: T.Tensor((64,), dtype), O: T.Tensor((64,), dtype),
             P: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                O[i] = T.if_then_else(A[i] < B[i], A[i] * B[i] - A[i], -A[i] / B[i])
                P[i] = T.cast(A[i] != B[i], "int32") + T.cast(A[i] >= B[i] + A[i], "int32")

    source = tilec.JITKernel(main, "cuda:sm_89").get_kernel_source()
    assert "static_cast<float>(A[tx]) < static_cast<float>(B[tx])" in source, source
    compile_cuda(source, tmp_path, "sm_89")


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_two_byte_chunks_of_zeros_past_a_ragged_edge_compile(tmp_path, rng, dtype):
    """A copy of 8-bit values two at a time into shared memory writes zeros for a chunk past the tensor's edge
    through ``unsigned short``: it was written ``unsigned short{}``, which is no C++ (nvcc:
    'type name is not allowed'); the thread interpreter runs the kernel right."""
    import tilec.language as T

    N = 18

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), O: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=32) as bx:
            a_s = T.alloc_shared((64,), dtype)
            T.copy(A[0], a_s)
            for i in T.Parallel(N):
                O[i] = a_s[i + 2]

    source = tilec.JITKernel(main, "cuda:sm_80").get_kernel_source()
    compile_cuda(source, tmp_path)
    a = rng.integers(-100, 100, N).astype(dtype)
    o = np.full(N, 7, dtype)
    tilec.JITKernel(main, "simt:sm_80")(a, o)
    np.testing.assert_array_equal(o, np.concatenate([a[2:], np.zeros(2, dtype)]))


@pytest.mark.parametrize("dtype", ["int16", "uint8"])
def test_max_and_min_of_narrow_ints_with_constants_and_bit_operations_compile(tmp_path, rng, dtype):
    """T.max / T.min of 8- and 16-bit ints whose C operands are ints (a constant, a bitwise and, a select of a
    constant) called tl::max(short, int), which matches no template (nvcc: 'no instance of function template'); the
    thread interpreter gives numpy's values."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((64,), dtype), B: T.Tensor((64,), dtype), O: T.Tensor((64, 3), dtype)):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                O[i, 0] = T.min(A[i], 18)
                O[i, 1] = T.max(A[i] & B[i], A[i] ^ B[i])
                O[i, 2] = T.max(T.if_then_else(A[i] > B[i], A[i], 3), B[i])

    source = tilec.JITKernel(main, "cuda:sm_80").get_kernel_source()
    compile_cuda(source, tmp_path)
    info = np.iinfo(dtype)
    a, b = (rng.integers(info.min, info.max, 64, endpoint=True).astype(dtype) for _ in range(2))
    o = np.zeros((64, 3), dtype)
    tilec.JITKernel(main, "simt:sm_80")(a, b, o)
    want = np.stack([np.minimum(a, 18), np.maximum(a & b, a ^ b), np.maximum(np.where(a > b, a, 3), b)], axis=1)
    np.testing.assert_array_equal(o, want.astype(dtype))


def test_atomic_add_of_a_constant_to_an_unsigned_int_compiles(tmp_path, rng):
    """T.atomic_add(U[i], 1) on a uint32 tensor printed tl::atomic_add(&U[...], 1): the template's two arguments
    deduced unsigned and int, and nvcc found no instance of tl::atomic_add. A uint32 constant is an unsigned literal
    (1u); the thread interpreter's sums are checked too."""
    import tilec.language as T

    @T.prim_func
    def main(U: T.Tensor((4,), "uint32"), V: T.Tensor((4,), "uint64"), S: T.Tensor((64,), "uint32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                T.atomic_add(U[i % 4], 3)
                T.atomic_add(V[i % 4], 2**40)
                S[i] = T.max(S[i], 7) + 1

    source = tilec.JITKernel(main, "cuda:sm_80").get_kernel_source()
    compile_cuda(source, tmp_path)
    u, v = rng.integers(0, 2**32, 4, dtype=np.uint32), rng.integers(0, 2**63, 4, dtype=np.uint64)
    s = rng.integers(0, 2**32, 64, dtype=np.uint32)
    want = (u + np.uint32(48), v + np.uint64(16 * 2**40), np.maximum(s, np.uint32(7)) + np.uint32(1))
    tilec.JITKernel(main, "simt:sm_80")(u, v, s)
    for got, w in zip((u, v, s), want):
        np.testing.assert_array_equal(got, w)


def _hinted_copies(M, N, dtype, out_dtype, policy):
    """Global -> shared -> global through T.copy with an eviction policy (a conversion on the way out if the dtypes
    differ: element by element)."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(M, 16), threads=128) as bx:
            S = T.alloc_shared((16, N), dtype)
            T.copy(A[bx * 16, 0], S, eviction_policy=policy)
            T.copy(S, B[bx * 16, 0], eviction_policy=policy)

    return main


def _hinted_gemm(M, N, K, block_M=64, block_N=64):
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, 32), "float16")
            B_s = T.alloc_shared((32, block_N), "float16")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
                T.copy(A[by * block_M, k * 32], A_s, eviction_policy="evict_first")
                T.copy(B[k * 32, bx * block_N], B_s, eviction_policy="evict_last")
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N], eviction_policy="evict_first")

    return main


HINTED = {  # name -> (kernel, target, pass configs, what the source must call)
    "plain 16-byte vectors": (lambda: _hinted_copies(100, 72, "float16", "float16", "evict_first"), "sm_80", {},
                              ("tl::ld_hint<uint4>(", "tl::st_hint<uint4>(")),
    "plain bytes, odd rows": (lambda: _hinted_copies(40, 7, "int8", "int8", "evict_last"), "sm_80", {},
                              ("tl::ld_hint<signed char>(", "tl::st_hint<signed char>(")),
    "plain 2-, 8-byte elements, converted": (lambda: _hinted_copies(40, 5, "float16", "float64", "evict_first"),
                                             "sm_80", {}, ("tl::ld_hint<half>(", "tl::st_hint<double>(")),
    "plain 4-byte words": (lambda: _hinted_copies(40, 6, "float16", "float16", "evict_first"), "sm_80", {},
                           ("tl::ld_hint<unsigned>(", "tl::st_hint<unsigned>(")),
    "cp.async pipeline (no hint on cp.async, plain stores hinted)": (lambda: _hinted_gemm(256, 256, 256), "sm_80", {},
                                                                      ("tl::st_hint<",)),
    "TMA load and store": (lambda: _hinted_gemm(256, 256, 256), "sm_90a", {"wgmma": True, "tma": True},
                           ("tl::tma_load_2d_hint(", "tl::tma_store_2d_hint(")),
    "TMA multicast": (lambda: _hinted_gemm(512, 512, 256, 128, 128), "sm_90a",
                      {"wgmma": True, "tma": True, "warp_specialize": True, "cluster": 2},
                      ("tl::tma_load_2d_multicast_hint(",)),
}


@pytest.mark.parametrize("case", list(HINTED))
def test_l2_cache_hints_compile(case, tmp_path):
    """T.copy(eviction_policy=...) becomes createpolicy and .L2::cache_hint forms of ld/st.global and
    cp.async.bulk.tensor (not of cp.async): each path's PTX must assemble (sm_80, and sm_90a for TMA)."""
    make, arch, configs, calls = HINTED[case]
    source = tilec.JITKernel(make(), f"cuda:{arch}", pass_configs=configs).get_kernel_source()
    body = source[source.index('extern "C" __global__'):]
    for call in calls:
        assert call in body, (call, body)
    assert "createpolicy.fractional.L2::evict_" in source
    compile_cuda(source, tmp_path, arch)


@pytest.mark.parametrize(("width", "arch", "configs"), [(2, "sm_80", {}), (16, "sm_80", {}), (4, "sm_90a", {}),
                                                         (4, "sm_90a", {"wgmma": True, "tma": True})])
def test_coalesced_copies_compile(width, arch, configs, tmp_path):
    """T.copy(coalesced_width=...): runs of elements a thread moves in narrower or several accesses (plain stores,
    cp.async of 4 or 8 bytes) compile, beside the copies' other options (with the tma pass config, B's disable_tma
    puts its copy on cp.async into the TMA ring's stages, arriving on their mbarriers)."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((200, 72), "float16"), B: T.Tensor((72, 136), "float16"), C: T.Tensor((200, 136), "float16")):
        with T.Kernel(T.ceildiv(136, 64), T.ceildiv(200, 64), threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(72, 32), num_stages=2):
                T.copy(A[by * 64, k * 32], A_s, coalesced_width=width, eviction_policy="evict_first")
                T.copy(B[k * 32, bx * 64], B_s, coalesced_width=2, disable_tma=True)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 64, bx * 64], coalesced_width=width)

    compile_cuda(tilec.JITKernel(main, f"cuda:{arch}", pass_configs=configs).get_kernel_source(), tmp_path, arch)


@pytest.mark.parametrize("operand", ["A disable_tma", "B strided"])
def test_mixed_tma_and_cp_async_ring_compiles(operand, tmp_path):
    """A TMA pipeline whose one operand TMA cannot copy (A's copy with disable_tma=True, or B a strided view): that
    operand goes by cp.async into the ring's stages, each thread arriving on the stage's mbarrier
    (``cp.async.mbarrier.arrive.noinc``), the other by ``cp.async.bulk.tensor``; ptxas takes it, the wgmma pipeline
    unserialized and nothing spilled."""
    import tilec.language as T

    M, N, K = 512, 256, 512
    b_type = T.StridedTensor((K, N), (2 * N, 1), "float16") if operand == "B strided" else T.Tensor((K, N), "float16")

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: b_type, C: T.Tensor((M, N), "float16")):
        with T.Kernel(N // 128, M // 128, threads=256) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(K // 64, num_stages=3):
                T.copy(A[by * 128, k * 64], A_s, disable_tma=operand == "A disable_tma")
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 128, bx * 128])

    jk = tilec.JITKernel(main, "cuda:sm_90a")
    source = jk.get_kernel_source()
    body = source[source.index('extern "C" __global__'):]
    slow, fast = ("A", "B") if operand == "A disable_tma" else ("B", "A")
    assert f"tl::tma_load_2d(&{fast}_tmap0" in body and f"{slow}_tmap" not in body, body
    assert f"tl::cp_async<16>(&{slow}_s[" in body and "mbar_arrive_cp_async(" in body, body
    assert "cp.async.mbarrier.arrive.noinc.shared::cta.b64" in source and "cp_async_commit()" not in body
    assert f"{slow}_s by cp.async, each thread arriving on the stage's mbarrier" in jk.report()
    info = compile_cuda(source, tmp_path, "sm_90a")
    assert info["spill_stores"] == info["spill_loads"] == 0, info


@T.macro
def _gemm_into(A, B, C_f, bx, by, K, block_M, block_N, block_K, dtype):
    """C_f = A @ B^T for the block's tile, pipelined (the GEMMs with an epilogue reading vectors below)."""
    A_s = T.alloc_shared((block_M, block_K), dtype)
    B_s = T.alloc_shared((block_N, block_K), dtype)
    T.clear(C_f)
    for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
        T.copy(A[by * block_M, k * block_K], A_s)
        T.copy(B[bx * block_N, k * block_K], B_s)
        T.gemm(A_s, B_s, C_f, transpose_B=True)


@tilec.jit(out_idx=[-1])
def _gemm_bias_relu(M, N, K, block_M=128, block_N=256, block_K=64, threads=256):
    """C = relu(A @ B^T * scale + bias): an (M, 1) scale and a (1, N) bias read from global memory by the epilogue."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), scale: T.Tensor((M, 1), "float32"),
             bias: T.Tensor((1, N), "float32"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            _gemm_into(A, B, C_f, bx, by, K, block_M, block_N, block_K, "float16")
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j] * scale[by * block_M + i, 0] + bias[0, bx * block_N + j], 0.0)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


@pytest.mark.parametrize("configs", [{"persistent": True}, {"persistent": True, "cluster": 2}])
def test_persistent_epilogue_reads_of_vectors_are_unchecked_and_do_not_spill(configs, tmp_path, rng):
    """A persistent kernel's tile coordinates are floor divisions and modulos of ``pid + tile * P`` (in the panels
    the compiler chooses, or in row-major order in clusters): the bounds of a floor modulo by a positive constant
    are [0, m) whatever its dividend, so the epilogue's reads of the scale and the bias at 4096^2 (whole tiles) need
    no bounds check. They were checked (the dividend's range was unknown), and the 64 checked loads a thread made
    ptxas spill 268 bytes. Where M is ragged the row check stays (the interpreter runs it)."""
    ws = {"wgmma": True, "tma": True, "warp_specialize": True}
    g = _gemm_bias_relu(4096, 4096, 4096).prim_func
    kernel = tilec.JITKernel(g, "cuda:sm_90a", pass_configs={**ws, **configs})
    source = kernel.get_kernel_source()
    assert ("in panels of 16 rows" in kernel.report()) == ("cluster" not in configs)
    assert "< 4096" not in source and "bias[tl::floor" in source
    info = compile_cuda(source, tmp_path, "sm_90a")
    assert info["spill_stores"] == info["spill_loads"] == 0, info
    M, N, K = 70, 200, 104  # ragged M and N: 2 x 4 tiles of 64 x 64 on 3 blocks
    small = tilec.JITKernel(_gemm_bias_relu(M, N, K, 64, 64, 32, 128).prim_func, "simt:sm_90a", [-1],
                            pass_configs={**ws, **configs, "persistent": 3})
    assert "< 70" in tilec.JITKernel(small.prim_func, "cuda:sm_90a", pass_configs={**ws, **configs,
                                                                                   "persistent": 3}).get_kernel_source()
    a, b = (rng.standard_normal(s).astype(np.float16) for s in ((M, K), (N, K)))
    scale, bias = rng.standard_normal((M, 1)).astype(np.float32), rng.standard_normal((1, N)).astype(np.float32)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64).T * scale + bias, 0)
    got = small(a, b, scale, bias).astype(np.float64)
    assert np.abs(got - ref).max() <= 2e-3 * np.abs(ref).max()


def _gemm_column_scale(M, N, K, dtype="float16", block_M=128, block_N=256, block_K=64, threads=256):
    """C = (A @ B^T) * scale: an (N,) scale of the columns read from global memory by the epilogue."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), scale: T.Tensor((N,), "float32"),
             C: T.Tensor((M, N), "bfloat16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            _gemm_into(A, B, C_f, bx, by, K, block_M, block_N, block_K, dtype)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = C_f[i, j] * scale[bx * block_N + j]
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


@pytest.mark.parametrize(("dtype", "block_K"), [("float16", 64), ("float8_e4m3", 128)])
def test_stream_k_consumers_keep_their_registers_and_do_not_spill(dtype, block_K, tmp_path, rng):
    """The traps of stream-K's flags (a flag set already, a wait that never ends) were inlined into the consumer
    warpgroups, and ptxas then kept them to the kernel's 168 registers at 384 threads, not the 232 of their
    ``setmaxnreg``: a 128 x 256 accumulator scaled by a per-column vector (64 loads a thread) spilled 204 bytes at
    4096^3. The traps are now a call of a function that is not inlined. The thread interpreter checks the numerics
    (ragged, 3 blocks sharing out the last tiles)."""
    cfg = {"wgmma": True, "tma": True, "warp_specialize": True, "persistent": True, "stream_k": True}
    g = _gemm_column_scale(4096, 4096, 4096, dtype, block_K=block_K)
    source = tilec.JITKernel(g, "cuda:sm_90a", pass_configs=cfg).get_kernel_source()
    assert "sk_partials" in source and "__trap()" in source
    info = compile_cuda(source, tmp_path, "sm_90a")
    assert info["spill_stores"] == info["spill_loads"] == 0, info
    M, N, K = 200, 136, 8 * block_K + 32  # ragged: 4 x 3 tiles of 64 x 64 on 5 blocks, 9 iterations a tile
    small = tilec.JITKernel(_gemm_column_scale(M, N, K, dtype, 64, 64, block_K, 128), "simt:sm_90a",
                            pass_configs={**cfg, "persistent": 5})
    assert "then the last 7 tiles shared out" in small.report()
    np_dtype = ml_dtypes.float8_e4m3fn if dtype == "float8_e4m3" else np.float16
    a, b = (rng.standard_normal(s).astype(np_dtype) for s in ((M, K), (N, K)))
    scale = rng.standard_normal(N).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64).T * scale
    c = np.full((M, N), np.nan, ml_dtypes.bfloat16)
    small(a, b, scale, c)
    assert np.abs(c.astype(np.float64) - ref).max() <= 1e-2 * np.abs(ref).max()


@pytest.mark.parametrize(("rows", "cols"), [(40, 24), (37, 200)])
def test_reductions_of_shared_tiles_into_shared_vectors_share_the_lines_out(rows, cols, tmp_path, rng):
    """A shared tile reduced into a shared vector whose length does not divide the threads nor they it (24 columns,
    40 rows at 128 threads) had every thread compute every line (a tile held whole by each thread) and thread 0 store
    them: 128 times the work, and 2968 bytes of spills at 40 x 24. Each line is now computed once, by one thread
    (of as many as the largest divisor of the line count not above the threads). The thread interpreter checks the
    numerics (clear=False min over columns, sum over rows)."""
    from conftest import assert_close

    import tilec.language as T

    @T.prim_func
    def main(X: T.Tensor((rows, cols), "float32"), Y: T.Tensor((cols,), "float32"), Y2: T.Tensor((rows,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((rows, cols), "float32")
            r = T.alloc_shared((cols,), "float32")
            r2 = T.alloc_shared((rows,), "float32")
            T.copy(X, s)
            T.fill(r, 1.0)
            T.reduce_min(s, r, dim=0, clear=False)
            T.reduce_sum(s, r2, dim=1)
            T.copy(r, Y)
            T.copy(r2, Y2)

    info = compile_cuda(tilec.JITKernel(main, "cuda:sm_80").get_kernel_source(), tmp_path)
    assert info["spill_stores"] == info["spill_loads"] == 0, info
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y, y2 = np.full(cols, np.nan, np.float32), np.full(rows, np.nan, np.float32)
    tilec.JITKernel(main, "simt:sm_80")(x, y, y2)
    x64 = x.astype(np.float64)
    assert_close(y, np.minimum(x64.min(0), 1.0), "float32")
    assert_close(y2, x64.sum(1), "float32", scale=float(np.abs(x64).sum(1).max()))


def test_a_wgmma_too_wide_for_the_launchs_registers_gets_a_hint(tmp_path):
    """Three consumer warpgroups (512 threads launched: 128 registers a thread) with a 64 x 256 float32 accumulator
    a wgmma: ptxas refuses the instruction (154 registers) though setmaxnreg gives the consumers 160; the error tilec
    raises for that log says why and what to change."""
    from tilec.backends.cuda.runtime import ptxas_hint

    k = tilec.JITKernel(load_example("01_gemm").matmul.fn(4096, 4096, 4096, block_M=192, block_N=256, block_K=64,
                                                          threads=384, num_stages=2),
                        "cuda:sm_90a", [-1], pass_configs={"wgmma": True, "tma": True, "warp_specialize": True})
    (tmp_path / "kernel.cu").write_text(k.get_kernel_source())
    res = subprocess.run([NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-cubin", "-o",
                          str(tmp_path / "kernel.cubin"), str(tmp_path / "kernel.cu")], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode != 0
    hint = ptxas_hint(res.stdout + res.stderr)
    assert "needs 154 registers" in hint and "the 128 the block's launch size allows" in hint, hint
    assert "block_N" in hint and "fewer threads" in hint


STAGED = {  # flash attention whose P·V gemm runs on the scalar FMA path, P staged through shared memory; none spills
    # (float32 64x64 at 128 threads spilled 1.7 KB at 255 registers while the scalar gemm unrolled its whole k-loop)
    "float32": ((1, 8, 1000, 64, False), {"dtype": "float32"}),
    "float32 causal 32x32 2 stages": ((1, 8, 1000, 64, True), {"dtype": "float32", "block_M": 32, "block_N": 32,
                                                               "threads": 64, "num_stages": 2}),
    "float16 64x40 causal": ((1, 8, 1000, 64, True), {"block_N": 40}),  # P·V's K=40: no mma.m16n8k16 steps
}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("case", list(STAGED))
def test_attention_with_a_staged_register_operand_compiles(case, arch, tmp_path):
    args, kwargs = STAGED[case]
    jk = tilec.JITKernel(load_example("03_flash_attention").flash_attention.fn(*args, **kwargs), f"cuda:{arch}", [3])
    assert "its A operand 'P' is staged through shared memory" in jk.report()
    source = jk.get_kernel_source()
    assert "P_staged" in source
    info = compile_cuda(source, tmp_path, arch)
    line = record(f"flash attention staged {case} ({arch})", info)
    assert info["spill_stores"] == info["spill_loads"] == 0, line


SCALAR = {  # float32 kernels on the scalar FMA path -> (kernel, whether ptxas spills: the register note says so)
    "gemm 224x128 128 threads": (lambda: load_example("01_gemm").matmul.fn(1024, 1024, 1024, block_M=224, block_N=128,
                                                                            num_stages=1, dtype="float32"), False),
    "gemm 128x128 64 threads": (lambda: load_example("01_gemm").matmul.fn(1024, 1024, 1024, threads=64, num_stages=2,
                                                                           dtype="float32"), True),  # C: 256 a thread
    "attention 128x64 128 threads": (lambda: load_example("03_flash_attention").flash_attention.fn(
        1, 8, 1000, 64, False, block_M=128, dtype="float32"), False),
}


@pytest.mark.parametrize("case", list(SCALAR))
def test_scalar_gemms_spill_only_where_the_register_note_says(case, tmp_path):
    """The scalar FMA gemm unrolls a few k-steps, not its whole k-loop: the operand values the compiler hoists no
    longer crowd out the accumulators (nvcc 13.0, sm_80: the 224 x 128 gemm spilled 1104 bytes and attention at
    128 x 64 2764 bytes, the register note silent; now 255 and 254 registers, no spills), so ptxas spills where the
    fragments alone do not fit, as the note estimates."""
    make, spills = SCALAR[case]
    jk = tilec.JITKernel(make(), "cuda:sm_80", [-1] if case.startswith("gemm") else [3])
    assert "scalar FMA path" in jk.report()
    info = compile_cuda(jk.get_kernel_source(), tmp_path)
    line = record(f"scalar {case}", info)
    assert ("32-bit registers a thread" in jk.report()) == spills == (info["spill_stores"] > 0), (line, jk.report())


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_scalar_gemm_offsets_stay_few_registers(arch, tmp_path):
    """A float32 240 x 128 gemm at 128 threads on the scalar FMA path holds 240 accumulators a thread. Its A tile,
    swizzled on sm_90a, was read at offsets the CUDA compiler kept one register for each of the thread's 60 rows
    across the k loop: ptxas (nvcc 13.0) spilled 220 bytes on sm_90a. Each operand's offsets are now one of a few
    bases plus a constant (A: two on sm_90a, one on sm_80; B: one): no spills."""
    fn = load_example("01_gemm").matmul.fn(1024, 1024, 1024, block_M=240, block_N=128, dtype="float32")
    jk = tilec.JITKernel(fn, f"cuda:{arch}", [-1])
    assert "scalar FMA path" in jk.report()
    source = jk.get_kernel_source()
    bases = 2 if arch == "sm_90a" else 1  # sm_90a's TMA tile swizzles even and odd rows apart; sm_80's is plain
    assert len(re.findall(r"const int A_s_at_\d+ =", source)) == bases, source
    info = compile_cuda(source, tmp_path, arch)
    line = record(f"scalar gemm 240x128 ({arch})", info)
    assert info["spill_stores"] == info["spill_loads"] == 0, line
