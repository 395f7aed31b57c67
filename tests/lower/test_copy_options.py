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


def _gemm(M, N, K, a=None, b=None, c=None, bm=64, bn=64, bk=32):
    """A pipelined GEMM whose A copy, B copy and C store take the options ``a``, ``b`` and ``c``."""
    a, b, c = a or {}, b or {}, c or {}

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s, **a)  # the A copy
                T.copy(B[k * bk, bx * bn], B_s, **b)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn], **c)  # the C store

    return main


def _policy_gemm(M, N, K, policy):
    return _gemm(M, N, K, {"eviction_policy": policy}, {"eviction_policy": "evict_last"}, {"eviction_policy": policy})


def _coalesced_gemm(M, N, K, width):
    return _gemm(M, N, K, {"coalesced_width": width}, c={"coalesced_width": width})


def _run_gemm(kernel, rng, M, N, K):
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    c = poisoned((M, N), "float16")
    kernel(a, b, c)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), "float16")


@pytest.mark.parametrize("configs", [TMA, WS], ids=["tma", "tma ws"])
def test_disable_tma_copy_goes_by_cp_async_in_the_tma_ring(rng, configs):
    """disable_tma=True on A's copy turned the whole loop into a cp.async pipeline, B's tile losing TMA too. A's copy
    now goes by the block's cp.async into the TMA ring's stage, each thread arriving on the stage's mbarrier
    (cp.async.mbarrier.arrive.noinc, the barrier's count raised by the block's 128 threads), B's stays a TMA copy;
    a warp-specialized loop is not specialized (its producer issues TMA copies only), noted with the copy's line."""
    M, N, K = 100, 72, 80
    g = _gemm(M, N, K, a={"disable_tma": True})
    line = _line(_gemm, "# the A copy")
    kernel = tilec.JITKernel(g, "simt:sm_90a", pass_configs=configs)
    notes = _notes(kernel)
    assert f"T.Pipelined at line {line - 1}: A_s by cp.async, each thread arriving on the stage's mbarrier: the " \
        f"T.copy at line {line} has disable_tma=True" in notes, notes
    assert any(n.startswith(f"T.Pipelined at line {line - 1}: 2 stages") and "with TMA on 3 mbarriers (4096 bytes"
               in n for n in notes), notes  # B's 32x64 tile of fp16 only
    assert not any("cp.async, not TMA" in n for n in notes)
    ws = f"T.Pipelined at line {line - 1}: not warp-specialized: the T.copy at line {line} has disable_tma=True (a " \
        "producer warpgroup issues TMA copies only)"
    assert (ws in notes) == ("warp_specialize" in configs), notes
    assert "T.copy(A[by * 64:by * 64 + 64, k * 32:k * 32 + 32], A_s, disable_tma=True)" in str(g)
    assert "-> A_s[k % 3, :64, :32], disable_tma=True" in kernel.report()  # the FTG's node of the copy
    _run_gemm(kernel, rng, M, N, K)
    _run_gemm(tilec.JITKernel(g, "cpu"), rng, M, N, K)
    src = tilec.JITKernel(g, "cuda:sm_90a", pass_configs=configs).get_kernel_source()
    assert src.count("tl::tma_load_2d(&B_tmap0") == 1 and "A_tmap" not in src and "tl::cp_async<16>(&A_s[" in src
    assert "cp.async.mbarrier.arrive.noinc.shared::cta.b64" in src and "mbar_init(k_full + 0, 129);" in src
    body = src[src.index("__global__"):]
    assert "cp_async_commit()" not in body and "cp_async_wait<" not in body and "producer warpgroup" not in body
    plain = tilec.JITKernel(_gemm(M, N, K), "cuda:sm_90a", pass_configs=configs).get_kernel_source()
    assert "shared::cluster.global" in plain and "tl::cp_async<" not in plain and "mbarrier.arrive.noinc" not in plain


@pytest.mark.parametrize(("configs", "a", "b", "slow"), [
    ({"wgmma": False, "tma": True}, {"disable_tma": True}, {}, "A_s"),  # mma.sync: ldmatrix reads the landed tile
    (TMA, {}, {"disable_tma": True}, "B_s"),
    (TMA, {"disable_tma": True, "coalesced_width": 2}, {}, "A_s"),  # 4-byte cp.async
    (TMA, {"disable_tma": True, "coalesced_width": 1}, {}, "A_s"),  # a synchronous copy, then the arrival
], ids=["mma A", "wgmma B", "wgmma A 4-byte", "wgmma A synchronous"])
def test_mixed_ring_numerics(rng, configs, a, b, slow):
    """The mixed ring with either operand on the block's threads, gemms by mma.sync or wgmma, and cp.async chunks of
    16 or 4 bytes, or a copy too narrow for cp.async (synchronous, each thread arriving all the same)."""
    M, N, K = 100, 72, 80
    g = _gemm(M, N, K, a=a, b=b)
    kernel = tilec.JITKernel(g, "simt:sm_90a", pass_configs=configs)
    assert any(f"{slow} by cp.async, each thread arriving on the stage's mbarrier" in n for n in _notes(kernel))
    _run_gemm(kernel, rng, M, N, K)
    body = tilec.JITKernel(g, "cuda:sm_90a", pass_configs=configs).get_kernel_source().split("__global__")[1]
    assert "mbar_arrive_cp_async(" in body and "tma_load_2d(" in body


def _strided_b_gemm(M, N, K, bm=64, bn=64, bk=32):
    """A pipelined GEMM whose B is a strided view (rows 2 N apart): TMA's tensor map would read it row-major."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.StridedTensor((K, N), (2 * N, 1), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)  # the B copy
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


def test_a_strided_operand_goes_by_cp_async_in_the_tma_ring(rng):
    """B a T.StridedTensor: its copy cannot be a TMA copy, which made the whole loop a cp.async pipeline; B's tile now
    goes by cp.async into the TMA ring's stages (noted with the reason), A's by TMA, and the product is right."""
    M, N, K = 128, 64, 96
    g = _strided_b_gemm(M, N, K)
    kernel = tilec.JITKernel(g, "simt:sm_90a", pass_configs=TMA)
    line = _line(_strided_b_gemm, "# the B copy")
    assert f"T.Pipelined at line {line - 2}: B_s by cp.async, each thread arriving on the stage's mbarrier: the " \
        f"T.copy at line {line} cannot be a TMA copy ('B': TMA here needs a contiguous tensor of rank 1-5 with " \
        "compile-time sizes)" in _notes(kernel), kernel.report()
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    full = np.full((K, 2 * N), np.nan, np.float16)
    full[:, :N] = b
    c = poisoned((M, N), "float16")
    kernel(a, full[:, :N], c)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), "float16")
    src = tilec.JITKernel(g, "cuda:sm_90a", pass_configs=TMA).get_kernel_source()
    assert "tl::tma_load_2d(&A_tmap0" in src and "B_tmap" not in src and "tl::cp_async<16>(&B_s[" in src
    assert "cp.async.mbarrier.arrive.noinc" in src


def test_a_ring_of_cp_async_copies_only_stays_a_cp_async_pipeline(rng):
    """With no copy TMA can do, the loop is the cp.async pipeline (commit groups and waits), as before."""
    M, N, K = 100, 72, 80
    g = _gemm(M, N, K, a={"disable_tma": True}, b={"disable_tma": True})
    line = _line(_gemm, "# the A copy")
    kernel = tilec.JITKernel(g, "simt:sm_90a", pass_configs=TMA)
    assert f"T.Pipelined at line {line - 1}: cp.async, not TMA: the T.copy at line {line} has disable_tma=True" \
        in _notes(kernel), kernel.report()
    _run_gemm(kernel, rng, M, N, K)
    src = tilec.JITKernel(g, "cuda:sm_90a", pass_configs=TMA).get_kernel_source()
    body = src[src.index("__global__"):]
    assert "cp_async_commit()" in body and "mbar_" not in body and "tma_load" not in body


@pytest.mark.parametrize("broken", ["no arrival", "arrival before the copies"])
def test_the_interpreter_checks_cp_async_arrivals(rng, monkeypatch, broken):
    """The thread interpreter lands a thread's cp.async copies at the wait for the phase its arrival completes: with
    no arrival the wait is a deadlock, and an arrival that did not carry the copies leaves a read of unlanded data;
    both are reported (the mixed ring's numerics above rest on this model)."""
    from tilec.errors import RaceError
    from tilec.interp import tma as itma
    from tilec.interp.thread import STMT_RULES
    from tilec.lower.tir import CpAsyncMbarArrive

    def arrive_only(it, s, env, mask):
        key = itma._slot(it, s.bar, s.off, env, mask, "arrive")
        bar = itma._get(it, key, "arrive")
        bar.expected -= int(np.count_nonzero(mask))
        itma._advance(it, bar, key)

    monkeypatch.setitem(STMT_RULES, CpAsyncMbarArrive,
                        (lambda it, s, env, mask: None) if broken == "no arrival" else arrive_only)
    M, N, K = 64, 64, 64
    kernel = tilec.JITKernel(_gemm(M, N, K, a={"disable_tma": True}), "simt:sm_90a", pass_configs=TMA)
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    want = "a deadlock" if broken == "no arrival" else "before the asynchronous copy writing it has landed"
    with pytest.raises(RaceError, match=want):
        kernel(a, b, poisoned((M, N), "float16"))


def test_disable_tma_keeps_the_epilogue_store_on_threads(rng):
    """The accumulator's store went out by TMA stores whatever the copy said; with disable_tma=True the staged tile
    goes to global memory by the threads' 16-byte stores."""
    M, N, K = 100, 72, 80
    g = _gemm(M, N, K, c={"disable_tma": True})
    kernel = tilec.JITKernel(g, "simt:sm_90a", pass_configs=TMA)
    line = _line(_gemm, "# the C store")
    assert f"T.copy at line {line}: C_f goes out through shared memory (C_f_stage, over A_s, B_s), in 16-byte " \
        "vectors (disable_tma=True)" in _notes(kernel), kernel.report()
    _run_gemm(kernel, rng, M, N, K)
    src = tilec.JITKernel(g, "cuda:sm_90a", pass_configs=TMA).get_kernel_source()
    assert "global.shared::cta.bulk_group" not in src and "shared::cluster.global" in src  # A and B still by TMA
    assert "global.shared::cta.bulk_group" in tilec.JITKernel(_gemm(M, N, K), "cuda:sm_90a",
                                                              pass_configs=TMA).get_kernel_source()


def _preloaded(disable_q=False, n=3, q_dtype="float16"):
    @T.prim_func
    def main(Q: T.Tensor((128, 64), q_dtype), B: T.Tensor((n * 64, 64), "float16"),
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


def _check_preloaded(rng, *kernels, q_dtype="float16"):
    """Each of ``kernels`` (of :func:`_preloaded`, n=3) against float64 numpy on fresh inputs (Q as its float16 tile
    holds it)."""
    q, b = randn(rng, (128, 64), q_dtype), randn(rng, (192, 64), "float16")
    q16 = q.astype(np.float16).astype(np.float64)
    want = sum(q16 @ b[i * 64:(i + 1) * 64].astype(np.float64) for i in range(3))
    for k in kernels:
        c = poisoned((128, 64), "float16")
        k(q, b, c)
        assert_close(c, want, "float16")


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
    _check_preloaded(rng, kernel, tilec.JITKernel(_preloaded(True), "cpu"))


def test_preload_note_names_the_real_reason_not_disable_tma(rng):
    """Q copied from a float32 tensor into a float16 tile (a conversion, which TMA cannot do) with disable_tma=True:
    the preload note blamed disable_tma, though the copy stays the block's threads' without it too. The note now names
    the conversion, the option is noted as having no effect, and the results match numpy."""
    line = _line(_preloaded, "# the Q copy")
    reason = "'Q': TMA copies 8-, 16- or 32-bit elements without conversion"
    for disable in (True, False):
        notes = _notes(tilec.JITKernel(_preloaded(disable, q_dtype="float32"), "simt:sm_90a", pass_configs=WS))
        assert f"T.copy at line {line}: the block's threads load 'Q_s', not the producer warpgroup by TMA: " \
            f"{reason}" in notes, notes
        assert not any("has disable_tma=True" in n or n.endswith(": disable_tma=True") for n in notes), notes
        inert = [n for n in notes if "disable_tma=True has no effect" in n]
        assert inert == ([f"T.copy at line {line}: disable_tma=True has no effect: TMA would not move it: {reason}"]
                         if disable else []), notes
    kernel = tilec.JITKernel(_preloaded(True, q_dtype="float32"), "simt:sm_90a", pass_configs=WS)
    _check_preloaded(rng, kernel, q_dtype="float32")


def _both_disabled():
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float32"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((128, 64), "float16")):
        with T.Kernel(2, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(2, num_stages=2):
                T.copy(A[bx * 64, k * 32], A_s, disable_tma=True)  # the A copy
                T.copy(B[k * 32, 0], B_s, disable_tma=True)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[bx * 64, 0])

    return main


def test_pipelined_note_names_the_real_reason_not_disable_tma():
    """Both operand copies with disable_tma=True, A's also converting float32 to float16: the loop's note named
    A's disable_tma though TMA could not have copied A anyway; it now names the conversion, and notes A's option as
    having no effect (B's, which kept B's tile off TMA, gets no such note)."""
    line = _line(_both_disabled, "# the A copy")
    notes = _notes(tilec.JITKernel(_both_disabled(), "simt:sm_90a", pass_configs=TMA))
    assert f"T.Pipelined at line {line - 1}: cp.async, not TMA: 'A': TMA copies 8-, 16- or 32-bit elements " \
        "without conversion" in notes, notes
    assert f"T.copy at line {line}: disable_tma=True has no effect: TMA would not move it: 'A': TMA copies 8-, 16- " \
        "or 32-bit elements without conversion" in notes, notes
    assert not any(f"line {line + 1}: disable_tma=True has no effect" in n for n in notes), notes


def _no_tma_anyway():
    @T.prim_func
    def main(A: T.Tensor((100, 64), "float16"), R: T.Tensor((100, 36), "float16"), B: T.Tensor((100, 64), "float16"),
             D: T.Tensor((100, 36), "float16")):
        with T.Kernel(T.ceildiv(100, 32), threads=128) as bx:
            S = T.alloc_shared((32, 64), "float16")
            U = T.alloc_shared((32, 36), "float16")
            F = T.alloc_fragment((32, 64), "float32")
            T.copy(A[bx * 32, 0], S, disable_tma=True)  # the plain load
            T.copy(R[bx * 32, 0], U, disable_tma=True)  # the odd rows
            T.copy(S, F, disable_tma=True)  # the shared read
            for i, j in T.Parallel(32, 64):
                F[i, j] = F[i, j] * 2.0
            T.copy(F, B[bx * 32, 0])
            T.copy(U, D[bx * 32, 0])

    return main


@pytest.mark.parametrize("configs", [None, TMA, WS], ids=["default", "tma", "tma ws"])
def test_disable_tma_where_no_pass_would_use_tma_is_noted(rng, configs):
    """On sm_90a with TMA, disable_tma=True on copies no pass would move by TMA (a global->shared copy outside any
    T.Pipelined loop, one whose 72-byte rows no tensor map takes, a shared->fragment copy) got no note, so nothing
    told the user the option did nothing. Each now gets one, with the copy's line and why TMA would not move it;
    where the option acts (a pipelined gemm's copies and store) there is none. The results match numpy."""
    kernel = tilec.JITKernel(_no_tma_anyway(), "simt:sm_90a", pass_configs=configs)
    notes = [n for n in _notes(kernel) if "disable_tma" in n]
    load, odd, read = (_line(_no_tma_anyway, t) for t in ("# the plain load", "# the odd rows", "# the shared read"))
    assert sorted(notes) == sorted([
        f"T.copy at line {load}: disable_tma=True has no effect: TMA would not move it: only a T.Pipelined loop's "
        "first-stage copies and tiles a warp-specialized loop's gemms read go global->shared by TMA",
        f"T.copy at line {odd}: disable_tma=True has no effect: TMA would not move it: 'R': its rows of 72 bytes are "
        "not a multiple of 16",
        f"T.copy at line {read}: disable_tma=True has no effect: TMA would not move it: TMA moves global->shared "
        "copies and accumulator stores to global memory, not a shared->fragment copy"]), kernel.report()
    a, r = randn(rng, (100, 64), "float16"), randn(rng, (100, 36), "float16")
    b, d = poisoned((100, 64), "float16"), poisoned((100, 36), "float16")
    kernel(a, r, b, d)
    assert_close(b, a.astype(np.float64) * 2, "float16")
    assert_close(d, r.astype(np.float64), "float16")
    acting = tilec.JITKernel(_gemm(100, 72, 80, a={"disable_tma": True}, c={"disable_tma": True}), "simt:sm_90a",
                             pass_configs=configs or TMA)
    assert not any("has no effect" in n and "disable_tma" in n for n in _notes(acting)), acting.report()


@pytest.mark.parametrize("value", ["yes", 2, None])
def test_disable_tma_must_be_a_flag(value):
    with pytest.raises(tilec.TilecError, match=r"T.copy: disable_tma must be True or False, got"):
        @T.prim_func
        def main(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                A_s = T.alloc_shared((16, 16), "float16")
                T.copy(A, A_s, disable_tma=value)


# --------------------------------------------------------------------------------------------- eviction_policy


def _through_shared(M, N, dtype="float16", policy="evict_first", out_dtype=None):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), out_dtype or dtype)):
        with T.Kernel(T.ceildiv(M, 64), threads=128) as bx:
            S = T.alloc_shared((64, N), dtype)
            F = T.alloc_fragment((64, N), "float32")
            T.copy(A[bx * 64, 0], S, eviction_policy=policy)  # the load
            T.copy(S, F, eviction_policy=policy)  # the shared read
            for i, j in T.Parallel(64, N):
                F[i, j] = F[i, j] * 2.0
            T.copy(F, S)
            T.copy(S, B[bx * 64, 0], eviction_policy=policy)  # the store

    return main


@pytest.mark.parametrize("policy", ["evict_first", "evict_last"])
def test_eviction_policy_hints_plain_loads_and_stores(policy):
    """eviction_policy was dropped. On CUDA targets the copy's global loads and stores now carry the L2 cache hint
    (ld/st.global.L2::cache_hint with a createpolicy policy); shared memory and registers get none."""
    src = tilec.JITKernel(_through_shared(100, 72, policy=policy), "cuda:sm_80").get_kernel_source()
    assert f"createpolicy.fractional.L2::{policy}.b64" in src
    assert "ld.global.L2::cache_hint.v4.u32" in src and "st.global.L2::cache_hint.v4.u32" in src
    body = src[src.index('extern "C" __global__'):]
    assert body.count("tl::ld_hint<uint4>(") == 1 and body.count("tl::st_hint<uint4>(") == 1, body
    assert body.count(f"tl::policy_{policy}()") == 2
    plain = tilec.JITKernel(_through_shared(100, 72, policy=None), "cuda:sm_80").get_kernel_source()
    assert "cache_hint" not in plain and "createpolicy" not in plain
    normal = tilec.JITKernel(_through_shared(100, 72, policy="evict_normal"), "cuda:sm_80").get_kernel_source()
    code = lambda text: [t for t in text.splitlines() if not t.strip().startswith("//")]  # noqa: E731
    assert code(normal) == code(plain)  # the default priority: no hint (the comments name the option)
    cast = tilec.JITKernel(_through_shared(100, 72, policy=policy, out_dtype="float32"), "cuda:sm_80")
    assert "tl::st_hint<float>(&B[" in cast.get_kernel_source()  # a conversion: element by element


def test_eviction_policy_hints_tma_not_cp_async():
    """The pipelined copies carry the hint where TMA moves them (loads and the epilogue's TMA store, sm_90a). cp.async
    copies (sm_80) go without it, and the report says why: their hinted form made a kernel that traps on an H100
    (ptxas drops the createpolicy the hint reads: 'an illegal instruction was encountered'); the epilogue's plain
    stores keep it."""
    g = _policy_gemm(256, 256, 256, "evict_first")
    k = tilec.JITKernel(g, "cuda:sm_80")
    src = k.get_kernel_source()
    body = src[src.index('extern "C" __global__'):]
    assert "cp.async.cg.shared.global.L2::cache_hint" not in src and body.count("tl::cp_async<16>(") == 2
    notes = [n for n in k.report().splitlines() if "not applied to its cp.async copies" in n]
    assert len(notes) == 2 and all("illegal instruction" in n for n in notes), k.report()
    assert "tl::st_hint<" in body and "tl::policy_evict_first()" in body
    src = tilec.JITKernel(g, "cuda:sm_90a", pass_configs=WS).get_kernel_source()
    assert "mbarrier::complete_tx::bytes.L2::cache_hint" in src and "bulk_group.L2::cache_hint" in src
    body = src[src.index('extern "C" __global__'):]
    assert "tl::tma_load_2d_hint(&A_tmap0, " in body and body.count("tl::policy_evict_first());") == 2
    assert "tl::tma_store_2d_hint(&C_tmap2, " in body and "tl::tma_load_2d_hint(&B_tmap1, " in body


@pytest.mark.parametrize("target", ["cpu", "simt:sm_80"])
def test_eviction_policy_numerics_and_notes_where_not_applied(rng, target):
    """Where the hint cannot apply (the interpreters, AMD) the results are the same and the report says so, as it does
    for a copy with no global side."""
    line = _line(_through_shared, "# the load")
    kernel = tilec.JITKernel(_through_shared(100, 72), target)
    notes = _notes(kernel)
    assert f"T.copy at line {line}: eviction_policy='evict_first' is not applied on target {target}: it is an L2 " \
        "cache hint of the CUDA backend (the results are the same without it)" in notes, notes
    assert f"T.copy at line {line + 1}: eviction_policy='evict_first' has no effect: the copy does not read or write " \
        "global memory" in notes
    a = randn(rng, (100, 72), "float16")
    b = poisoned((100, 72), "float16")
    kernel(a, b)
    assert_close(b, a.astype(np.float64) * 2, "float16")
    assert any("not applied on target hip:gfx90a" in n for n in _notes(tilec.JITKernel(_through_shared(100, 72),
                                                                                           "hip:gfx90a")))
    cuda = _notes(tilec.JITKernel(_through_shared(100, 72), "cuda:sm_80"))
    assert not any("not applied" in n for n in cuda)


def test_eviction_policy_gemm_numerics(rng):
    M, N, K = 100, 72, 80
    g = _policy_gemm(M, N, K, "evict_first")
    for kernel in (tilec.JITKernel(g, "simt:sm_90a", pass_configs=WS), tilec.JITKernel(g, "cpu")):
        _run_gemm(kernel, rng, M, N, K)


@pytest.mark.parametrize(("value", "error"), [("evict_sometimes", tilec.TilecValueError),
                                              ("EVICT_FIRST", tilec.TilecValueError), (1, tilec.TilecTypeError),
                                              (True, tilec.TilecTypeError)])
def test_eviction_policy_must_be_a_known_name(value, error):
    with pytest.raises(error, match=r"T.copy: eviction_policy must be None or one of 'evict_normal', 'evict_first', "
                                    r"'evict_last', got") as ei:
        @T.prim_func
        def main(A: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, threads=32) as bx:
                A_s = T.alloc_shared((16, 16), "float16")
                T.copy(A, A_s, eviction_policy=value)
    assert repr(value) in str(ei.value)


# --------------------------------------------------------------------------------------------- coalesced_width


def _copies(M, N, width, dtype="float16", out_dtype=None, block=32):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), out_dtype or dtype)):
        with T.Kernel(T.ceildiv(M, block), threads=128) as bx:
            S = T.alloc_shared((block, N), dtype)
            T.copy(A[bx * block, 0], S, coalesced_width=width)
            T.copy(S, B[bx * block, 0], coalesced_width=width)  # the store

    return main


def _body(kernel: tilec.JITKernel) -> str:
    src = kernel.get_kernel_source()
    return src[src.index('extern "C" __global__'):]


@pytest.mark.parametrize(("width", "load"), [
    (1, "S[tx % 64 + (q_1 * 2 + tx / 64) * 64] = "),  # one element a thread
    (2, "*reinterpret_cast<unsigned*>(&S[tx * 2 % 64 + (q_1 * 4 + tx * 2 / 64) * 64]) = "),
    (4, "*reinterpret_cast<uint2*>(&S[tx * 4 % 64 + (q_1 * 8 + tx * 4 / 64) * 64]) = "),
    (16, "*reinterpret_cast<uint4*>(&S[tx * 16 % 64 + 8 + tx * 16 / 64 % 32 * 64]) = "),  # two 16-byte accesses
])
def test_coalesced_width_sets_the_run_a_thread_moves(rng, width, load):
    """coalesced_width was dropped: a float16 copy always moved 8 elements a thread (16-byte vectors). It is now the
    run of consecutive elements each thread moves, in accesses as wide as divide it (several for runs over 16 bytes),
    on the GPU targets; the thread interpreter's results and the tile interpreter's match numpy."""
    kernel = tilec.JITKernel(_copies(100, 64, width), "cuda:sm_80")
    body = _body(kernel)
    assert load in body, body
    assert "uint4" in _body(tilec.JITKernel(_copies(100, 64, None), "cuda:sm_80"))
    assert not any("coalesced_width" in n for n in _notes(kernel))
    a = randn(rng, (100, 64), "float16")
    for target in ("simt:sm_80", "simt:gfx90a", "cpu"):
        b = poisoned((100, 64), "float16")
        tilec.JITKernel(_copies(100, 64, width), target)(a, b)
        np.testing.assert_array_equal(b, a)


def test_coalesced_width_of_an_odd_run(rng):
    """A run of 3 float32 elements (12 bytes) moves element by element; a conversion too."""
    kernel = tilec.JITKernel(_copies(50, 48, 3, "float32", "float16"), "simt:sm_80")
    a = randn(rng, (50, 48), "float32")
    b = poisoned((50, 48), "float16")
    kernel(a, b)
    assert_close(b, a.astype(np.float64), "float16")
    loop = "for (int q_1 = 0; q_1 < 4; ++q_1)"  # 32 x 48 / 3 = 512 runs: 4 rounds of 128 threads
    assert loop in _body(tilec.JITKernel(_copies(50, 48, 3, "float32", "float16"), "cuda:sm_80"))


def test_coalesced_width_in_a_cp_async_pipeline(rng):
    """The pipeline's cp.async copies move the runs too: 8-byte cp.async for runs of 4 float16; a run of one
    float16 (2 bytes) is too narrow for cp.async, which the report says (a synchronous copy)."""
    M, N, K = 100, 72, 80
    for width, want, note in ((4, "tl::cp_async<8>(", None),
                              (1, None, "coalesced_width=1 leaves accesses of 2 bytes, and cp.async moves 4, 8 or 16; "
                                        "a synchronous copy")):
        g = _coalesced_gemm(M, N, K, width)
        kernel = tilec.JITKernel(g, "cuda:sm_80")
        body = _body(kernel)
        if want:
            assert body.count(want) == 1 and "tl::cp_async<16>(" in body, body  # B keeps 16-byte copies
        if note:
            line = _line(_gemm, "# the A copy")
            assert f"T.copy at line {line}: {note}" in _notes(kernel), kernel.report()
        _run_gemm(tilec.JITKernel(g, "simt:sm_80"), rng, M, N, K)
        _run_gemm(tilec.JITKernel(g, "cpu"), rng, M, N, K)


def test_coalesced_width_where_it_cannot_apply_is_noted(rng):
    """A copy that TMA does, or whose elements a fragment's layout places, keeps its mapping; the report says why."""
    M, N, K = 100, 72, 80
    g = _coalesced_gemm(M, N, K, 4)
    a_line, c_line = _line(_gemm, "# the A copy"), _line(_gemm, "# the C store")
    tma = tilec.JITKernel(g, "simt:sm_90a", pass_configs=TMA)
    notes = _notes(tma)
    assert f"T.copy at line {a_line}: coalesced_width=4 has no effect: the tensor-memory accelerator moves the tile " \
        "(disable_tma=True keeps the copy on the threads)" in notes, notes
    _run_gemm(tma, rng, M, N, K)
    plain = tilec.JITKernel(g, "simt:sm_80", pass_configs={"stage_epilogue": False})
    assert f"T.copy at line {c_line}: coalesced_width=4 has no effect: the layout of fragment 'C_f' places its " \
        "elements on the threads" in _notes(plain), plain.report()
    _run_gemm(plain, rng, M, N, K)


def _inert_options():
    @T.prim_func
    def main(A: T.Tensor((100, 64), "float16"), B: T.Tensor((100, 64), "float16")):
        with T.Kernel(T.ceildiv(100, 32), threads=128) as bx:
            S = T.alloc_shared((32, 64), "float16")
            T.copy(A[bx * 32, 0], S, coalesced_width=4, disable_tma=True)  # the copy
            for i, j in T.Parallel(32, 64, coalesced_width=2):  # the loop
                B[bx * 32 + i, j] = S[i, j] * 2

    return main


@pytest.mark.parametrize(("target", "configs"), [
    ("cpu", None), ("simt:sm_80", None), ("simt:gfx90a", None), ("hip:gfx90a", None), ("cuda:sm_80", None),
    ("cuda:sm_90a", None), ("simt:sm_90a", None), ("simt:sm_90a", {"tma": False, "wgmma": False}),
])
def test_copy_and_parallel_options_a_target_ignores_are_noted(rng, target, configs):
    """coalesced_width on the CPU interpreter (T.copy's and T.Parallel's) and disable_tma where no copy goes by TMA
    were dropped without a word, though the README says the report says why an option has no effect (as it did for
    eviction_policy). Each is now noted with the target and the reason; where the option acts, nothing is noted; the
    results match numpy."""
    kernel = tilec.JITKernel(_inert_options(), target, pass_configs=configs)
    notes = [n for n in _notes(kernel) if "is not applied on target" in n]
    copy, loop = _line(_inert_options, "# the copy"), _line(_inert_options, "# the loop")
    want = []
    if target == "cpu":
        want += [f"T.copy at line {copy}: coalesced_width=4 is not applied on target cpu: the CPU interpreter moves "
                 "whole tiles, not runs of elements a thread (the results are the same without it)",
                 f"T.Parallel at line {loop}: coalesced_width=2 is not applied on target cpu: the CPU interpreter "
                 "moves whole tiles, not runs of elements a thread (the results are the same without it)"]
    if not target.endswith("sm_90a") or configs:
        want.append(f"T.copy at line {copy}: disable_tma=True is not applied on target {target}: only sm_90a with "
                    "pass config 'tma' moves copies by TMA (the results are the same without it)")
    assert sorted(notes) == sorted(want), kernel.report()
    if target.startswith("cuda") or target.startswith("hip"):
        return
    a = randn(rng, (100, 64), "float16")
    b = poisoned((100, 64), "float16")
    kernel(a, b)
    assert_close(b, a.astype(np.float64) * 2, "float16")


@pytest.mark.parametrize(("value", "error", "message"), [
    (0, tilec.TilecTypeError, "T.copy: coalesced_width must be an int >= 1, got 0"),
    (2.0, tilec.TilecTypeError, "T.copy: coalesced_width must be an int >= 1, got 2.0"),
    (True, tilec.TilecTypeError, "T.copy: coalesced_width must be an int >= 1, got True"),
    (3, tilec.TilecValueError, "T.copy(coalesced_width=3): runs of 3 consecutive elements need 3 to divide the "
                               "innermost extent 16 of the destination A_s"),
    (32, tilec.TilecValueError, "T.copy(coalesced_width=32): runs of 32 consecutive elements need 32 to divide "
                                "the innermost extent 16"),
])
def test_coalesced_width_must_divide_the_innermost_extent(tmp_path, value, error, message):
    src = f'''
import tilec.language as T


@T.prim_func
def main(A: T.Tensor((16, 16), "float16")):
    with T.Kernel(1, threads=32) as bx:
        A_s = T.alloc_shared((16, 16), "float16")
        T.copy(A, A_s, coalesced_width={value!r})
'''
    path = tmp_path / "kernel.py"
    path.write_text(src)
    with pytest.raises(error) as ei:
        exec(compile(src, str(path), "exec"), {})
    assert message in str(ei.value), str(ei.value)
    assert ei.value.loc.file == str(path) and ei.value.loc.line == 9


def test_disable_tma_keeps_a_persistent_kernels_store_direct(rng):
    """In a persistent kernel's tile loop the accumulator is staged only for TMA stores: with disable_tma=True it is
    stored directly (noted) and no TMA store is emitted."""
    M, N, K = 200, 136, 96
    configs = {**WS, "persistent": True}
    kernel = tilec.JITKernel(_gemm(M, N, K, c={"disable_tma": True}), "simt:sm_90a", pass_configs=configs)
    line = _line(_gemm, "# the C store")
    assert f"T.copy at line {line}: the accumulator is stored directly: disable_tma=True, and staging it in a loop " \
        "needs TMA stores" in _notes(kernel), kernel.report()
    _run_gemm(kernel, rng, M, N, K)
    g = _gemm(M, N, K, c={"disable_tma": True})
    src = tilec.JITKernel(g, "cuda:sm_90a", pass_configs=configs).get_kernel_source()
    assert "bulk_group" not in src


# ---------------------------------------------------------------- disable_tma: notes on a copy used several times


@T.macro
def _load(src, row, col, dst):
    T.copy(src[row, col], dst, disable_tma=True)  # the macro's copy


def _macro_twice(pipelined=True):
    """The macro's copy used before the loop (no pass would move it by TMA) and, with ``pipelined``, in a TMA ring
    (where the option keeps it off TMA); else once more in the loop, beside another copy into its tile (so that it
    stays in its iteration)."""

    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((128, 64), "float16"),
             D: T.Tensor((128, 64), "float16")):
        with T.Kernel(2, threads=128) as bx:
            X_s = T.alloc_shared((64, 64), "float16")
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            _load(A, bx * 64, 0, X_s)  # the plain call
            T.copy(X_s, D[bx * 64, 0])
            T.clear(C_f)
            for k in T.Pipelined(2, num_stages=2):
                if pipelined:
                    _load(A, bx * 64, k * 32, A_s)  # the pipelined call
                else:
                    _load(A, bx * 64, k * 32, A_s)  # the second plain call
                    T.copy(A[bx * 64, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[bx * 64, 0])

    return main


def _run_macro_twice(kernel, rng):
    a, b = randn(rng, (128, 64), "float16"), randn(rng, (64, 64), "float16")
    c, d = poisoned((128, 64), "float16"), poisoned((128, 64), "float16")
    kernel(a, b, c, d)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), "float16")
    assert_close(d, a.astype(np.float64), "float16")


@pytest.mark.parametrize("configs", [TMA, WS], ids=["tma", "tma ws"])
def test_disable_tma_of_a_macro_used_twice_is_noted_for_each_use(rng, configs):
    """A T.macro's copy with disable_tma=True, used in a TMA ring (where the option keeps it on cp.async) and before
    the loop (where no pass would move it by TMA): the fates were kept by the copy's line, so the use the option
    decided hid the other's note. The use before the loop now gets the note, naming the macro's line and its call
    site; the one in the ring gets none. The results match numpy."""
    kernel = tilec.JITKernel(_macro_twice(), "simt:sm_90a", pass_configs=configs)
    line, plain = _line(_load.fn, "# the macro's copy"), _line(_macro_twice, "# the plain call")
    notes = [n for n in _notes(kernel) if "disable_tma=True has no effect" in n]
    assert notes == [f"T.copy at line {line} (in the T.macro called at line {plain}): disable_tma=True has no effect: "
                     "TMA would not move it: only a T.Pipelined loop's first-stage copies and tiles a warp-specialized "
                     "loop's gemms read go global->shared by TMA"], kernel.report()
    _run_macro_twice(kernel, rng)


def test_disable_tma_of_a_macro_used_twice_gets_a_note_for_each_use(rng):
    """Both uses of the macro's copy with no effect: the two notes read the same and were merged into one; each now
    names its own call site."""
    kernel = tilec.JITKernel(_macro_twice(False), "simt:sm_90a", pass_configs=TMA)
    line = _line(_load.fn, "# the macro's copy")
    sites = [_line(_macro_twice, t) for t in ("# the plain call", "# the second plain call")]
    loop = _line(_macro_twice, "for k in T.Pipelined")
    whys = ["only a T.Pipelined loop's first-stage copies and tiles a warp-specialized loop's gemms read go "
            "global->shared by TMA", f"it stays in its iteration of the T.Pipelined loop at line {loop}: the loop "
            "writes 'A_s'"]
    notes = [n for n in _notes(kernel) if "disable_tma=True has no effect" in n]
    assert sorted(notes) == [f"T.copy at line {line} (in the T.macro called at line {s}): disable_tma=True has no "
                             f"effect: TMA would not move it: {why}" for s, why in zip(sites, whys)], kernel.report()
    _run_macro_twice(kernel, rng)


# ------------------------------------------------------- disable_tma: why a copy in a loop or before it is not TMA's


def _one_stage(stages=1, touch=False):
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((128, 64), "float16")):
        with T.Kernel(2, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(2, num_stages=stages):  # the loop
                if touch:
                    A_s[0, 0] = 0  # a write of the tile: the copy stays in its iteration
                T.copy(A[bx * 64, k * 32], A_s, disable_tma=True)  # the A copy
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[bx * 64, 0])

    return main


@pytest.mark.parametrize("stages", [0, 1])
@pytest.mark.parametrize("configs", [TMA, WS], ids=["tma", "tma ws"])
def test_disable_tma_in_a_plain_loop_names_the_stages(rng, configs, stages):
    """A T.Pipelined loop of fewer than 2 stages stays a plain loop, so TMA would not have moved its copies: the note
    on disable_tma gave the generic reason (only a pipelined loop's first-stage copies go by TMA), which reads as if
    the copy were outside any such loop. It now names the loop and its num_stages. The results match numpy."""
    kernel = tilec.JITKernel(_one_stage(stages), "simt:sm_90a", pass_configs=configs)
    line, loop = _line(_one_stage, "# the A copy"), _line(_one_stage, "# the loop")
    notes = [n for n in _notes(kernel) if "disable_tma=True has no effect" in n]
    assert notes == [f"T.copy at line {line}: disable_tma=True has no effect: TMA would not move it: the T.Pipelined "
                     f"loop at line {loop} is not a TMA pipeline: num_stages={stages}, a plain loop (TMA needs 2 "
                     "stages or more)"], kernel.report()
    a, b = randn(rng, (128, 64), "float16"), randn(rng, (64, 64), "float16")
    c = poisoned((128, 64), "float16")
    kernel(a, b, c)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), "float16")


@pytest.mark.parametrize("configs", [TMA, WS], ids=["tma", "tma ws"])
def test_disable_tma_of_a_copy_that_stays_in_its_iteration_names_the_cause(rng, configs):
    """A copy in a 2-stage T.Pipelined loop that writes its tile: the copy stays in its iteration (no first-stage
    copy, so no TMA), but the note on its disable_tma=True gave the generic reason (only a pipelined loop's
    first-stage copies go by TMA), as if the copy were outside the loop, and the loop's own note did not say why the
    copy stays. Both now name the cause. The results match numpy."""
    kernel = tilec.JITKernel(_one_stage(2, touch=True), "simt:sm_90a", pass_configs=configs)
    line, loop = _line(_one_stage, "# the A copy"), _line(_one_stage, "# the loop")
    notes = _notes(kernel)
    assert f"T.Pipelined at line {loop}: the copy at line {line} stays in its iteration: the loop writes 'A_s'" \
        in notes, kernel.report()
    assert [n for n in notes if "disable_tma=True has no effect" in n] == [
        f"T.copy at line {line}: disable_tma=True has no effect: TMA would not move it: it stays in its iteration of "
        f"the T.Pipelined loop at line {loop}: the loop writes 'A_s'"], kernel.report()
    a, b = randn(rng, (128, 64), "float16"), randn(rng, (64, 64), "float16")
    c = poisoned((128, 64), "float16")
    kernel(a, b, c)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), "float16")


@pytest.mark.parametrize("extra, reason", [
    ({"preload": False}, "pass config 'preload' is off"),
    ({"persistent": True, "consumers": 2}, "the consumers run in 2 copies (pass config 'consumers'), for which the "
     "producer warpgroup loads no tile copied before the loop")], ids=["preload off", "consumers 2"])
def test_disable_tma_before_a_specialized_loop_names_the_config(rng, extra, reason):
    """A tile copied before a warp-specialized loop that only its gemms read goes to the producer warpgroup's TMA
    copies, unless pass config preload is off or the consumers run in copies: then disable_tma=True on that copy
    has no effect, and its note gave the generic reason; it now names the pass config. The results match numpy."""
    kernel = tilec.JITKernel(_preloaded(True), "simt:sm_90a", pass_configs={**WS, **extra})
    line = _line(_preloaded, "# the Q copy")
    notes = [n for n in _notes(kernel) if "disable_tma=True has no effect" in n]
    assert notes == [f"T.copy at line {line}: disable_tma=True has no effect: TMA would not move it: {reason}"], \
        kernel.report()
    _check_preloaded(rng, kernel)


@pytest.mark.parametrize("disable, q_dtype, why", [
    (True, "float16", "disable_tma=True"),
    (False, "float32", "'Q': TMA copies 8-, 16- or 32-bit elements without conversion")],
    ids=["disable_tma", "convert"])
def test_preload_off_note_names_the_tile_that_stays_with_the_threads(rng, disable, q_dtype, why):
    """Pass config preload=False on a warp-specialized kernel whose only tile copied before the loop (Q, read by the
    loop's gemms) stays the block's threads' copy (disable_tma=True, or a conversion TMA cannot do): the config has
    no effect, but its note said the kernel has no such tile. It now names the tile and why it stays. The results
    match numpy."""
    kernel = tilec.JITKernel(_preloaded(disable, q_dtype=q_dtype), "simt:sm_90a",
                             pass_configs={**WS, "preload": False})
    notes = [n for n in _notes(kernel) if "pass config 'preload' has no effect" in n]
    assert notes == [f"T.Kernel at line {_line(_preloaded, 'with T.Kernel')}: pass config 'preload' has no effect: it "
                     "has the producer warpgroup load the tiles copied before the loop that only its gemms read, or "
                     "that are copied into fragments there, and the kernel's only such tile, 'Q_s', stays the block's "
                     f"threads' copy: {why}"], kernel.report()
    _check_preloaded(rng, kernel, q_dtype=q_dtype)


# ------------------------------------------------------------------------------------ offsets read from a tensor


def _indexed():
    """A pipelined GEMM whose A copy's column offset is an index read from tensor I."""
    @T.prim_func
    def main(A: T.Tensor((128, 128), "float16"), B: T.Tensor((128, 64), "float16"), C: T.Tensor((128, 64), "float16"),
             I: T.Tensor((4,), "int32")):
        with T.Kernel(2, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[bx * 64, I[k] * 32], A_s, disable_tma=True)  # the indexed copy
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[bx * 64, 0])

    return main


@pytest.mark.parametrize("target, configs", [("cpu", None), ("simt:sm_80", None), ("simt:sm_90a", TMA)],
                         ids=["cpu", "sm_80", "sm_90a tma"])
def test_copy_offset_read_from_a_tensor(rng, target, configs):
    """A copy whose offset reads an index from a tensor (A[bx * 64, I[k] * 32]) crashed the CUDA targets' lowering
    ('TypeError: cannot emit Load'); the index is now read into a scalar before the copy, and the results match
    numpy."""
    kernel = tilec.JITKernel(_indexed(), target, pass_configs=configs)
    a, b = randn(rng, (128, 128), "float16"), randn(rng, (128, 64), "float16")
    idx = rng.permutation(4).astype(np.int32)
    want = sum(a[:, i * 32:(i + 1) * 32].astype(np.float64) @ b[k * 32:(k + 1) * 32].astype(np.float64)
               for k, i in enumerate(idx))
    c = poisoned((128, 64), "float16")
    kernel(a, b, c, idx)
    assert_close(c, want, "float16")


def _kept_in_place(case):
    """A pipelined GEMM whose A copy keeps its place in its iteration: it fills part of A_s ("part"), its offset
    reads an index from I ("index"), or A_s is stored out after the loop ("after")."""
    @T.prim_func
    def main(A: T.Tensor((128, 128), "float16"), B: T.Tensor((128, 64), "float16"), C: T.Tensor((128, 64), "float16"),
             I: T.Tensor((4,), "int32"), D: T.Tensor((128, 32), "float16")):
        with T.Kernel(2, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            if case == "part":
                T.clear(A_s)  # the rows the copies leave
            for k in T.Pipelined(4, num_stages=2):
                if case == "part":
                    T.copy(A[bx * 64:bx * 64 + 48, k * 32:k * 32 + 32], A_s[0:48, 0:32], disable_tma=True)  # part
                elif case == "index":
                    T.copy(A[bx * 64, I[k] * 32], A_s, disable_tma=True)  # index
                else:
                    T.copy(A[bx * 64, k * 32], A_s, disable_tma=True)  # after
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[bx * 64, 0])
            T.copy(A_s, D[bx * 64, 0])  # the use after the loop

    return main


@pytest.mark.parametrize("case", ["part", "index", "after"])
def test_disable_tma_on_a_copy_kept_in_its_iteration_names_why(rng, case):
    """disable_tma=True on a pipelined loop's copy that stays in its iteration (so TMA would not move it): the note
    gave the generic 'only a T.Pipelined loop's first-stage copies ...' reason. It now names the cause: the part of
    the tile the copy fills and the tensor's shape, the offset read from memory, or the line that uses the tile after
    the loop; the loop's note says the same. The results match numpy (tile interpreter and thread interpreter)."""
    line, use, loop = (_line(_kept_in_place, t) for t in (f"# {case}", "# the use after the loop", "T.Pipelined("))
    why = {"part": "it fills A_s[:48, :32], 48x32 of the 64x32 tile, from 'A' (128x128); only a whole tile's copy "
                   "goes ahead",
           "index": "its offset in 'A' is read from memory (I[k])",
           "after": f"'A_s' is used outside the loop, at line {use}"}[case]
    kernel = tilec.JITKernel(_kept_in_place(case), "simt:sm_90a", pass_configs=TMA)
    notes = _notes(kernel)
    assert [n for n in notes if "disable_tma=True has no effect" in n] == [
        f"T.copy at line {line}: disable_tma=True has no effect: TMA would not move it: it stays in its iteration of "
        f"the T.Pipelined loop at line {loop}: {why}"], kernel.report()
    assert f"T.Pipelined at line {loop}: the copy at line {line} stays in its iteration: {why}" in notes, notes
    a, b = randn(rng, (128, 128), "float16"), randn(rng, (128, 64), "float16")
    idx = rng.permutation(4).astype(np.int32) if case == "index" else np.arange(4, dtype=np.int32)
    tiles = [a[:, i * 32:(i + 1) * 32].astype(np.float64) for i in idx]
    if case == "part":
        tiles = [np.concatenate([t.reshape(2, 64, 32)[:, :48], np.zeros((2, 16, 32))], 1).reshape(128, 32)
                 for t in tiles]
    want = sum(t @ b[k * 32:(k + 1) * 32].astype(np.float64) for k, t in enumerate(tiles))
    for k in (kernel, tilec.JITKernel(_kept_in_place(case), "cpu")):
        c, d = poisoned((128, 64), "float16"), poisoned((128, 32), "float16")
        k(a, b, c, idx, d)
        assert_close(c, want, "float16")
        assert_close(d, tiles[-1], "float16")
