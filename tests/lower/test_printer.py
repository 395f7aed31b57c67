"""The thread IR prints (``str(ThreadKernel)``, ``tilec.dump(kernel, after=...)``) without a device header."""

from __future__ import annotations

from conftest import load_example

import tilec

from .helpers import simt, thread_ir


def test_thread_ir_prints_mems_groups_and_intrinsics():
    k = simt(load_example("01_gemm").matmul(64, 64, 32, block_M=64, block_N=64))
    text = str(thread_ir(k))
    assert text.startswith("thread kernel main(A: float16[2048], B: float16[2048], C: float16[4096])")
    assert "  grid (1, 1), 128 threads, 8192 bytes of shared memory" in text
    assert "  shared B_s: float16[2048] at byte 4096" in text
    assert "  reg C_f: float32[32]" in text
    assert "// line 26: T.gemm(A_s, B_s, C_f)" in text
    assert "tl::ldmatrix_x4_trans(" in text and "tl::mma_m16n8k16_f16(C_f + 0, " in text
    assert text.count("sync_threads();") == 1  # one K step: the gemm waits for the copies
    assert "#include" not in text


def test_dump_after_lower_and_barriers():
    k = simt(load_example("01_gemm").matmul(64, 64, 64, block_M=64, block_N=64))
    lowered = tilec.dump(k, after="lower")
    placed = tilec.dump(k, after="barriers")
    assert "sync_threads" not in lowered
    assert placed.count("sync_threads();") == 2
