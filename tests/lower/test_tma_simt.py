"""TMA pipelines (pass configs ``wgmma`` + ``tma``, target ``simt:sm_90a``) run by the thread interpreter against
float64 numpy. The interpreter emulates TMA boxes (out-of-bounds zero fill, the swizzle on the written addresses) and
mbarrier phases from the PTX ISA, so a missing or wrong wait, arrival or barrier is a named error; the tests remove
each one from the lowered kernel and check that the hazard is reported."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import assert_close, example_line, load_example, randn

import tilec
import tilec.language as T
from tilec.errors import RaceError

from .helpers import tile_in_two_copies

TMA = {"wgmma": True, "tma": True}
WS = {**TMA, "warp_specialize": True}  # and a producer warpgroup: the interpreter runs both roles as coroutines


def _tma_note(kernel: tilec.JITKernel) -> str:
    return next((line for line in kernel.report().splitlines() if "T.Pipelined" in line and "stages" in line), "")


def _ws_note(kernel: tilec.JITKernel) -> str:
    return next((line for line in kernel.report().splitlines() if "warp-specialized" in line), "")


def _check_feed(kernel: tilec.JITKernel, ws: bool, tma_text: str, ws_text: str) -> None:
    if ws:
        assert ws_text in _ws_note(kernel)
        tk = kernel.state.artifacts["thread_ir"]
        assert tk.threads == kernel.prim_func.launch.num_threads + 128 and tk.min_blocks == 1
    else:
        assert tma_text in _tma_note(kernel)


GEMM = [  # (M, N, K, tile kwargs): ragged in every dimension, several stages, two warpgroups, panels of B, bf16
    (100, 72, 80, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2}),
    (130, 200, 64, {"block_M": 128, "block_N": 128, "block_K": 32, "threads": 256, "num_stages": 3}),
    (64, 80, 48, {"block_M": 64, "block_N": 128, "block_K": 16, "dtype": "bfloat16", "num_stages": 3}),
    (70, 256, 72, {"block_M": 64, "block_N": 256, "block_K": 32, "threads": 256, "num_stages": 2}),
]


@pytest.mark.parametrize("ws", [False, True], ids=["tma", "tma ws"])
@pytest.mark.parametrize(("M", "N", "K", "tiles"), GEMM, ids=lambda x: str(x) if not isinstance(x, dict) else "")
def test_tma_gemm(rng, M, N, K, tiles, ws):
    kernel = tilec.JITKernel(load_example("01_gemm").matmul(M, N, K, **tiles).prim_func, "simt:sm_90a", [-1],
                             pass_configs=WS if ws else TMA)
    _check_feed(kernel, ws, "with TMA on", "a producer warpgroup issues TMA copies")
    dtype = tiles.get("dtype", "float16")
    a, b = randn(rng, (M, K), dtype), randn(rng, (K, N), dtype)
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), dtype)


@pytest.mark.parametrize("feed", ["tma", "tma ws", "tma ws rotated", "tma ws rotated one ring", "tma ws pingpong"])
@pytest.mark.parametrize(("n", "causal"), [(100, False), (100, True), (64, False), (200, True)])
def test_tma_flash_attention(rng, n, causal, feed):
    """Ragged, causal, and one key block (the rotated loop's steady part runs no trip); rotated: the PV gemm of
    iteration k-1 after the QK^T gemm of k, each waiting for its wgmma group only where its results are read, V on
    an mbarrier ring of its own (two stages of K and two of V), or with K in one ring of three stages (split_rings
    off); pingpong: two consumer warpgroups taking turns (named barriers) around their gemms."""
    fa = load_example("03_flash_attention")
    b, h, d = 1, 2, 64
    configs = {"tma": TMA, "tma ws": {**WS, "rotate": False},
               "tma ws rotated one ring": {**WS, "split_rings": False}}.get(feed, WS)
    two = feed == "tma ws pingpong"
    kernel = tilec.JITKernel(fa.flash_attention(b, h, n, d, causal, block_M=128 if two else 64, block_N=64,
                                                threads=256 if two else 128, num_stages=2).prim_func,
                             "simt:sm_90a", [3], pass_configs=configs)
    rotated = feed.startswith(("tma ws rotated", "tma ws pingpong"))
    split = "K_s x2, V_s x2 (16384 bytes a stage) on 2 full/empty mbarrier pairs for each of 2 rings (8192 bytes a " \
        "stage, then 8192 bytes a stage)"
    _check_feed(kernel, feed != "tma", "K_s x2, V_s x2 with TMA",
                "K_s x3, V_s x3" if feed.endswith("one ring") else split if rotated else "release each stage after it")
    assert ("runs one iteration late" in kernel.report()) == rotated
    assert ("take turns" in kernel.report()) == two
    q, k, v = (randn(rng, (b, h, n, d), "float16") for _ in range(3))
    assert_close(kernel(q, k, v), fa.reference(q, k, v, causal), "float16",
                 scale=float(np.abs(v.astype(np.float64)).max()))


def test_split_ring_hazards_are_named(rng):
    """The rotated loop's ring of V stages: without the consumers' waits on it, PV reads V before its copy landed;
    released right after the wait (before the late PV gemm read the stage), the producer's copy of V two iterations
    on may land while that gemm still reads it."""
    from tilec.ir.stmt import BarrierArrive, BarrierWait, SeqStmt
    from tilec.ir.visit import transform
    from tilec.lower.tir import Group, MbarWait, Seq, seq

    fa = load_example("03_flash_attention")
    g = fa.flash_attention(1, 1, 256, 64, False, block_M=64, block_N=64, threads=128, num_stages=2).prim_func
    kernel = tilec.JITKernel(g, "simt:sm_90a", [3], pass_configs=WS)
    tk = kernel.state.artifacts["thread_ir"]
    q, k, v = (randn(rng, (1, 1, 256, 64), "float16") for _ in range(3))
    _run_thread_ir(kernel, tk, q, k, v)

    def late_wait(c) -> bool:
        return isinstance(c, Group) and any(isinstance(n, MbarWait) and n.bar.name == "k_late_full"
                                            for n in _walk(c.body))

    def no_late_waits(node):
        if isinstance(node, Seq) and any(late_wait(c) for c in node.stmts):
            return seq([c for c in node.stmts if not late_wait(c)] or [Seq(())])
        return None

    with pytest.raises(RaceError, match="wgmma reads V_s before the asynchronous copy writing it has landed"):
        _run_thread_ir(kernel, _edit(tk, no_late_waits), q, k, v)

    def at(stmts, cls, name) -> int | None:
        return next((i for i, c in enumerate(stmts) if isinstance(c, cls) and c.barrier.buffer.name == name), None)

    def early(node):  # the steady trip's release of V right after its wait
        if isinstance(node, SeqStmt):
            stmts = list(node.stmts)
            w, r = at(stmts, BarrierWait, "k_late_full"), at(stmts, BarrierArrive, "k_late_empty")
            if w is not None and r is not None and w < r:
                stmts.insert(w + 1, stmts.pop(r))
                return SeqStmt(tuple(stmts), loc=node.loc)
        return None

    bad = transform(kernel.state.func, early)
    assert bad is not kernel.state.func
    with pytest.raises(RaceError, match=r"TMA copy into V_s\[\d+\] while thread \d+ may still read it: its read came "
                                        r"after the release this copy waited for"):
        tilec.JITKernel(bad, "simt:sm_90a", [3], pass_configs=WS)(q, k, v)


def test_wgmma_waits_wait_for_the_first_reader(rng):
    """A wgmma gemm's wait moves down to the first statement that reads its registers: past T.copy(m, m_prev) in
    the plain loop; in the rotated one the softmax waits for QK^T with wait_group 1 (PV still running) and the
    write of P for PV. Retiring one group fewer at any of those waits is a hazard the interpreter names."""
    from tilec.lower.tir import WgmmaWait

    fa = load_example("03_flash_attention")
    plain = tilec.JITKernel(fa.flash_attention(1, 1, 200, 64, False, block_M=64, block_N=64, threads=128,
                                               num_stages=2).prim_func, "cuda:sm_90a", [3], pass_configs=TMA)
    src = plain.get_kernel_source()
    issued = src.index("wgmma.commit_group")  # QK^T's group
    assert issued < src.index("T.copy(m, m_prev)", issued) < src.index("wgmma.wait_group", issued)
    rotated = tilec.JITKernel(fa.flash_attention(1, 1, 200, 64, False, block_M=64, block_N=64, threads=128,
                                                 num_stages=2).prim_func, "simt:sm_90a", [3], pass_configs=WS)
    tk = rotated.state.artifacts["thread_ir"]
    assert sorted({n.n for n in _walk(tk.body) if isinstance(n, WgmmaWait)}) == [0, 1]
    q, k, v = (randn(rng, (1, 1, 200, 64), "float16") for _ in range(3))
    _run_thread_ir(rotated, tk, q, k, v)
    later = _edit(tk, lambda n: dataclasses.replace(n, n=n.n + 1) if isinstance(n, WgmmaWait) else None)
    with pytest.raises(RaceError, match="while the wgmma is in flight"):
        _run_thread_ir(rotated, later, q, k, v)


def test_deferred_wgmma_wait_is_anchored_below_the_softmax():
    """With ``wgmma_wait_anchor`` the rotated loop's wait for PV(k-1), after the softmax's exponentials and sums, is
    preceded by a store to a shared word under the condition ``l[0] != l[0]`` (a NaN: in practice it never runs, and
    nothing reads the word): ptxas keeps a wgmma wait below a store but otherwise moves it up to the first
    max-reduction (perf notes AF: the anchored kernel measured slower, so it is off by default)."""
    fa = load_example("03_flash_attention")
    g = fa.flash_attention(1, 1, 256, 128, False, block_M=128, block_N=128, threads=256, num_stages=2).prim_func
    plain = tilec.JITKernel(g, "cuda:sm_90a", [3], pass_configs=WS)
    assert "wait_anchor" not in plain.get_kernel_source()
    kernel = tilec.JITKernel(g, "cuda:sm_90a", [3], pass_configs={**WS, "wgmma_wait_anchor": True})
    lines = kernel.get_kernel_source().splitlines()
    anchors = [i for i, line in enumerate(lines) if "(l[0] != l[0])" in line and "wait_anchor" in line]
    assert anchors
    for i in anchors:
        assert "wgmma.wait_group.sync.aligned 0" in lines[i + 1]
        qk_wait = max(j for j in range(i) if "wgmma.wait_group.sync.aligned 1" in lines[j])
        assert any("tl::exp2(S[" in line for line in lines[qk_wait:i])


def test_pingpong_turns_must_pair_up(rng):
    """A warpgroup that never hands its turn on leaves the next one waiting: the interpreter names the barrier."""
    import dataclasses

    from tilec.ir.stmt import WarpgroupTurn
    from tilec.ir.visit import transform

    fa = load_example("03_flash_attention")
    kernel = tilec.JITKernel(fa.flash_attention(1, 1, 200, 64, False, block_M=128, block_N=64, threads=256,
                                                num_stages=2).prim_func, "simt:sm_90a", [3], pass_configs=WS)
    func = kernel.state.func
    dropped = transform(func, lambda n: dataclasses.replace(n, edge=False) if isinstance(n, WarpgroupTurn) and
                        n.give and n.edge else None)
    assert dropped is not func
    bad = tilec.JITKernel(dropped, "simt:sm_90a", [3], pass_configs=WS)
    q, k, v = (randn(rng, (1, 1, 200, 64), "float16") for _ in range(3))
    with pytest.raises(RaceError, match="named barrier 2: 512 threads waited and 640 arrived"):
        bad(q, k, v)


@pytest.mark.parametrize("ws", [False, True], ids=["tma", "tma ws"])
def test_tma_mla_decode(rng, ws):
    """Rank-4 tensors: each 64 x 512 latent tile is eight 128-byte-swizzled boxes; the rank-3 output's 64 x 512 tile
    leaves by eight TMA stores of the same swizzle."""
    mla = load_example("07_mla_decode")
    b, h, kvh, s = 1, 128, 2, 100
    kernel = tilec.JITKernel(mla.mla_decode(b, h, kvh, s, num_stages=2).prim_func, "simt:sm_90a", [4],
                             pass_configs=WS if ws else TMA)
    _check_feed(kernel, ws, "with TMA", "2 consumer warpgroup(s)")
    maps = kernel.state.artifacts["thread_ir"].tensor_maps
    assert {m.box for m in maps} == {(64, 1, 64, 1), (64, 64, 1)} and {m.swizzle for m in maps} == {128}
    q, q_pe = (randn(rng, (b, h, d), "float16") for d in (512, 64))
    kv, k_pe = (randn(rng, (b, s, kvh, d), "float16") for d in (512, 64))
    assert_close(kernel(q, q_pe, kv, k_pe), mla.reference(q, q_pe, kv, k_pe), "float16",
                 scale=float(np.abs(kv.astype(np.float64)).max()))


def test_tma_fp8_gemm(rng):
    fp8 = load_example("06_fp8_gemm")
    M, N, K = 100, 72, 160
    a, sa = fp8.quantize(rng.standard_normal((M, K)), 1)
    b, sb = fp8.quantize(rng.standard_normal((N, K)), 1)
    kernel = tilec.JITKernel(fp8.fp8_matmul(M, N, K, block_M=64, block_N=64, block_K=64, num_stages=2).prim_func,
                             "simt:sm_90a", [-1], pass_configs=TMA)
    assert "with TMA" in _tma_note(kernel)
    ref = (a.astype(np.float64) @ b.astype(np.float64).T) * sa[:, None] * sb[None, :]
    out = kernel(a, b, sa, sb).astype(np.float64)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 8e-3


def test_tma_needs_its_pass_config_and_sm_90a():
    g = load_example("01_gemm").matmul(128, 128, 128, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    assert "TMA" not in _tma_note(tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs={"wgmma": True, "tma": False}))
    assert "TMA" not in _tma_note(tilec.JITKernel(g, "simt:sm_80", [-1], pass_configs=TMA))


# -------------------------------------------------------------------------------------------- when TMA is refused


def _refusal(kernel_fn) -> str:
    """The note refusing TMA: the whole loop's (cp.async, not TMA), or a copy's that goes by cp.async into the TMA
    ring's stages while the loop's other copies stay TMA copies."""
    kernel = tilec.JITKernel(kernel_fn, "simt:sm_90a", [-1], pass_configs=TMA)
    return next(line for line in kernel.report().splitlines() if "not TMA" in line or "cannot be a TMA copy" in line)


def test_tma_refused_for_dynamic_shapes():
    M = T.dynamic("M")

    @T.prim_func
    def main(A: T.Tensor((M, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((M, 64), "float16")):
        with T.Kernel(T.ceildiv(M, 64), threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(2, num_stages=2):
                T.copy(A[bx * 64, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[bx * 64, 0])

    assert "compile-time sizes" in _refusal(main)


def test_tma_refused_when_a_tile_feeds_more_than_gemm():
    @T.prim_func
    def main(A: T.Tensor((64, 128), "float16"), B: T.Tensor((128, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            S_f = T.alloc_fragment((64, 32), "float32")
            T.clear(C_f)
            T.clear(S_f)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[0, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                for i, j in T.Parallel(64, 32):
                    S_f[i, j] += A_s[i, j]
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[0, 0])

    assert "'A_s' is read by something other than T.gemm" in _refusal(main)


def test_tma_refused_for_unaligned_rows():
    """Rows of 100 bytes: TMA needs 16-byte multiple strides, so A's copy goes by cp.async (B's 128-byte rows by
    TMA)."""
    g = load_example("01_gemm").matmul(64, 64, 50, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    assert "not a multiple of 16" in _refusal(g)


# ------------------------------------------------------------------------------------------- hazards are named


def _run_thread_ir(kernel: tilec.JITKernel, tk, *arrays) -> None:
    from tilec.backends.simt import SimtExecutable
    from tilec.runtime.args import allocate_like, bind

    SimtExecutable(tk, kernel.prim_func)(bind(kernel.prim_func, arrays, "cpu", allocate_like))


def _edit(tk, fn):
    from tilec.ir.visit import transform

    return dataclasses.replace(tk, body=transform(tk.body, fn))


def _drop(cls):
    """Remove every statement of class ``cls`` (with the tile op's group holding it)."""
    from tilec.lower.tir import Group, Seq, seq

    def hit(c) -> bool:
        return isinstance(c, cls) or isinstance(c, Group) and any(isinstance(n, cls) for n in _walk(c.body))

    def fn(node):
        if isinstance(node, Seq) and any(hit(c) for c in node.stmts):
            return seq([c for c in node.stmts if not hit(c)] or [Seq(())])
        return None

    return fn


def _flip_parity(node):
    from tilec.ir.expr import binop
    from tilec.lower.tir import MbarWait

    return dataclasses.replace(node, parity=binop("-", 1, node.parity)) if isinstance(node, MbarWait) else None


def _hazards():
    from tilec.lower.tir import MbarArriveTx, MbarWait

    return [
        (_drop(MbarWait), r"wgmma reads [AB]_s before the asynchronous copy writing it has landed"),
        (_flip_parity, r"a wait for phase parity 1 that nothing can complete .* a deadlock"),
        (_drop(MbarArriveTx), r"a wait for phase parity 0 that nothing can complete"),
    ]


def _walk(node):
    from tilec.ir.visit import walk

    return walk(node)


def test_tma_needs_the_barrier_before_overwriting_a_stage(rng):
    """Two warpgroups: without the barrier before a trip's copies, thread 0's TMA may overwrite the stage the other
    warpgroup's wgmma read (the interpreter tracks wgmma reads per warpgroup)."""
    from tilec.lower.tir import Loop, Sync

    g = load_example("01_gemm").matmul(128, 64, 256, block_M=128, block_N=64, block_K=32, threads=256,
                                       num_stages=2).prim_func
    kernel = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs=TMA)
    tk = kernel.state.artifacts["thread_ir"]
    a, b = randn(rng, (128, 256), "float16"), randn(rng, (256, 64), "float16")
    _run_thread_ir(kernel, tk, a, b)
    no_sync = _edit(tk, lambda n: dataclasses.replace(n, body=_edit_body(n.body, _drop(Sync)))
                    if isinstance(n, Loop) else None)
    with pytest.raises(RaceError, match=r"race on shared [AB]_s\[\d+\]: thread 0 writes what thread 128 read"):
        _run_thread_ir(kernel, no_sync, a, b)


def _edit_body(body, fn):
    from tilec.ir.visit import transform

    return transform(body, fn)


@pytest.mark.parametrize("case", range(3), ids=["no wait", "wrong parity", "no arrival"])
def test_tma_hazards_are_named(rng, case):
    edit, hazard = _hazards()[case]
    g = load_example("01_gemm").matmul(64, 64, 128, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    kernel = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs=TMA)
    tk = kernel.state.artifacts["thread_ir"]
    a, b = randn(rng, (64, 128), "float16"), randn(rng, (128, 64), "float16")
    _run_thread_ir(kernel, tk, a, b)  # as lowered: no hazard
    with pytest.raises(RaceError, match=hazard):
        _run_thread_ir(kernel, _edit(tk, edit), a, b)


# ---------------------------------------------------------------------------------------- warp specialization

@pytest.mark.parametrize(("configs", "threads", "producer", "consumer"), [
    ({}, 256, 40, 232), ({"producer_regs": 24}, 256, 24, 240), ({"producer_regs": 56}, 256, 56, 224),
    ({}, 384, 24, 160), ({"producer_regs": 40}, 384, 40, 152)])
def test_ws_registers_move_to_the_consumers(configs, threads, producer, consumer):
    """Two consumer warpgroups: 168 registers a thread at launch (384 threads), 40 for the producer, 232 for them;
    pass config ``producer_regs`` moves the split (the consumers' share capped at 240). Three: 128 at launch (512
    threads), the producer at 24 unless told otherwise."""
    from tilec.lower.tir import Roles

    g = load_example("01_gemm").matmul(384, 256, 256, block_M=threads // 2, block_N=256, block_K=64, threads=threads,
                                       num_stages=3).prim_func
    kernel = tilec.JITKernel(g, "cuda:sm_90a", [-1], pass_configs={**WS, **configs})
    roles = next(n for n in _walk(kernel.state.artifacts["thread_ir"].body) if isinstance(n, Roles))
    assert (roles.producer_regs, roles.consumer_regs) == (producer, consumer)
    src = kernel.get_kernel_source()
    assert f"__launch_bounds__({threads + 128}, 1)" in src and f"setmaxnreg.inc.sync.aligned.u32 {consumer};" in src
    assert f"setmaxnreg.dec.sync.aligned.u32 {producer};" in src
    assert "__syncthreads" not in src.split("the producer warpgroup")[1]  # after the split: named barriers only


@pytest.mark.parametrize("value", [20, 44, 264, True, "24"])
def test_producer_regs_must_be_a_setmaxnreg_count(value):
    g = load_example("01_gemm").matmul(256, 256, 256, block_M=128, block_N=256, block_K=64, threads=256).prim_func
    with pytest.raises(tilec.TilecValueError, match=r"pass config 'producer_regs' takes a multiple of 8 from 24 to "
                                                    rf"256, got {value!r}"):
        tilec.JITKernel(g, "cuda:sm_90a", [-1], pass_configs={**WS, "producer_regs": value})


def test_ws_needs_the_loop_at_the_top_level():
    @T.prim_func
    def main(A: T.Tensor((2, 64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for r in T.serial(2):
                for k in T.Pipelined(2, num_stages=2):
                    T.copy(A[r, 0, k * 32], A_s)
                    T.copy(B[k * 32, 0], B_s)
                    T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[0, 0])

    kernel = tilec.JITKernel(main, "simt:sm_90a", [-1], pass_configs=WS)
    assert "not warp-specialized: the loop is not at the kernel's top level" in kernel.report()
    assert "with TMA on" in _tma_note(kernel)  # still a TMA pipeline


def test_ws_deadlock_without_releases(rng):
    """Without the consumers' releases the producer waits forever for a free stage: a named deadlock."""
    from tilec.lower.tir import MbarArriveTx

    g = load_example("01_gemm").matmul(64, 64, 256, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    kernel = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs=WS)
    tk = kernel.state.artifacts["thread_ir"]
    a, b = randn(rng, (64, 256), "float16"), randn(rng, (256, 64), "float16")
    _run_thread_ir(kernel, tk, a, b)
    def only_releases(node):  # the consumers' arrivals carry no transaction bytes
        from tilec.lower.tir import Group, Seq

        if isinstance(node, Group) and any(isinstance(n, MbarArriveTx) and n.tx == 0 for n in _walk(node)):
            return Seq(())
        return None

    with pytest.raises(RaceError, match=r"k_empty\[\d\]: a wait for phase parity \d that nothing can complete"):
        _run_thread_ir(kernel, _edit(tk, only_releases), a, b)


MMA_WS = {"wgmma": False, "tma": True, "warp_specialize": True}  # mma.sync consumers: each warp reads with ldmatrix


@pytest.mark.parametrize(("M", "N", "K", "tiles"), [
    (100, 72, 80, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2}),
    (130, 200, 96, {"block_M": 128, "block_N": 128, "block_K": 32, "threads": 256, "num_stages": 3}),
])
def test_ws_mma_gemm(rng, M, N, K, tiles):
    """Warp specialization with mma.sync consumers: every consumer warp releases each stage (its ldmatrix reads)."""
    kernel = tilec.JITKernel(load_example("01_gemm").matmul(M, N, K, **tiles).prim_func, "simt:sm_90a", [-1],
                             pass_configs=MMA_WS)
    _check_feed(kernel, True, "", "whose warps release each stage after it")
    assert "mma" in kernel.report() and "wgmma" not in kernel.report()
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")


def test_ws_release_must_speak_for_its_threads(rng):
    """A stage released by one thread for others that read it (ldmatrix) needs those threads synchronized with it:
    without the __syncwarp, or with one arrival per warpgroup instead of per warp (the warps of a warpgroup do not
    run in step under mma.sync), the interpreter names the unordered reads."""
    from tilec.ir.expr import binop
    from tilec.lower.tir import If, MbarArriveTx, MbarInit, SyncWarp

    g = load_example("01_gemm").matmul(64, 64, 128, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    kernel = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs=MMA_WS)
    tk = kernel.state.artifacts["thread_ir"]
    a, b = randn(rng, (64, 128), "float16"), randn(rng, (128, 64), "float16")
    _run_thread_ir(kernel, tk, a, b)
    with pytest.raises(RaceError, match=r"k_empty\[\d\] is released by thread\(s\) \[0, 32, 64, 96\] while thread 1 "
                                        r"accessed shared memory .* nothing synchronized it"):
        _run_thread_ir(kernel, _edit(tk, _drop(SyncWarp)), a, b)

    def per_warpgroup(node):  # the old scheme: thread 0 of each warpgroup arrives, the barrier expects one each
        if isinstance(node, If) and isinstance(node.then_body, MbarArriveTx) and node.then_body.tx == 0:
            return dataclasses.replace(node, cond=binop("==", binop("%", tk.tx, 128), 0))
        if isinstance(node, MbarInit) and node.count == 4:
            return dataclasses.replace(node, count=1)
        return None

    with pytest.raises(RaceError, match=r"released by thread\(s\) \[0\] while thread 32 .* its warp synchronized, "
                                        r"but no thread of it arrives"):
        _run_thread_ir(kernel, _edit(tk, per_warpgroup), a, b)


# ------------------------------------------------------------------------------------------- persistent kernels


@pytest.mark.parametrize(("M", "N", "K", "tiles", "blocks"), [
    (200, 200, 80, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2}, 3),  # 16 tiles on 3 blocks
    (300, 264, 104, {"block_M": 128, "block_N": 64, "block_K": 32, "threads": 256, "num_stages": 3}, 5),
])
def test_persistent_gemm(rng, M, N, K, tiles, blocks):
    """Every block loops over tiles b, b + P, ...: the mbarrier rings run on across tiles (parity from the global
    iteration), and the producer loads the next tile while the consumers store the last one."""
    kernel = tilec.JITKernel(load_example("01_gemm").matmul(M, N, K, **tiles).prim_func, "simt:sm_90a", [-1],
                             pass_configs={**WS, "persistent": blocks})
    assert f"persistent, {blocks} blocks loop over the tiles" in kernel.report()
    tk = kernel.state.artifacts["thread_ir"]
    assert [int(g.value) for g in tk.grid] == [blocks]
    dtype = tiles.get("dtype", "float16")
    a, b = randn(rng, (M, K), dtype), randn(rng, (K, N), dtype)
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), dtype)


@pytest.mark.parametrize("order", ["row", "column"])
def test_persistent_tiles_follow_the_rasterization(rng, order):
    """With T.use_swizzle (set here on the example's kernel) a persistent block's tiles come in panels: 2 grid rows
    (or columns) at a time, the ragged last panel of 1; every tile is computed once (outputs start as NaN)."""
    import dataclasses

    g = load_example("01_gemm").matmul(300, 520, 64, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    g = dataclasses.replace(g, body=dataclasses.replace(g.launch, swizzle=(2, order)))  # 9 x 5 tiles
    kernel = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs={**WS, "persistent": 4})
    assert f"persistent, 4 blocks loop over the tiles of the grid in panels of 2 {order}s (T.use_swizzle)" in \
        kernel.report()
    text = tilec.dump(kernel, after="pipelining")
    span = {"row": "// 18 * 2", "column": "// 10 * 2"}[order]  # a panel: 2 grid rows of 9 tiles (columns of 5)
    assert "T.use_swizzle" not in text and span in text
    a, b = randn(rng, (300, 64), "float16"), randn(rng, (64, 520), "float16")
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")


@pytest.mark.parametrize(("stream_k", "serpentine"), [(False, False), (True, False), (False, True)])
def test_persistent_fp8_gemm_in_panels(rng, stream_k, serpentine):
    """The fp8 example with its ``panel`` argument on persistent blocks: 4 x 6 tiles on 5 blocks in panels of 2
    rows, the row and column scales applied after the loop (after stream-K's partial sums are added, where the last
    4 tiles are shared out; with ``k_serpentine`` odd rounds take their k-tiles in descending order); ragged M and N."""
    fp8 = load_example("06_fp8_gemm")
    M, N, K = 200, 328, 512
    a, sa = fp8.quantize(rng.standard_normal((M, K)), 1)
    b, sb = fp8.quantize(rng.standard_normal((N, K)), 1)
    g = fp8.fp8_matmul(M, N, K, block_M=64, block_N=64, block_K=64, num_stages=2, panel=2).prim_func
    kernel = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs={**WS, "persistent": 5, "stream_k": stream_k,
                                                                    "k_serpentine": serpentine})
    report = kernel.report()
    assert "persistent, 5 blocks loop over the tiles of the grid in panels of 2 rows (T.use_swizzle)" in report
    assert ("the last 4 tiles shared out" in report) == stream_k
    assert ("loads odd rounds' k-tiles in descending order" in report) == serpentine
    ref = (a.astype(np.float64) @ b.astype(np.float64).T) * sa[:, None] * sb[None, :]
    out = kernel(a, b, sa, sb).astype(np.float64)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 8e-3


def test_persistent_needs_warp_specialization():
    g = load_example("01_gemm").matmul(300, 264, 100, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    kernel = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs={**WS, "persistent": 4})  # rows of 200 bytes
    assert "not persistent: that needs a warp-specialized TMA pipeline" in kernel.report()
    assert len(kernel.state.artifacts["thread_ir"].grid) == 2


@pytest.mark.parametrize(("configs", "notes"), [
    ({**TMA, "persistent": 3}, ["not persistent: pass config 'persistent' needs warp_specialize"]),
    ({**TMA, "persistent": 3, "stream_k": True}, ["not persistent: pass config 'persistent' needs warp_specialize",
                                                  "not stream-K: pass config 'stream_k' needs a persistent kernel"]),
    ({**WS, "stream_k": True}, ["not stream-K: pass config 'stream_k' needs a persistent kernel"]),
])
def test_persistent_and_stream_k_without_what_they_need_say_so(configs, notes):
    """persistent without warp_specialize, stream_k without persistent: dropped without a word before (consumers and
    cluster say why in the same case)."""
    g = load_example("01_gemm").matmul(256, 256, 512, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    kernel = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs=configs)
    line = example_line("01_gemm", "with T.Kernel")
    for note in notes:
        assert f"T.Kernel at line {line}: {note}" in kernel.report()
    assert len(kernel.state.artifacts["thread_ir"].grid) == 2


@pytest.mark.parametrize(("target", "configs", "why"), [
    ("simt:sm_90a", {**TMA, "tma": False, "warp_specialize": True}, "pass config 'tma' is off"),
    ("simt:sm_80", WS, "simt:sm_80 has no TMA (sm_90a only)"),
    ("simt:gfx90a", WS, "simt:gfx90a has no TMA (sm_90a only)"),
])
def test_warp_specialize_without_tma_says_so(rng, target, configs, why):
    """warp_specialize where no TMA pipeline is built (tma off, or a target without TMA) was dropped without a word,
    though the README says report() tells why a pass declined a config; the kernel still runs, unspecialized."""
    g = load_example("01_gemm").matmul(100, 72, 96, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    kernel = tilec.JITKernel(g, target, [-1], pass_configs=configs)
    line = example_line("01_gemm", "with T.Kernel")
    assert f"T.Kernel at line {line}: not warp-specialized: pass config 'warp_specialize' needs a TMA pipeline " \
           f"and {why}" in kernel.report()
    a, b = randn(rng, (100, 96), "float16"), randn(rng, (96, 72), "float16")
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")


@pytest.mark.parametrize("target", ["cuda:sm_80", "cuda:sm_89", "hip:gfx90a", "simt:sm_90a"])
def test_pdl_where_it_cannot_apply_says_so(target):
    """pass_configs={"pdl": True} on a target without programmatic dependent launches (before sm_90, AMD, the thread
    interpreter) was ignored without a note; a cuda:sm_90a kernel notes the launch, and the default asks nothing."""
    g = load_example("01_gemm").matmul(256, 256, 128, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    note = f"pass config 'pdl' has no effect on {target}: programmatic dependent launches need CUDA on sm_90"
    assert note in tilec.JITKernel(g, target, [-1], pass_configs={"pdl": True}).report()
    assert "pass config 'pdl'" not in tilec.JITKernel(g, target, [-1]).report()
    assert "pass config 'pdl'" not in tilec.JITKernel(g, "cuda:sm_90a", [-1], pass_configs={"pdl": True}).report()


def test_one_stage_says_it_is_no_tma_pipeline(rng):
    """num_stages=1 keeps the plain loop: no TMA, no producer warpgroup, not persistent. The report said nothing of
    TMA or warp specialization (the persistent note pointed at 'the notes above', which had none)."""
    g = load_example("01_gemm").matmul(128, 128, 128, block_M=64, block_N=64, block_K=32, num_stages=1).prim_func
    kernel = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs={**WS, "persistent": 3})
    line = example_line("01_gemm", "for k in T.Pipelined")
    assert f"T.Pipelined at line {line}: num_stages=1: a plain loop, not a TMA pipeline (its copies overlap nothing; " \
           "TMA and warp specialization need 2 stages or more)" in kernel.report()
    assert "not persistent: that needs a warp-specialized TMA pipeline" in kernel.report()
    a, b = randn(rng, (128, 128), "float16"), randn(rng, (128, 128), "float16")
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")
    assert "num_stages" not in tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs={"wgmma": True, "tma": False})\
        .report()


def test_persistent_refused_when_a_tile_may_run_no_trip(rng):
    """A pipelined loop of ``by`` trips (none in the first row of tiles): persistent blocks would pass the
    warpgroups' turns on through tiles without gemms, so the kernel stays non-persistent and says why."""
    M, N, K, bm, bn, bk = 192, 128, 192, 64, 64, 32

    @T.prim_func
    def staircase(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(N // bn, M // bm, threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(by * 2, num_stages=2):  # row block r sums K's first 64 r columns
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    kernel = tilec.JITKernel(staircase, "simt:sm_90a", [2], pass_configs={**WS, "persistent": 2})
    assert "not persistent: the trip count of the T.Pipelined loop at line" in kernel.report()
    assert "depends on the tile and may be zero" in kernel.report()
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    ref = np.concatenate([a[r * bm:(r + 1) * bm, : r * 64].astype(np.float64) @ b[: r * 64].astype(np.float64)
                          for r in range(M // bm)])
    assert_close(kernel(a, b), ref, "float16")


@pytest.mark.parametrize(("d", "block_N"), [(64, 128), (128, 64)])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_with_three_consumer_warpgroups(rng, d, block_N, causal):
    """192-row tiles on three consumer warpgroups taking turns (named barriers for three), persistent on 3 blocks:
    S = 520 gives 3 row tiles, the last partial, and key blocks whose last is partial; Q stays in shared memory
    (512 threads leave too few registers for it) and the producer keeps 24 registers."""
    fa = load_example("03_flash_attention")
    kernel = tilec.JITKernel(fa.flash_attention(1, 2, 520, d, causal, block_M=192, block_N=block_N, threads=384,
                                                num_stages=2).prim_func, "simt:sm_90a", [3],
                             pass_configs={**WS, "persistent": 3})
    report = kernel.report()
    assert "3 consumer warpgroup(s)" in report and "the 3 consumer warpgroups take turns" in report
    assert "'Q_s' stays in shared memory" in report
    assert "setmaxnreg.dec.sync.aligned.u32 24;" in kernel.get_kernel_source()
    q, k, v = (randn(rng, (1, 2, 520, d), "float16") for _ in range(3))
    assert_close(kernel(q, k, v), fa.reference(q, k, v, causal), "float16",
                 scale=float(np.abs(v.astype(np.float64)).max()))


@pytest.mark.parametrize(("causal", "heads", "blocks", "order"), [
    (False, 1, 2, "balanced"), (True, 1, 2, "serpentine"), (True, 3, 4, "serpentine"), (True, 1, 2, "balanced"),
    (True, 3, 4, "balanced"), (True, 5, 4, "balanced")])
def test_persistent_attention(rng, causal, heads, blocks, order):
    """Persistent flash attention: blocks over row blocks of 3 key blocks each, or of 5, 4 and 2 when causal (the
    longest first); the producer loads each tile's Q by TMA, two versions of it in shared memory (where it stays for
    QK^T with ``operand_registers`` off; on, see the next test). A causal tile's
    trip count depends on the tile: the ring counts iterations in a register and the tiles come in serpentine order
    (3 heads: 9 tiles over 4 blocks, the last round only partly taken) or from a table balancing the blocks' work
    (where blocks run different numbers of tiles: 15 tiles over 4 blocks)."""
    fa = load_example("03_flash_attention")
    kernel = tilec.JITKernel(fa.flash_attention(1, heads, 300, 64, causal, block_M=128, block_N=64, threads=256,
                                                num_stages=2).prim_func, "simt:sm_90a", [3],
                             pass_configs={**WS, "persistent": blocks, "tile_order": order,
                                           "operand_registers": False})
    assert f"persistent, {blocks} blocks loop over the tiles" in kernel.report()
    assert ("in serpentine order" in kernel.report()) == (causal and order == "serpentine")
    assert ("in the balanced order" in kernel.report()) == (causal and order == "balanced")
    assert "the producer warpgroup loads 'Q_s' by TMA (16384 bytes) before the loop, the next tile's beside this " \
           "one's (two versions)" in kernel.report()
    q, k, v = (randn(rng, (1, heads, 300, 64), "float16") for _ in range(3))
    assert_close(kernel(q, k, v), fa.reference(q, k, v, causal), "float16",
                 scale=float(np.abs(v.astype(np.float64)).max()))


@pytest.mark.parametrize(("causal", "configs", "explicit", "note"), [
    (False, {**WS, "persistent": 3}, True, "read into 'Q_x' there, again once the consumers are done with it"),
    (True, {**WS, "persistent": 3}, True, "read into 'Q_x' there, again once the consumers are done with it"),
    (False, WS, True, "read into 'Q_x' there"),
    (True, TMA, True, None),
    (True, {**WS, "persistent": 3}, False, "read into 'Q_s_regs' there, again once the consumers are done with it"),
    (False, WS, False, "read into 'Q_s_regs' there")])
def test_attention_with_q_in_registers(rng, causal, configs, explicit, note):
    """Q taken into registers before the loop (QK^T in wgmma's RS form), by the example's ``q_registers`` or, in
    warp-specialized kernels, by the compiler (``operand_registers``): with a producer warpgroup it still loads Q by
    TMA, into one version of Q_s (swizzled as TMA writes it), and the consumers release it as soon as their copy
    into registers is done, so the producer loads the next tile's while this one's loop runs; the interpreter would
    name a release before the copies' reads. Without one, the block's threads load Q themselves, as with Q in shared
    memory (into the same swizzle, against bank conflicts in the fragment copy)."""
    fa = load_example("03_flash_attention")
    kernel = tilec.JITKernel(fa.flash_attention(1, 2, 300, 64, causal, block_M=128, block_N=64, threads=256,
                                                num_stages=2, q_registers=explicit).prim_func, "simt:sm_90a", [3],
                             pass_configs=configs)
    report = kernel.report()
    assert "wgmma (m64n64k16, 2 warpgroup(s) along M)" in report
    assert (note is None) == ("loads 'Q_s' by TMA" not in report)
    assert note is None or note in report
    assert "two versions" not in report  # released after the copy: the next tile's Q needs no second buffer
    q, k, v = (randn(rng, (1, 2, 300, 64), "float16") for _ in range(3))
    assert_close(kernel(q, k, v), fa.reference(q, k, v, causal), "float16",
                 scale=float(np.abs(v.astype(np.float64)).max()))


@pytest.mark.parametrize(("block_N", "n", "store"), [
    (176, 300, "O_f goes out through shared memory of its own (O_f_stage, 128 x 64, 2 chunks)"),
    (192, 400, "the accumulator is stored directly: a staging tile of 128 x 64 needs 16384 bytes of shared memory, "
               "944 are free")])
def test_persistent_attention_wide_key_tiles(rng, block_N, n, store):
    """D=128 with 176 or 192 keys a tile (FA3's non-causal choice): the K/V stages leave room for one version of
    Q only, and at 192 for no staging tile of O, which then leaves from registers (with the reason in the report);
    the last key block of each row partial, two heads over three blocks."""
    fa = load_example("03_flash_attention")
    kernel = tilec.JITKernel(fa.flash_attention(1, 2, n, 128, False, block_M=128, block_N=block_N, threads=256,
                                                num_stages=2).prim_func, "simt:sm_90a", [3],
                             pass_configs={**WS, "persistent": 3})
    report = kernel.report()
    assert f"wgmma (m64n{block_N}k16, 2 warpgroup(s) along M)" in report
    assert "loads 'Q_s' by TMA (32768 bytes) before the loop, again once the consumers are done with it" in report
    assert store in report
    q, k, v = (randn(rng, (1, 2, n, 128), "float16") for _ in range(3))
    assert_close(kernel(q, k, v), fa.reference(q, k, v, False), "float16",
                 scale=float(np.abs(v.astype(np.float64)).max()))


def test_releasing_q_before_its_last_read_is_a_race(rng):
    """The consumers release Q (``pre_empty``) once its last QK^T completed; released right after its wait instead,
    the producer's next TMA copy of Q may land while the gemms still read it. The interpreter orders each consumer
    read before the producer only through a release that came after it, so the early release is named even though
    its schedule happens to leave the results right (one block over three row blocks, one version of Q: with two,
    the K/V stages the producer must see released first come after the reads, which orders them)."""
    d = 128
    from tilec.ir.stmt import BarrierArrive, BarrierWait, SeqStmt
    from tilec.ir.visit import transform

    fa = load_example("03_flash_attention")
    g = fa.flash_attention(1, 1, 300, d, False, block_M=128, block_N=128, threads=256, num_stages=2).prim_func
    cfg = {**WS, "persistent": 1, "split_rings": False}  # one ring of three K/V stages: room for one Q only
    func = tilec.JITKernel(g, "simt:sm_90a", [3], pass_configs=cfg).state.func
    released: list = []

    def early(n: object) -> object:
        if isinstance(n, BarrierArrive) and n.barrier.buffer.name == "pre_empty":
            released.append(n)
            return SeqStmt(())
        return None

    def after_wait(n: object) -> object:
        if isinstance(n, SeqStmt) and any(isinstance(c, BarrierWait) and c.barrier.buffer.name == "pre_full"
                                          for c in n.stmts):
            i = next(i for i, c in enumerate(n.stmts) if isinstance(c, BarrierWait))
            return SeqStmt(n.stmts[: i + 1] + (released[0],) + n.stmts[i + 1:])
        return None

    bad = transform(transform(func, early), after_wait)
    assert len(released) == 1 and bad is not func
    q, k, v = (randn(rng, (1, 1, 300, d), "float16") for _ in range(3))
    assert_close(tilec.JITKernel(func, "simt:sm_90a", [3], pass_configs=cfg)(q, k, v), fa.reference(q, k, v, False),
                 "float16", scale=float(np.abs(v.astype(np.float64)).max()))
    with pytest.raises(RaceError, match="may still read it: its read came after the release this copy waited for"):
        tilec.JITKernel(bad, "simt:sm_90a", [3], pass_configs=cfg)(q, k, v)


@pytest.mark.parametrize(("mnk", "configs", "causal", "blocks", "why"), [
    ((4096, 4096, 4096), {}, None, 128, "(128 of 132 SMs: the 512 tiles take 4 rounds either way, none of them "
                                        "partial on 128)"),
    ((8192, 8192, 8192), {}, None, 128, "(128 of 132 SMs: the 2048 tiles take 16 rounds either way"),
    ((4096, 4096, 4096), {"cluster": 2}, None, 128, "in clusters of 2 blocks"),
    ((4224, 4096, 4096), {}, None, 132, "over the tiles of the grid"),  # 528 tiles: 4 whole rounds already
    ((2048, 2048, 512), {}, None, 128, "(the grid has 128 tiles, fewer than the 132 blocks"),  # one round
    ((4096, 4096, 4096), {"stream_k": True}, None, 132, "the last 116 tiles shared out"),  # stream-K fills it
    ((4096, 4096, 4096), {"persistent": 120}, None, 120, "over the tiles of the grid"),  # a count given: kept
    (None, {}, False, 128, "(128 of 132 SMs: the 512 tiles take 4 rounds either way"),
    (None, {}, True, 132, "in the balanced order"),  # causal: the tiles' work differs
])
def test_persistent_blocks_are_the_fewest_for_the_rounds(mnk, configs, causal, blocks, why):
    """persistent=True launches the fewest blocks that take the tiles in as many rounds as one block per SM would:
    512 tiles are 4 rounds on 132 SMs (the last with 16 blocks idle) or 4 whole rounds on 128 blocks, whose idle SMs
    leave the others L2 bandwidth and power (perf notes, twenty-fifth session: 0.5-1.2 % faster). Not where stream-K
    fills the last round, a block count is given, the tiles' trip counts differ (causal attention) or one round
    takes them all; in clusters, a multiple of their size."""
    from tilec.backends.cuda.runtime import _grid_fn, grid_code

    if mnk is None:
        fa = load_example("03_flash_attention")
        g = fa.flash_attention(2, 16, 2048, 128, causal, block_M=128, block_N=128, threads=256, num_stages=2).prim_func
        kernel = tilec.JITKernel(g, "cuda:sm_90a", [3], pass_configs={**WS, "persistent": True})
    else:
        g = load_example("01_gemm").matmul(*mnk, block_M=128, block_N=256, block_K=64, threads=256,
                                           panel=16).prim_func
        kernel = tilec.JITKernel(g, "cuda:sm_90a", [-1], pass_configs={**WS, "persistent": True, **configs})
    note = next(line for line in kernel.report().splitlines() if "loop over the tiles" in line)
    assert f"persistent, {blocks} blocks loop over the tiles" in note and why in note, note
    tk = kernel.state.artifacts["thread_ir"]
    assert _grid_fn(grid_code(tk.grid, tk.dyn_vars))() == (blocks, 1, 1)


def test_persistent_launch_grid_is_the_lowered_one():
    """A persistent kernel launches min(tiles, SMs) blocks, not the Tile IR's grid: the disk cache keeps the lowered
    grid's code (a cached persistent kernel once launched on the Tile IR's 4 x 8 grid and computed each tile many
    times over: wrong where tiles were missed, 4-16x slower; perf notes J)."""
    from tilec.backends.cuda.runtime import _grid_fn, grid_code

    g = load_example("01_gemm").matmul(1024, 1024, 512, block_M=128, block_N=256, block_K=64, threads=256).prim_func
    kernel = tilec.JITKernel(g, "cuda:sm_90a", [-1], pass_configs={**WS, "persistent": True})
    assert "persistent, 32 blocks loop over the tiles of the grid (the grid has 32 tiles, fewer than the 132 " \
           "blocks of pass config 'persistent')" in kernel.report()
    tk = kernel.state.artifacts["thread_ir"]
    assert _grid_fn(grid_code(tk.grid, tk.dyn_vars))() == (32, 1, 1)  # 4 x 8 tiles on 32 of the 132 blocks
    assert _grid_fn(grid_code(g.launch.grid, g.dyn_vars))() == (4, 8, 1)


# ------------------------------------------------------------------------ copies of the consumers (ping-pong)

COPIES = [  # (M, N, K, tile kwargs, blocks, cluster): tiles per block odd and even, ragged, bf16, clusters of 2
    (300, 264, 104, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2}, 3, 0),  # 25 tiles: 9, 8, 8
    (200, 200, 80, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 3, "dtype": "bfloat16"}, 4, 0),
    (256, 512, 96, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2}, 4, 2),
]


@pytest.mark.parametrize(("M", "N", "K", "tiles", "blocks", "cluster"), COPIES,
                         ids=lambda x: str(x) if not isinstance(x, dict) else "")
def test_persistent_gemm_consumer_copies(rng, M, N, K, tiles, blocks, cluster):
    """Pass config ``consumers``: two copies of the block's 128 consumer threads, copy c taking the block's tiles
    c, c + 2, ... (its own accumulators, its own staging tile, its own named barrier), the two taking turns at their
    main loops; the interpreter runs each copy as a coroutine of its own, with its own wgmma groups in flight."""
    kernel = tilec.JITKernel(load_example("01_gemm").matmul(M, N, K, **tiles).prim_func, "simt:sm_90a", [-1],
                             pass_configs={**WS, "persistent": blocks, "consumers": 2, "cluster": cluster})
    report = kernel.report()
    assert "dealt out in turn to 2 copies of the block's 128 consumer threads" in report
    assert "C_f_stage, 64 x 64, one for each of 2 copies of the consumers" in report
    tk = kernel.state.artifacts["thread_ir"]
    assert tk.threads == 384 and [int(g.value) for g in tk.grid] == [blocks]
    dtype = tiles.get("dtype", "float16")
    a, b = randn(rng, (M, K), dtype), randn(rng, (K, N), dtype)
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), dtype)


@pytest.mark.parametrize("split", [True, False], ids=["split rings", "one ring"])
def test_persistent_attention_consumer_copies(rng, split):
    """The rotated loop in copies (a 64-row tile for each copy of one warpgroup): each copy releases its tile's
    stages itself, the turns around its main loop (the copies' loops then run one at a time: correct, but without
    the warpgroups' overlap of one's softmax with another's gemms)."""
    fa = load_example("03_flash_attention")
    b, h, n, d = 1, 2, 200, 64
    kernel = tilec.JITKernel(fa.flash_attention(b, h, n, d, False, block_M=64, block_N=64, threads=128,
                                                num_stages=2).prim_func, "simt:sm_90a", [3],
                             pass_configs={**WS, "persistent": 3, "consumers": 2, "split_rings": split})
    assert "dealt out in turn to 2 copies" in kernel.report() and "runs one iteration late" in kernel.report()
    q, k, v = (randn(rng, (b, h, n, d), "float16") for _ in range(3))
    assert_close(kernel(q, k, v), fa.reference(q, k, v, False), "float16",
                 scale=float(np.abs(v.astype(np.float64)).max()))


def test_consumer_copies_hazards_are_named(rng):
    """Without the copies' turns the second copy waits for its first stage a lap of the ring ahead (an mbarrier's
    parity names a phase only up to one lap: its wait passes at once, its releases come out of step with the
    producer's loads and the ring deadlocks); without the wgmma wait before a copy releases its tile's last stage,
    the producer overwrites a stage a wgmma is still reading."""
    from tilec.lower.tir import If, MbarArriveTx, NamedBarrier, Seq, WgmmaWait

    M, N, K, tiles, blocks, _ = COPIES[0]
    kernel = tilec.JITKernel(load_example("01_gemm").matmul(M, N, K, **tiles).prim_func, "simt:sm_90a", [-1],
                             pass_configs={**WS, "persistent": blocks, "consumers": 2})
    tk = kernel.state.artifacts["thread_ir"]
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    _run_thread_ir(kernel, tk, a, b)  # as lowered: no hazard
    no_turns = _edit(tk, lambda n: Seq(()) if isinstance(n, If) and isinstance(n.then_body, NamedBarrier) else None)
    with pytest.raises(RaceError, match="a wait for phase parity . that nothing can complete"):
        _run_thread_ir(kernel, no_turns, a, b)

    def release_first(node):  # the last stage's release moved above the wgmma wait before it
        if not isinstance(node, Seq):
            return None
        stmts = list(node.stmts)
        wait = next((i for i, c in enumerate(stmts) if isinstance(c, WgmmaWait) and c.n == 0), None)
        rel = next((j for j, c in enumerate(stmts) if wait is not None and j > wait and
                    any(isinstance(x, MbarArriveTx) and x.tx == 0 for x in _walk(c))), None)
        if rel is None:
            return None
        return Seq(tuple(stmts[:wait] + [stmts[rel]] + stmts[wait:rel] + stmts[rel + 1:]))

    with pytest.raises(RaceError, match="while a wgmma reading it is in flight"):
        _run_thread_ir(kernel, _edit(tk, release_first), a, b)


def test_consumer_copies_refused():
    """Copies need a persistent kernel, a consumer side of one warpgroup (two copies of 256 threads would leave too
    few registers each) and a trip count that does not depend on the tile; each refusal is a note."""
    g = load_example("01_gemm").matmul
    small = {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2}
    causal = load_example("03_flash_attention").flash_attention(1, 2, 200, 64, True, block_M=64, block_N=64,
                                                                 threads=128, num_stages=2).prim_func
    cases = [(g(256, 256, 64, **small).prim_func, [-1], {**WS, "consumers": 2},
              ", not 2: pass config 'consumers' needs a persistent kernel"),
             (g(256, 256, 64, block_M=128, block_N=64, block_K=32, threads=256, num_stages=2).prim_func, [-1],
              {**WS, "persistent": 2, "consumers": 2}, ", not 2: 2 x 256 consumer threads leave too few registers"),
             (causal, [3], {**WS, "persistent": 2, "consumers": 2}, ": the trip count of the T.Pipelined loop at")]
    for func, out, cfg, why in cases:
        kernel = tilec.JITKernel(func, "simt:sm_90a", out, pass_configs=cfg)
        assert f"one copy of the consumer threads{why}" in kernel.report()
        assert kernel.state.artifacts["thread_ir"].threads == kernel.prim_func.launch.num_threads + 128


@T.prim_func
def _first_by_k_tiles(A: T.Tensor((192, 192), "float16"), B: T.Tensor((192, 64), "float16"),
                      C: T.Tensor((192, 64), "float32")):
    with T.Kernel(1, 3, threads=128) as (bx, by):
        A_s = T.alloc_shared((64, 64), "float16")
        B_s = T.alloc_shared((64, 64), "float16")
        C_f = T.alloc_fragment((64, 64), "float32")
        T.clear(C_f)
        for k in T.Pipelined(by, num_stages=2):  # block row by takes the first by K tiles (row 0: none)
            T.copy(A[by * 64, k * 64], A_s)
            T.copy(B[k * 64, bx * 64], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[by * 64, bx * 64])


@pytest.mark.parametrize("extra", [{}, {"stream_k": True}, {"consumers": 2},
                                   {"cluster": 2, "stream_k": True, "consumers": 2}])
def test_persistent_refused_for_a_tile_without_trips_drops_what_needs_it(rng, extra):
    """A trip count that may be zero for a tile refuses the persistent kernel (with its note); stream-K and copies of
    the consumers, which need one, go with it (they once left the tile counter and the stream-K ring count unbound:
    a TilecVerifyError), and the kernel is the warp-specialized one of one tile a block."""
    kernel = tilec.JITKernel(_first_by_k_tiles, "simt:sm_90a", [-1], pass_configs={**WS, "persistent": 2, **extra})
    report = kernel.report()
    assert "not persistent: the trip count of the T.Pipelined loop at line" in report and "may be zero" in report
    assert "blocks loop over" not in report and "a producer warpgroup issues TMA copies" in report
    assert kernel.state.artifacts["thread_ir"].threads == 256
    a, b = randn(rng, (192, 192), "float16"), randn(rng, (192, 64), "float16")
    ref = np.zeros((192, 64))
    for by in range(3):
        ref[by * 64:by * 64 + 64] = a[by * 64:by * 64 + 64, :by * 64].astype(np.float64) @ \
            b[:by * 64].astype(np.float64)
    assert_close(kernel(a, b), ref, "float32")


def test_stage_handoff_hazards_are_named(rng):
    """The persistent rotated attention's warpgroups hand O's staging tile to each other by named barriers (the last
    issues its TMA store), with no barrier of all consumers left in the CUDA source; without the handoff's "written"
    step the store reads rows the other warpgroup wrote without ordering, without the last warpgroup's early wait
    for the previous store the tile is written while that store may still read it."""
    from tilec.lower.tir import BulkWait, Group, HandoffBarrier, If, Seq

    fa = load_example("03_flash_attention")
    func = fa.flash_attention(1, 1, 300, 64, False, block_M=128, block_N=64, threads=256, num_stages=2).prim_func
    kernel = tilec.JITKernel(func, "simt:sm_90a", [3], pass_configs={**WS, "persistent": 2})
    assert "the 2 consumer warpgroups hand O_f_stage on by named barriers" in kernel.report()
    cuda = tilec.JITKernel(func, "cuda:sm_90a", [3], pass_configs={**WS, "persistent": 2}).get_kernel_source()
    assert "bar.sync 1, 256" not in cuda and "bar.arrive 9, 256" in cuda and "bar.sync 8, 256" in cuda
    tk = kernel.state.artifacts["thread_ir"]
    q, k, v = (randn(rng, (1, 1, 300, 64), "float16") for _ in range(3))
    _run_thread_ir(kernel, tk, q, k, v)  # as lowered: no hazard
    no_written = _edit(tk, lambda n: Seq(()) if isinstance(n, Group) and isinstance(n.body, HandoffBarrier)
                       and n.body.id == 9 else None)
    with pytest.raises(RaceError, match="race on shared O_f_stage.*: thread 128 reads what thread 0 wrote"):
        _run_thread_ir(kernel, no_written, q, k, v)
    waits = [n for n in _walk(tk.body) if isinstance(n, If) and isinstance(n.then_body, BulkWait)]
    no_early_wait = _edit(tk, lambda n: Seq(()) if n is waits[0] else None)  # the first: before the last part
    with pytest.raises(RaceError, match="write of shared O_f_stage.* while a TMA store may still read it"):
        _run_thread_ir(kernel, no_early_wait, q, k, v)


@T.prim_func
def _a_in_registers(A: T.Tensor((200, 160), "float16"), B: T.Tensor((160, 136), "float16"),
                    C: T.Tensor((200, 136), "float32")):
    with T.Kernel(3, 2, threads=256) as (bx, by):
        A_s = T.alloc_shared((128, 32), "float16")
        A_x = T.alloc_fragment((128, 32), "float16")
        B_s = T.alloc_shared((32, 64), "float16")
        C_f = T.alloc_fragment((128, 64), "float32")
        T.clear(C_f)
        for k in T.Pipelined(5, num_stages=2):
            T.copy(A[by * 128, k * 32], A_s)
            T.copy(B[k * 32, bx * 64], B_s)
            T.copy(A_s, A_x)  # the gemm's A in registers, rewritten every trip
            T.gemm(A_x, B_s, C_f)
        T.copy(C_f, C[by * 128, bx * 64])


@pytest.mark.parametrize("configs", [TMA, WS, {**WS, "persistent": 2}, {"wgmma": True, "tma": False}],
                         ids=["tma", "tma ws", "persistent", "cp.async"])
@pytest.mark.parametrize(("func", "operand"), [(tile_in_two_copies, "A_s"), (_a_in_registers, "A_x")],
                         ids=["tile in two copies", "A in registers"])
def test_wgmma_group_waits_where_an_operand_is_rewritten_in_place(rng, configs, func, operand):
    """A gemm whose operand the loop rewrites in one version (a shared tile filled by two copies, A copied into
    registers) waits for its wgmma group every trip: left in flight into the next trip (wgmma_overlap), the next
    trip's copy overwrote the operand while the group still read it."""
    kernel = tilec.JITKernel(func, "simt:sm_90a", [-1], pass_configs=configs)
    report = kernel.report()
    assert f"waits for its wgmma group every trip ({operand!r} is rewritten in the loop in one version)" in report
    assert "overlaps the next trip" not in report and "wgmma (m64n64k16, 2 warpgroup(s) along M)" in report
    a, b = randn(rng, (200, 160), "float16"), randn(rng, (160, 136), "float16")
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), "float32")


def test_every_note_on_the_persistent_kernel_names_its_line(monkeypatch):
    """The notes of the persistent schedule on T.Kernel (refused for want of a TMA pipeline or for a tile without
    trips; clusters and consumer copies dropped, the balanced or serpentine tile order of causal attention) said
    "T.Kernel: ..." without the line of the T.Kernel, unlike the others ("T.Kernel at line N: ...")."""
    from tilec.passes import tile_order

    gemm = load_example("01_gemm").matmul(130, 70, 96, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    fa = load_example("03_flash_attention")
    causal = fa.flash_attention(1, 2, 256, 64, True, block_M=64, block_N=64, num_stages=2).prim_func
    cases = [  # (kernel, its T.Kernel's line, pass configs, a note it must give)
        (gemm, example_line("01_gemm", "with T.Kernel"), {**WS, "persistent": 3},
         "not persistent: that needs a warp-specialized TMA pipeline"),
        (_first_by_k_tiles, _first_by_k_tiles.launch.loc.line, {**WS, "persistent": 2},
         "not persistent: the trip count of the T.Pipelined loop at line"),
        (causal, example_line("03_flash_attention", "with T.Kernel"),
         {**WS, "persistent": 2, "cluster": 2, "consumers": 2}, "persistent blocks not in clusters: the trip count"),
        (causal, example_line("03_flash_attention", "with T.Kernel"), {**WS, "persistent": 2, "consumers": 2},
         "one copy of the consumer threads: the trip count"),
        (causal, example_line("03_flash_attention", "with T.Kernel"), {**WS, "persistent": 2},
         "persistent blocks take tiles in a balanced order"),
    ]
    for g, line, configs, note in cases:
        report = tilec.JITKernel(g, "simt:sm_90a", None, pass_configs=configs).report()
        assert f"T.Kernel at line {line}: {note}" in report, report
        assert all(f"T.Kernel at line {line}: " in t for t in report.splitlines() if "note: T.Kernel" in t), report
    monkeypatch.setattr(tile_order, "MAX_ENTRIES", 3)
    report = tilec.JITKernel(causal, "simt:sm_90a", None, pass_configs={**WS, "persistent": 2}).report()
    assert f"T.Kernel at line {example_line('03_flash_attention', 'with T.Kernel')}: persistent blocks take tiles " \
           "in serpentine order: a table of 8 tiles on 2 blocks would pass 3 entries" in report


@pytest.mark.parametrize("kernel", ["rows of 140 bytes", "a tile without trips"])
def test_a_refused_persistent_kernel_says_stream_k_and_copies_go_with_it(rng, kernel):
    """stream_k and consumers need a persistent kernel: where persistent is refused for want of a TMA pipeline (B's
    rows of 140 bytes) or for a tile that may run no trip, they were dropped without a word (persistent without
    warp_specialize notes both); each now says why. The kernel still runs right."""
    if kernel == "a tile without trips":
        g, line, M, N, K = _first_by_k_tiles, _first_by_k_tiles.launch.loc.line, 192, 64, 192
    else:
        M, N, K = 130, 70, 96
        g = load_example("01_gemm").matmul(M, N, K, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
        line = example_line("01_gemm", "with T.Kernel")
    configs = {**WS, "persistent": 2, "stream_k": True, "consumers": 2}
    k = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs=configs)
    report = k.report()
    assert f"T.Kernel at line {line}: not persistent: " in report
    assert f"T.Kernel at line {line}: not stream-K: pass config 'stream_k' needs a persistent kernel" in report
    assert f"T.Kernel at line {line}: one copy of the consumer threads, not 2: pass config 'consumers' needs a " \
           "persistent kernel" in report
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if kernel == "a tile without trips":
        ref = np.concatenate([a[r * 64:r * 64 + 64, :r * 64].astype(np.float64) @ b[:r * 64].astype(np.float64)
                              for r in range(3)])
    assert_close(k(a, b), ref, "float16" if g is not _first_by_k_tiles else "float32")


@pytest.mark.parametrize(("M", "N", "K", "empty"), [(64, 64, 0, "A"), (0, 64, 64, "A"), (64, 0, 64, "B")])
@pytest.mark.parametrize("configs", [TMA, {**WS, "persistent": 2}], ids=["tma", "persistent"])
def test_an_empty_tensor_gets_no_tensor_map(rng, M, N, K, empty, configs):
    """A size of 0 (K = 0: the sums are empty; M or N = 0: no tile) got TMA loads and stores all the same, whose
    tensor maps cuTensorMapEncodeTiled refuses (its sizes start at 1): the GPU launch raised "tensor map A_tmap0:
    globalDim[0] = 0" for a kernel the thread interpreter and sm_80 run. The empty tensors now keep cp.async (into
    the TMA ring's stages where the other operand is not empty) and plain stores, with a note, and every tensor map
    of the CUDA kernel is one the driver takes."""
    from tilec.runtime.tensor_map import check

    g = load_example("01_gemm").matmul(M, N, K, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    for t in tilec.JITKernel(g, "cuda:sm_90a", [-1], pass_configs=configs).state.artifacts["thread_ir"].tensor_maps:
        check(t)
    kernel = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs=configs)
    line = example_line("01_gemm", "for k in T.Pipelined")
    why = f"'{empty}': it has a dimension of size 0 (a tensor map's sizes start at 1)"
    if K == 0:  # A and B empty: the whole loop on cp.async
        assert f"T.Pipelined at line {line}: cp.async, not TMA: {why}" in kernel.report()
    else:  # the empty one by cp.async into the TMA ring's stages
        copy = example_line("01_gemm", f"T.copy({empty}[")
        assert f"T.Pipelined at line {line}: {empty}_s by cp.async, each thread arriving on the stage's " \
               f"mbarrier: the T.copy at line {copy} cannot be a TMA copy ({why})" in kernel.report()
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    out = kernel(a, b)
    assert out.shape == (M, N) and (out == 0).all()  # NaN-poisoned before the run: K = 0 writes zeros


@pytest.mark.parametrize(("M", "blocks", "cluster", "launched"), [(130, 11, 0, 9), (130, 3, 0, 3), (200, 12, 2, 8),
                                                              (40, 2, 0, 1)])
def test_persistent_with_fewer_tiles_than_blocks_names_the_blocks_launched(rng, M, blocks, cluster, launched):
    """9 tiles (8 in clusters of 2: 4 groups; or 1) on 11 (12; 2) persistent blocks: the kernel launches one block a
    tile (a cluster a group), but the note said "persistent, 11 blocks loop over the tiles of the grid"; it now names
    the blocks launched and why fewer than asked. Every tile once, against numpy (outputs start as NaN)."""
    N, K = (136 if not cluster else 128) if M > 64 else 40, 96
    g = load_example("01_gemm").matmul(M, N, K, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    kernel = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs={**WS, "persistent": blocks, "cluster": cluster})
    tiles = -(-M // 64) * -(-N // 64)
    note = f"persistent, {launched} blocks loop over the tiles of the grid" if launched > 1 else \
        "persistent, 1 block loops over the tiles of the grid"
    fewer = f"the grid has {tiles} tile{'s' * (tiles > 1)}, fewer than the {blocks} blocks of pass config " \
        "'persistent'"
    report = kernel.report()
    assert note in report and (fewer in report) == (launched < blocks), report
    assert [int(d.value) for d in kernel.state.artifacts["thread_ir"].grid] == [launched]
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")


@pytest.mark.parametrize("configs", [{"wgmma": True, "tma": False}, TMA], ids=["cp.async", "mixed"])
def test_wgmma_reads_of_thread_written_tiles_need_the_proxy_fence(configs):
    """Tiles the block's threads write (cp.async, or a mixed ring's cp.async copies) reach wgmma, which reads shared
    memory through the async proxy, only after a fence.proxy.async by their writers: the PTX ISA says so of wgmma's
    shared-memory matrices, and wgmma.fence orders register accesses only. The interpreter took wgmma.fence for a
    proxy fence too, so a kernel without the proxy fences ran clean; it now names the unfenced read."""
    from tilec.lower.tir import FenceProxyAsync

    rng = np.random.default_rng()
    # with tma, A's 200-byte rows allow no tensor map: A by cp.async, B by TMA, on one ring; the accumulators go out
    # directly, so the only proxy fences are the operands'
    g = load_example("01_gemm").matmul(96, 128, 100, block_M=64, block_N=64, block_K=32, threads=128,
                                       num_stages=2).prim_func
    kernel = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs={**configs, "stage_epilogue": False})
    assert "wgmma" in kernel.report() and ("A_s by cp.async" in kernel.report()) == bool(configs["tma"])
    tk = kernel.state.artifacts["thread_ir"]
    a, b = randn(rng, (96, 100), "float16"), randn(rng, (100, 128), "float16")
    _run_thread_ir(kernel, tk, a, b)
    with pytest.raises(RaceError, match=r"a wgmma reads shared \w+\[\d+\], which thread \d+ wrote without a "
                                        r"fence.proxy.async"):
        _run_thread_ir(kernel, _edit(tk, _drop(FenceProxyAsync)), a, b)
