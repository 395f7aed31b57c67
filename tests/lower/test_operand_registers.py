"""The operand_registers pass (tilec/passes/operand_registers.py): which shared tiles it takes into registers for
wgmma, what it writes, and where it declines. (The thread interpreter runs the kernels it makes:
``test_tma_simt.py::test_attention_with_q_in_registers``.)"""

from __future__ import annotations

import re

import pytest
from conftest import load_example

import tilec
import tilec.language as T
from tilec.ir.stmt import Copy, Gemm
from tilec.ir.visit import walk
from tilec.passes.operand_registers import operands_to_registers
from tilec.target import Target

WS = {"wgmma": True, "tma": True, "warp_specialize": True}
H100 = Target("cuda", "sm_90a")


def _source(kernel: tilec.JITKernel) -> str:
    return re.sub(r"//.*", "", kernel.get_kernel_source())


@pytest.mark.parametrize(("d", "causal", "dtype", "persistent"), [
    (128, False, "bfloat16", True), (64, True, "float16", True), (128, True, "float16", False)])
def test_same_kernel_as_q_in_registers_by_hand(d, causal, dtype, persistent):
    """Flash attention written with Q in shared memory compiles, warp-specialized, to the CUDA the example's
    ``q_registers=True`` gives (the fragment's name aside), which was measured on the GPU (perf notes AV)."""
    fa = load_example("03_flash_attention")

    def kernel(q_registers: bool, configs: dict) -> tilec.JITKernel:
        fn = fa.flash_attention.fn(2, 16, 2048, d, causal, block_M=128, block_N=128, num_stages=2, threads=256,
                                   dtype=dtype, q_registers=q_registers)
        return tilec.JITKernel(fn, H100, [3], pass_configs={**configs, "persistent": persistent})

    auto = kernel(False, WS)
    assert "copied once into registers ('Q_s_regs', " in auto.report()
    assert _source(auto).replace("Q_s_regs", "Q_x") == _source(kernel(True, {**WS, "operand_registers": False}))
    assert _source(kernel(False, {**WS, "operand_registers": False})) != _source(auto)


@pytest.mark.parametrize(("configs", "block_N", "note"), [
    (WS, 160, "'Q_s' stays in shared memory for T.gemm's A (with it, the kernel's register tiles would take 874 "
              "bytes a thread, more than 800)"),
    ({"wgmma": True, "tma": True, "warp_specialize": False}, 128, None),  # no producer: registers cost a block an SM
    ({**WS, "operand_registers": False}, 128, None)])
def test_declines_where_registers_run_short_or_are_not_asked_for(configs, block_N, note):
    fa = load_example("03_flash_attention")
    fn = fa.flash_attention.fn(2, 16, 2048, 128, False, block_M=128, block_N=block_N, num_stages=2, threads=256)
    report = tilec.JITKernel(fn, H100, [3], pass_configs=configs).report()
    assert "Q_s_regs" not in report
    assert (note is None and "T.copy into 'Q_s'" not in report) or note in report


def test_declines_with_three_consumer_warpgroups():
    """512 threads leave ptxas 128 registers a thread: flash attention at D=64 in 192-row tiles keeps Q in shared
    memory (with Q in registers it spills 148 bytes; nvcc 13.0)."""
    fa = load_example("03_flash_attention")
    fn = fa.flash_attention.fn(2, 16, 2048, 64, False, block_M=192, block_N=128, num_stages=2, threads=384)
    report = tilec.JITKernel(fn, H100, [3], pass_configs={**WS, "persistent": True}).report()
    assert "Q_s_regs" not in report
    assert "'Q_s' stays in shared memory for T.gemm's A (384 consumer threads beside the producer leave ptxas 128 " \
           "registers a thread, fewer than the 168 this is calibrated at)" in report


def test_mla_keeps_its_query_tiles_in_shared_memory():
    """MLA decode's Q (64 heads x 512: too many registers) and Q_pe (64 rows on two warpgroups, which wgmma can
    only split along N, each needing all 64 rows of A from registers) stay in shared memory, and say why."""
    mla = load_example("07_mla_decode")
    kernel = tilec.JITKernel(mla.mla_decode.fn(64, 128, 1, 8192, num_stages=2), H100, [4], pass_configs=WS)
    report = kernel.report()
    assert "'Q_s' stays in shared memory for T.gemm's A (with it, the kernel's register tiles would take" in report
    assert "'Qpe_s' stays in shared memory for T.gemm's A (wgmma cannot take it from registers" in report
    assert "_regs" not in _source(kernel)


def _fixed_a(use: str):
    """C[:, n] = A @ B[:, n] for each column block n: A's tile loaded once before the loop; ``use`` adds another
    use of it (``copy``: also copied out after the loop; ``transposed``: A stored K x M, read transposed)."""
    a_shape = (64, 128) if use == "transposed" else (128, 64)

    @T.prim_func
    def main(A: T.Tensor(a_shape, "float16"), B: T.Tensor((64, 512), "float16"), C: T.Tensor((128, 512), "float32"),
             A2: T.Tensor(a_shape, "float16")):
        with T.Kernel(1, threads=256) as _:
            A_s = T.alloc_shared(a_shape, "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.copy(A, A_s)
            for n in T.Pipelined(4, num_stages=2):
                T.copy(B[0, n * 128], B_s)
                T.gemm(A_s, B_s, C_f, transpose_A=use == "transposed", clear_accum=True,
                       policy=T.GemmWarpPolicy.FullRow)
                T.copy(C_f, C[0, n * 128])
            if use == "copy":
                T.copy(A_s, A2)

    return main


@pytest.mark.parametrize(("use", "moved"), [("", True), ("copy", False), ("transposed", False)])
def test_only_a_tile_read_by_nothing_but_the_gemm_moves(use, moved):
    func = _fixed_a(use)
    new, notes = operands_to_registers(func, H100, WS)
    assert (new is not func) == moved
    copies = [c for c in walk(new.body) if isinstance(c, Copy) and c.src.buffer.name == "A_s"]
    gemm = next(g for g in walk(new.body) if isinstance(g, Gemm))
    if moved:
        assert any(c.dst.buffer.name == "A_s_regs" and c.dst.buffer.scope == "fragment" for c in copies)
        assert gemm.A.buffer.name == "A_s_regs" and notes and "'A_s_regs', 64 bytes a thread" in notes[0]
    else:
        assert gemm.A.buffer.name == "A_s" and not notes
    assert operands_to_registers(func, Target("cuda", "sm_80"), WS)[0] is func  # no wgmma there
