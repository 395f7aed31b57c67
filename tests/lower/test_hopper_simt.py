"""The Hopper and fp8 paths, run by the thread interpreter against float64 numpy: ``wgmma`` (pass config, target
``simt:sm_90a``) for fp16/bf16 gemms, flash attention and MLA decode, and fp8 gemms on ``mma.sync.m16n8k32``
(sm_89+) and ``wgmma.m64nNk32``. The interpreter emulates both instructions from the PTX ISA's fragment and
descriptor layouts and checks shared-memory accesses for races, bounds and pending cp.async writes; each test also
checks which instruction the gemm took, so a silent fallback to scalar FMAs fails."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, load_example, randn

import tilec

WGMMA = {"wgmma": True}


def _compile(kernel, target: str, out_idx, wgmma: bool = False) -> tilec.JITKernel:
    return tilec.JITKernel(kernel.prim_func, target, out_idx, pass_configs=WGMMA if wgmma else None)


def _gemm_note(kernel: tilec.JITKernel) -> str:
    return next(line for line in kernel.report().splitlines() if "note: T.gemm" in line)


GEMM = [  # (M, N, K, tile kwargs): ragged sizes, two warpgroups, n > 256 in two atoms, bf16
    (64, 64, 64, {"block_M": 64, "block_N": 64, "block_K": 32}),
    (100, 72, 80, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2}),
    (130, 64, 64, {"block_M": 128, "block_N": 64, "block_K": 64, "threads": 256, "num_stages": 2}),
    (64, 512, 32, {"block_M": 64, "block_N": 512, "block_K": 32, "num_stages": 1}),
    (64, 80, 48, {"block_M": 64, "block_N": 128, "block_K": 16, "dtype": "bfloat16"}),
    (70, 256, 64, {"block_M": 64, "block_N": 256, "block_K": 32, "threads": 256}),  # 2 warpgroups along N
]


@pytest.mark.parametrize(("M", "N", "K", "tiles"), GEMM, ids=lambda x: str(x) if not isinstance(x, dict) else "")
def test_wgmma_gemm(rng, M, N, K, tiles):
    kernel = _compile(load_example("01_gemm").matmul(M, N, K, **tiles), "simt:sm_90a", [-1], wgmma=True)
    assert "wgmma (m64n" in _gemm_note(kernel)
    dtype = tiles.get("dtype", "float16")
    a, b = randn(rng, (M, K), dtype), randn(rng, (K, N), dtype)
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), dtype)


@pytest.mark.parametrize("causal", [False, True])
def test_wgmma_flash_attention(rng, causal):
    """P stays in registers: the second gemm takes its A operand from the accumulator fragment."""
    fa = load_example("03_flash_attention")
    b, h, n, d = 1, 2, 100, 64
    kernel = _compile(fa.flash_attention(b, h, n, d, causal, block_M=64, block_N=64, threads=128, num_stages=2),
                      "simt:sm_90a", [3], wgmma=True)
    assert kernel.report().count("wgmma (m64n") == 2
    q, k, v = (randn(rng, (b, h, n, d), "float16") for _ in range(3))
    assert_close(kernel(q, k, v), fa.reference(q, k, v, causal), "float16",
                 scale=float(np.abs(v.astype(np.float64)).max()))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("block_M", "threads", "instr"), [(128, 128, "wgmma"), (64, 256, "mma")])
def test_flash_attention_rows_and_warpgroups(rng, causal, block_M, threads, instr):
    """128 query rows on 128 threads: both gemms on wgmma in two 64-row steps, PV reading P from registers (each warp
    holds the rows of its accumulator in each step). 64 rows on 256 threads: PV cannot run on wgmma (its register A
    cannot split N between warpgroups), so it runs on mma.sync and QK^T does too (on wgmma its accumulator's rows
    would lie over the warps unlike PV's, and the softmax's row values could not reach O)."""
    fa = load_example("03_flash_attention")
    b, h, n, d = 1, 2, 200, 64
    kernel = _compile(fa.flash_attention(b, h, n, d, causal, block_M=block_M, block_N=64, threads=threads,
                                         num_stages=2), "simt:sm_90a", [3], wgmma=True)
    notes = [line for line in kernel.report().splitlines() if "note: T.gemm" in line]
    assert len(notes) == 2 and all(f": {instr} (" in line for line in notes), notes
    assert ("reads A from registers off wgmma" in notes[0]) == (instr == "mma")
    q, k, v = (randn(rng, (b, h, n, d), "float16") for _ in range(3))
    assert_close(kernel(q, k, v), fa.reference(q, k, v, causal), "float16",
                 scale=float(np.abs(v.astype(np.float64)).max()))


@pytest.mark.parametrize("num_stages", [1, 2])
def test_wgmma_mla_decode(rng, num_stages):
    """64 heads on two warpgroups: every gemm splits its columns between them (the shared P tile feeds the last)."""
    mla = load_example("07_mla_decode")
    b, h, kvh, s = 1, 128, 2, 100
    kernel = _compile(mla.mla_decode(b, h, kvh, s, num_stages=num_stages), "simt:sm_90a", [4], wgmma=True)
    assert kernel.report().count("1 warpgroup(s) along M x 2 along N") == 3
    q, q_pe = (randn(rng, (b, h, d), "float16") for d in (512, 64))
    kv, k_pe = (randn(rng, (b, s, kvh, d), "float16") for d in (512, 64))
    assert_close(kernel(q, q_pe, kv, k_pe), mla.reference(q, q_pe, kv, k_pe), "float16",
                 scale=float(np.abs(kv.astype(np.float64)).max()))


def test_mla_decode_gemm_off_wgmma_takes_its_row_partners_along(rng):
    """dv=64 on two warpgroups: PV's B tile (KV, stored K x N) is 32 columns a warpgroup, under its 64-column swizzle
    panel, so PV runs on mma.sync; QK^T stayed on wgmma and compiling failed with a LayoutConflictError ('rescale'
    ... not held where the loop at line 73 runs), though the kernel runs on sm_80. Gemms whose accumulators are tied
    by row values (the softmax's rescale of O) now leave wgmma together."""
    mla = load_example("07_mla_decode")
    b, h, kvh, s, dv, dpe = 1, 64, 1, 70, 64, 16
    kernel = _compile(mla.mla_decode(b, h, kvh, s, dv=dv, dpe=dpe, block_H=64, block_N=64, threads=256),
                      "simt:sm_90a", [4], wgmma=True)
    notes = [line for line in kernel.report().splitlines() if "note: T.gemm" in line]
    assert len(notes) == 3 and all(": mma (" in line for line in notes), notes
    assert "not wgmma: the gemm at" in notes[0] and "their accumulators' rows must lie alike" in notes[0]
    q, q_pe = (randn(rng, (b, h, d), "float16") for d in (dv, dpe))
    kv, k_pe = (randn(rng, (b, s, kvh, d), "float16") for d in (dv, dpe))
    assert_close(kernel(q, q_pe, kv, k_pe), mla.reference(q, q_pe, kv, k_pe), "float16",
                 scale=float(np.abs(kv.astype(np.float64)).max()))


def test_wgmma_needs_its_pass_config():
    kernel = _compile(load_example("01_gemm").matmul(64, 64, 64, block_M=64, block_N=64), "simt:sm_90a", [-1])
    assert "mma (" in _gemm_note(kernel)


@pytest.mark.parametrize(("transpose_A", "block_N", "why"), [
    (True, 64, "not wgmma: transpose_A"),
    (False, 24, "not wgmma: B's shared tile (32, 24) has no wgmma swizzle layout"),
])
def test_wgmma_fallback_says_why(rng, transpose_A, block_N, why):
    """A gemm wgmma cannot run falls back to mma.sync, and the report's note says what stopped wgmma."""
    import tilec.language as T

    M, N, K, bM, bK = 128, 96, 64, 64, 32
    a_shape, as_shape = ((K, M), (bK, bM)) if transpose_A else ((M, K), (bM, bK))

    @T.prim_func
    def main(A: T.Tensor(a_shape, "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared(as_shape, "float16")
            B_s = T.alloc_shared((bK, block_N), "float16")
            C_f = T.alloc_fragment((bM, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(K // bK, num_stages=2):
                if transpose_A:
                    T.copy(A[k * bK, by * bM], A_s)
                else:
                    T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f, transpose_A=transpose_A)
            T.copy(C_f, C[by * bM, bx * block_N])

    kernel = tilec.JITKernel(main, "simt:sm_90a", [-1], pass_configs=WGMMA)
    note = _gemm_note(kernel)
    assert "mma (Square; " in note and why in note, note
    a, b = randn(rng, a_shape, "float16"), randn(rng, (K, N), "float16")
    a64 = a.astype(np.float64).T if transpose_A else a.astype(np.float64)
    assert_close(kernel(a, b), a64 @ b.astype(np.float64), "float16")


# ---------------------------------------------------------------------------------------------------------- fp8


def _fp8_inputs(rng, M: int, N: int, K: int, b_dtype: str = "float8_e4m3"):
    fp8 = load_example("06_fp8_gemm")
    a, sa = fp8.quantize(rng.standard_normal((M, K)), 1)
    b, sb = fp8.quantize(rng.standard_normal((N, K)), 1)
    if b_dtype == "float8_e5m2":
        import ml_dtypes

        b = b.astype(np.float32).astype(ml_dtypes.float8_e5m2)
    ref = (a.astype(np.float64) @ b.astype(np.float64).T) * sa[:, None] * sb[None, :]
    return (a, b, sa, sb), ref


FP8 = [  # (target, wgmma, M, N, K, tile kwargs, instruction note)
    ("simt:sm_90", False, 64, 64, 64, {"block_M": 64, "block_N": 64, "block_K": 64}, "mma ("),
    ("simt:sm_89", False, 100, 72, 160, {"block_M": 64, "block_N": 64, "block_K": 64, "num_stages": 2}, "mma ("),
    ("simt:sm_90", False, 40, 40, 96, {"block_M": 32, "block_N": 32, "block_K": 32, "threads": 128}, "mma ("),
    ("simt:sm_90a", True, 100, 72, 160, {"block_M": 64, "block_N": 64, "block_K": 64, "num_stages": 2},
     "wgmma (m64n64k32"),
    ("simt:sm_90a", True, 130, 128, 128, {"block_M": 128, "block_N": 128, "block_K": 128, "threads": 256,
                                          "num_stages": 2}, "wgmma (m64n128k32"),
    ("simt:sm_80", False, 40, 24, 64, {"block_M": 32, "block_N": 32, "block_K": 32}, "fallback: fp8 tensor cores need"),
]


@pytest.mark.parametrize(("target", "wgmma", "M", "N", "K", "tiles", "note"), FP8,
                         ids=lambda x: str(x) if not isinstance(x, dict) else "")
def test_fp8_gemm(rng, target, wgmma, M, N, K, tiles, note):
    kernel = _compile(load_example("06_fp8_gemm").fp8_matmul(M, N, K, **tiles), target, [-1], wgmma=wgmma)
    assert note in _gemm_note(kernel)
    args, ref = _fp8_inputs(rng, M, N, K)
    c = kernel(*args)
    assert c.dtype.name == "bfloat16"
    assert_close(c, ref, "bfloat16")


@tilec.jit(out_idx=[-1])
def _one_tile(M, N, K, a_dtype, b_dtype, transpose_B=True, threads=128):
    """C = A @ B^T (or A @ B) of one tile, fp8 operands of any mix, a float32 result."""
    import tilec.language as T

    b_shape = (N, K) if transpose_B else (K, N)

    @T.prim_func
    def main(A: T.Tensor((M, K), a_dtype), B: T.Tensor(b_shape, b_dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, 1, threads=threads) as (bx, by):
            A_s = T.alloc_shared((M, K), a_dtype)
            B_s = T.alloc_shared(b_shape, b_dtype)
            C_f = T.alloc_fragment((M, N), "float32")
            T.copy(A[0, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.gemm(A_s, B_s, C_f, transpose_B=transpose_B, clear_accum=True)
            T.copy(C_f, C[0, 0])

    return main


@pytest.mark.parametrize("wgmma", [False, True])
def test_fp8_mixed_e4m3_e5m2(rng, wgmma):
    """A in e4m3, B in e5m2: both instructions take mixed fp8 types."""
    import ml_dtypes

    kernel = _compile(_one_tile(64, 64, 64, "float8_e4m3", "float8_e5m2"), "simt:sm_90a", [-1], wgmma)
    assert ("wgmma (m64n64k32" if wgmma else "mma (") in _gemm_note(kernel)
    a = rng.standard_normal((64, 64)).astype(ml_dtypes.float8_e4m3fn)
    b = (rng.standard_normal((64, 64)) * 4).astype(ml_dtypes.float8_e5m2)
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64).T, "float32")
    source = tilec.JITKernel(kernel.prim_func, "cuda:sm_90a", [-1], pass_configs=WGMMA if wgmma else None)
    assert (".e4m3.e5m2" in source.get_kernel_source())


@pytest.mark.parametrize(("target", "wgmma"), [("simt:sm_90", False), ("simt:sm_90a", True), ("simt:sm_80", False)])
def test_fp8_operand_not_k_major_falls_back_with_the_reason(target, wgmma):
    """The fallback to scalar FMAs is named once, as such: the report had two notes for the gemm, "simt (fallback:
    ...)" from layout inference and "scalar FMA path (fallback: ...)" from the lowering, with the same reason."""
    import ml_dtypes

    kernel = _compile(_one_tile(32, 32, 32, "float8_e4m3", "float8_e4m3", transpose_B=False), target, [-1], wgmma)
    notes = [line for line in kernel.report().splitlines() if "note: T.gemm" in line]
    assert len(notes) == 1 and ": scalar FMA path (fallback: " in notes[0], notes
    assert ("fp8 operands must be K-major" if target != "simt:sm_80" else "fp8 tensor cores need sm_89") in notes[0]
    rng = np.random.default_rng()
    a, b = (rng.standard_normal((32, 32)).astype(ml_dtypes.float8_e4m3fn) for _ in range(2))
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), "float32")


# ---------------------------------------------------------------------------------------- wgmma asynchrony


def _run_thread_ir(kernel: tilec.JITKernel, tk, *arrays) -> None:
    from tilec.backends.simt import SimtExecutable
    from tilec.runtime.args import allocate_like, bind

    SimtExecutable(tk, kernel.prim_func)(bind(kernel.prim_func, arrays, "cpu", allocate_like))


def _with_waits(tk, change):
    """Thread IR ``tk`` with each ``wgmma.wait_group n`` made ``wait_group change(n)`` (removed where None)."""
    import dataclasses

    from tilec.ir.visit import transform
    from tilec.lower.tir import Seq, WgmmaWait, seq

    def fn(node):
        if not isinstance(node, Seq) or not any(isinstance(c, WgmmaWait) for c in node.stmts):
            return None
        out = []
        for c in node.stmts:
            n = change(c.n) if isinstance(c, WgmmaWait) else c
            if isinstance(c, WgmmaWait) and n is not None:
                out.append(dataclasses.replace(c, n=n))
            elif not isinstance(c, WgmmaWait):
                out.append(c)
        return seq(out)

    return dataclasses.replace(tk, body=transform(tk.body, fn))


WAR = r"write of shared [AB]_s\[\d+\] while a wgmma reading it is in flight"
ACC = r"reads wgmma accumulator C_f\[\d+\] while the wgmma is in flight"


@pytest.mark.parametrize(("K", "overlap", "change", "hazard"), [
    (32, True, lambda n: None, ACC),  # one tile, no wait: the epilogue reads the accumulators too early
    (128, False, lambda n: None, WAR),  # next trip's cp.async overwrites the stage the group reads
    (128, False, lambda n: 1, WAR),  # wait_group 1 without the extra operand version
    (128, True, lambda n: 2 if n == 1 else n, WAR),  # two groups in flight: one version too few
    (128, True, lambda n: n or None, ACC),  # no wait after the loop
])
def test_wgmma_waits_are_checked(rng, K, overlap, change, hazard):
    """The emulation keeps wgmma's asynchrony, so each wait the lowering places is needed: weakening one makes the
    thread interpreter name the hazard."""
    from tilec.errors import RaceError

    gemm = load_example("01_gemm").matmul(64, 64, K, block_M=64, block_N=64, block_K=32, num_stages=2)
    kernel = tilec.JITKernel(gemm.prim_func, "simt:sm_90a", [-1], pass_configs={"wgmma": True,
                                                                                 "wgmma_overlap": overlap})
    assert ("overlaps the next trip" in kernel.report()) == overlap
    tk = kernel.state.artifacts["thread_ir"]
    a, b = randn(rng, (64, K), "float16"), randn(rng, (K, 64), "float16")
    _run_thread_ir(kernel, tk, a, b)  # as lowered: no hazard
    with pytest.raises(RaceError, match=hazard):
        _run_thread_ir(kernel, _with_waits(tk, change), a, b)


def test_wgmma_overlap_needs_the_accumulator_to_itself():
    """Flash attention reads S and rescales O in the loop: its gemms wait for their groups every trip."""
    fa = load_example("03_flash_attention")
    kernel = _compile(fa.flash_attention(1, 1, 256, 64, False, block_M=64, block_N=64, threads=128, num_stages=2),
                      "simt:sm_90a", [3], wgmma=True)
    assert "overlaps the next trip" not in kernel.report()
    assert "in_flight" not in str(kernel.state.func)


@tilec.jit(out_idx=[-1])
def _sum_of_products(R, M, N, K, num_stages):
    """C = sum_r A[r] @ B: the pipelined K loop inside an outer serial loop."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((R, M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for r in T.serial(R):
                for k in T.Pipelined(T.ceildiv(K, 32), num_stages=num_stages):
                    T.copy(A[r, by * 64, k * 32], A_s)
                    T.copy(B[k * 32, bx * 64], B_s)
                    T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 64, bx * 64])

    return main


@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize(("K", "num_stages"), [(96, 3), (160, 3), (32, 3), (96, 2)])
def test_wgmma_group_left_in_flight_is_retired_before_an_outer_loops_next_trip(rng, K, num_stages, tma):
    """The K loop's last wgmma group, left in flight past the loop (wgmma_overlap), is waited for at the end of each
    trip of the loop around it: the K loop's next run starts by rewriting the operand versions it reads (the
    interpreter named the race where the trip count is not a multiple of the versions)."""
    kernel = tilec.JITKernel(_sum_of_products(3, 100, 72, K, num_stages).prim_func, "simt:sm_90a", [-1],
                             pass_configs={"wgmma": True, "tma": tma})
    assert "overlaps the next trip" in kernel.report()
    a, b = randn(rng, (3, 100, K), "float16"), randn(rng, (K, 72), "float16")
    assert_close(kernel(a, b), a.astype(np.float64).sum(0) @ b.astype(np.float64), "float32")
