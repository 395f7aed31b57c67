"""Layout inference (stage 4) on small kernels: the concrete fragment, shared and loop layouts it picks, the level
that fixed each one, and the conflicts it reports. Expected layouts are built with the named constructors of
:mod:`tilec.layout` (themselves checked against the PTX tables in ``tests/layout``) or checked by enumeration."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
from conftest import assert_close, load_example, poisoned, randn

import tilec
import tilec.language as T
from tilec.errors import LayoutConflictError
from tilec.ir.stmt import Fill, Gemm, Parallel
from tilec.layout import (
    Fragment,
    Layout,
    make_mma_a_fragment,
    make_mma_b_fragment,
    make_mma_c_fragment,
    row_major,
    swizzle,
)
from tilec.lower.layouts import default_fragment, project
from tilec.passes.pipeline import run_pipeline
from tilec.runtime.jit import default_pass_configs
from tilec.target import parse_target


class Plan:
    """The layout plan of a kernel, with its buffers and ops looked up by name and line."""

    def __init__(self, func, target: str = "cuda:sm_80") -> None:
        func = func.prim_func if isinstance(func, tilec.JITKernel) else func
        state = run_pipeline(func, parse_target(target), until="layout_inference")
        self.plan = state.artifacts["layout_inference"]
        self.ops = [state.ftg.node(n)["op"] for n in state.ftg.nodes]

    def frag(self, name: str) -> Fragment:
        return next(f for b, f in self.plan.fragments.items() if b.name == name)

    def shared(self, name: str):
        return next(lay for b, lay in self.plan.shared.items() if b.name == name)

    def origin(self, name: str) -> tuple[str, str]:
        return next(o for b, o in self.plan.origin.items() if getattr(b, "name", None) == name)

    def ops_of(self, cls: type) -> list:
        return [op for op in self.ops if isinstance(op, cls)]

    def gemms(self) -> list:
        return [self.plan.gemms[op] for op in self.ops if isinstance(op, Gemm)]

    def loops(self) -> list[Fragment]:
        """Loop layouts of the kernel's T.Parallel nests, in program order."""
        return [self.plan.loops[op] for op in self.ops if isinstance(op, Parallel)]


def line_of(fn, marker: str) -> int:
    """The file line of the source line of ``fn`` containing ``marker``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def holders(frag: Fragment) -> list[set[int]]:
    """Per element (row-major): the threads holding it."""
    t, _ = frag.eval_tables()
    return [set(row.tolist()) for row in t.reshape(frag.size, -1)]


# ---------------------------------------------------------------------------------------------------------- GEMM


def gemm(bm, bn, bk, threads, policy="Square", dtype="float16", trans_b=False, epilogue=False, num_stages=2):
    M, N, K = 2 * bm, 2 * bn, 2 * bk
    b_shape, bs_shape = ((N, K), (bn, bk)) if trans_b else ((K, N), (bk, bn))

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype), Bias: T.Tensor((N,), "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_f = T.alloc_fragment((bm, bn), "float32")
            D_f = T.alloc_fragment((bm, bn), "float32")
            bias = T.alloc_fragment((bn,), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=num_stages):
                T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=trans_b, policy=policy)
            if epilogue:
                T.copy(Bias[bx * bn], bias)
                for i, j in T.Parallel(bm, bn):
                    D_f[i, j] = T.max(C_f[i, j] + bias[j], 0.0)
                T.copy(D_f, C[by * bm, bx * bn])
            else:
                T.copy(C_f, C[by * bm, bx * bn])

    return main


POLICIES = [  # (bm, bn, threads, policy) -> the warp grid
    (64, 64, 128, "Square", (2, 2)),
    (64, 64, 128, "FullRow", (4, 1)),
    (64, 64, 128, "FullCol", (1, 4)),
    (128, 64, 256, "Square", (4, 2)),
    (128, 128, 256, "FullRow", (8, 1)),
    (128, 128, 256, "FullCol", (1, 8)),
    (32, 64, 128, "FullRow", (2, 2)),  # 32 rows take at most 2 warps of 16: the others go to the columns
    (64, 16, 128, "FullCol", (2, 2)),  # 16 columns take at most 2 warps of 8
    (16, 8, 32, "Square", (1, 1)),
]


@pytest.mark.parametrize(("bm", "bn", "threads", "policy", "grid"), POLICIES)
def test_gemm_accumulator_is_the_mma_c_fragment_of_the_policys_warp_grid(bm, bn, threads, policy, grid):
    p = Plan(gemm(bm, bn, 32, threads, getattr(T.GemmWarpPolicy, policy)))
    (g,) = p.gemms()
    assert (g.instr, g.warp_m, g.warp_n) == ("mma", *grid)
    want = make_mma_c_fragment(bm, bn, *grid)
    assert p.frag("C_f").equals(want)
    assert p.origin("C_f") == ("strict", f"mma.m16n8k16 accumulator, {grid[0]}x{grid[1]} warps")
    # independently: warp (wm, wn) = thread // 32 holds the (wm, wn) sub-tile of C
    t, _ = p.frag("C_f").eval_tables()
    i, j = np.indices((bm, bn))
    warp = (i // (bm // grid[0])) * grid[1] + j // (bn // grid[1])
    np.testing.assert_array_equal(t[..., 0] // 32, warp)


@pytest.mark.parametrize("stages", [1, 2, 3])
@pytest.mark.parametrize(("bm", "bn", "bk", "trans_b", "a_bytes", "b_bytes"), [
    (64, 64, 32, False, 64, 128),  # A_s rows of 32 halves = 64 B; B_s rows of 64 halves = 128 B
    (64, 64, 64, False, 128, 128),
    (64, 32, 16, False, 32, 64),
    (64, 64, 32, True, 64, 64),  # B_s stored N x K
])
def test_gemm_shared_operands_get_the_widest_swizzle_their_rows_allow(bm, bn, bk, trans_b, a_bytes, b_bytes,
                                                                       stages):
    """With ``num_stages >= 2`` the pipelining pass (before layout inference) makes each operand a
    ``(stages,) + tile`` buffer: its layout is the tile's swizzle stacked ``stages`` times (version ``v`` at
    offset ``v * tile size``); with ``num_stages=1`` the buffer stays the 2-D tile."""
    p = Plan(gemm(bm, bn, bk, 128, trans_b=trans_b, num_stages=stages))
    bs_shape = (bn, bk) if trans_b else (bk, bn)
    versions = () if stages == 1 else (stages,)
    for name, shape, row_bytes in (("A_s", (bm, bk), a_bytes), ("B_s", bs_shape, b_bytes)):
        want = swizzle(shape, 16, row_bytes)
        lay = p.shared(name)
        assert lay.shape == versions + shape, name
        assert lay.equals(want.stack(stages) if versions else want), name
        assert p.origin(name) == ("strict", "tensor-core operand")
        table = lay.eval_table().reshape((-1,) + shape)
        # the versions are disjoint, one after another: together a permutation of the buffer's elements
        np.testing.assert_array_equal(np.sort(table.ravel()), np.arange(table.size))
        for v in range(table.shape[0]):
            assert table[v].min() == v * math.prod(shape), (name, v)
        # what the swizzle is for: the 8 rows one ldmatrix matrix reads (16 bytes each) hit 8 different 16-byte
        # bank groups, for every 16-byte column chunk and every group of 8 rows, in every version
        for v in range(table.shape[0]):
            for r0 in range(0, shape[0], 8):
                for c in range(0, shape[1], 8):
                    groups = (table[v, r0 : r0 + 8, c] * 2 // 16) % 8
                    assert len(set(groups.tolist())) == 8, (name, v, r0, c)


def test_gemm_epilogue_loop_and_its_fragments_take_the_accumulator_layout():
    p = Plan(gemm(64, 64, 32, 128, epilogue=True))
    c = make_mma_c_fragment(64, 64, 2, 2)
    (loop,) = p.loops()
    assert loop.equals(c)
    assert p.frag("D_f").equals(c)
    assert p.origin("D_f")[0] == "common" and p.origin("D_f")[1].startswith("indexed by the loop at line")
    # the bias row vector, indexed by j only, is held by exactly the threads holding its column of C
    bias = p.frag("bias")
    assert bias.equals(project(c, (1,)))
    t, _ = c.eval_tables()
    for j, hs in enumerate(holders(bias)):
        assert hs == set(t[:, j, 0].tolist())
    assert (bias.num_threads, bias.num_locals, bias.replicate) == (128, 8, 16)  # 2 warp rows x 8 lane groups


def test_gemm_fallback_to_simt_for_float32_operands_and_free_accumulator():
    p = Plan(gemm(32, 32, 16, 128, dtype="float32"))
    (g,) = p.gemms()
    assert g.instr == "simt" and "operand dtype float32" in g.why
    assert p.frag("C_f").equals(default_fragment((32, 32), 128, 4))
    assert p.origin("C_f")[0] == "free" and p.origin("C_f")[1].startswith("spread over the threads, the accumulator "
                                                                           "of T.gemm at line ")
    assert "in scalar code (fallback: operand dtype float32" in p.origin("C_f")[1]
    assert not p.plan.shared  # no tensor-core operands: shared buffers stay row-major (lowering's default)


def test_register_operands_of_a_gemm():
    """``T.gemm(P_f, V_s, O_f)``: the register A operand is the mma A fragment of O's warp grid, replicated over
    the warps of a row; a register B operand the B fragment replicated over the warps of a column."""

    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_f = T.alloc_fragment((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            A_s = T.alloc_shared((64, 32), "float16")
            B_f = T.alloc_fragment((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            C2 = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_f)
            T.copy(B, B_s)
            T.gemm(A_f, B_s, C_f, clear_accum=True)
            T.copy(A, A_s)
            T.copy(B, B_f)
            T.gemm(A_s, B_f, C2, clear_accum=True)
            for i, j in T.Parallel(64, 64):
                C2[i, j] += C_f[i, j]
            T.copy(C2, C)

    p = Plan(main)
    assert p.frag("A_f").equals(make_mma_a_fragment(64, 32, 2, 2))
    assert p.frag("A_f").replicate == 2
    assert p.frag("B_f").equals(make_mma_b_fragment(32, 64, 2, 2))
    assert p.frag("C_f").equals(p.frag("C2"))


# ------------------------------------------------------------------------------------------------------- softmax


def test_softmax_free_spread_rows_and_loops():
    p = Plan(load_example("02_softmax").softmax(64, 256, block_M=8, block_N=128))  # over 128 threads
    x = p.frag("x")
    assert p.origin("x") == ("free", "spread over the threads")
    assert x.equals(default_fragment((8, 128), 128, 4))
    # evenly: every thread holds 8 elements, as 2 runs of 4 consecutive columns (one 16-byte float32 vector)
    t, loc = x.eval_tables()
    t, loc = t[..., 0], loc[..., 0]
    assert (x.num_threads, x.num_locals, x.replicate) == (128, 8, 1)
    assert (np.bincount(t.ravel(), minlength=128) == 8).all()
    assert (t.reshape(8, 32, 4) == t.reshape(8, 32, 4)[:, :, :1]).all()
    assert (np.diff(loc.reshape(8, 32, 4), axis=-1) == 1).all()
    # y (float16) is written by the loop over x: same layout, from the common level
    assert p.frag("y").equals(x) and p.origin("y")[0] == "common"
    # row vectors: projections of x, each row on the 32 threads holding it (2 rows per thread)
    for name in ("row_max", "row_sum", "tile_max", "tile_sum"):
        f = p.frag(name)
        assert f.equals(project(x, (0,))), name
        assert (f.num_locals, f.replicate) == (2, 32)
        for i, hs in enumerate(holders(f)):
            assert hs == set(range(32 * (i % 4), 32 * (i % 4) + 32))
    loops = p.loops()
    assert [lp.shape for lp in loops] == [(8, 128), (8,), (8, 128), (8,), (8, 128)]
    for lp in loops:
        assert lp.equals(x if lp.ndim == 2 else p.frag("row_max"))


# ----------------------------------------------------------------------------------------------- flash attention


@pytest.mark.parametrize("dim", [32, 64])
@pytest.mark.parametrize(("causal", "seq_len"), [(False, 128), (False, 100), (True, 128)])
def test_flash_attention_layouts(dim, causal, seq_len):
    p = Plan(load_example("03_flash_attention").flash_attention(1, 2, seq_len, dim, causal))
    assert [(g.instr, g.warp_m, g.warp_n) for g in p.gemms()] == [("mma", 4, 1), ("mma", 4, 1)]  # FullRow
    s = make_mma_c_fragment(64, 64, 4, 1)
    assert p.frag("S").equals(s)
    assert p.frag("O_f").equals(make_mma_c_fragment(64, dim, 4, 1))
    assert p.frag("P").equals(make_mma_a_fragment(64, 64, 4, 1))  # the A operand of P @ V
    for name in ("Q_s", "K_s", "V_s"):
        assert p.shared(name).equals(swizzle((64, dim), 16, 2 * dim))
    # row statistics: the projection of S; with FullRow each row lives on the 4 lanes of one quad of one warp
    for name in ("m", "m_prev", "rescale", "l_tile", "l"):
        f = p.frag(name)
        assert f.equals(project(s, (0,))), name
        assert (f.num_threads, f.num_locals, f.replicate) == (128, 2, 4)
        t, loc = f.eval_tables()
        for i in range(64):
            quad = 32 * (i // 16) + 4 * (i % 8)
            assert set(t[i].tolist()) == {quad, quad + 1, quad + 2, quad + 3}
            assert set(loc[i].tolist()) == {(i % 16) // 8}  # rows g and g + 8 of an m16 atom
    assert p.origin("m") == ("common", "rows of S")
    # each loop takes the layout of the fragment it indexes by all its variables, or the row projection; the
    # scores of the key blocks the diagonal crosses (causal) or the last partial block (ragged) are masked by a
    # loop, the others cleared (T.clear, no loop)
    masked = causal or seq_len % 64 != 0
    first = p.ops.index(p.ops_of(Gemm)[0])
    assert isinstance(p.ops[first - 1], Fill) and p.ops[first - 1].writes()[0].buffer.name == "S"
    if masked:
        assert isinstance(p.ops[first - 2], Parallel) and p.ops[first - 2].writes()[0].buffer.name == "S"
    want = ([s] if masked else []) + [p.frag("m"), s, p.frag("m"), p.frag("O_f"), p.frag("O_f")]
    loops = p.loops()
    assert len(loops) == len(want)
    for got, w in zip(loops, want):
        assert got.equals(w)


@pytest.mark.parametrize(("target", "tiles", "instrs"), [
    ("cuda:sm_80", {"block_N": 16}, ["simt", "simt", "mma"]),  # S: no FullRow partition of 4 warps; O on mma
    ("hip:gfx90a", {"block_N": 16}, ["simt", "simt", "mfma"]),
    ("cuda:sm_80", {"block_N": 32, "dtype": "float32"}, ["simt", "simt", "simt"]),
    ("cuda:sm_80", {"block_N": 32, "dv": 100, "dpe": 3}, ["simt", "simt", "simt"]),  # O_f: 1600 over 128 threads
])
def test_a_scalar_gemms_accumulator_follows_the_rows_it_is_tied_to(target, tiles, instrs):
    """MLA decode, 16 heads on 128 threads: S (scalar QK^T) and O_f (PV) are tied by the softmax's row values, so each
    row of S lies on the threads of that row of O_f (the mma accumulator's, or, both scalar, row i on threads
    i % 16 + 16 r), its columns shared out over them; the row statistics are their rows' projection."""
    p = Plan(load_example("07_mla_decode").mla_decode(1, 16, 1, 40, block_H=16, threads=128,
                                                      **{"dv": 64, "dpe": 16, **tiles}), target)
    assert [g.instr for g in p.gemms()] == instrs
    s, o = p.frag("S"), p.frag("O_f")
    assert s.is_valid() and o.is_valid()
    rows = [[set(t[i].reshape(-1).tolist()) for i in range(16)] for t in (s.eval_tables()[0], o.eval_tables()[0])]
    assert rows[0] == rows[1]
    if instrs[-1] == "simt":
        assert rows[0] == [{i + 16 * r for r in range(8)} for i in range(16)]
        assert o.num_locals * 128 == o.size * o.replicate and o.replicate < 128  # not the whole tile on every thread
    assert p.origin("S")[1].startswith("laid out as the accumulator of T.gemm at line")
    for name in ("m", "l", "rescale"):
        assert [set(t.reshape(-1).tolist()) for t in p.frag(name).eval_tables()[0]] == rows[0], name


# ----------------------------------------------------------------------------------------------------- the free level


def test_free_default_spreads_evenly_and_vectorizes():
    @T.prim_func
    def main(X: T.Tensor((32, 64), "float32"), Y: T.Tensor((32, 64), "float16"), Z: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((32, 64), "float32")
            small = T.alloc_fragment((8, 8), "float32")
            T.copy(X, x)
            for i, j in T.Parallel(32, 64):
                Y[i, j] = x[i, j] * 2.0
            for i, j in T.Parallel(16, 64):  # touches only global memory: the narrowest element is a half
                Y[i, j] = Y[i + 16, j]
            T.copy(Z, small)
            T.copy(small, Z)

    p = Plan(main)
    x = p.frag("x")
    assert x.equals(default_fragment((32, 64), 128, 4))
    t, loc = x.eval_tables()
    assert (np.bincount(t.ravel(), minlength=128) == 16).all()  # 2048 elements, 16 per thread
    flat = np.arange(2048)
    np.testing.assert_array_equal(t.ravel(), (flat // 4) % 128)  # runs of 4 float32 = 16 bytes
    np.testing.assert_array_equal(loc.ravel(), (flat // 512) * 4 + flat % 4)
    loops = p.loops()
    assert loops[0].equals(x)
    assert p.plan.origin[[op for op in p.ops if isinstance(op, Parallel)][1]] == ("free", "spread over the threads")
    assert loops[1].equals(default_fragment((16, 64), 128, 8))  # 8 halves = 16 bytes
    # 64 elements on 128 threads: each on 2 threads
    small = p.frag("small")
    assert (small.num_threads, small.num_locals, small.replicate) == (128, 1, 2) and small.is_valid()


# ---------------------------------------------------------------------------------------------------- conflicts


def two_gemms_kernel():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)  # first gemm
            T.gemm(A_s, B_s, C_f, policy=T.GemmWarpPolicy.FullCol)  # second gemm
            T.copy(C_f, C)

    return main


def test_two_gemms_demanding_different_accumulator_layouts_conflict():
    with pytest.raises(LayoutConflictError) as e:
        Plan(two_gemms_kernel())
    first, second = line_of(two_gemms_kernel, "# first gemm"), line_of(two_gemms_kernel, "# second gemm")
    msg = str(e.value)
    assert "fragment 'C_f' needs two different layouts" in msg
    assert f"mma.m16n8k16 accumulator, 4x1 warps (gemm at line {first})" in msg
    assert f"mma.m16n8k16 accumulator, 1x4 warps (gemm at line {second})" in msg
    assert e.value.loc is not None and e.value.loc.line == second


def annotated_kernel():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({C_f: make_mma_c_fragment(64, 64, 4, 1)})  # annotation
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f, clear_accum=True)  # the gemm
            T.copy(C_f, C)

    return main


def test_annotate_layout_against_a_gemm_conflicts():
    with pytest.raises(LayoutConflictError) as e:
        Plan(annotated_kernel())
    msg = str(e.value)
    assert f"T.annotate_layout (at line {line_of(annotated_kernel, '# annotation')})" in msg
    assert f"mma.m16n8k16 accumulator, 2x2 warps (gemm at line {line_of(annotated_kernel, '# the gemm')})" in msg


_ILLEGAL_ANNOTATIONS = {  # name: (buffer, layout, words the error must contain)
    "fragment register shared": ("a", lambda: Fragment((16, 16), lambda i, j: (i * 16 + j) % 128, lambda i, j: 0,
                                                       num_threads=128, num_locals=2),
                                 ["a[0, 0] and a[8, 0] both in register 0 of thread 0"]),
    "fragment over 64 threads": ("a", lambda: default_fragment((16, 16), 64),
                                 ["spreads 'a' over 64 threads; the block has 128"]),
    "fragment given a Layout": ("a", lambda: row_major(16, 16), ["needs a Fragment", "got Layout"]),
    "fragment of another shape": ("a", lambda: default_fragment((16, 32), 128),
                                  ["layout of shape (16, 32) given to 'a' of shape (16, 16)"]),
    "shared offsets collide": ("s", lambda: Layout((16, 16), lambda i, j: (i * 16 + j) // 2),
                               ["s[0, 0] and s[0, 1] both at offset 0"]),
    "shared of another shape": ("s", lambda: row_major(16, 32),
                                ["layout of shape (16, 32) given to 's' of shape (16, 16)"]),
    "shared given a Fragment": ("s", lambda: default_fragment((16, 16), 128), ["needs a Layout", "got Fragment"]),
    "shared transpose": ("s", lambda: Layout((16, 16), lambda i, j: (j, i)), ["one offset per element"]),
}


def annotation_kernel(name: str, layout):
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float32"), C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((16, 16), "float32")
            a = T.alloc_fragment((16, 16), "float32")
            T.annotate_layout({s if name == "s" else a: layout})  # annotation
            T.copy(A, s)
            T.copy(s, a)
            for i, j in T.Parallel(16, 16):
                a[i, j] = a[i, j] + 1.0
            T.copy(a, C)

    return main


@pytest.mark.parametrize("case", list(_ILLEGAL_ANNOTATIONS))
def test_annotate_layout_that_cannot_be_the_buffers_is_an_error_naming_its_line(case):
    """An annotation must be a layout of its buffer: a valid Fragment over the block's threads for a fragment, an
    offset Layout giving each element its own offset for shared memory, of the buffer's shape. Such mistakes were
    taken in and failed later (AttributeError, 'cannot reshape array', 'inverse() needs a valid fragment', a loop
    over 64 threads at the line of the T.copy) or ran (colliding offsets: threads racing on one word)."""
    from tilec.errors import TilecError

    name, make, words = _ILLEGAL_ANNOTATIONS[case]
    with pytest.raises(TilecError) as e:
        Plan(annotation_kernel(name, make()))
    assert e.value.loc is not None and e.value.loc.line == line_of(annotation_kernel, "# annotation")
    for w in words:
        assert w in str(e.value)


_MISTYPED_ANNOTATIONS = {  # name: (buffer, layout, words the error must contain)
    "shared given an int": ("s", lambda: 3, ["T.annotate_layout of shared 's' needs a Layout", "got int 3"]),
    "shared given a name": ("s", lambda: "swizzle", ["needs a Layout", "got str 'swizzle'"]),
    "shared given None": ("s", lambda: None, ["needs a Layout", "got NoneType None"]),
    "fragment given a Layout": ("a", lambda: row_major(16, 16), ["needs a Fragment", "got Layout"]),
    "function giving an int": ("a", lambda: (lambda buf: 3), ["needs a Fragment", "got int 3"]),
    "shared of another shape": ("s", lambda: row_major(16, 32),
                                ["layout of shape (16, 32) given to 's' of shape (16, 16)"]),
    "fragment of another rank": ("a", lambda: default_fragment((256,), 128),
                                 ["layout of shape (256,) given to 'a' of shape (16, 16)"]),
}


@pytest.mark.parametrize("case", list(_MISTYPED_ANNOTATIONS))
def test_annotate_layout_of_a_wrong_type_or_shape_is_refused_on_every_target(case):
    """``T.annotate_layout({s: 3})`` (or a layout of another shape) was taken in by the kernel and refused only by
    layout inference, which target 'cpu' does not run: the kernel compiled and ran there, and failed on a GPU target.
    The kernel itself is now refused, naming the buffer, what it needs and the line."""
    from tilec.errors import TilecError

    name, make, words = _MISTYPED_ANNOTATIONS[case]
    with pytest.raises(TilecError) as e:
        tilec.compile(annotation_kernel(name, make()), target="cpu").report()
    assert e.value.loc is not None and e.value.loc.line == line_of(annotation_kernel, "# annotation"), e.value
    for w in words:
        assert w in str(e.value)


def test_annotate_layout_that_agrees_with_the_gemm_is_kept():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({C_f: make_mma_c_fragment(64, 64, 2, 2), B_s: swizzle((32, 64), 16, 64)})
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f, clear_accum=True)
            T.copy(C_f, C)

    p = Plan(main)
    assert p.origin("C_f") == ("strict", "T.annotate_layout")
    assert p.shared("B_s").equals(swizzle((32, 64), 16, 64))  # the user's swizzle, not the widest
    assert p.shared("A_s").equals(swizzle((64, 32), 16, 64))


def row_vector_broadcast_kernel(width: int):
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"), Y: T.Tensor((64, width), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C = T.alloc_fragment((64, 64), "float32")
            r = T.alloc_fragment((64,), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C, clear_accum=True)
            T.reduce_max(C, r, dim=1)
            for i, j in T.Parallel(64, width):  # indexes only the row vector
                Y[i, j] = r[i] + j

    return main


@pytest.mark.parametrize("width", [64, 6])
def test_a_loop_indexing_only_a_row_vector_runs_around_it(width, rng):
    """The loop's iterations run where ``r[i]`` is held (the 8 replicas of each row of the 2x2-warp accumulator
    share its columns; 6 columns do not split 8 ways, so the loop is replicated 4 times)."""
    from tilec.lower.layouts import around

    from .helpers import simt

    func = row_vector_broadcast_kernel(width)
    p = Plan(func)
    r = p.frag("r")
    assert r.equals(project(make_mma_c_fragment(64, 64, 2, 2), (0,))) and r.replicate == 8
    (loop,) = p.loops()
    assert loop.equals(around(r, (0,), (64, width)))
    assert loop.replicate == (1 if width == 64 else 4) and loop.is_valid()
    t, _ = loop.eval_tables()
    rt, _ = r.eval_tables()
    for i in range(64):
        assert set(t[i].ravel().tolist()) <= set(rt[i].tolist())
    a, b = (rng.standard_normal(s).astype(np.float16) for s in ((64, 32), (32, 64)))
    y = np.full((64, width), np.nan, np.float32)
    simt(func)(a, b, y)
    ref = (a.astype(np.float64) @ b.astype(np.float64)).max(axis=1)[:, None] + np.arange(width)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def loop_over_two_accumulators_kernel():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C1 = T.alloc_fragment((64, 64), "float32")
            C2 = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C1, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)  # gemm 1
            T.gemm(A_s, B_s, C2, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)  # gemm 2
            for i, j in T.Parallel(64, 64):  # the loop
                C1[i, j] += C2[i, j]
            T.copy(C1, C)

    return main


def part_loop_kernel(row_vector: bool):
    @T.prim_func
    def main(A: T.Tensor((16,), "float32"), C: T.Tensor((8, 32), "float32")):
        with T.Kernel(1, threads=128) as bx:
            v = T.alloc_fragment((16,), "float32")
            T.copy(A, v)
            if row_vector:
                for i, j in T.Parallel(8, 32):  # the 2-D loop
                    C[i, j] = v[i] * 2.0
            else:
                for i in T.Parallel(8):  # the 1-D loop
                    C[i, 0] = v[i] * 2.0

    return main


@pytest.mark.parametrize("row_vector", [False, True])
def test_a_loop_over_part_of_a_fragment_is_a_conflict_naming_the_loop(row_vector):
    """A loop over rows 0-7 of a 16-element fragment: it took the fragment's layout of shape (16,) ('loop layout of
    shape (16,) ... does not fit the loop (8,)' in lowering), or ran around it with registers left unused
    (ValueError 'inverse() needs a valid fragment', no line). Half the fragment cannot be spread evenly over the
    threads that hold it: a layout conflict at the loop, saying it covers part of the fragment."""
    f = part_loop_kernel
    with pytest.raises(LayoutConflictError) as e:
        Plan(f(row_vector))
    assert e.value.loc is not None and e.value.loc.line == line_of(f, "# the 2-D loop" if row_vector else "# the 1-D")
    assert "the loop covers only part of it (extents (8,) of its shape (16,))" in str(e.value)


def test_a_loop_over_two_fragments_of_incompatible_layouts_conflicts():
    f = loop_over_two_accumulators_kernel
    with pytest.raises(LayoutConflictError) as e:
        Plan(f())
    msg = str(e.value)
    assert (f"fragment 'C2' (mma.m16n8k16 accumulator, 1x4 warps, gemm at line {line_of(f, '# gemm 2')}) is not held "
            f"where the loop at line {line_of(f, '# the loop')} runs (the layout of C1: mma.m16n8k16 accumulator, "
            f"4x1 warps (gemm at line {line_of(f, '# gemm 1')}))") in msg
    assert e.value.loc.line == line_of(f, "# the loop")


def test_which_fragments_a_loop_can_read():
    """A loop laid out like an accumulator can read the accumulator's row and column projections (by i, by j), but
    not an accumulator of another warp grid, nor the mma A operand layout (its registers hold other columns)."""
    from tilec.lower.layouts import holds

    c = make_mma_c_fragment(64, 64, 2, 2)
    assert holds(c, project(c, (0,)), (0,)) and holds(c, project(c, (1,)), (1,))
    assert not holds(c, make_mma_c_fragment(64, 64, 4, 1), (0, 1))
    assert not holds(c, make_mma_a_fragment(64, 64, 2, 2), (0, 1))
    assert holds(c, c, (0, 1))


@pytest.mark.parametrize(("shape", "threads", "dims"), [((8, 24), 64, (1,)), ((16, 24), 64, (1,)), ((24, 8), 64, (0,))])
def test_projection_keeps_registers_a_loop_over_the_tile_can_use(shape, threads, dims):
    """Where the even spread wraps the threads around in mid-row, a thread's elements of one column are not in
    increasing column order (8 x 24 over 64 threads: thread 0 holds columns 0, 16, 8 in registers 0, 1, 2, thread
    8 columns 8, 0, 16): the projection must number its registers like the tile's, so that the loop over the tile
    (and a reduction onto the columns) finds each column in one register on every thread."""
    from tilec.lower.layouts import holds

    f = default_fragment(shape, threads)
    p = project(f, dims)
    assert p.is_valid() and p.num_threads == threads
    assert holds(f, p, dims)


# --------------------------------------------------------------------------------------------- register pressure


def _register_tiles(rows: int, cols: int, threads: int):
    """A float32 tile ``x`` and its float16 copy ``h``, each thread holding rows x cols / threads elements of each."""
    @T.prim_func
    def main(X: T.Tensor((rows, cols), "float32"), Y: T.Tensor((rows, cols), "float16")):
        with T.Kernel(1, threads=threads) as bx:
            x = T.alloc_fragment((rows, cols), "float32")  # the float32 tile
            h = T.alloc_fragment((rows, cols), "float16")
            T.copy(X[bx * rows, 0], x)
            for i, j in T.Parallel(rows, cols):
                h[i, j] = x[i, j] * 2.0 + 1.0
            T.copy(h, Y[bx * rows, 0])
    return main


def _register_notes(func, target: str, options: dict | None = None) -> list[str]:
    state = run_pipeline(func.prim_func if isinstance(func, tilec.JITKernel) else func, parse_target(target),
                         until="layout_inference", options=options)
    return [n for n in state.report if "32-bit registers a thread" in n]


def _softmax_in_place(rows: int, cols: int, threads: int):
    """Rows of X replaced by exp(x - max): the tile ``x`` is held across the reduction (X is written, so the compiler
    cannot load it again)."""
    @T.prim_func
    def main(X: T.Tensor((rows, cols), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            x = T.alloc_fragment((rows, cols), "float32")  # the held tile
            m = T.alloc_fragment((rows,), "float32")
            T.copy(X[bx * rows, 0], x)
            T.reduce_max(x, m, dim=1)
            for i, j in T.Parallel(rows, cols):
                x[i, j] = T.exp(x[i, j] - m[i])
            T.copy(x, X[bx * rows, 0])
    return main


@pytest.mark.parametrize("target", ["cuda:sm_80", "cuda:sm_90a"])
def test_a_streamed_tile_gets_no_register_note(target, rng):
    """A 128 x 64 float32 tile copied in, scaled element by element into a float16 copy and copied out at 32 threads
    (256 + 128 registers a thread by the tiles' sizes) compiles to 64 registers without spills (nvcc 13.0, sm_80 and
    sm_90a): the compiler streams it. The note summed every fragment as live together and said it would spill."""
    assert not _register_notes(_register_tiles(128, 64, 32), target)
    assert not _register_notes(_register_tiles(1024, 48, 1024), target)
    k = tilec.JITKernel(_register_tiles(128, 64, 32), "simt:sm_80")
    x = randn(rng, (128, 64), "float32")
    y = poisoned((128, 64), "float16")
    k(x, y)
    assert_close(y, x.astype(np.float64) * 2 + 1, "float16")


def test_fragments_held_across_a_reduction_get_a_note_at_their_line():
    """The same tile held across a reduction (softmax in place, 256 + 64 registers a thread at 32 threads): ptxas
    spills 120 bytes on sm_80, 96 on sm_90a; at 64 rows (128 + 32) it uses 166 registers, no spills (nvcc 13.0)."""
    line = line_of(_softmax_in_place, "# the held tile")
    for target in ("cuda:sm_80", "simt:sm_90a"):
        notes = _register_notes(_softmax_in_place(128, 64, 32), target)
        assert len(notes) == 1, notes
        assert notes[0].startswith(f"T.alloc_fragment at line {line}: the fragments live at once at the T.reduce "
                                   f"at line {line + 3} take about 320 32-bit registers a thread ('x' 256, 'm' 64; "
                                   "an estimate"), notes[0]
        assert f"more than the 255 a thread of a 32-thread block can have on {target.split(':')[1]}:" in notes[0]
        assert not _register_notes(_softmax_in_place(64, 64, 32), target)
    # the limit is the target table's: 512 VGPRs a thread on CDNA (the 320 of 256 rows at 64 threads fit there)
    assert not _register_notes(_softmax_in_place(256, 64, 64), "simt:gfx90a")
    assert "about 320 32-bit registers" in _register_notes(_softmax_in_place(256, 64, 64), "cuda:sm_80")[0]
    assert "about 640 32-bit registers a thread ('x' 512, 'm' 128; an estimate" in \
        _register_notes(_softmax_in_place(512, 64, 64), "simt:gfx90a")[0]
    # ... and the register file shared out over the threads: 64 a thread of 1024
    note = _register_notes(_softmax_in_place(1024, 64, 1024), "cuda:sm_80")[0]
    assert "about 80 32-bit registers a thread ('x' 64, 'm' 16;" in note, note
    assert "more than the 64 a thread of a 1024-thread block" in note, note


@pytest.mark.parametrize("name", ["gemm 128x256, 2 consumer warpgroups", "flash attention 128x128 D=128",
                                  "flash attention 128x192 D=128", "flash attention 192x128 D=64, 384 threads"])
def test_the_suites_register_tiles_fit_without_a_note(name):
    """The suite's largest register tiles fit: no note. ptxas (nvcc 13.0, sm_90a, persistent) spills none of them but
    flash attention 128x192, 48 bytes: S, P, O and the row statistics live at its QK gemm take 214 of the consumers'
    232 registers, the rest going to addresses, which the estimate does not count."""
    ws = {"wgmma": True, "tma": True, "warp_specialize": True}
    example, factory, args, kwargs = {
        "gemm 128x256, 2 consumer warpgroups": ("01_gemm", "matmul", (4096, 4096, 4096),
                                                {"block_N": 256, "block_K": 64, "threads": 256}),
        "flash attention 128x128 D=128": ("03_flash_attention", "flash_attention", (8, 16, 2048, 128, False),
                                          {"block_M": 128, "block_N": 128, "threads": 256, "num_stages": 2}),
        "flash attention 128x192 D=128": ("03_flash_attention", "flash_attention", (2, 16, 8192, 128, False),
                                          {"block_M": 128, "block_N": 192, "threads": 256, "num_stages": 2}),
        "flash attention 192x128 D=64, 384 threads": ("03_flash_attention", "flash_attention",
                                                      (2, 16, 8192, 64, True),
                                                      {"block_M": 192, "block_N": 128, "threads": 384,
                                                       "num_stages": 2}),
    }[name]
    func = getattr(load_example(example), factory)(*args, **kwargs)
    assert not _register_notes(func, "cuda:sm_90a", {**default_pass_configs(), **ws, "persistent": True})
    assert not _register_notes(func, "cuda:sm_80", default_pass_configs())


@pytest.mark.parametrize("block_n, threads, note", [(240, 256, True), (128, 256, False), (192, 384, False)])
def test_a_warp_specialized_kernel_is_held_to_the_registers_setmaxnreg_gives(block_n, threads, note):
    """A warp-specialized kernel's consumers get what the producer warpgroup leaves them (setmaxnreg: 232 at 256 + 128
    threads), not the 255 a 256-thread block could have: a 256 x 240 gemm accumulator (240 registers a consumer
    thread) got no note (a 256 x 208 one already spills 2112 bytes; nvcc 13.0, sm_90a); a 256 x 128 one and a
    192 x 192 one at 384 threads (96 of 160) have none."""
    func = load_example("01_gemm").matmul.fn(4096, 4096, 4096, block_M=256 if threads == 256 else 192,
                                              block_N=block_n, block_K=64, threads=threads, num_stages=2)
    notes = _register_notes(func, "cuda:sm_90a", {**default_pass_configs(), "wgmma": True, "tma": True,
                                                  "warp_specialize": True})
    assert len(notes) == int(note), notes
    if note:
        assert "('C_f' 240;" in notes[0] and "more than the 232 a thread of a 256-thread block can have on sm_90a " \
            "after setmaxnreg" in notes[0], notes[0]
