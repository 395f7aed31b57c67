"""Thread-block clusters with TMA multicast (pass config ``cluster``, tilec.passes.cluster) on the thread interpreter:
the blocks of a cluster run together, multicasts land in every block, releases reach every block; numerics against
float64 numpy, refusals with their reasons, and each missing cluster barrier or remote release named."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import assert_close, example_line, load_example, randn

import tilec
from tilec.errors import RaceError

WS = {"wgmma": True, "tma": True, "warp_specialize": True}


def _gemm(M, N, K, configs, target="simt:sm_90a", **tiles):
    return tilec.JITKernel(load_example("01_gemm").matmul(M, N, K, **tiles).prim_func, target, [-1],
                           pass_configs=configs)


CASES = [  # (M, N, K, tiles, cluster, what is shared)
    # one 64-byte panel per tile: each block loads a band of 32 rows of A; clusters along x (A does not use bx)
    (200, 72, 96, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2}, 2, "along grid dimension 0 (x); "
     "A_s multicast"),
    # B's 64x128 tile is two 128-byte panels: one each; clusters along y; ragged M and N, bf16
    (250, 200, 64, {"block_M": 64, "block_N": 128, "block_K": 64, "num_stages": 2, "dtype": "bfloat16"}, 2,
     "along grid dimension 1 (y); B_s multicast"),
    # two consumer warpgroups, clusters of four along y: B's four panels one each
    (512, 256, 128, {"block_M": 128, "block_N": 256, "block_K": 64, "threads": 256, "num_stages": 2}, 4,
     "clusters of 4 blocks along grid dimension 1 (y); B_s multicast"),
]


@pytest.mark.parametrize(("M", "N", "K", "tiles", "n", "note"), CASES, ids=["x-bands", "y-panels-bf16", "y-four"])
def test_cluster_gemm(rng, M, N, K, tiles, n, note):
    kernel = _gemm(M, N, K, {**WS, "cluster": n}, **tiles)
    assert note in kernel.report()
    tk = kernel.state.artifacts["thread_ir"]
    assert sorted(tk.cluster) == [1, 1, n]
    dtype = tiles.get("dtype", "float16")
    a, b = randn(rng, (M, K), dtype), randn(rng, (K, N), dtype)
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), dtype)


def test_cluster_ir_and_cuda_source():
    k = _gemm(4096, 4096, 4096, {**WS, "cluster": 2}, "cuda:sm_90a", block_N=256, block_K=64, threads=256)
    text = tilec.dump(k, after="clusters")
    assert "# clusters of 2 blocks along grid dimension 1" in text
    assert "T.barrier_init(k_empty, count=16)" in text  # 8 consumer warps of each of the 2 blocks
    assert text.count("T.cluster_sync()") == 2
    assert "barrier=k_full[k % 4], multicast=True)" in text and "per_warp=True, every_block=True)" in text
    src = k.get_kernel_source()
    assert 'extern "C" __global__ void __cluster_dims__(1, 2, 1) __launch_bounds__(384, 1) main_kernel(' in src
    assert src.count("tl::tma_load_2d_multicast(&B_tmap1") == 2 and "tl::mbar_arrive_cta(k_empty" in src


@pytest.mark.parametrize(("configs", "kw", "why"), [
    ({"wgmma": True, "tma": True, "cluster": 2}, {}, "it needs a warp-specialized TMA pipeline"),
    ({**WS, "cluster": 4}, {"M": 192}, "no grid dimension that is a multiple of 4"),
])
def test_cluster_refusals(configs, kw, why):
    k = _gemm(kw.get("M", 256), 192, 128, configs, block_M=64, block_N=64, block_K=32, num_stages=2)
    assert f"not clustered: {why}" in k.report()
    assert k.state.artifacts["thread_ir"].cluster == (1, 1, 1)


@pytest.mark.parametrize(("M", "N", "K", "tiles", "n", "blocks", "note"), [
    # 4 x 5 tiles; along x (A shared): 2 x 5 tiles of clusters over 3 clusters, 4, 3 and 3 rounds; ragged M and N
    (300, 200, 96, {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2}, 2, 6,
     "in clusters of 2 blocks whose tiles neighbour along grid dimension 0 (x)"),
    # 2 x 8 tiles; along y (B's four panels one each): 2 x 2 over 2 clusters of 4; bf16
    (1024, 512, 128, {"block_M": 128, "block_N": 256, "block_K": 64, "threads": 256, "num_stages": 2,
                      "dtype": "bfloat16"}, 4, 8,
     "in clusters of 4 blocks whose tiles neighbour along grid dimension 1"),
], ids=["x-2", "y-4-bf16"])
def test_persistent_cluster_gemm(rng, M, N, K, tiles, n, blocks, note):
    """Persistent blocks in clusters: the n blocks of a cluster take neighbouring tiles in every round (so they share
    a tile of each stage), the clusters loop over the grid of n-tile groups; every tile computed once (outputs start
    as NaN)."""
    kernel = _gemm(M, N, K, {**WS, "cluster": n, "persistent": blocks}, **tiles)
    report = kernel.report()
    assert f"persistent, {blocks} blocks loop over the tiles of the grid, {note}" in report
    assert f"clusters of {n} blocks along grid dimension 0 (x)" in report
    tk = kernel.state.artifacts["thread_ir"]
    assert tk.cluster == (n, 1, 1) and [int(g.value) for g in tk.grid] == [blocks]
    dtype = tiles.get("dtype", "float16")
    a, b = randn(rng, (M, K), dtype), randn(rng, (K, N), dtype)
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), dtype)


def test_persistent_cluster_fp8_gemm_with_scale_vectors(rng):
    """The fp8 example copies its row and column scales (1-D tiles, never TMA boxes) into shared memory after the
    loop: choosing the clusters' dimension looked for the swizzle panels of those too (ValueError: not enough values
    to unpack). 4 x 4 tiles on 4 persistent blocks in clusters of 2 along x (A shared); ragged M and N."""
    fp8 = load_example("06_fp8_gemm")
    M, N, K = 250, 200, 256
    a, sa = fp8.quantize(rng.standard_normal((M, K)), 1)
    b, sb = fp8.quantize(rng.standard_normal((N, K)), 1)
    g = fp8.fp8_matmul(M, N, K, block_M=64, block_N=64, block_K=64, num_stages=2).prim_func
    k = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs={**WS, "cluster": 2, "persistent": 4})
    assert "in clusters of 2 blocks whose tiles neighbour along grid dimension 0 (x)" in k.report()
    assert "A_s multicast" in k.report()
    ref = (a.astype(np.float64) @ b.astype(np.float64).T) * sa[:, None] * sb[None, :]
    out = k(a, b, sa, sb).astype(np.float64)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 8e-3


def test_persistent_clusters_follow_the_rasterization(rng):
    """With T.use_swizzle (set here on the example's kernel) the clusters take their groups of tiles in panels of the
    grid of groups: 4 x 5 tiles in groups of 2 along x, 2 x 5 groups in panels of 4 rows (the last of 1); every
    tile computed once (outputs start as NaN)."""
    g = load_example("01_gemm").matmul(300, 256, 64, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    g = dataclasses.replace(g, body=dataclasses.replace(g.launch, swizzle=(4, "row")))
    k = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs={**WS, "cluster": 2, "persistent": 4})
    assert "persistent, 4 blocks loop over the tiles of the grid in panels of 4 rows (T.use_swizzle), in clusters " \
           "of 2 blocks whose tiles neighbour along grid dimension 0 (x)" in k.report()
    a, b = randn(rng, (300, 64), "float16"), randn(rng, (64, 256), "float16")
    assert_close(k(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")


@pytest.mark.parametrize("blocks", [2, 4])
def test_persistent_cluster_attention(rng, blocks):
    """Persistent flash attention in clusters of 2: neighbouring row blocks of a head share its K and V tiles; the
    warpgroups' turns, the producer's Q (two versions) and the multicast stages together, 8 tiles."""
    fa = load_example("03_flash_attention")
    g = fa.flash_attention(1, 2, 512, 64, False, block_M=128, block_N=64, threads=256, num_stages=2).prim_func
    k = tilec.JITKernel(g, "simt:sm_90a", [3], pass_configs={**WS, "cluster": 2, "persistent": blocks})
    assert "clusters of 2 blocks along grid dimension 0 (x); K_s, V_s multicast" in k.report()
    q, kk, v = (randn(rng, (1, 2, 512, 64), "float16") for _ in range(3))
    assert_close(k(q, kk, v), fa.reference(q, kk, v, False), "float16",
                 scale=float(np.abs(v.astype(np.float64)).max()))


def test_persistent_clusters_refused(rng):
    """Persistent blocks not a multiple of the cluster size, and a tile-dependent trip count (causal attention: a
    cluster's blocks would run different numbers of trips): the kernel stays persistent, not clustered, and says
    why."""
    k = _gemm(256, 192, 128, {**WS, "cluster": 2, "persistent": 3}, block_M=64, block_N=64, block_K=32,
              num_stages=2)
    assert "persistent blocks not in clusters: 3 blocks are not a multiple of 2" in k.report()
    assert "not clustered: its blocks' tiles were not ordered in clusters of 2" in k.report()
    assert k.state.artifacts["thread_ir"].cluster == (1, 1, 1)
    # a kernel that is not made persistent (no TMA pipeline: 72-byte rows) says why, and nothing about persistent
    # blocks in clusters (it said both)
    k = _gemm(64, 64, 36, {**WS, "cluster": 2, "persistent": 2}, "cuda:sm_90a", block_M=64, block_N=64, block_K=32,
              num_stages=2)
    assert "not persistent: that needs a warp-specialized TMA pipeline" in k.report()
    assert "persistent blocks not in clusters" not in k.report(), k.report()
    k = _gemm(4096, 4096, 4096, {**WS, "cluster": 4, "persistent": True}, "cuda:sm_90a", block_N=256, block_K=64,
              threads=256)
    assert "persistent blocks not in clusters: clusters of 4 blocks, one per SM, do not all fit" in k.report()
    assert "persistent, 128 blocks loop over the tiles of the grid" in k.report()  # 512 tiles: 4 rounds either way
    fa = load_example("03_flash_attention")
    g = fa.flash_attention(1, 1, 512, 64, True, block_M=128, block_N=64, threads=256, num_stages=2).prim_func
    k = tilec.JITKernel(g, "simt:sm_90a", [3], pass_configs={**WS, "cluster": 2, "persistent": 2})
    assert "persistent blocks not in clusters: the trip count of the T.Pipelined loop at line" in k.report()
    assert "persistent, 2 blocks loop over the tiles" in k.report()
    q, kk, v = (randn(rng, (1, 1, 512, 64), "float16") for _ in range(3))
    assert_close(k(q, kk, v), fa.reference(q, kk, v, True), "float16",
                 scale=float(np.abs(v.astype(np.float64)).max()))


@pytest.mark.parametrize(("block_M", "block_N", "threads", "n", "clustered"), [
    (64, 64, 128, 2, False),  # row blocks 0 and 1 of a pair run 1 and 2 key blocks
    (128, 64, 256, 2, False),
    (64, 128, 128, 4, False),  # 1, 1, 2, 2 key blocks in a cluster of four
    (64, 128, 128, 2, True),  # 64-row blocks in pairs run the same 128-key blocks: clustered
])
def test_cluster_refused_where_its_blocks_run_different_trips(rng, block_M, block_N, threads, n, clustered):
    """Causal attention without persistence: the trip count of the pipelined loop depends on the row block (bx),
    along which K and V are shared. Blocks of a cluster that run different numbers of trips would wait for each
    other's multicast boxes and releases forever (the interpreter's deadlock); the pass clusters only where every
    cluster's blocks run the same trips, and says why not otherwise."""
    fa = load_example("03_flash_attention")
    g = fa.flash_attention(1, 2, 256, 64, True, block_M=block_M, block_N=block_N, threads=threads,
                           num_stages=2).prim_func
    k = tilec.JITKernel(g, "simt:sm_90a", [3], pass_configs={**WS, "cluster": n})
    if clustered:
        assert f"clusters of {n} blocks along grid dimension 0 (x); K_s, V_s multicast" in k.report()
    else:
        line = example_line("03_flash_attention", "for k in T.Pipelined")
        assert f"not clustered: the trip count of the T.Pipelined loop at line {line} differs between neighbouring " \
               "blocks along x" in k.report()
        assert k.state.artifacts["thread_ir"].cluster == (1, 1, 1)
    q, kk, v = (randn(rng, (1, 2, 256, 64), "float16") for _ in range(3))
    assert_close(k(q, kk, v), fa.reference(q, kk, v, True), "float16",
                 scale=float(np.abs(v.astype(np.float64)).max()))


def test_a_cluster_size_the_pass_cannot_make_is_an_error():
    from tilec.errors import TilecValueError

    with pytest.raises(TilecValueError, match=r"pass config 'cluster' takes 0 or 1 \(none\), 2 or 4, got 3"):
        _gemm(256, 192, 128, {**WS, "cluster": 3}, block_M=64, block_N=64, block_K=32, num_stages=2)


def test_cluster_refused_with_rasterization():
    """T.use_swizzle remaps blocks: the example GEMM with a rasterized grid (as if it called T.use_swizzle(2))."""
    g = load_example("01_gemm").matmul(256, 256, 128, block_M=64, block_N=64, block_K=32, num_stages=2).prim_func
    g = dataclasses.replace(g, body=dataclasses.replace(g.launch, swizzle=(2, "row")))
    k = tilec.JITKernel(g, "simt:sm_90a", [-1], pass_configs={**WS, "cluster": 2})
    assert "not clustered: T.use_swizzle remaps blocks" in k.report()


# ------------------------------------------------------------------------------------------- hazards are named


def _run(kernel, tk, *arrays):
    from tilec.backends.simt import SimtExecutable
    from tilec.runtime.args import allocate_like, bind

    SimtExecutable(tk, kernel.prim_func)(bind(kernel.prim_func, arrays, "cpu", allocate_like))


def _without(tk, target):
    """``tk`` without the statement ``target`` (or the tile op's group holding it)."""
    from tilec.ir.visit import transform
    from tilec.lower.tir import Group, Seq, seq

    def hit(c) -> bool:
        return c is target or isinstance(c, Group) and c.body is target

    def fn(node):
        if isinstance(node, Seq) and any(hit(c) for c in node.stmts):
            return seq([c for c in node.stmts if not hit(c)] or [Seq(())])
        return None

    return dataclasses.replace(tk, body=transform(tk.body, fn))


def test_cluster_hazards_are_named(rng):
    from tilec.ir.expr import binop
    from tilec.ir.visit import transform, walk
    from tilec.lower.tir import ClusterBarrier, If, MbarArriveTx

    kernel = _gemm(128, 128, 128, {**WS, "cluster": 2}, block_M=64, block_N=64, block_K=32, num_stages=2)
    tk = kernel.state.artifacts["thread_ir"]
    a, b = randn(rng, (128, 128), "float16"), randn(rng, (128, 128), "float16")
    _run(kernel, tk, a, b)
    first, last = [n for n in walk(tk.body) if isinstance(n, ClusterBarrier)]
    with pytest.raises(RaceError, match=r"of the cluster's block of rank \d before its mbarrier.init \(a missing "
                                        r"cluster barrier after the inits\)"):
        _run(kernel, _without(tk, first), a, b)
    with pytest.raises(RaceError, match=r"the cluster's block of rank \d exits while a peer may still arrive on its "
                                        r"mbarriers .* \(a missing cluster barrier before the end\)"):
        _run(kernel, _without(tk, last), a, b)

    def local_only(node):  # every consumer warp releases the stage in its own block only (lane 0, as without a cluster)
        if isinstance(node, If) and isinstance(node.then_body, MbarArriveTx) and node.then_body.cta is not None:
            lane = binop("%", tk.tx, 32)
            return If(binop("==", lane, 0), dataclasses.replace(node.then_body, cta=None))
        return None

    # the producers wait for releases that never come; the consumers, for the copies after them: a deadlock
    with pytest.raises(RaceError, match=r"k_(empty|full)\[\d\]: a wait for phase parity \d that nothing can complete"):
        _run(kernel, dataclasses.replace(tk, body=transform(tk.body, local_only)), a, b)
