"""The HIP source emitted for every example compiles offline with hipcc for gfx90a (device code only, to AMDGPU
assembly), uses MFMA where it has a gemm, and keeps its registers out of scratch memory; the registers and scratch
bytes are printed at the end of the run. The kernels of target hip:gfx942 are compiled for gfx940, the CDNA3 target
the installed clang knows (gfx942, the MI300X, has the same MFMA set and needs a newer clang); the CUDA side's kernels
(tests/backends/test_nvcc.py) are all compiled here or refused with a reason. Skipped where hipcc is absent."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from conftest import EXAMPLES, load_example

import tilec

from .conftest import HIPCC_INFO

HIPCC = shutil.which("hipcc")
pytestmark = pytest.mark.skipif(HIPCC is None, reason="hipcc is not on PATH")

CASES = {  # name -> (example, factory, args, kwargs)
    "gemm 1024^3 64x64x32": ("01_gemm", "matmul", (1024, 1024, 1024), {"block_M": 64, "block_N": 64}),
    "gemm 1000^3 64x64x32 (ragged)": ("01_gemm", "matmul", (1000, 1000, 1000), {"block_M": 64, "block_N": 64}),
    "gemm 4096^3 128x128x32": ("01_gemm", "matmul", (4096, 4096, 4096), {}),
    "gemm 4096^3 128x128x32 bf16 256 threads": ("01_gemm", "matmul", (4096, 4096, 4096),
                                                {"dtype": "bfloat16", "threads": 256}),
    "softmax 1024x1000": ("02_softmax", "softmax", (1024, 1000), {}),
    "rms_norm 1000x1024": ("05_norms", "rms_norm", (1000, 1024), {}),
    "layer_norm 1000x1024": ("05_norms", "layer_norm", (1000, 1024), {}),
    "flash attention 1x8x1000x64": ("03_flash_attention", "flash_attention", (1, 8, 1000, 64, False), {}),
    "flash attention 1x8x1000x128 causal": ("03_flash_attention", "flash_attention", (1, 8, 1000, 128, True),
                                            {"num_stages": 2}),
    "flash attention 1x8x1000x128 causal 1 stage": ("03_flash_attention", "flash_attention",
                                                    (1, 8, 1000, 128, True), {}),
    "mla decode 64x128x1x8192 16x32": ("07_mla_decode", "mla_decode", (64, 128, 1, 8192),
                                       {"block_H": 16, "block_N": 32, "threads": 128}),  # 64 KB of LDS a block
}


def amdgpu_info(asm: str) -> dict[str, int]:
    """MFMA count, VGPRs, AGPRs and scratch bytes per lane from the AMDGPU assembly of one kernel."""
    def field(name: str) -> int:
        m = re.search(rf"\.{name}:\s+(\d+)", asm)
        assert m, f".{name} not in the assembly"
        return int(m.group(1))

    return {"mfma": len(re.findall(r"^\s*v_mfma_", asm, re.M)), "vgpr": field("vgpr_count"),
            "agpr": field("agpr_count"), "scratch": field("private_segment_fixed_size")}


def compile_hip(source: str, arch: str, tmp_path) -> dict[str, int]:  # noqa: ANN001
    src = tmp_path / "kernel.hip"
    src.write_text(source)
    out = tmp_path / "kernel.s"
    cmd = [HIPCC, f"--offload-arch={arch}", "-O3", "--cuda-device-only", "-S", "-x", "hip", str(src), "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, HIP_PLATFORM="amd"))
    assert res.returncode == 0, f"hipcc failed:\n{res.stderr}\n--- source ---\n{source}"
    return amdgpu_info(out.read_text())


def source_of(case: str, target: str = "hip:gfx90a") -> str:
    example, factory, args, kwargs = CASES[case]
    kernel = getattr(load_example(example), factory)(*args, **kwargs)
    return tilec.JITKernel(kernel.prim_func, target).get_kernel_source()


def test_assembly_is_parsed():
    asm = ("\tv_mfma_f32_16x16x16f16 a[0:3], v[0:1], v[2:3], a[0:3]\n    .agpr_count:     4\n"
           "    .private_segment_fixed_size: 0\n    .vgpr_count:     32\n")
    assert amdgpu_info(asm) == {"mfma": 1, "vgpr": 32, "agpr": 4, "scratch": 0}


def test_every_example_is_compiled():
    # 06_fp8_gemm: CDNA2 has no fp8 (tests/amd/test_examples_simt.py checks the backend refuses it)
    assert {c[0] for c in CASES.values()} == {p.stem for p in EXAMPLES.glob("*.py")} - {"04_recommend", "06_fp8_gemm"}


ARCHS = {"hip:gfx90a": "gfx90a", "hip:gfx942": "gfx940"}  # target -> --offload-arch (see the module docstring)


@pytest.mark.parametrize("target", list(ARCHS))
@pytest.mark.parametrize("case", list(CASES))
def test_example_compiles_with_hipcc(case, target, tmp_path):
    source = source_of(case, target)
    assert 'extern "C" __global__' in source
    info = compile_hip(source, ARCHS[target], tmp_path)
    line = f"{case:<42} {ARCHS[target]} {info['vgpr']:>3} VGPRs, {info['agpr']:>3} AGPRs, {info['scratch']} B " \
           f"scratch, {info['mfma']} MFMA"
    print(line)
    HIPCC_INFO.append(line)
    assert (info["mfma"] > 0) == case.startswith(("gemm", "flash", "mla")), line  # the kernels with a T.gemm
    if case.startswith(("gemm", "softmax")):
        assert info["scratch"] == 0, line


# the CUDA side's kernels (tests/backends/test_nvcc.py) that HIP cannot take, and why (the rest are in CASES)
LDS = "bytes of shared memory; a block on {arch} may have at most 65536"
REFUSED = {
    "mla decode 64x128x1x8192": "needs 155648 " + LDS,
    "mla decode 64x128x1x8191 2 stages": "needs 114688 " + LDS,
    "fp8 gemm 1000^3 64x64x64 (sm_89)": "dtype float8_e4m3 (of parameter 'A') is not supported by the hip backend",
}


@pytest.mark.parametrize("target", list(ARCHS))
def test_the_cuda_sides_kernels_compile_or_are_refused_with_the_reason(target):
    """Every kernel test_nvcc.py compiles for CUDA is compiled here too (in CASES: same example, sizes and tiles),
    or refused with the reason in REFUSED."""
    from backends.test_nvcc import CASES as NVCC_CASES

    compiled = list(CASES.values())
    for name, (example, factory, args, kwargs) in NVCC_CASES.items():
        if name not in REFUSED:
            assert (example, factory, args, kwargs) in compiled, name
            continue
        kernel = getattr(load_example(example), factory)(*args, **kwargs)
        with pytest.raises(tilec.TilecError, match=re.escape(REFUSED[name].format(arch=target[4:]))):
            tilec.JITKernel(kernel.prim_func, target).get_kernel_source()


def test_bf16_gemm_compiles_for_cdna3(tmp_path):
    info = compile_hip(source_of("gemm 4096^3 128x128x32 bf16 256 threads", "hip:gfx942"), "gfx940", tmp_path)
    assert info["mfma"] > 0 and info["scratch"] == 0, info


def test_atomic_adds_of_16_bit_floats_compile(tmp_path):
    """HIP's atomicAdd has no half / bfloat16 overloads: the header's tl::atomic_add does them by CAS."""
    import tilec.language as T

    @T.prim_func
    def main(X: T.Tensor((256,), "float32"), H: T.Tensor((16,), "float16"), B: T.Tensor((16,), "bfloat16"),
             F: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(256):
                T.atomic_add(H[i % 16], X[i])
                T.atomic_add(B[i % 16], X[i])
                T.atomic_add(F[i % 16], X[i])

    source = tilec.JITKernel(main, "hip:gfx90a").get_kernel_source()
    assert source.count("tl::atomic_add(&") == 3
    compile_hip(source, "gfx90a", tmp_path)


def test_atomic_adds_of_8_and_16_bit_ints_compile(tmp_path):
    """HIP's atomicAdd has no 8/16-bit integer overloads either (hipcc: no matching function for call to
    'atomicAdd'): the header's tl::atomic_add does them by CAS of the 32-bit word."""
    from test_interp import narrow_int_atomic_kernel

    main = narrow_int_atomic_kernel()
    source = tilec.JITKernel(main, "hip:gfx90a").get_kernel_source()
    assert source.count("tl::atomic_add(&") == 4
    compile_hip(source, "gfx90a", tmp_path)


def test_vector_moves_span_their_elements(tmp_path):
    """``tl::vec<T, n>``, the type of the emitter's vector moves, is n elements of T's size for every HIP type: a
    clang ``bool`` vector is packed one bit an element (tl::vec<bool, 16> was 2 bytes, so a 16-byte copy of a
    bool tile moved 2 bytes and spread their bits over 16 elements)."""
    from tilec.backends.hip.header import HEADER
    from tilec.backends.hip.table import HIP_TYPES

    checks = "".join(f"static_assert(sizeof(tl::vec<{t}, {n}>) == {n} * sizeof({t}), \"tl::vec<{t}, {n}>\");\n"
                     for t in sorted(set(HIP_TYPES.values())) for n in (2, 4, 8, 16))
    compile_hip(HEADER + checks + 'extern "C" __global__ void k() {}\n', "gfx90a", tmp_path)


def test_int_to_bfloat16_compiles(tmp_path):
    """int32 / int64 / float64 to bfloat16 go through the header's tl::bf16_rn (rounded once)."""
    from test_interp import int_to_bf16_kernel

    source = tilec.JITKernel(int_to_bf16_kernel(64), "hip:gfx90a").get_kernel_source()
    assert source.count("tl::bf16_rn(static_cast<double>(") == 3
    compile_hip(source, "gfx90a", tmp_path)


def test_int64_atomic_add_compiles(tmp_path):
    """HIP's atomicAdd has no long long overload either: the unsigned long long one adds the same bits."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((256,), "int64"), O: T.Tensor((16,), "int64")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(256):
                T.atomic_add(O[i % 16], A[i])

    compile_hip(tilec.JITKernel(main, "hip:gfx90a").get_kernel_source(), "gfx90a", tmp_path)


def test_bf16_negation_compiles(tmp_path):
    """tl::bf16 had no unary minus: -x was float's, and ``bf16 - float`` an ambiguous operator-."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((64,), "bfloat16"), B: T.Tensor((64,), "bfloat16"), O: T.Tensor((64,), "bfloat16")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                O[i] = B[i] - (-A[i])

    compile_hip(tilec.JITKernel(main, "hip:gfx90a").get_kernel_source(), "gfx90a", tmp_path)


def test_float_to_int_casts_compile(tmp_path):
    """Every float type to every int type goes through the header's tl::f2i (saturated as interpreted; hipcc's own
    casts saturated half to int8 at 16 bits and took float to uint8 through a signed conversion)."""
    import tilec.language as T

    ints = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
    floats = ["float64", "float32", "float16", "bfloat16"]
    pairs = [(k, floats[k // 8], ints[k % 8]) for k in range(32)]

    @T.prim_func
    def main(A: T.Tensor((64, 4), "float64"), O: T.Tensor((64, 32), "int64")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                for k, f, t in pairs:  # unrolled at compile time
                    O[i, k] = T.cast(T.cast(T.cast(A[i, k // 8], f), t), "int64")

    source = tilec.JITKernel(main, "hip:gfx90a").get_kernel_source()
    assert source.count("tl::f2i<") == 32, source
    compile_hip(source, "gfx90a", tmp_path)


STAGED = {  # flash attention whose P·V gemm runs on the scalar FMA path, P staged through shared memory; none spills
    # (float32: 168 B of scratch, float16 at 32 threads 272 B, while the scalar gemm unrolled its whole k-loop)
    "float32": ((1, 8, 1000, 64, False), {"dtype": "float32"}),
    "float32 causal 32x32": ((1, 8, 1000, 64, True), {"dtype": "float32", "block_M": 32, "block_N": 32,
                                                      "threads": 64}),
    "float16 32 threads": ((1, 8, 1000, 64, False), {"block_M": 32, "block_N": 32, "threads": 32}),
    "float16 D=40 causal": ((1, 8, 1000, 40, True), {}),  # P·V's N=40: no 16x16 MFMA tiling
}


@pytest.mark.parametrize("case", list(STAGED))
def test_attention_with_a_staged_register_operand_compiles(case, tmp_path):
    args, kwargs = STAGED[case]
    jk = tilec.JITKernel(load_example("03_flash_attention").flash_attention.fn(*args, **kwargs), "hip:gfx90a", [3])
    assert "its A operand 'P' is staged through shared memory" in jk.report()
    source = jk.get_kernel_source()
    assert "P_staged" in source
    info = compile_hip(source, "gfx90a", tmp_path)
    line = f"{'flash attention staged ' + case:<42} gfx90a {info['vgpr']:>3} VGPRs, {info['scratch']} B scratch"
    print(line)
    HIPCC_INFO.append(line)
    assert info["scratch"] == 0, line
