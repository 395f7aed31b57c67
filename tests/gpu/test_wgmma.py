"""The Hopper path (pass configs ``wgmma`` and ``tma``: wgmma fed by cp.async or by TMA through mbarriers) on a Hopper
GPU, against float64 references."""

import pytest

import tilec

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _rel(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    assert not torch.isnan(out).any()
    return (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()


def _tol(dtype: str) -> float:
    return 3e-3 if dtype == "float16" else 1e-2


def _ws_gemm(examples, M, N, K, dtype="float16", panel=0, **passes):
    """The example GEMM in 128x256x64 tiles on two consumer warpgroups, warp-specialized (wgmma fed by TMA from a
    producer warpgroup), with ``passes`` on top."""
    kernel = examples["01_gemm"].matmul.fn(M, N, K, block_M=128, block_N=256, block_K=64, threads=256, dtype=dtype,
                                           panel=panel)
    return tilec.JITKernel(kernel, "cuda", [-1],
                           pass_configs={"wgmma": True, "tma": True, "warp_specialize": True, **passes})


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("feed", ["cp.async", "tma", "tma ws"])
@pytest.mark.parametrize("cfg", [(128, 128, 64, 3, 128), (128, 256, 64, 3, 256), (64, 64, 32, 2, 128)])
@pytest.mark.parametrize("mnk", [(512, 512, 512), (1000, 1000, 1000), (1000, 1000, 1024)])
def test_wgmma_gemm(examples, cfg, mnk, feed):
    bm, bn, bk, st, th = cfg
    M, N, K = mnk
    g = examples["01_gemm"]
    k = tilec.JITKernel(g.matmul.fn(M, N, K, block_M=bm, block_N=bn, block_K=bk, num_stages=st, threads=th),
                        "cuda", [-1], pass_configs={"wgmma": True, "tma": feed != "cp.async",
                                                    "warp_specialize": feed == "tma ws"})
    assert "wgmma" in k.report()
    assert any("T.Pipelined" in t and "TMA" in t for t in k.report().splitlines()) == (feed != "cp.async")
    assert ("warp-specialized" in k.report()) == (feed == "tma ws")
    assert ("by TMA stores" in k.report()) == (feed != "cp.async")  # the staged epilogue's tile, clipped at 1000
    a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
    assert _rel(k(a, b), a.double() @ b.double()) < 3e-3


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
def test_tma_gemm_checked_launch_and_cache(examples, tmp_path, monkeypatch):
    """The packed-argument launch (cupy arrays take the checked path) and a kernel rebuilt from the disk cache."""
    cupy = pytest.importorskip("cupy")
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    g = examples["01_gemm"]
    make = lambda: tilec.JITKernel(g.matmul.fn(1000, 520, 1000, block_M=128, block_N=128, block_K=64, num_stages=3),  # noqa: E731
                                   "cuda", [-1], pass_configs={"wgmma": True, "tma": True, "warp_specialize": True})
    a, b = torch.randn(1000, 1000, device="cuda").half(), torch.randn(1000, 520, device="cuda").half()
    ref = a.double() @ b.double()
    out = make()(cupy.asarray(a), cupy.asarray(b))
    assert _rel(torch.as_tensor(out, device="cuda"), ref) < 3e-3
    assert _rel(make()(a, b), ref) < 3e-3  # from the cache: the tensor maps come back from its metadata


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("ring", [True, False])
@pytest.mark.parametrize("panel", [0, 8])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mnk", [(1000, 1000, 1000), (2048, 4096, 1024)])
def test_persistent_gemm_fresh_and_from_the_disk_cache(examples, tmp_path, monkeypatch, mnk, dtype, panel, ring):
    """One block per SM looping over the tiles (in panels of 8 rows with ``panel``), the accumulators out by TMA
    stores, half through the stage of B the main loop read last and half through a tile of their own (or, without
    ``stage_in_ring``, all through that tile in chunks): built here, then again from the disk cache (which must give
    back the lowered grid, not the Tile IR's); outputs poisoned, so a tile no block takes shows."""
    from tilec.backends.cuda import runtime

    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    M, N, K = mnk
    make = lambda: _ws_gemm(examples, M, N, K, dtype, panel, persistent=True, stage_in_ring=ring)  # noqa: E731
    tdt = getattr(torch, dtype)
    a, b = torch.randn(M, K, device="cuda").to(tdt), torch.randn(K, N, device="cuda").to(tdt)
    ref = a.double() @ b.double()
    tol = _tol(dtype)
    k = make()
    staged = "the stage of B_s the main loop read last" if ring else "of its own (C_f_stage, two buffers"
    assert "persistent" in k.report() and staged in k.report()
    assert _rel(k(a, b), ref) < tol
    runtime._BUILT.clear()
    assert _rel(make()(a, b), ref) < tol


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("cfg", [(128, 256, 3, {"persistent": True}), (128, 128, 5, {"persistent": True}),
                                 (128, 128, 3, {"warp_specialize": False})], ids=["256-persistent",
                                                                                   "128-persistent", "128-tma"])
@pytest.mark.parametrize("mnk", [(1000, 1000, 1000), (2048, 4096, 1024)])
def test_tf32_wgmma_gemm(examples, mnk, cfg):
    """float32 with allow_tf32=True, B stored N x K: wgmma m64nNk8 on the Hopper path (TMA, warp specialization,
    persistent), ragged tiles. Within TF32's error of the float64 product and within float32 summation error of
    the product of the operands with their low 13 bits cleared (wgmma reads TF32 by truncation)."""
    from tilec.dtypes import truncate_tf32

    bn, stages, passes = cfg[1], cfg[2], cfg[3]
    M, N, K = mnk
    kernel = examples["01_gemm"].matmul.fn(M, N, K, block_M=128, block_N=bn, block_K=32, num_stages=stages,
                                           threads=256, dtype="float32", allow_tf32=True, transpose_B=True, panel=8)
    k = tilec.JITKernel(kernel, "cuda", [-1], pass_configs={"wgmma": True, "tma": True, "warp_specialize": True,
                                                             **passes})
    assert f"wgmma (m64n{bn}k8, 2 warpgroup(s) along M)" in k.report(), k.report()
    a, b = torch.randn(M, K, device="cuda"), torch.randn(N, K, device="cuda")
    c = k(a, b)
    err = _rel(c, a.double() @ b.double().T)
    assert 1e-6 < err < 3e-3, err
    ta, tb = (torch.from_numpy(truncate_tf32(x.cpu().numpy())).double() for x in (a, b))
    assert _rel(c, ta @ tb.T) < 1e-5


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(("mnk", "panel", "blocks", "note"), [
    # 256 tiles on 132 SMs: one round, the last 124 tiles shared out; ragged M, N and K. The round's tiles stage
    # half their epilogue in the held stage, which the first part's first step gives back (stage_in_ring)
    ((2000, 4000, 1000), 8, True, "1 round of whole tiles, then the last 124 tiles"),
    # 64 tiles on 60 blocks: four left over, shared with one more round (each block at least half a tile)
    ((1024, 2048, 2048), 0, 60, "0 rounds of whole tiles, then the last 64 tiles"),
])
def test_stream_k_gemm(examples, mnk, panel, blocks, note, dtype):
    """Persistent blocks sharing out the last round's tiles by iterations (pass config stream_k): partial sums through
    the module's workspace, added by the block that ran each tile's last iterations; launched three times in a row on
    fresh inputs (every flag must be clear again after a launch), outputs poisoned."""
    M, N, K = mnk
    k = _ws_gemm(examples, M, N, K, dtype, panel, persistent=blocks, stream_k=True)
    assert note in k.report()
    assert ("staged in the stage of B_s the main loop read last" in k.report()) == note.startswith("1 round")
    tdt = getattr(torch, dtype)
    for _ in range(3):
        a, b = torch.randn(M, K, device="cuda").to(tdt), torch.randn(K, N, device="cuda").to(tdt)
        assert _rel(k(a, b), a.double() @ b.double()) < _tol(dtype)


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("mnk", [(1024, 1000, 1000), (2048, 4096, 1024)])
def test_cluster_gemm(examples, mnk, n):
    """Clusters of n blocks along M sharing B's tiles by TMA multicast (pass config cluster)."""
    M, N, K = mnk
    k = _ws_gemm(examples, M, N, K, cluster=n)
    assert f"clusters of {n} blocks along grid dimension 1" in k.report()
    a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
    assert _rel(k(a, b), a.double() @ b.double()) < 3e-3


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(("mnk", "n", "panel", "blocks"), [((1000, 1000, 1000), 2, 0, True),
                                                           ((2048, 4096, 1024), 2, 8, True),
                                                           ((4096, 2048, 512), 4, 0, 64)])
def test_persistent_cluster_gemm(examples, mnk, n, panel, blocks, dtype):
    """Persistent blocks in clusters of n (pass configs persistent and cluster): a cluster's blocks take n tiles
    that neighbour along M in every round (in panels of 8 with ``panel``) and share B's tiles by TMA multicast;
    outputs poisoned, so a tile no block takes shows. (Clusters of 4 with a block per SM are refused: they do not
    all fit at once.)"""
    M, N, K = mnk
    k = _ws_gemm(examples, M, N, K, dtype, panel, persistent=blocks, cluster=n)
    assert f"in clusters of {n} blocks whose tiles neighbour along grid dimension 1" in k.report()
    assert f"clusters of {n} blocks along grid dimension 0 (x); B_s multicast" in k.report()
    tdt = getattr(torch, dtype)
    a, b = torch.randn(M, K, device="cuda").to(tdt), torch.randn(K, N, device="cuda").to(tdt)
    assert _rel(k(a, b), a.double() @ b.double()) < _tol(dtype)


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize(("mnk", "dtype", "cluster", "panel", "blocks"), [
    ((1000, 1000, 1000), "float16", 0, 0, True),  # ragged: 64 tiles on 132 blocks, none with a second
    ((2048, 4096, 1024), "bfloat16", 2, 8, True),
    ((4096, 2048, 512), "float16", 0, 0, 50),  # 512 tiles on 50 blocks: 10 or 11 each, dealt out in turn
    ((1024, 1536, 4096), "float16", 2, 0, 16),
])
def test_persistent_gemm_consumer_copies(examples, mnk, dtype, cluster, panel, blocks):
    """Two copies of a 128-thread consumer warpgroup per persistent block (pass config consumers), each taking
    every other tile of its block (CUTLASS's ping-pong: one's epilogue beside the other's main loop), in clusters
    or not; outputs poisoned, so a tile no copy takes shows."""
    M, N, K = mnk
    k = tilec.JITKernel(examples["01_gemm"].matmul.fn(M, N, K, block_M=128, block_N=128, block_K=64, threads=128,
                                                      dtype=dtype, panel=panel), "cuda", [-1],
                        pass_configs={"wgmma": True, "tma": True, "warp_specialize": True, "persistent": blocks,
                                      "consumers": 2, "cluster": cluster})
    assert "dealt out in turn to 2 copies of the block's 128 consumer threads" in k.report()
    assert k.state.artifacts["thread_ir"].threads == 384
    tdt = getattr(torch, dtype)
    a, b = torch.randn(M, K, device="cuda").to(tdt), torch.randn(K, N, device="cuda").to(tdt)
    assert _rel(k(a, b), a.double() @ b.double()) < _tol(dtype)


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize(("feed", "block_N"), [("cp.async", 64), ("tma", 64), ("tma ws", 64),
                                               ("tma ws rotated", 64), ("tma ws rotated", 128)])
@pytest.mark.parametrize("n", [512, 1000])
@pytest.mark.parametrize("causal", [False, True])
def test_wgmma_flash_attention(examples, causal, n, feed, block_N):
    fa = examples["03_flash_attention"]
    b, h, d = 2, 4, 128
    ws = feed.startswith("tma ws")
    k = tilec.JITKernel(fa.flash_attention.fn(b, h, n, d, causal, block_M=128, block_N=block_N, threads=256,
                                              num_stages=2), "cuda", [3],
                        pass_configs={"wgmma": True, "tma": feed != "cp.async", "warp_specialize": ws,
                                      "rotate": feed == "tma ws rotated"})
    assert any("T.Pipelined" in t and "TMA" in t for t in k.report().splitlines()) == (feed != "cp.async")
    assert ("warp-specialized" in k.report()) == ws
    assert ("runs one iteration late" in k.report()) == (feed == "tma ws rotated")
    assert "wgmma" in k.report()
    q, k_, v = (torch.randn(b, h, n, d, device="cuda").half() for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k_.double(), v.double(), is_causal=causal)
    assert _rel(k(q, k_, v), ref) < 3e-3


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n", [1000, 2048])
def test_persistent_flash_attention(examples, n, d, causal):
    """One block per SM over 256 / 512 row blocks: the producer loads each tile's Q by TMA, which the consumers take
    into registers for QK^T (``operand_registers``) and release for the next tile's; the warpgroups' turns run on
    from tile to tile; causal tiles (of 1 to 16 key blocks) come from a table balancing the blocks' work, with the
    rings' iterations counted in a register."""
    fa = examples["03_flash_attention"]
    b, h = 2, 16
    k = tilec.JITKernel(fa.flash_attention.fn(b, h, n, d, causal, block_M=128, block_N=128, threads=256,
                                              num_stages=2), "cuda", [3],
                        pass_configs={"wgmma": True, "tma": True, "warp_specialize": True, "persistent": True})
    report = k.report()
    # non-causal: 256 / 512 tiles take 2 / 4 rounds on 132 SMs and on 128 blocks, which take them (no partial round)
    assert f"persistent, {132 if causal else 128} blocks loop over the tiles" in report and "take turns" in report
    assert ("in the balanced order" in report) == causal
    assert "read into 'Q_s_regs' there, again once the consumers are done with it" in report
    assert "mbarrier pairs for each of 2 rings" in report
    q, k_, v = (torch.randn(b, h, n, d, device="cuda").half() for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k_.double(), v.double(), is_causal=causal)
    assert _rel(k(q, k_, v), ref) < 3e-3


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("kernel", ["gemm float16", "gemm bfloat16", "attention D=128", "attention D=128 causal",
                                    "attention D=64 192x128", "attention D=64 128x128"])
def test_the_compilers_choice_of_specialization(examples, kernel):
    """No pass configs: the suite's kernels that have their SM to themselves come out warp-specialized and persistent
    (tilec.passes.specialize), flash attention at D=64 in 128x128 tiles keeps its block-wide pipeline; ragged sizes
    against float64."""
    fa = examples["03_flash_attention"].flash_attention
    if kernel.startswith("gemm"):
        M, N, K, dtype = 1000, 1496, 1000, kernel.split()[1]  # rows of whole 16 bytes: TMA
        k = tilec.JITKernel(examples["01_gemm"].matmul.fn(M, N, K, block_M=128, block_N=256, block_K=64, threads=256,
                                                          dtype=dtype, panel=4), "cuda")
        a = torch.randn(M, K, device="cuda").to(getattr(torch, dtype))
        b = torch.randn(K, N, device="cuda").to(getattr(torch, dtype))
        out = torch.full((M, N), float("nan"), device="cuda", dtype=a.dtype)  # poisoned: unwritten elements show
        k(a, b, out)
        ref, tol = a.double() @ b.double(), _tol(dtype)
    else:
        d, causal, bm = (64 if "D=64" in kernel else 128), "causal" in kernel, (192 if "192" in kernel else 128)
        k = tilec.JITKernel(fa.fn(2, 8, 1000, d, causal, block_M=bm, block_N=128, threads=bm * 2, num_stages=2),
                            "cuda")
        q, k_, v = (torch.randn(2, 8, 1000, d, device="cuda").half() for _ in range(3))
        out = torch.full_like(q, float("nan"))
        k(q, k_, v, out)
        ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k_.double(), v.double(), is_causal=causal)
        tol = 3e-3
    chosen = "128x128" not in kernel
    note = next(line for line in k.report().splitlines() if "chosen by the compiler" in line and "special" in line)
    assert ("warp specialization and persistence chosen" in note) == chosen, note
    assert ("setmaxnreg" in k.get_kernel_source()) == ("persistent, " in k.report()) == chosen
    assert _rel(out, ref) < tol


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_compilers_choice_of_panels(examples, dtype):
    """No pass configs and no ``panel``: a persistent GEMM of 16 x 16 tiles takes them in panels of 16 rows
    (tilec.passes.panels; a round of the SMs' blocks spans 16 rows and about 9 columns), ragged in every dimension,
    launched twice (the second launch finds the first's output, poisoned again)."""
    M, N, K = 2000, 4000, 520  # rows of whole 16 bytes: TMA
    k = tilec.JITKernel(examples["01_gemm"].matmul.fn(M, N, K, block_M=128, block_N=256, block_K=64, threads=256,
                                                      dtype=dtype), "cuda")
    assert "tiles in panels of 16 rows, chosen by the compiler" in k.report()
    a = torch.randn(M, K, device="cuda").to(getattr(torch, dtype))
    b = torch.randn(K, N, device="cuda").to(getattr(torch, dtype))
    ref = a.double() @ b.double()
    for _ in range(2):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=a.dtype)  # poisoned: unwritten elements show
        k(a, b, out)
        assert _rel(out, ref) < _tol(dtype)


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_flash_attention_three_consumer_warpgroups(examples, dtype, causal, persistent):
    """D=64 in 192-row tiles: three consumer warpgroups taking turns beside the producer (512 threads; by default
    Q stays in shared memory and the producer gives up all but 24 registers); 128-key blocks, so the causal
    diagonal crosses two of a tile's blocks; S = 1000 leaves a partial last tile and key block."""
    fa = examples["03_flash_attention"]
    b, h, n, d = 2, 8, 1000, 64
    k = tilec.JITKernel(fa.flash_attention.fn(b, h, n, d, causal, block_M=192, block_N=128, threads=384,
                                              num_stages=2, dtype=dtype), "cuda", [3],
                        pass_configs={"wgmma": True, "tma": True, "warp_specialize": True, "persistent": persistent})
    report = k.report()
    assert "3 consumer warpgroup(s)" in report and "take turns" in report and "Q_s_regs" not in report
    assert "setmaxnreg.dec.sync.aligned.u32 24;" in k.get_kernel_source()
    assert ("persistent, 96 blocks loop over the tiles" in report) == persistent  # 96 tiles, one a block
    tdt = getattr(torch, dtype)
    q, k_, v = (torch.randn(b, h, n, d, device="cuda", dtype=tdt) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k_.double(), v.double(), is_causal=causal)
    assert _rel(k(q, k_, v), ref) < (3e-3 if dtype == "float16" else 1e-2)


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("d", "dtype", "ws"), [(64, "float16", True), (128, "bfloat16", True),
                                                (128, "float16", False)])
def test_flash_attention_q_in_shared_memory_or_registers(examples, d, dtype, ws, causal):
    """Where Q sits for QK^T, the other way round from each kernel's default: the persistent warp-specialized kernel
    with ``operand_registers`` off keeps Q in shared memory (the producer loads the next tile's beside this one's:
    two versions), the kernel without a producer takes it into registers by the example's ``q_registers`` (the
    block's threads load it). S = 1000 (the last row and key blocks partial)."""
    fa = examples["03_flash_attention"]
    b, h, n = 2, 16, 1000
    k = tilec.JITKernel(fa.flash_attention.fn(b, h, n, d, causal, block_M=128, block_N=128, threads=256,
                                              num_stages=2, dtype=dtype, q_registers=not ws), "cuda", [3],
                        pass_configs={"wgmma": True, "tma": True, "warp_specialize": ws, "persistent": ws,
                                      "operand_registers": False})
    report = k.report()
    assert ("the next tile's beside this one's (two versions)" in report) == ws
    assert ("Q_s -> Q_x" in report) == (not ws) and "Q_s_regs" not in report
    q, k_, v = (torch.randn(b, h, n, d, device="cuda").to(getattr(torch, dtype)) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k_.double(), v.double(), is_causal=causal)
    assert _rel(k(q, k_, v), ref) < (3e-3 if dtype == "float16" else 1e-2)


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("d", [64, 128])
def test_persistent_cluster_flash_attention(examples, d):
    """Persistent flash attention in clusters of 2 blocks taking neighbouring row blocks of one head, which share
    the K and V tiles by TMA multicast."""
    fa = examples["03_flash_attention"]
    b, h, n = 2, 16, 2048
    k = tilec.JITKernel(fa.flash_attention.fn(b, h, n, d, False, block_M=128, block_N=128, threads=256,
                                              num_stages=2), "cuda", [3],
                        pass_configs={"wgmma": True, "tma": True, "warp_specialize": True, "persistent": True,
                                      "cluster": 2})
    assert "clusters of 2 blocks along grid dimension 0 (x); K_s, V_s multicast" in k.report()
    q, k_, v = (torch.randn(b, h, n, d, device="cuda").half() for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k_.double(), v.double())
    assert _rel(k(q, k_, v), ref) < 3e-3


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("block_N", "configs"), [(128, {"split_rings": False}), (176, {})])
def test_persistent_flash_attention_rings(examples, causal, block_N, configs):
    """K and V in one ring of three stages (split_rings off: Q loaded again once the consumers are done, one
    version), and 176-key tiles on split rings (2048 keys: the last block partial)."""
    fa = examples["03_flash_attention"]
    b, h, n, d = 2, 16, 2048, 128
    k = tilec.JITKernel(fa.flash_attention.fn(b, h, n, d, causal, block_M=128, block_N=block_N, threads=256,
                                              num_stages=2), "cuda", [3],
                        pass_configs={"wgmma": True, "tma": True, "warp_specialize": True, "persistent": True,
                                      **configs})
    assert ("K_s x3, V_s x3" in k.report()) == (not configs.get("split_rings", True))
    q, k_, v = (torch.randn(b, h, n, d, device="cuda").half() for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k_.double(), v.double(), is_causal=causal)
    assert _rel(k(q, k_, v), ref) < 3e-3


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
@pytest.mark.parametrize("split_rings", [True, False])
def test_persistent_flash_attention_consumer_copies(examples, split_rings):
    """The rotated loop in two copies of one consumer warpgroup (64-row tiles, S=1000: the last tile of a head
    partial), each copy releasing its own tile's stages."""
    fa = examples["03_flash_attention"]
    b, h, n, d = 2, 8, 1000, 128
    k = tilec.JITKernel(fa.flash_attention.fn(b, h, n, d, False, block_M=64, block_N=64, threads=128,
                                              num_stages=2), "cuda", [3],
                        pass_configs={"wgmma": True, "tma": True, "warp_specialize": True, "persistent": True,
                                      "consumers": 2, "split_rings": split_rings})
    assert "dealt out in turn to 2 copies" in k.report()
    q, k_, v = (torch.randn(b, h, n, d, device="cuda").half() for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k_.double(), v.double())
    assert _rel(k(q, k_, v), ref) < 3e-3


@pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")
def test_a_wgmma_too_wide_for_the_launch_fails_with_a_hint(examples):
    """Three consumer warpgroups (128 registers a thread at launch) with a 64 x 256 float32 accumulator a wgmma:
    ptxas refuses it; the error names the registers and what to change (not only ptxas's log)."""
    from tilec.errors import TilecRuntimeError

    a, b = (torch.randn(1024, 1024, device="cuda", dtype=torch.float16) for _ in range(2))
    kernel = examples["01_gemm"].matmul.fn(1024, 1024, 1024, block_M=192, block_N=256, block_K=64, threads=384,
                                           num_stages=2)
    with pytest.raises(TilecRuntimeError, match=r"(?s)Insufficient registers.*hint: .*needs \d+ registers.*block_N"):
        tilec.JITKernel(kernel, "cuda", [-1], pass_configs={"wgmma": True, "tma": True, "warp_specialize": True})(a, b)
