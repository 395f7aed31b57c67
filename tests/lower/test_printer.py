"""The thread IR prints (``str(ThreadKernel)``, ``tilec.dump(kernel, after=...)``) without a device header."""

from __future__ import annotations

from conftest import example_line, load_example

import tilec

from .helpers import simt, thread_ir

LOOP, COPY_A, GEMM = (example_line("01_gemm", t) for t in ("for k in T.Pipelined", "T.copy(A[", "T.gemm("))


def gemm(K: int, num_stages: int) -> tilec.JITKernel:
    return simt(load_example("01_gemm").matmul(64, 64, K, block_M=64, block_N=64, num_stages=num_stages))


def test_thread_ir_prints_mems_groups_and_intrinsics():
    """The plain loop (``num_stages=1``): 2-D shared tiles, synchronous copies."""
    text = str(thread_ir(gemm(32, 1)))
    assert text.startswith("thread kernel main(A: float16[2048], B: float16[2048], C: float16[4096])")
    assert "  grid (1, 1), 128 threads, 8192 bytes of shared memory" in text
    assert "  shared B_s: float16[2048] at byte 4096" in text
    assert "  reg C_f: float32[32]" in text
    assert f"// line {GEMM}: T.gemm(A_s, B_s, C_f)" in text
    assert "tl::ldmatrix_x4_trans(" in text and "tl::mma_m16n8k16_f16(C_f + 0, " in text
    assert text.count("sync_threads();") == 1  # one K step: the gemm waits for the copies
    assert "cp_async" not in text
    assert "#include" not in text


def test_thread_ir_prints_a_pipelined_loop():
    """``num_stages=3``: 3 versions of each shared tile, cp.async copies committed once per trip, the wait and
    the one barrier at the top of the trip, the gemm on version ``(k - 2) % 3`` from trip 2 on."""
    text = str(thread_ir(gemm(32, 3)))
    assert text.startswith("thread kernel main(A: float16[2048], B: float16[2048], C: float16[4096])")
    assert "  grid (1, 1), 128 threads, 24576 bytes of shared memory" in text
    assert "  shared A_s: float16[6144] at byte 0" in text
    assert "  shared B_s: float16[6144] at byte 12288" in text
    assert "  reg C_f: float32[32]" in text
    lines = [t.strip() for t in text.splitlines()]
    top = lines.index("for (int k = 0; k < 3; ++k) {")  # one K step, 1 + 2 trips
    assert lines[top + 1 : top + 5] == [f"// line {LOOP}: T.ptx_wait_group(1)", "tl::cp_async_wait<1>();",
                                        "sync_threads();",
                                        f"// line {COPY_A}: T.async_copy(A[by * 64:by * 64 + 64, T.min(k, 0) * 32:"
                                        "T.min(k, 0) * 32 + 32], A_s[k % 3, :64, :32])"]
    assert text.count("tl::cp_async<16>(") == 2 and text.count("tl::cp_async_commit();") == 1
    gemm_at = lines.index(f"// line {GEMM}: T.gemm(A_s[(k - 2) % 3, :64, :32], B_s[(k - 2) % 3, :32, :64], C_f)")
    assert lines[gemm_at - 2 : gemm_at] == ["tl::cp_async_commit();", "if (k >= 2) {"]
    assert "tl::ldmatrix_x4_trans(" in text and "tl::mma_m16n8k16_f16(C_f + 0, " in text
    assert text.count("sync_threads();") == 3  # the trip's, and two around the accumulators' staging tile
    assert "  shared C_f_stage: float16[4096] at byte 0" in text  # over A_s (tilec.passes.epilogue)
    assert lines[lines.index(f"// line {LOOP}: T.ptx_wait_group(0)") + 1] == "tl::cp_async_wait<0>();"
    assert "#include" not in text


def test_dump_after_lower_and_barriers():
    # the plain loop needs two barriers, the pipelined one one per trip and two around its staged epilogue
    for stages, syncs in ((1, 2), (3, 3)):
        k = gemm(64, stages)
        lowered = tilec.dump(k, after="lower")
        placed = tilec.dump(k, after="barriers")
        assert "sync_threads" not in lowered
        assert placed.count("sync_threads();") == syncs, stages
