"""``T.gemm(..., allow_tf32=True)``: float32 gemms on TF32 tensor cores: ``mma.sync.m16n8k8`` on NVIDIA sm_80+,
operands rounded by ``cvt.rna.tf32.f32``; on sm_90a, with both operands K-major in shared memory, ``wgmma`` m64nNk8,
which reads the operands' top 19 bits. The CPU tile interpreter and the thread interpreters compute what the GPU does
(operands rounded or truncated to TF32, products summed in float32), checked against float64 numpy on fresh random
inputs; targets without TF32 tensor cores keep the exact scalar path and say so."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import example_line, load_example, poisoned, randn

import tilec
import tilec.language as T
from tilec.dtypes import round_tf32, truncate_tf32
from tilec.errors import TilecTypeError
from tilec.interp import thread

from .helpers import operand_gemm

MMA_TF32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"


def _gemm_note(kernel: tilec.JITKernel) -> str:
    """The note of the kernel's gemms (operand_gemm has two, the first k-tile's and the others', which must agree)."""
    notes = [line for line in kernel.report().splitlines() if "note: T.gemm" in line]
    assert len(notes) == 2 and len({re.sub(r"line \d+", "", n) for n in notes}) == 1, notes
    return notes[0]


def _run(kernel, rng, M, N, K, trans_A, trans_B, as_read=round_tf32):
    """The output's relative errors against the float64 product and against the product of the operands as the
    tensor cores read them (``as_read``)."""
    a = randn(rng, (K, M) if trans_A else (M, K), "float32")
    b = randn(rng, (N, K) if trans_B else (K, N), "float32")
    c = poisoned((M, N), "float32")
    kernel(a, b, c)
    assert np.isfinite(c).all(), "an element of C was not written"
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = (a64.T if trans_A else a64) @ (b64.T if trans_B else b64)
    ta, tb = as_read(a).astype(np.float64), as_read(b).astype(np.float64)
    tf32 = (ta.T if trans_A else ta) @ (tb.T if trans_B else tb)
    rel = lambda ref: float(np.linalg.norm(c - ref) / np.linalg.norm(ref))  # noqa: E731
    return rel(exact), rel(tf32)


def test_round_tf32_keeps_10_bits_to_nearest_ties_away():
    one = 1.0
    x = np.array([one + 2**-11, one + 3 * 2**-11, -(one + 2**-11), one + 2**-11 - 2**-23, one + 2**-11 + 2**-23,
                  3.4028235e38, np.inf, -np.inf], np.float32)
    want = np.array([one + 2**-10, one + 2**-9, -(one + 2**-10), one, one + 2**-10, np.inf, np.inf, -np.inf],
                    np.float32)
    got = round_tf32(x)
    assert np.array_equal(got, want), got
    assert np.isnan(round_tf32(np.array([np.nan], np.float32))).all()
    assert not (round_tf32(np.float32([1.2345678, -7.654321e-3])).view(np.uint32) & 0x1FFF).any()


SHAPES = [  # (M, N, K, block_M, block_N, block_K, threads, transpose_A, transpose_B)
    (64, 64, 32, 64, 64, 32, 128, False, False),
    (100, 70, 57, 64, 32, 16, 128, False, False),  # ragged in M, N and K (zero-padded tiles)
    (64, 96, 48, 32, 32, 16, 64, True, False),
    (64, 64, 40, 64, 64, 8, 128, False, True),  # attention's Q K^T orientation
    (48, 40, 24, 16, 40, 8, 32, True, True),
]


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:sm_90a"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(str(x) for x in s[:7]) + f"-{s[7]:d}{s[8]:d}")
def test_tf32_gemm_reads_operands_like_the_tensor_cores(rng, target, shape):
    """Within TF32's error of the exact product, and not exact float32: the operands were rounded (a float32 gemm
    of these sizes is within ~1e-7 of float64); within float32 summation error of the product of the operands as
    the instruction reads them: mma.sync's rounded to nearest (ties away), the CPU interpreter's too; on sm_90a,
    where both operands are K-major and the block whole warpgroups over 64-row atoms, wgmma's truncated (biased
    toward zero, hence the wider bound on the error)."""
    M, N, K, bm, bn, bk, threads, ta, tb = shape
    kernel = tilec.JITKernel(operand_gemm(M, N, K, bm, bn, bk, threads, ta, tb, allow_tf32=True), target)
    on_wgmma = target == "simt:sm_90a" and tb and not ta and threads % 128 == 0 and bm % 64 == 0
    if target != "cpu":
        assert (f"wgmma (m64n{bn}k8" if on_wgmma else MMA_TF32) in _gemm_note(kernel)
    err_exact, err_tf32 = _run(kernel, rng, M, N, K, ta, tb, truncate_tf32 if on_wgmma else round_tf32)
    assert 1e-6 < err_exact < (3e-3 if on_wgmma else 1e-3), err_exact
    assert err_tf32 < 1e-6, err_tf32


def _tf32_kt_gemm(M, N, K, bm, bn, bk, stages=3):
    """The GEMM example on float32 with TF32 in the orientation wgmma takes (B stored N x K), 128 threads."""
    return load_example("01_gemm").matmul.fn(M, N, K, block_M=bm, block_N=bn, block_K=bk, num_stages=stages,
                                             threads=128, dtype="float32", allow_tf32=True, transpose_B=True)


@pytest.mark.parametrize(("ws", "bk"), [(False, 32), (True, 32), (True, 64)], ids=["tma", "tma-ws", "tma-ws-bk64"])
def test_wgmma_tf32_runs_on_the_hopper_pipeline(rng, ws, bk):
    """sm_90a: TMA copies (on a producer warpgroup with warp specialization) into 128-byte-swizzled float32 tiles
    (a 64-element K tile: two 128-byte panels), wgmma m64n96k8 reading them through descriptors, ragged K; numerics
    as wgmma computes them."""
    M, N, K = 128, 96, 100 if bk == 32 else 200
    kernel = tilec.JITKernel(_tf32_kt_gemm(M, N, K, 128, 96, bk, 3 if bk == 32 else 2), "simt:sm_90a",
                             pass_configs={"warp_specialize": ws})
    report = kernel.report()
    assert "wgmma (m64n96k8, 1 warpgroup(s) along M)" in report and "TMA" in report, report
    assert ("producer warpgroup" in report) == ws, report
    err_exact, err_tf32 = _run(kernel, rng, M, N, K, False, True, truncate_tf32)
    assert 1e-6 < err_exact < 3e-3 and err_tf32 < 1e-6, (err_exact, err_tf32)


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_a_register_operand_is_staged_for_the_tf32_mma(rng, target):
    """mma.m16n8k8.tf32 reads its operands from shared memory: A in a fragment is staged there (pass
    stage_operands), then the gemm runs on TF32 tensor cores."""

    @T.prim_func
    def main(A: T.Tensor((64, 32), "float32"), B: T.Tensor((32, 64), "float32"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            A_f = T.alloc_fragment((64, 32), "float32")
            B_s = T.alloc_shared((32, 64), "float32")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.copy(A[0, 0], A_f)
            T.copy(B[0, 0], B_s)
            T.gemm(A_f, B_s, C_f, clear_accum=True, allow_tf32=True)
            T.copy(C_f, C[0, 0])

    kernel = tilec.JITKernel(main, target)
    if target != "cpu":
        notes = [line for line in kernel.report().splitlines() if "note: T.gemm" in line]
        assert any("staged through shared memory" in line and "stays exact" not in line for line in notes), notes
        assert any(MMA_TF32 in line for line in notes), notes
    err_exact, err_tf32 = _run(kernel, rng, 64, 64, 32, False, False)
    assert 1e-6 < err_exact < 1e-3 and err_tf32 < 1e-6, (err_exact, err_tf32)


def test_without_tensor_cores_the_gemm_stays_exact(rng):
    """AMD has no TF32 tensor cores: the scalar path, exact float32, and the note says why."""
    kernel = tilec.JITKernel(operand_gemm(64, 64, 32, 64, 64, 32, 256, allow_tf32=True), "simt:gfx90a")
    note = _gemm_note(kernel)
    assert "scalar FMA path" in note and "allow_tf32: target simt:gfx90a has no TF32 tensor cores" in note, note
    err_exact, _ = _run(kernel, rng, 64, 64, 32, False, False)
    assert err_exact < 1e-6, err_exact


def test_without_allow_tf32_float32_stays_exact(rng):
    kernel = tilec.JITKernel(operand_gemm(64, 64, 32, 64, 64, 32, 128), "simt:sm_80")
    assert "scalar FMA path (fallback: operand dtype float32)" in _gemm_note(kernel)
    assert _run(kernel, rng, 64, 64, 32, False, False)[0] < 1e-6


def test_a_k_tile_off_the_atoms_stays_exact_and_says_why(rng):
    """K = 12 a tile does not split into m16n8k8's 8-deep steps: exact float32 on the scalar path."""
    kernel = tilec.JITKernel(operand_gemm(64, 64, 36, 64, 64, 12, 128, allow_tf32=True), "simt:sm_80")
    note = _gemm_note(kernel)
    assert "K=12 is not a multiple of 8" in note and "allow_tf32: TF32 tensor cores cannot run it" in note, note
    assert _run(kernel, rng, 64, 64, 36, False, False)[0] < 1e-6


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_allow_tf32_on_16_bit_operands_changes_nothing(dtype):
    tf32 = tilec.JITKernel(operand_gemm(64, 64, 32, 64, 64, 32, 128, dtype=dtype, allow_tf32=True), "cuda:sm_80")
    plain = tilec.JITKernel(operand_gemm(64, 64, 32, 64, 64, 32, 128, dtype=dtype), "cuda:sm_80")
    assert f"allow_tf32 has no effect: operands are {dtype}, not float32" in _gemm_note(tf32)
    code = lambda k: re.sub(r"//.*", "", k.get_kernel_source())  # noqa: E731 - the comments quote the T.gemm call
    assert code(tf32) == code(plain)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_cuda_names_the_tf32_mma_and_loads_no_ldmatrix(arch):
    """32-bit loads from shared memory (ldmatrix moves 16-bit elements), each rounded by cvt.rna.tf32.f32, then
    mma.sync m16n8k8; on sm_90a mma.sync too for B stored K x N (wgmma reads TF32 K-major only), which the note
    says."""
    kernel = tilec.JITKernel(operand_gemm(128, 128, 64, 128, 128, 32, 128, allow_tf32=True), f"cuda:{arch}")
    note = _gemm_note(kernel)
    assert MMA_TF32 in note, note
    assert ("not wgmma: TF32 operands must both be K-major" in note) == (arch == "sm_90a"), note
    source = kernel.get_kernel_source()
    body = source[source.index('extern "C"'):]
    assert MMA_TF32 in source and "cvt.rna.tf32.f32" in source
    assert "tl::mma_m16n8k8_tf32(" in body and "tl::cvt_tf32(" in body and "ldmatrix" not in body


def test_the_cuda_of_a_k_major_tf32_gemm_on_sm_90a_is_wgmma():
    """B stored N x K on sm_90a: wgmma m64n128k8 on descriptors of the swizzled float32 tiles, no conversion."""
    kernel = tilec.JITKernel(_tf32_kt_gemm(256, 256, 256, 128, 128, 32), "cuda:sm_90a")
    source = kernel.get_kernel_source()
    body = source[source.index('extern "C"'):]
    assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " in source
    assert "tl::wgmma_m64n128k8_ss_tf32_tf32_t0(" in body and "cvt_tf32" not in body and "tl::mma" not in body


def test_with_wgmma_off_sm_90a_says_tf32_runs_on_mma_sync():
    kernel = tilec.JITKernel(_tf32_kt_gemm(256, 256, 256, 128, 128, 32), "cuda:sm_90a", pass_configs={"wgmma": False})
    notes = [line for line in kernel.report().splitlines() if "note: T.gemm" in line]
    assert len(notes) == 1 and MMA_TF32 in notes[0] and "TF32 on mma.sync, not wgmma" in notes[0], notes


def test_the_ir_printer_shows_the_flag():
    text = str(operand_gemm(64, 64, 32, 64, 64, 32, 128, allow_tf32=True))
    assert "allow_tf32=True" in text, text
    assert "allow_tf32" not in str(operand_gemm(64, 64, 32, 64, 64, 32, 128))


@pytest.mark.parametrize("value", ["yes", None, 2, 1.0])
def test_allow_tf32_must_be_a_bool(value):
    with pytest.raises(TilecTypeError, match=rf"T.gemm: allow_tf32 must be True or False, got .*{value!r}"):
        operand_gemm(64, 64, 32, 64, 64, 32, 128, allow_tf32=value)


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_operand_loads_hit_distinct_banks(monkeypatch, rng, ta, tb):
    """Each warp's shared-memory loads of the TF32 gemm's operands, in every stored orientation, touch each bank
    with no more distinct words than a load of that width must (one for 32-bit loads, two for 64-bit ones). With
    the instruction's k t and t + 4 read from the tile's k t and t + 4, the operands stored with K as rows (B K x N,
    A K x M) had 2-way conflicts under the swizzle; the tile's k 2t and 2t + 1 remove them, and the operands stored
    with K innermost read their two values of a row as one 64-bit load."""
    degrees: dict[tuple[str, int], int] = {}
    read = thread.ThreadInterpreter.read

    def recording(self, mem, off, lanes, mask):
        if mem.space == "shared" and mem.name in ("A_s", "B_s"):
            words = np.broadcast_to(np.asarray(off, np.int64), (self.T,))[:32, None] + np.arange(lanes)
            per_bank = [len(set(words[words % 32 == b].tolist())) for b in range(32)]
            key = (mem.name, lanes)
            degrees[key] = max(degrees.get(key, 0), max(per_bank) // lanes)
        return read(self, mem, off, lanes, mask)

    monkeypatch.setattr(thread.ThreadInterpreter, "read", recording)
    kernel = tilec.JITKernel(operand_gemm(64, 64, 32, 64, 64, 32, 128, ta, tb, allow_tf32=True), "simt:sm_80")
    exact, tf32 = _run(kernel, rng, 64, 64, 32, ta, tb)
    assert exact < 1e-3 and tf32 < 1e-6, (exact, tf32)
    assert degrees == {("A_s", 1 if ta else 2): 1, ("B_s", 2 if tb else 1): 1}, degrees


PERSISTENT_AND_CLUSTERS = {"stream-k": {"persistent": 3, "stream_k": True}, "cluster2": {"cluster": 2},
                           "persistent-cluster2": {"persistent": 2, "cluster": 2}}


@pytest.mark.parametrize("passes", PERSISTENT_AND_CLUSTERS.values(), ids=PERSISTENT_AND_CLUSTERS.keys())
def test_wgmma_tf32_on_the_persistent_and_cluster_paths(rng, passes):
    """The TF32 wgmma gemm on two consumer warpgroups beside a producer: stream-K sharing the last tiles out by
    iterations (float32 partial sums through the fix-up), clusters of two sharing B's tile by TMA multicast."""
    M, N, K = 256, 512, 320
    kernel = tilec.JITKernel(load_example("01_gemm").matmul.fn(
        M, N, K, block_M=128, block_N=128, block_K=32, num_stages=2, threads=256, dtype="float32", allow_tf32=True,
        transpose_B=True), "simt:sm_90a", pass_configs={"warp_specialize": True, **passes})
    report = kernel.report()
    assert "wgmma (m64n128k8, 2 warpgroup(s) along M)" in report, report
    assert ("shared out by iterations" in report) == ("stream_k" in passes), report
    err_exact, err_tf32 = _run(kernel, rng, M, N, K, False, True, truncate_tf32)
    assert 1e-6 < err_exact < 3e-3 and err_tf32 < 1e-6, (err_exact, err_tf32)


TILE_SHAPES = {  # (M, N, K, block_M, block_N, block_K, threads), the plan: what the case exercises
    "swizzle32": ((128, 128, 40, 128, 128, 8, 128), "m64n128k8, 1 warpgroup(s) along M"),  # 32-byte rows, 1 k-step
    "swizzle64": ((128, 128, 48, 128, 128, 16, 128), "m64n128k8, 1 warpgroup(s) along M"),
    "split-n": ((64, 256, 64, 64, 256, 32, 256), "m64n128k8, 1 warpgroup(s) along M x 2 along N"),  # one 64-row atom
    "three-warpgroups": ((192, 128, 64, 192, 128, 32, 384), "m64n128k8, 3 warpgroup(s) along M"),
}


@pytest.mark.parametrize(("shape", "plan"), TILE_SHAPES.values(), ids=TILE_SHAPES.keys())
def test_wgmma_tf32_tile_shapes(rng, shape, plan):
    M, N, K, bm, bn, bk, threads = shape
    kernel = tilec.JITKernel(load_example("01_gemm").matmul.fn(
        M, N, K, block_M=bm, block_N=bn, block_K=bk, num_stages=2, threads=threads, dtype="float32", allow_tf32=True,
        transpose_B=True), "simt:sm_90a", pass_configs={"warp_specialize": True})
    assert f"wgmma ({plan})" in kernel.report(), kernel.report()
    err_exact, err_tf32 = _run(kernel, rng, M, N, K, False, True, truncate_tf32)
    assert 1e-6 < err_exact < 3e-3 and err_tf32 < 1e-6, (err_exact, err_tf32)


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80", "simt:sm_90a"])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_on_tf32(rng, target, causal):
    """The attention example in float32 with allow_tf32: on NVIDIA both gemms on mma.sync TF32, sm_90a included,
    whose note says why Q.K^T is not on wgmma (P.V's operands cannot be, and the accumulators' rows must lie alike);
    within TF32's error of float64 and not exact float32's."""
    b, h, n, d = 1, 2, 80, 32
    kernel = tilec.JITKernel(load_example("03_flash_attention").flash_attention.fn(
        b, h, n, d, causal, block_M=64, block_N=32, num_stages=2, dtype="float32", allow_tf32=True), target, [3])
    if target != "cpu":
        plans = [line for line in kernel.report().splitlines() if "note: T.gemm" in line and MMA_TF32 in line]
        qk = [line for line in plans if f"line {example_line('03_flash_attention', 'T.gemm(Q_x')}:" in line]
        assert len(plans) == 2 and len(qk) == 1, plans
        assert ("reads A from registers off wgmma" in qk[0]) == (target == "simt:sm_90a"), qk
    q, k, v = (randn(rng, (b, h, n, d), "float32") for _ in range(3))
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(d)
    if causal:
        s += np.triu(np.full((n, n), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("bhij,bhjd->bhid", p / p.sum(-1, keepdims=True), v.astype(np.float64))
    err = np.linalg.norm(kernel(q, k, v) - ref) / np.linalg.norm(ref)
    assert 1e-6 < err < 2e-3, err
