"""The staged epilogue (tilec.passes.epilogue): a gemm's accumulators go out through a shared tile placed over an
operand's idle stages, swizzled, then to global memory in 16-byte vectors; and the arena placement of overlays."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import assert_close, example_line, load_example, poisoned, randn

import tilec
from tilec.ir.visit import transform
from tilec.lower.tir import arena

TMA_WS = {"wgmma": True, "tma": True, "warp_specialize": True}
STORE = example_line("01_gemm", "T.copy(C_f, C[")  # the GEMM example's accumulator store
MMA = {"wgmma": False, "tma": False}  # the sm_80 path, also on sm_90a


def _gemm(M=4096, N=4096, K=4096, target="cuda:sm_90a", configs=None, **tiles):
    tiles = {"block_N": 256, "block_K": 64, "threads": 256, **tiles}
    return tilec.JITKernel(load_example("01_gemm").matmul(M, N, K, **tiles).prim_func, target, [-1],
                           pass_configs=configs)


def test_the_accumulators_go_out_through_a_tile_over_the_stages():
    k = _gemm(configs=TMA_WS)
    assert f"T.copy at line {STORE}: C_f goes out through shared memory (C_f_stage, over A_s, B_s), by TMA stores" \
        in k.report()
    text = tilec.dump(k, after="epilogue")
    assert "# C_f_stage overlays A_s, B_s" in text
    assert "T.copy(C_f, C_f_stage)" in text and "T.tma_store(C_f_stage, C[by * 128:by * 128 + 128" in text
    plan = k.layouts
    (stage,) = [b for b in plan.shared if b.name == "C_f_stage"]
    assert plan.origin[stage] == ("free", "written from fragment C_f: swizzled against bank conflicts")
    tk = k.state.artifacts["thread_ir"]
    offsets = {m.name: off for m, off in tk.shared}
    assert offsets["C_f_stage"] == offsets["A_s"] == 0  # 64 KB over A_s's four 16 KB stages: no extra memory
    plain = _gemm(configs={**TMA_WS, "stage_epilogue": False})
    assert tk.smem_bytes == plain.state.artifacts["thread_ir"].smem_bytes
    assert "goes out through shared memory" not in plain.report()
    src = k.get_kernel_source()  # one TMA store per 64-column swizzle panel, after the writers' async-proxy fence
    assert src.count("tl::tma_store_2d(&C_tmap") == 4 and "*reinterpret_cast<unsigned*>(&C[" not in src
    assert src.index("fence.proxy.async") < src.index("tl::tma_store_2d(&C_tmap")
    vec = _gemm(configs={"wgmma": True, "tma": False}).get_kernel_source()  # cp.async pipeline: vector stores
    assert "*reinterpret_cast<uint4*>(&C[" in vec and "*reinterpret_cast<unsigned*>(&C[" not in vec


def test_tma_store_needs_a_tensor_map_and_the_barrier_before_it(rng):
    """Rows of 1001 halves (2002 bytes) allow no tensor map: 16-byte vector stores. Without the barrier between
    the staging writes and the store, the interpreter names the unordered read of the tile; without the writers'
    async-proxy fences, the first read by the async proxy of a thread's write."""
    from tests.lower.test_tma_simt import _run_thread_ir
    from tilec.errors import RaceError
    from tilec.ir.visit import walk
    from tilec.lower.tir import FenceProxyAsync, Group, Seq, Sync, TmaStoreBox

    tiles = {"block_M": 64, "block_N": 128, "block_K": 32, "threads": 128, "num_stages": 3}
    odd = _gemm(100, 1001, 96, "simt:sm_90a", {"wgmma": True, "tma": True}, **tiles)
    assert "goes out through shared memory (C_f_stage, over A_s, B_s), one element (2 bytes) a store" in odd.report()
    k = _gemm(100, 200, 96, "simt:sm_90a", {"wgmma": True, "tma": True}, **tiles)
    tk = k.state.artifacts["thread_ir"]

    def no_sync(node):
        if not isinstance(node, Seq):
            return None
        s = list(node.stmts)
        hit = [i for i in range(len(s) - 1) if isinstance(s[i], Sync) and isinstance(s[i + 1], Group)
               and any(isinstance(n, TmaStoreBox) for n in walk(s[i + 1]))]
        return Seq(tuple(c for i, c in enumerate(s) if i not in hit)) if hit else None

    a, b = randn(rng, (100, 96), "float16"), randn(rng, (96, 200), "float16")
    _run_thread_ir(k, tk, a, b)
    edited = dataclasses.replace(tk, body=transform(tk.body, no_sync))
    with pytest.raises(RaceError, match=r"race on shared C_f_stage\[\d+\]: thread 0 reads what thread \d+ wrote"):
        _run_thread_ir(k, edited, a, b)
    unfenced = dataclasses.replace(tk, body=transform(tk.body, lambda n: Seq(()) if isinstance(n, FenceProxyAsync)
                                                       else None))
    with pytest.raises(RaceError, match=r"a (wgmma|TMA store) reads shared \w+\[\d+\], which thread \d+ wrote "
                                        r"without a fence.proxy.async"):
        _run_thread_ir(k, unfenced, a, b)


def test_no_staging_where_no_operand_holds_the_tile():
    """128x128x32 with 3 stages: A_s and B_s hold 24 KB each, the fp16 tile 32 KB. The store stays direct."""
    k = _gemm(block_N=128, block_K=32, threads=128, num_stages=3, configs=MMA)
    assert (f"T.copy at line {STORE}: the accumulator is stored directly: no shared operand of its gemm idle after the "
            "loop has the 32768 bytes a staging tile needs") in k.report()
    assert "C_f_stage" not in k.get_kernel_source()


def test_simt_gemms_and_other_targets_keep_the_direct_store():
    """float32 operands (no tensor cores: the accumulators are spread in 16-byte runs already), AMD targets and the
    CPU interpreter are left alone."""
    g = load_example("01_gemm").matmul(64, 64, 64, block_M=32, block_N=32, dtype="float32").prim_func
    assert "goes out through shared memory" not in tilec.JITKernel(g, "simt:sm_80", [-1]).report()
    g16 = load_example("01_gemm").matmul(256, 256, 256, block_M=64, block_N=64, num_stages=3).prim_func
    assert "goes out through shared memory" in tilec.JITKernel(g16, "simt:sm_80", [-1]).report()
    assert "goes out through shared memory" not in tilec.JITKernel(g16, "simt:gfx90a", [-1]).report()


@pytest.mark.parametrize("configs", [MMA, {"wgmma": True, "tma": False}, {"wgmma": True, "tma": True}, TMA_WS],
                         ids=["mma", "wgmma", "tma", "tma ws"])
def test_staged_epilogue_numerics(rng, configs):
    """Ragged in M and N (the vector stores are predicated per row and column chunk), on the thread interpreter."""
    M, N, K = 100, 200, 96
    k = _gemm(M, N, K, "simt:sm_90a", configs, block_M=64, block_N=128, block_K=32, threads=128, num_stages=3)
    assert "goes out through shared memory" in k.report()
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    assert_close(k(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")


def test_arena_places_an_overlay_over_the_mems_it_may_take():
    # mems 0 (16 KB) and 1 (32 KB) placed one after the other; 2 (a barrier) after them
    sizes = [16384, 32768, 64, 24576]
    offsets, total = arena(sizes, {3: [0, 1]})  # 24 KB from mem 0's start reaches into mem 1: both may be taken
    assert offsets[:3] == [0, 16384, 49152] and offsets[3] == 0 and total == 49152 + 64
    offsets, total = arena(sizes, {3: [1]})  # over mem 1 alone
    assert offsets[3] == 16384 and total == 49152 + 64
    offsets, total = arena(sizes, {3: [0]})  # would cover mem 1 too: placed after everything
    assert offsets[3] == 50176 and total == 50176 + 24576


@pytest.mark.parametrize("buffers", [1, 2])
def test_a_persistent_kernel_stages_through_a_tile_of_its_own(rng, buffers):
    """In a persistent kernel's tile loop the operand stages hold the next tile's loads: without ``stage_in_ring``
    the accumulators go out through a tile of their own (that fits beside 4 x 48 KB of stages) by TMA stores the
    next write of the tile waits for: two 128-column chunks, or (``store_buffers``: 2, the default) four 64-column
    chunks in two buffers in turn, each write waiting for the store two chunks back; ragged, three blocks looping
    over six tiles. Without the waits (or with the two buffers' waits leaving one store too many in flight), the
    interpreter names the write over a tile a store may still read; without the last one, the kernel's end."""
    from tests.lower.test_tma_simt import _run_thread_ir
    from tilec.errors import RaceError
    from tilec.ir.visit import walk
    from tilec.lower.tir import BulkWait, Loop, Seq

    M, N, K = 300, 520, 128
    k = _gemm(M, N, K, "simt:sm_90a", {**TMA_WS, "persistent": 3, "store_buffers": buffers, "stage_in_ring": False},
              num_stages=3)
    shape = "128 x 128, 2 chunks" if buffers == 1 else "two buffers of 128 x 64, 4 chunks in turn"
    assert (f"T.copy at line {STORE}: C_f goes out through shared memory of its own (C_f_stage, {shape}) "
            "by TMA stores that overlap what follows") in k.report()
    text = tilec.dump(k, after="epilogue")
    if buffers == 1:
        assert text.count("T.tma_store_wait(C_f_stage)") == 3 and "T.copy(C_f[:128, 128:256], C_f_stage)" in text
        assert "vec_" in k.get_kernel_source().split("T.copy(C_f[:128, 128:256], C_f_stage)")[1][:200]  # pairs
    else:
        assert text.count("T.tma_store_wait(C_f_stage[1, :128, :64], pending=1)") == 2
        assert text.count("T.tma_store_wait(C_f_stage)") == 1 and "T.copy(C_f[:128, 192:256], C_f_stage[1" in text
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    assert_close(k(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")
    tk = k.state.artifacts["thread_ir"]
    drop = lambda n: Seq(()) if isinstance(n, BulkWait) else None  # noqa: E731
    in_loops = lambda n: dataclasses.replace(n, body=transform(n.body, drop)) if isinstance(n, Loop) else None  # noqa: E731
    looped = {id(n) for loop in walk(tk.body) if isinstance(loop, Loop) for n in walk(loop) if isinstance(n, BulkWait)}
    after_loops = lambda n: None if id(n) in looped else drop(n)  # noqa: E731
    lax = lambda n: dataclasses.replace(n, pending=2) if isinstance(n, BulkWait) and n.pending else None  # noqa: E731

    broken = [in_loops] + ([lax] if buffers == 2 else [])
    for fn in broken:
        with pytest.raises(RaceError, match=r"write of shared C_f_stage\[\d+\] while a TMA store may still read it"):
            _run_thread_ir(k, dataclasses.replace(tk, body=transform(tk.body, fn)), a, b)
    with pytest.raises(RaceError, match=r"the kernel ends while thread 0's TMA stores may still read shared memory"):
        _run_thread_ir(k, dataclasses.replace(tk, body=transform(tk.body, after_loops)), a, b)



@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_persistent_kernel_stages_half_its_tile_in_the_held_stage(rng, dtype):
    """The stage of B the main loop read last stays the consumers' until the next tile's first k-step: the first
    128 columns of the accumulators go out through it (C_f_held, over B_s), the other 128 through a tile of their
    own, each half by one TMA store with no wait between them; the held stage's release at the next tile's first
    k-step waits for the first store (all but the latest), the next epilogue's start for the second. Ragged, three
    blocks over six tiles of four k-steps (the interpreter's output starts as NaN). Without the release's wait the
    interpreter names the producer's TMA copy over the held tile a store may still read; without the epilogue's
    first wait, the write of C_f_stage."""
    from tests.lower.test_tma_simt import _run_thread_ir
    from tilec.errors import RaceError
    from tilec.ir.visit import walk
    from tilec.lower.tir import BulkWait, If, Seq

    M, N, K = 300, 520, 256  # four k-steps a tile: the consumers wait for the held stage's reload in the tile
    k = _gemm(M, N, K, "simt:sm_90a", {**TMA_WS, "persistent": 3}, num_stages=3, dtype=dtype)
    assert (f"T.copy at line {STORE}: C_f goes out by two TMA stores, its first 128 columns staged in the stage of "
            "B_s the main loop read last (C_f_held, over B_s, released once the store has read it), the other 128 in "
            "C_f_stage; neither waits for the other") in k.report()
    text = tilec.dump(k, after="epilogue")
    assert "# C_f_held overlays B_s" in text
    assert "if k == 0:\n                            T.tma_store_wait(C_f_held, pending=1)" in text
    assert "T.copy(C_f[:128, :128], C_f_held[(tile * 4 + 3) % 4, :128, :128])" in text
    assert text.count("T.tma_store_wait(") == 3  # the release's, the epilogue's first, the one after the tile loop
    tk = k.state.artifacts["thread_ir"]
    offsets = {m.name: off for m, off in tk.shared}
    assert offsets["C_f_held"] == offsets["B_s"]  # no shared memory of its own
    a, b = randn(rng, (M, K), dtype), randn(rng, (K, N), dtype)
    assert_close(k(a, b), a.astype(np.float64) @ b.astype(np.float64), dtype)  # (outputs start as NaN)
    waits = [n for n in walk(tk.body) if isinstance(n, BulkWait)]
    release = next(n for n in walk(tk.body) if isinstance(n, If) and isinstance(n.then_body, BulkWait)
                   and n.then_body.pending == 1)
    first = next(w for w in waits if w.pending == 0)
    for gone, what in ((release.then_body, r"write of shared C_f_held\[\d+\] while a TMA store may still read it"),
                       (first, r"write of shared C_f_stage\[\d+\] while a TMA store may still read it")):
        broken = transform(tk.body, lambda n, gone=gone: Seq(()) if n is gone else None)
        with pytest.raises(RaceError, match=what):
            _run_thread_ir(k, dataclasses.replace(tk, body=broken), a, b)


@pytest.mark.parametrize(("mnk", "tiles"), [((19, 21, 35), (16, 16, 16, 32)), ((131, 37, 131), (128, 32, 64, 128))])
def test_float32_stage_over_half_tiles_copied_element_by_element(rng, mnk, tiles):
    """K = 35 or 131 leaves A's rows misaligned for cp.async: the tiles are copied a half at a time, two threads
    writing the halves of one float32 of the staging tile placed over them. They do not race (the interpreter
    reported one)."""
    import tilec.language as T

    (M, N, K), (bm, bn, bk, threads) = mnk, tiles

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    k = tilec.JITKernel(main, "simt:sm_80", [-1])
    assert "C_f goes out through shared memory (C_f_stage, over A_s" in k.report()
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    assert_close(k(a, b), a.astype(np.float64) @ b.astype(np.float64), "float32",
                 scale=float(np.abs(a).sum(axis=1).max() * np.abs(b).max()))


@pytest.mark.parametrize("configs", [{"wgmma": True, "tma": True}, {**TMA_WS, "persistent": 2}])
def test_a_strided_output_keeps_the_staged_stores(rng, configs):
    """A T.StridedTensor output: the tensor map would describe it row-major (its rows written at the wrong pitch on
    the GPU), so its tile leaves by stores that follow its strides (staged, or direct in a persistent kernel's tile
    loop), not by a TMA store."""
    import tilec.language as T

    M = N = K = 256

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.StridedTensor((M, N), (2 * N, 1), "float16")):
        with T.Kernel(N // 128, M // 128, threads=256) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(K // 64, num_stages=2):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 128, bx * 128])

    kernel = tilec.JITKernel(main, "simt:sm_90a", pass_configs=configs)
    report = kernel.report()
    assert "tma_store" not in report and "not by TMA stores: 'C' is a T.StridedTensor" in report
    assert all("not by TMA stores" in line for line in report.splitlines() if "by TMA stores" in line)
    assert "C_tmap" not in tilec.JITKernel(main, "cuda:sm_90a", pass_configs=configs).get_kernel_source()
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    full = np.full((M, 2 * N), np.nan, np.float16)
    kernel(a, b, full[:, :N])
    assert_close(full[:, :N], a.astype(np.float64) @ b.astype(np.float64), "float16")
    assert np.isnan(full[:, N:]).all()  # the rows' gaps untouched


@pytest.mark.parametrize(("N", "dtype", "configs", "width"), [
    (68, "float16", {"wgmma": True, "tma": True}, 8), (1001, "float16", {"wgmma": True, "tma": True}, 2),
    (66, "float16", {"wgmma": True, "tma": False}, 4), (200, "float16", MMA, 16),
    (200, "float16", {**MMA, "coalesced_width": 2}, 4)])
def test_the_staged_store_note_names_the_vectors_the_cuda_stores(rng, N, dtype, configs, width):
    """The staged epilogue's note said "in 16-byte vectors" whatever the CUDA stored: C of 68 float16 columns
    (136-byte rows) goes out in 8-byte uint2 vectors, 1001 columns element by element, 66 in 4-byte ones. The note
    now names the width of the stores the CUDA makes (the tensor's rows, the tile's columns, coalesced_width)."""
    import tilec.language as T

    M, K = 72, 64
    configs = dict(configs)
    run = configs.pop("coalesced_width", None)

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((64, 32), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[bx * 64, k * 32], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C[by * 64, bx * 64], coalesced_width=run)  # staged-store

    line = next(i + 1 for i, t in enumerate(open(__file__).read().splitlines()) if t.endswith("# staged-store"))
    kind = {16: "uint4", 8: "uint2", 4: "unsigned"}.get(width)
    how = f"in {width}-byte vectors" if kind else f"one element ({width} bytes) a store"
    src = tilec.JITKernel(main, "cuda:sm_90a", pass_configs=configs).get_kernel_source()
    store = next(t for t in src.splitlines() if "C[(" in t and "C_f_stage[" in t)  # the staged tile's store
    assert (f"*reinterpret_cast<{kind}*>(&C[" in store) if kind else store.lstrip().startswith("C[")
    kernel = tilec.JITKernel(main, "simt:sm_90a", pass_configs=configs)
    assert f"T.copy at line {line}: C_f goes out through shared memory (C_f_stage, over A_s, B_s), {how}" \
        in kernel.report()
    a, b, c = randn(rng, (M, K), "float16"), randn(rng, (N, K), "float16"), poisoned((M, N), dtype)
    kernel(a, b, c)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64).T, dtype)


@pytest.mark.parametrize("configs", [{"wgmma": True, "tma": True}, {**TMA_WS, "persistent": 2}])
def test_an_output_without_a_tensor_map_says_why_it_has_no_tma_stores(rng, configs):
    """C of 68 float16 columns (rows of 136 bytes): no tensor map can describe it, so its tile leaves by plain
    stores, staged through shared memory or (in a persistent kernel's tile loop) directly from the registers. The
    report said nothing of it in the persistent kernel, and only "in 16-byte vectors" otherwise; each note now says
    why no TMA store. Ragged M and N, the last column tile 4 wide."""
    import tilec.language as T

    M, N, K = 136, 68, 88

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((64, 32), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[bx * 64, k * 32], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C[by * 64, bx * 64])  # no-tma-store

    line = next(i + 1 for i, t in enumerate(open(__file__).read().splitlines()) if t.endswith("# no-tma-store"))
    kernel = tilec.JITKernel(main, "simt:sm_90a", [-1], pass_configs=configs)
    how = "the accumulator is stored directly" if configs.get("persistent") else \
        "C_f goes out through shared memory (C_f_stage, over A_s, B_s), in 8-byte vectors"
    assert (f"T.copy at line {line}: {how}, not by TMA stores: 'C' has rows of 136 bytes, not a "
            "multiple of 16 (a tensor map's row pitch)") in kernel.report()
    a, b = randn(rng, (M, K), "float16"), randn(rng, (N, K), "float16")
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64).T, "float16")
