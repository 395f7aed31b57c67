"""Stream-K (pass config ``stream_k``, tilec.passes.stream_k): the schedule's arithmetic checked exhaustively (every
iteration of every shared tile run once, the ring counting each block's iterations in order, a block waiting only for
partial sums saved before by a block below it), the persistent GEMM on the thread interpreter against float64 numpy
(ragged, bf16, two warpgroups, launched twice: the flags must be clear again), the refusals with their reasons, and a
broken schedule named by the interpreter."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import assert_close, example_line, load_example, randn

import tilec
from tilec.errors import RaceError
from tilec.ir.expr import Var, const
from tilec.passes import stream_k
from tilec.passes.trip_counts import evaluate

WS = {"wgmma": True, "tma": True, "warp_specialize": True}


def _parts(tiles: int, n: int, P: int) -> tuple[stream_k.Plan, dict[int, list[dict[str, int]]]]:
    plan = stream_k.plan(tiles, n, P)
    assert isinstance(plan, stream_k.Plan), plan
    pid, j = Var("pid"), Var("j")
    part = stream_k.part(plan, pid, j)
    fields = [f.name for f in dataclasses.fields(part) if f.name != "count"]
    out: dict[int, list[dict[str, int]]] = {}
    for b in range(P):
        count = int(evaluate(part.count, {pid: np.int64(b), j: np.int64(0)}))
        out[b] = [{f: int(evaluate(getattr(part, f), {pid: np.int64(b), j: np.int64(i)})) for f in fields}
                  for i in range(count)]
    return plan, out


@pytest.mark.parametrize(("tiles", "n", "P"), [(2048, 128, 132), (512, 64, 132), (15, 8, 4), (15, 8, 7),
                                               (64, 32, 60), (200, 9, 33), (1000, 17, 132)])
def test_the_schedule_runs_every_shared_iteration_once(tiles, n, P):
    plan, parts = _parts(tiles, n, P)
    assert plan.dp_rounds * P + plan.sk_tiles == tiles
    assert plan.span >= P * n // 2  # each block gets at least half a tile
    seen = np.zeros((plan.sk_tiles, n), int)
    saved: dict[int, int] = {}  # block -> the tile whose partial sums it saves
    for b, ps in parts.items():
        ring = plan.dp_rounds * n  # the ring goes on from the whole tiles' iterations, one by one
        for i, p in enumerate(ps):
            s = p["tile"] - plan.dp_rounds * P
            assert 0 <= s < plan.sk_tiles and p["trips"] > 0
            seen[s, p["k_lo"]:p["k_lo"] + p["trips"]] += 1
            assert p["ring0"] + p["k_lo"] == ring
            ring += p["trips"]
            reaches_end = p["k_lo"] + p["trips"] == n
            assert bool(p["partial"]) == (not reaches_end)
            if p["partial"]:
                assert i == 0, "only a block's first part may stop short of its tile's end"
                saved[b] = s
            else:  # it adds the slots of the blocks that ran the tile's earlier iterations, all below it
                assert p["first"] <= b
                assert all(saved.get(q) == s for q in range(p["first"], b))
                expect = sum(int(pp["trips"]) for q in range(p["first"], b) for pp in parts[q]
                             if pp["tile"] == p["tile"])
                assert expect + p["trips"] == n and p["k_lo"] == expect
    assert (seen == 1).all()
    owners = sum(1 for ps in parts.values() for p in ps if not p["partial"])
    assert owners == plan.sk_tiles  # one epilogue per shared tile


def test_the_plan_and_its_refusals():
    assert stream_k.plan(264, 128, 132) == "the 264 tiles fill whole rounds of 132 blocks"
    assert "too few to share out" in stream_k.plan(200, 4, 132)
    p = stream_k.plan(2048, 128, 132)
    assert (p.dp_rounds, p.sk_tiles) == (15, 68)
    p = stream_k.plan(136, 64, 132)  # 4 tiles over: with one round more, each block at least half a tile
    assert (p.dp_rounds, p.sk_tiles) == (0, 136)


def _gemm(M, N, K, configs, target="simt:sm_90a", **tiles):
    return tilec.JITKernel(load_example("01_gemm").matmul(M, N, K, **tiles).prim_func, target, [-1],
                           pass_configs={**WS, **configs})


CASES = [  # (M, N, K, tiles, blocks, dtype, the note's schedule, half the tile staged in the held stage)
    # 5 x 3 tiles on 4 blocks: three rounds, the last 3 tiles over 4 blocks (6 of 8 iterations each); ragged M
    (300, 184, 256, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2}, 4, "float16",
     "3 rounds of whole tiles, then the last 3 tiles", False),
    # two tiles over: shared with one more round (7 blocks, 9 tiles); ragged K (TMA zero fill), bf16
    (256, 256, 248, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2, "dtype": "bfloat16"}, 7,
     "bfloat16", "1 round of whole tiles, then the last 9 tiles", False),
    # two consumer warpgroups of a 128x128 tile, 3 tiles on 2 blocks; the whole tile's first 64 columns go out
    # through the stage of B its loop read last, which the first part's first step gives back
    (384, 128, 512, {"block_M": 128, "block_N": 128, "block_K": 64, "threads": 256, "num_stages": 2}, 2, "float16",
     "1 round of whole tiles, then the last 1 tile shared out", True),
]


@pytest.mark.parametrize(("M", "N", "K", "tiles", "blocks", "dtype", "note", "held"), CASES,
                         ids=["ragged", "bf16", "two-wg"])
def test_stream_k_gemm(rng, M, N, K, tiles, blocks, dtype, note, held):
    kernel = _gemm(M, N, K, {"persistent": blocks, "stream_k": True}, **tiles)
    assert note in kernel.report()
    assert ("staged in the stage of B_s the main loop read last (C_f_held" in kernel.report()) == held
    tk = kernel.state.artifacts["thread_ir"]
    assert sorted(m.name for m in tk.statics) == ["sk_flags", "sk_partials"]
    for _ in range(2):  # the second launch finds every flag clear again (the interpreter names one left set)
        a, b = randn(rng, (M, K), dtype), randn(rng, (K, N), dtype)
        assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), dtype)


def test_the_cuda_source_owns_its_workspace():
    k = _gemm(8192, 8192, 8192, {"persistent": True, "stream_k": True}, "cuda:sm_90a", block_M=128, block_N=256,
              block_K=64, threads=256, panel=8)
    assert "15 rounds of whole tiles, then the last 68 tiles shared out by iterations of the T.Pipelined loop at " \
           "line" in k.report()
    assert "65.9 k-iterations a block, of 128 a tile" in k.report()
    assert "launches of this kernel must not overlap" in k.report()
    src = k.get_kernel_source()
    assert "__device__ __align__(16) float sk_partials[4325376];" in src  # 132 slots of 128 x 256
    assert "__device__ __align__(16) int sk_flags[132];" in src
    assert src.count("tl::flag_signal(sk_flags + pid);") == 1 and src.count("tl::flag_wait(sk_flags + ") == 1
    text = tilec.dump(k, after="pipelining")
    assert "T.partial_save(C_f, sk_partials[pid], flag=sk_flags[pid])" in text


@pytest.mark.parametrize(("configs", "kw", "why"), [
    ({"persistent": 4}, {"M": 256, "N": 256}, "the 16 tiles fill whole rounds of 4 blocks"),
    ({"persistent": 6, "cluster": 2}, {"M": 320, "N": 256}, "in clusters"),
    ({"persistent": 5}, {"K": 64}, "2 iterations of the pipelined loop a tile are too few to share out"),
    ({"persistent": 5}, {"K": 32}, "1 iteration of the pipelined loop a tile is too few to share out (at least 8)"),
    # fewer tiles than blocks: it said "the 9 tiles fill whole rounds of 9 blocks" (or "the 1 tiles ... of 1 blocks")
    ({"persistent": 11}, {"M": 130, "N": 136}, "9 tiles in the grid, fewer than the 11 blocks of pass config "
     "'persistent' (one tile a block, none to share out)"),
    ({"persistent": 2}, {"M": 64, "N": 64}, "1 tile in the grid, fewer than the 2 blocks of pass config "
     "'persistent' (one tile a block, none to share out)"),
])
def test_refusals(configs, kw, why):
    k = _gemm(kw.get("M", 256), kw.get("N", 192), kw.get("K", 256), {**configs, "stream_k": True}, block_M=64,
              block_N=64, block_K=32, num_stages=2)
    assert f"not stream-K: {why}" in k.report() and "shared out by" not in k.report()


@pytest.mark.parametrize(("rotate", "why"), [
    (True, "the T.Pipelined loop's second gemm runs an iteration late (rotated)"),
    # not rotated: the reason given was the rotation all the same (the preloaded Q had moved the loop in the
    # statements the refusal looked it up in)
    (False, "the T.Pipelined loop does more than accumulate gemms into one fragment")])
def test_attention_is_refused(rng, rotate, why):
    fa = load_example("03_flash_attention")
    g = fa.flash_attention(1, 2, 512, 64, False, block_M=64, block_N=64, num_stages=2, threads=128).prim_func
    k = tilec.JITKernel(g, "simt:sm_90a", [3], pass_configs={**WS, "persistent": 3, "stream_k": True,
                                                             "rotate": rotate})
    assert ("runs one iteration late" in k.report()) == rotate
    assert "loads 'Q_s' by TMA" in k.report()  # Q preloaded by the producer either way
    assert [line for line in k.report().splitlines() if "not stream-K" in line] == \
        [f"  note: T.Kernel at line {example_line('03_flash_attention', 'with T.Kernel(')}: not stream-K: {why}"]
    q, kk, v = (randn(rng, (1, 2, 512, 64), "float16") for _ in range(3))
    assert_close(k(q, kk, v), fa.reference(q, kk, v, False), "float16",  # still right, as a persistent kernel
                 scale=float(np.abs(v.astype(np.float64)).max()))


def test_a_preloaded_tile_is_the_reason_given(rng):
    """A tile loaded once before the loop (X, read by the loop's second gemm) moves to the producer, which stream-K
    does not share out: the note said the loop's second gemm ran an iteration late (rotated), which it did not."""
    import tilec.language as T

    M, N, K, bm, bn, bk = 128, 128, 128, 64, 64, 32
    nk = K // bk

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), X: T.Tensor((M, bm), "float16"), B: T.Tensor((K, N), "float16"),
             D: T.Tensor((nk * bm, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // bn, M // bm, threads=128) as (bx, by):
            X_s = T.alloc_shared((bm, bm), "float16")
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            D_s = T.alloc_shared((bm, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.copy(X[by * bm, 0], X_s)
            T.clear(C_f)
            for k in T.Pipelined(nk, num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.copy(D[k * bm, bx * bn], D_s)
                T.gemm(A_s, B_s, C_f)
                T.gemm(X_s, D_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    k = tilec.JITKernel(main, "simt:sm_90a", [4], pass_configs={**WS, "persistent": 3, "stream_k": True})
    assert "the producer warpgroup loads 'X_s' by TMA" in k.report()
    assert [line.split(": not stream-K: ")[-1] for line in k.report().splitlines() if "not stream-K" in line] == \
        ["tiles are loaded before the loop"]
    a, x, b, d = (randn(rng, s, "float16") for s in ((M, K), (M, bm), (K, N), (nk * bm, N)))
    f = [y.astype(np.float64) for y in (a, x, b, d)]
    xd = sum(np.concatenate([f[1][r * bm:(r + 1) * bm] @ f[3][i * bm:(i + 1) * bm] for r in range(M // bm)])
             for i in range(nk))
    assert_close(k(a, x, b, d), f[0] @ f[2] + xd, "float16")


def test_a_part_that_saves_nothing_is_named(rng, monkeypatch):
    """A broken schedule: no part saves its partial sums, so the blocks adding them would spin on the GPU; the
    thread interpreter says which flag nobody set."""
    real = stream_k.part
    monkeypatch.setattr(stream_k, "part", lambda *a: dataclasses.replace(real(*a), partial=const(False)))
    k = _gemm(300, 184, 256, {"persistent": 4, "stream_k": True}, block_M=64, block_N=64, block_K=32, num_stages=2)
    a, b = randn(rng, (300, 256), "float16"), randn(rng, (256, 184), "float16")
    with pytest.raises(RaceError, match=r"a wait for flag sk_flags\[0\], which no block has set"):
        k(a, b)


@pytest.mark.parametrize("stream", [False, True])
def test_the_persistent_note_of_panels_of_one_row_and_of_stream_k_reads_in_words(rng, stream):
    """T.use_swizzle(1) read "in panels of 1 rows", and stream-K's share "(stream-K: 6.0 of 8 a block" named
    neither number; now "in panels of 1 row" and "6.0 k-iterations a block, of 8 a tile" (5 x 3 tiles on 4 blocks,
    the last 3 tiles of 8 iterations shared out: 24 / 4)."""
    M, N, K = 300, 184, 256
    g = load_example("01_gemm").matmul(M, N, K, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    g = dataclasses.replace(g, body=dataclasses.replace(g.launch, swizzle=(1, "row")))
    kernel = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs={**WS, "persistent": 4, "stream_k": stream})
    report = kernel.report()
    assert "persistent, 4 blocks loop over the tiles of the grid in panels of 1 row (T.use_swizzle)" in report
    assert ("(stream-K: 6.0 k-iterations a block, of 8 a tile; " in report) is stream
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")
