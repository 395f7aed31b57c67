"""T.copy's TileLang options ``disable_tma``, ``coalesced_width`` and ``eviction_policy``: what each does on the
CUDA targets (the generated code and the report), the thread interpreter's and the tile interpreter's numerics
against float64 numpy, and the errors for values a copy cannot take."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, poisoned, randn

import tilec
import tilec.language as T

TMA = {"wgmma": True, "tma": True}
WS = {**TMA, "warp_specialize": True}


def _notes(kernel: tilec.JITKernel) -> list[str]:
    return [line.strip()[len("note: "):] for line in kernel.report().splitlines() if line.strip().startswith("note:")]


def _line(kernel_fn, text: str) -> int:
    """The line of the kernel's source file that holds ``text`` (once)."""
    import inspect

    lines, first = inspect.getsourcelines(kernel_fn)
    hits = [first + i for i, t in enumerate(lines) if text in t]
    assert len(hits) == 1, text
    return hits[0]


# ------------------------------------------------------------------------------------------------- disable_tma


def _gemm(M, N, K, disable_a=False, disable_c=False, bm=64, bn=64, bk=32):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s, disable_tma=disable_a)  # the A copy
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn], disable_tma=disable_c)  # the C store

    return main


def _run_gemm(kernel, rng, M, N, K):
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    c = poisoned((M, N), "float16")
    kernel(a, b, c)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), "float16")


@pytest.mark.parametrize("configs", [TMA, WS], ids=["tma", "tma ws"])
def test_disable_tma_keeps_the_pipeline_on_cp_async(rng, configs):
    """disable_tma=True was dropped: the pipelined loop still loaded the tile by TMA. The loop now stays a cp.async
    pipeline (its note naming the copy's line), the generated CUDA has no TMA load, and the results are right."""
    M, N, K = 100, 72, 80
    g = _gemm(M, N, K, disable_a=True)
    line = _line(_gemm, "# the A copy")
    kernel = tilec.JITKernel(g, "simt:sm_90a", pass_configs=configs)
    assert f"T.Pipelined at line {line - 1}: cp.async, not TMA: the T.copy at line {line} has disable_tma=True" \
        in _notes(kernel), kernel.report()
    assert "T.copy(A[by * 64:by * 64 + 64, k * 32:k * 32 + 32], A_s, disable_tma=True)" in str(g)
    assert "-> A_s[k % 3, :64, :32], disable_tma=True" in kernel.report()  # the FTG's node of the copy
    _run_gemm(kernel, rng, M, N, K)
    _run_gemm(tilec.JITKernel(g, "cpu"), rng, M, N, K)
    src = tilec.JITKernel(g, "cuda:sm_90a", pass_configs=configs).get_kernel_source()
    assert "shared::cluster.global" not in src and "tl::cp_async<16>" in src
    plain = tilec.JITKernel(_gemm(M, N, K), "cuda:sm_90a", pass_configs=configs).get_kernel_source()
    assert "shared::cluster.global" in plain and "tl::cp_async<" not in plain  # TMA without the option


def test_disable_tma_keeps_the_epilogue_store_on_threads(rng):
    """The accumulator's store went out by TMA stores whatever the copy said; with disable_tma=True the staged tile
    goes to global memory by the threads' 16-byte stores."""
    M, N, K = 100, 72, 80
    g = _gemm(M, N, K, disable_c=True)
    kernel = tilec.JITKernel(g, "simt:sm_90a", pass_configs=TMA)
    line = _line(_gemm, "# the C store")
    assert f"T.copy at line {line}: C_f goes out through shared memory (C_f_stage, over A_s, B_s), in 16-byte " \
        "vectors (disable_tma=True)" in _notes(kernel), kernel.report()
    _run_gemm(kernel, rng, M, N, K)
    src = tilec.JITKernel(g, "cuda:sm_90a", pass_configs=TMA).get_kernel_source()
    assert "global.shared::cta.bulk_group" not in src and "shared::cluster.global" in src  # A and B still by TMA
    assert "global.shared::cta.bulk_group" in tilec.JITKernel(_gemm(M, N, K), "cuda:sm_90a",
                                                              pass_configs=TMA).get_kernel_source()


def _preloaded(disable_q=False, n=3):
    @T.prim_func
    def main(Q: T.Tensor((128, 64), "float16"), B: T.Tensor((n * 64, 64), "float16"),
             C: T.Tensor((128, 64), "float16")):
        with T.Kernel(2, threads=128) as bx:
            Q_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.copy(Q[bx * 64, 0], Q_s, disable_tma=disable_q)  # the Q copy
            T.clear(C_f)
            for k in T.Pipelined(n, num_stages=2):
                T.copy(B[k * 64, 0], B_s)
                T.gemm(Q_s, B_s, C_f)
            T.copy(C_f, C[bx * 64, 0])

    return main


def test_disable_tma_keeps_a_copy_before_the_loop_off_the_producer(rng):
    """A tile copied before a warp-specialized loop moved to the producer warpgroup's TMA copies even with
    disable_tma=True; it now stays the block's threads' copy (noted), and the loop's own copies keep TMA."""
    line = _line(_preloaded, "# the Q copy")
    on = tilec.JITKernel(_preloaded(), "simt:sm_90a", pass_configs=WS)
    assert any(n.startswith(f"T.copy at line {line}: the producer warpgroup loads 'Q_s' by TMA") for n in _notes(on))
    kernel = tilec.JITKernel(_preloaded(True), "simt:sm_90a", pass_configs=WS)
    notes = _notes(kernel)
    assert f"T.copy at line {line}: the block's threads load 'Q_s', not the producer warpgroup by TMA: " \
        "disable_tma=True" in notes, notes
    assert not any("the producer warpgroup loads 'Q_s'" in n for n in notes)
    assert any("a producer warpgroup issues TMA copies into B_s" in n for n in notes)
    q, b = randn(rng, (128, 64), "float16"), randn(rng, (192, 64), "float16")
    want = sum(q.astype(np.float64) @ b[i * 64:(i + 1) * 64].astype(np.float64) for i in range(3))
    for k in (kernel, tilec.JITKernel(_preloaded(True), "cpu")):
        c = poisoned((128, 64), "float16")
        k(q, b, c)
        assert_close(c, want, "float16")


@pytest.mark.parametrize("value", ["yes", 2, None])
def test_disable_tma_must_be_a_flag(value):
    with pytest.raises(tilec.TilecError, match=r"T.copy: disable_tma must be True or False, got"):
        @T.prim_func
        def main(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                A_s = T.alloc_shared((16, 16), "float16")
                T.copy(A, A_s, disable_tma=value)
