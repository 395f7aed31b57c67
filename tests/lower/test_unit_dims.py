"""Fragments with a dimension of size 1 read broadcast: a ``(1, N)`` row vector read as ``b[0, j]`` and an ``(M, 1)``
column vector read as ``s[i, 0]`` are laid out as their 1-D counterparts ``b[j]`` and ``s[i]`` (the threads of the
accumulator's columns or rows hold the slice they use, not the whole vector), on the thread interpreters, the CPU
interpreter and in the CUDA for mma.sync and wgmma."""

from __future__ import annotations

import re

import numpy as np
import pytest
from backends.test_nvcc import NVCC, compile_cuda
from conftest import assert_close, poisoned, randn

import tilec
import tilec.language as T

from .test_layout_inference import Plan


def epilogue_kernel(M, N, K, bm, bn, bk, threads, unit: bool):
    """``C = (A @ B) * Scale[:, None] + Bias[None, :]`` in float16 with a bias row vector and a per-row scale
    column vector: ``(1, bn)`` and ``(bm, 1)`` fragments of ``(1, N)`` and ``(M, 1)`` tensors when ``unit``, else
    ``(bn,)`` and ``(bm,)`` ones of 1-D tensors."""
    b_shape, s_shape = ((1, N), (M, 1)) if unit else ((N,), (M,))
    bf_shape, sf_shape = ((1, bn), (bm, 1)) if unit else ((bn,), (bm,))

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), Bias: T.Tensor(b_shape, "float32"),
             Scale: T.Tensor(s_shape, "float32"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            b_f = T.alloc_fragment(bf_shape, "float32")
            s_f = T.alloc_fragment(sf_shape, "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            if unit:
                T.copy(Bias[0, bx * bn], b_f)
                T.copy(Scale[by * bm, 0], s_f)
                for i, j in T.Parallel(bm, bn):
                    C_f[i, j] = C_f[i, j] * s_f[i, 0] + b_f[0, j]
            else:
                T.copy(Bias[bx * bn], b_f)
                T.copy(Scale[by * bm], s_f)
                for i, j in T.Parallel(bm, bn):
                    C_f[i, j] = C_f[i, j] * s_f[i] + b_f[j]
            T.copy(C_f, C[by * bm, bx * bn])

    return main


def _inputs(rng, M, N, K, unit):
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    bias, scale = randn(rng, (1, N) if unit else (N,), "float32"), randn(rng, (M, 1) if unit else (M,), "float32")
    ref = (a.astype(np.float64) @ b.astype(np.float64)) * scale.astype(np.float64).reshape(M, 1) \
        + bias.astype(np.float64).reshape(1, N)
    return (a, b, bias, scale), ref


@pytest.mark.parametrize("target", ["simt:sm_80", "cpu"])
@pytest.mark.parametrize("unit", [True, False], ids=["unit dims", "1-D"])
def test_bias_row_and_scale_column_epilogue_numerics(rng, target, unit):
    M, N, K = 128, 96, 64  # two row tiles, a ragged column tile
    k = tilec.JITKernel(epilogue_kernel(M, N, K, 64, 64, 32, 128, unit), target)
    args, ref = _inputs(rng, M, N, K, unit)
    c = poisoned((M, N), "float16")
    k(*args, c)
    assert_close(c, ref, "float16")


@pytest.mark.parametrize("configs", [{"wgmma": False}, {"wgmma": True}], ids=["mma", "wgmma"])
def test_numerics_on_the_hopper_thread_interpreter(rng, configs):
    M, N, K = 64, 128, 64
    k = tilec.JITKernel(epilogue_kernel(M, N, K, 64, 128, 32, 128, True), "simt:sm_90a", pass_configs=configs)
    args, ref = _inputs(rng, M, N, K, True)
    c = poisoned((M, N), "float16")
    k(*args, c)
    assert_close(c, ref, "float16")


# (target, pass configs, bm, bn, threads, registers of the bias and of the scale): the slice a thread uses, as for
# the 1-D vectors; mma.sync 2x2 warps over 128x128: 64 columns a warp, 16 of them a thread, 64 rows a warp, 8 of them
# a thread (of 128 and 128 held whole); wgmma 64xN atoms, 2 warpgroups over 128x256: 64 of the 256 columns a thread,
# 2 of the 128 rows a thread
SHAPES = [("cuda:sm_80", None, 128, 128, 128, 16, 8),
          ("cuda:sm_90a", {"wgmma": True, "tma": False}, 128, 256, 256, 64, 2)]


@pytest.mark.parametrize(("target", "configs", "bm", "bn", "threads", "b_regs", "s_regs"), SHAPES,
                         ids=["mma", "wgmma"])
def test_a_thread_holds_only_the_slice_of_the_vectors_it_uses(target, configs, bm, bn, threads, b_regs, s_regs):
    srcs, plans = {}, {}
    for unit in (True, False):
        k = tilec.JITKernel(epilogue_kernel(1024, 1024, 1024, bm, bn, 32, threads, unit), target, [-1],
                            pass_configs=configs)
        srcs[unit], plans[unit] = k.get_kernel_source(), Plan(k)
    for name, regs in (("b_f", b_regs), ("s_f", s_regs)):
        for unit in (True, False):
            assert re.findall(rf"float {name}\[(\d+)\];", srcs[unit]) == [str(regs)], (name, unit)
        one_d = plans[False].frag(name)
        assert plans[True].frag(name).equals(one_d.reshape(plans[True].frag(name).shape)), name
        assert plans[True].origin(name)[1].startswith("indexed by the loop at line")
    # the same code but for the source comments: the (1, N) bias too is loaded in vectors
    assert "uint2*>(&Bias[" in srcs[True]
    assert re.sub(r"\s*//.*", "", srcs[True]) == re.sub(r"\s*//.*", "", srcs[False])


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize(("target", "configs", "bm", "bn", "threads", "b_regs", "s_regs"), SHAPES,
                         ids=["mma", "wgmma"])
def test_unit_dim_epilogues_compile_without_spills(target, configs, bm, bn, threads, b_regs, s_regs, tmp_path):
    k = tilec.JITKernel(epilogue_kernel(1024, 1024, 1024, bm, bn, 32, threads, True), target, [-1],
                        pass_configs=configs)
    info = compile_cuda(k.get_kernel_source(), tmp_path, target.split(":")[1])
    assert info["spill_stores"] == info["spill_loads"] == 0, info


def reduced_rows_kernel(unit: bool, width: int):
    """Row maxima of a gemm's accumulator kept as an ``(64, 1)`` fragment (or ``(64,)``), scaled by a loop that
    writes another such fragment, then broadcast by a loop indexing only it."""
    shape = (64, 1) if unit else (64,)

    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"), Y: T.Tensor((64, width), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C = T.alloc_fragment((64, 64), "float32")
            r = T.alloc_fragment(shape, "float32")
            h = T.alloc_fragment(shape, "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C, clear_accum=True)
            T.reduce_max(C, r, dim=1)
            if unit:
                for i in T.Parallel(64):
                    h[i, 0] = r[i, 0] * 0.5
                for i, j in T.Parallel(64, width):
                    Y[i, j] = h[i, 0] + j
            else:
                for i in T.Parallel(64):
                    h[i] = r[i] * 0.5
                for i, j in T.Parallel(64, width):
                    Y[i, j] = h[i] + j

    return main


@pytest.mark.parametrize("width", [64, 6])
@pytest.mark.parametrize("target", ["simt:sm_80", "cpu"])
def test_a_column_vector_written_and_broadcast_by_loops(rng, target, width):
    """The loops take the column vectors' layouts as they take the 1-D ones' (the reduction's rows), and compute
    the same."""
    if target != "cpu":
        plans = [Plan(reduced_rows_kernel(unit, width)) for unit in (True, False)]
        for a, b in zip(*(p.loops() for p in plans)):
            assert a.equals(b)
        assert plans[0].frag("h").equals(plans[1].frag("h").reshape((64, 1)))
    a, b = randn(rng, (64, 32), "float16"), randn(rng, (32, 64), "float16")
    y = poisoned((64, width), "float32")
    tilec.JITKernel(reduced_rows_kernel(True, width), target)(a, b, y)
    ref = (a.astype(np.float64) @ b.astype(np.float64)).max(axis=1)[:, None] * 0.5 + np.arange(width)
    assert_close(y, ref, "float32")


@pytest.mark.parametrize("target", ["simt:sm_80", "cpu"])
def test_a_row_vector_computed_by_a_loop_is_stored_in_vectors(rng, target):
    """A ``(1, 256)`` fragment written as ``r[0, j]`` goes out to a row of a 2-D tensor in 16-byte vectors, as a
    1-D one does."""
    @T.prim_func
    def main(X: T.Tensor((4, 256), "float32"), Y: T.Tensor((4, 256), "float32")):
        with T.Kernel(4, threads=64) as bx:
            r = T.alloc_fragment((1, 256), "float32")
            for j in T.Parallel(256):
                r[0, j] = X[bx, j] * 2.0
            T.copy(r, Y[bx, 0])

    k = tilec.JITKernel(main, target)
    if target != "cpu":
        assert "tl::Vec<float, 4>*>(&Y[" in tilec.JITKernel(main, "cuda:sm_80").get_kernel_source()
    x, y = randn(rng, (4, 256), "float32"), poisoned((4, 256), "float32")
    k(x, y)
    assert_close(y, x.astype(np.float64) * 2.0, "float32")
