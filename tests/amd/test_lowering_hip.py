"""Lowering for HIP targets: what layout inference, lowering, pipelining and emission choose for 64-lane
wavefronts, checked on the plan, the thread IR and the HIP source, with numerics on the thread interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, load_example, poisoned, randn
from test_interp import gemm_kernel

import tilec
import tilec.language as T
from tilec.errors import TilecError
from tilec.ir.visit import walk
from tilec.lower.tir import CpAsync, Mfma, Sync, TCall

from .helpers import assert_mfma, gemm_instrs, hip_simt


def thread_ir(kernel: tilec.JITKernel):  # noqa: ANN201
    return kernel.state.artifacts["thread_ir"]


@pytest.mark.parametrize(("threads", "bm", "bn", "grid"), [(256, 128, 128, (2, 2)), (128, 64, 64, (2, 1)),
                                                           (64, 32, 64, (1, 1)), (256, 16, 128, (1, 4))])
def test_gemm_plans_mfma_on_a_grid_of_waves(threads, bm, bn, grid):
    func = load_example("01_gemm").matmul(256, 256, 64, block_M=bm, block_N=bn, threads=threads).prim_func
    k = hip_simt(func, [-1])
    plan = next(iter(k.layouts.gemms.values()))
    assert (plan.instr, plan.warp_m, plan.warp_n) == ("mfma", *grid)
    assert k.layouts.origin[next(b for b in k.layouts.fragments if b.name == "C_f")] == \
        ("strict", f"v_mfma_f32_16x16x16 accumulator, {grid[0]}x{grid[1]} waves")
    assert sum(isinstance(n, Mfma) for n in walk(thread_ir(k).body)) == (bm // grid[0] // 16) * (bn // grid[1] // 16)


@pytest.mark.parametrize(("kwargs", "why"), [({"threads": 32}, "32 threads"), ({"block_K": 8}, "K=8 is not"),
                                             ({"block_N": 24}, "no Square partition of 2 waves tiles 64x24")])
def test_gemm_fallbacks_are_reported(kwargs, why):
    tiles = {"block_M": 64, "block_N": 64} | kwargs
    k = hip_simt(load_example("01_gemm").matmul(64, 48, 64, **tiles).prim_func, [-1])
    assert gemm_instrs(k) == ["simt"]
    assert "scalar FMA path (fallback: " in k.report() and why in k.report()


def test_float32_gemm_falls_back_and_is_right(rng):
    k = hip_simt(gemm_kernel(70, 40, 50, 64, 64, 32, "float32", "float32"))
    a, b, c = randn(rng, (70, 50), "float32"), randn(rng, (50, 40), "float32"), poisoned((70, 40), "float32")
    k(a, b, c)
    assert gemm_instrs(k) == ["simt"] and "operand dtype float32" in k.report()
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), "float32")


@pytest.mark.parametrize("layout", ["NT", "TN", "TT"])
def test_transposed_operands(rng, layout):
    """A stored K x M and B stored K x N take element loads, A stored M x K and B stored N x K vector loads."""
    M, N, K = 100, 72, 48
    ta, tb = layout[0] == "T", layout[1] == "T"
    k = hip_simt(gemm_kernel(M, N, K, 64, 64, 16, "float16", "float16", trans_a=ta, trans_b=tb))
    a = randn(rng, (K, M) if ta else (M, K), "float16")
    b = randn(rng, (N, K) if tb else (K, N), "float16")
    c = poisoned((M, N), "float16")
    k(a, b, c)
    ref = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    assert_close(c, ref, "float16")
    assert_mfma(k)
    src = tilec.JITKernel(k.prim_func, "hip:gfx90a").get_kernel_source()
    a_vector = "*reinterpret_cast<tl::vec<_Float16, 4>*>(&a_frag" in src
    b_vector = "*reinterpret_cast<tl::vec<_Float16, 4>*>(&b_frag" in src
    assert (a_vector, b_vector) == (not ta, tb)


@tilec.jit(out_idx=[1], target="simt:gfx90a")
def row_sums(M, N, bm, red="sum", threads=128):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
            x = T.alloc_fragment((bm, N), "float32")
            y = T.alloc_fragment((bm,), "float32")
            T.copy(X[bx * bm, 0], x)
            getattr(T, f"reduce_{red}")(x, y, dim=1)
            T.copy(y, Y[bx * bm])

    return main


@pytest.mark.parametrize("red", ["sum", "max"])
def test_reduction_over_64_lanes_is_all_shuffles(rng, red):
    """2 rows of 256 over 128 threads: each row is held by 64 threads (4 values each), one wavefront on AMD, so
    the partials combine by XOR shuffles of masks 1..32 with width 64; on CUDA the same rows span two warps and
    the last step goes through shared memory."""
    x = randn(rng, (6, 256), "float32")
    k = row_sums(6, 256, 2, red)
    y = k(x)
    ref = x.astype(np.float64).sum(1) if red == "sum" else x.astype(np.float64).max(1)
    assert_close(y, ref, "float32", scale=float(np.abs(x).sum(1).max()))
    body = thread_ir(k).body
    shuffles = [n for n in walk(body) if isinstance(n, TCall)]
    assert sorted(int(s.args[1].value) for s in shuffles) == [1, 2, 4, 8, 16, 32]
    assert all(int(s.args[2].value) == 64 for s in shuffles)
    assert not any(isinstance(n, Sync) for n in walk(body)) and not thread_ir(k).shared
    cuda = tilec.JITKernel(k.prim_func, "simt:sm_80", [1])
    assert cuda.state.artifacts["thread_ir"].shared  # the cross-warp step's scratch
    np.testing.assert_allclose(cuda(x), y, rtol=1e-5, atol=1e-5)
    src = tilec.JITKernel(k.prim_func, "hip:gfx90a", [1]).get_kernel_source()
    assert "__shfl_xor(" in src and ", 32, 64)" in src and "_sync" not in src


@pytest.mark.parametrize("red", ["sum", "max"])
def test_reduction_in_a_block_smaller_than_a_wavefront(rng, red):
    """A block of 32 threads is half a 64-lane wavefront: its shuffles reach lanes 0..31 only (the thread
    interpreter failed reshaping the block's 32 lanes into waves of 64)."""
    x = randn(rng, (6, 64), "float32")
    k = row_sums(6, 64, 2, red, threads=32)
    y = k(x)
    ref = x.astype(np.float64).sum(1) if red == "sum" else x.astype(np.float64).max(1)
    assert_close(y, ref, "float32", scale=float(np.abs(x).sum(1).max()))
    assert any(isinstance(n, TCall) for n in walk(thread_ir(k).body))  # shuffles, within the 32 lanes
    src = tilec.JITKernel(k.prim_func, "hip:gfx90a", [1]).get_kernel_source()
    assert "__shfl_xor(" in src and ", 32, 64)" not in src


@pytest.mark.parametrize("red", ["sum", "max"])
@pytest.mark.parametrize(("scope", "threads"), [("fragment", 128), ("fragment", 512), ("shared", 128)])
def test_float64_reductions_combine_in_float64(rng, red, scope, threads):
    """A float64 reduction keeps float64 through its partials, shuffles and cross-wave scratch, as on the CPU (the
    lowering combined float64 values in float32: a max of values 1 + x * 1e-9 came back rounded to float)."""
    M, N = 4, 128

    @T.prim_func
    def main(A: T.Tensor((M, N), "float64"), O: T.Tensor((M,), "float64")):
        with T.Kernel(1, threads=threads) as bx:
            a = T.alloc_fragment((M, N), "float64") if scope == "fragment" else T.alloc_shared((M, N), "float64")
            o = T.alloc_fragment((M,), "float64")
            T.copy(A, a)
            getattr(T, f"reduce_{red}")(a, o, dim=1)
            T.copy(o, O)

    a = 1 + rng.random((M, N)) * 1e-9
    o = poisoned((M,), "float64")
    hip_simt(main)(a, o)
    np.testing.assert_allclose(o, a.sum(1) if red == "sum" else a.max(1), rtol=1e-15, atol=0)


@pytest.mark.parametrize("dtype", ["int32", "int64", "float64"])
@pytest.mark.parametrize("scope", ["fragment", "shared"])
def test_cumsum_sums_in_the_type_of_its_destination(rng, dtype, scope):
    """A running sum of int32 / int64 / float64 values stays in that type, as on the CPU (the lowering summed in
    float32, and went through a float32 shared scratch for fragments: int32 sums over 2^24 lost their low bits)."""
    M, N, bm, bn = 20, 50, 16, 64

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bm), threads=128) as bx:
            x = T.alloc_fragment((bm, bn), dtype) if scope == "fragment" else T.alloc_shared((bm, bn), dtype)
            T.copy(X[bx * bm, 0], x)
            T.cumsum(x, dim=1)
            T.copy(x, Y[bx * bm, 0])

    if dtype == "float64":
        x = rng.standard_normal((M, N)) * (1 + 2**-40)
    else:
        x = (rng.integers(0, 2**20, (M, N)) * 33 + 1).astype(dtype)  # sums past 2^24, odd
    y = poisoned((M, N), dtype)
    hip_simt(main)(x, y)
    np.testing.assert_array_equal(y, np.cumsum(x, axis=1))


def test_pipelined_loop_prefetches_into_registers(rng):
    """No cp.async on CDNA: T.Pipelined loads the next tiles into registers during the gemm (reported)."""
    M, N, K = 100, 72, 136
    k = hip_simt(load_example("01_gemm").matmul(M, N, K, block_M=64, block_N=64, num_stages=3), [-1])
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    assert_close(k(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")
    assert "register prefetch of the next tile of A_s, B_s" in k.report()
    tir = thread_ir(k)
    assert not any(isinstance(n, CpAsync) for n in walk(tir.body))
    assert {m.name for m in tir.regs} >= {"A_s_next", "B_s_next"}
    assert tir.smem_bytes == 64 * 32 * 2 * 2  # one buffer per operand
    one = hip_simt(load_example("01_gemm").matmul(M, N, K, block_M=64, block_N=64, num_stages=1), [-1])
    assert "prefetch" not in one.report()
    assert_close(one(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")


def test_hip_source_spells_hip():
    k = tilec.JITKernel(load_example("01_gemm").matmul(256, 256, 64, dtype="bfloat16").prim_func, "hip:gfx90a", [-1])
    src = k.get_kernel_source()
    assert src.count("#include") == 1 and "#include <hip/hip_runtime.h>" in src and "__HIPCC_RTC__" in src
    assert 'extern "C" __global__ __launch_bounds__(128) void main_kernel(tl::bf16* __restrict__ A' in src
    assert "extern __shared__ __attribute__((aligned(1024))) unsigned char smem[];" in src
    assert "tl::mfma_16x16x16_bf16(C_f + 0, b_frag" in src
    assert "__align__" not in src and "asm(" not in src and "__nv_" not in src
    assert "tl::vec<tl::bf16, 8>" in src


def test_float8_is_refused_by_the_hip_backend():
    @T.prim_func
    def main(X: T.Tensor((64,), "float8_e4m3"), Y: T.Tensor((64,), "float8_e4m3")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                Y[i] = X[i]

    with pytest.raises(TilecError, match=r"float8_e4m3 \(of parameter 'X'\) is not supported by the hip backend"):
        tilec.JITKernel(main, "hip:gfx90a").get_kernel_source()


def test_target_hip_takes_the_architecture_from_the_device():
    t = tilec.target.parse_target("hip")
    assert (t.kind, t.arch, t.backend, t.warp_size) == ("hip", "", "hip", 64)
    assert tilec.target.parse_target("simt:gfx942").warp_size == 64
    assert tilec.target.parse_target("simt:sm_80").warp_size == 32


def test_register_operands_replicated_over_waves(rng):
    """Register A and B operands loaded with T.copy (replicated over the waves of a wave row / column: 2 x 2 waves),
    and an accumulator copied to an A operand of another wave grid (converted through shared memory)."""

    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"), W: T.Tensor((64, 32), "float16"),
             C: T.Tensor((64, 32), "float32"), D: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=256) as bx:
            A_f = T.alloc_fragment((64, 32), "float16")
            B_f = T.alloc_fragment((32, 64), "float16")
            A_s = T.alloc_shared((64, 32), "float16")
            W_s = T.alloc_shared((64, 32), "float16")
            S = T.alloc_fragment((64, 64), "float32")
            S2 = T.alloc_fragment((64, 64), "float32")
            P = T.alloc_fragment((64, 64), "float16")
            O = T.alloc_fragment((64, 32), "float32")
            T.copy(A, A_f)
            T.copy(B, B_f)
            T.copy(A, A_s)
            T.copy(W, W_s)
            T.gemm(A_f, B_f, S, clear_accum=True)  # both operands from registers
            T.gemm(A_s, B_f, S2, clear_accum=True)  # B from registers
            T.copy(S2, D)
            T.copy(S, P)
            T.gemm(P, W_s, O, clear_accum=True)
            T.copy(O, C)

    a, b, w = randn(rng, (64, 32), "float16"), randn(rng, (32, 64), "float16"), randn(rng, (64, 32), "float16")
    c, d = poisoned((64, 32), "float32"), poisoned((64, 64), "float32")
    kernel = hip_simt(main)
    kernel(a, b, w, c, d)
    assert_mfma(kernel)
    plans = [(p.warp_m, p.warp_n) for p in kernel.layouts.gemms.values()]
    assert plans == [(2, 2), (2, 2), (4, 1)]
    assert any("layout conversion through shared memory" in n for n in kernel.state.report)
    s = a.astype(np.float64) @ b.astype(np.float64)
    assert_close(d, s, "float32")
    assert_close(c, s.astype(np.float16).astype(np.float64) @ w.astype(np.float64), "float16")
