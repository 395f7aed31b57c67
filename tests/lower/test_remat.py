"""The remat pass (tilec/passes/remat.py): each serial loop reads the thread index anew at the top of its trip and
its ldmatrix loads address through that read; the thread interpreter runs the result; ptxas then keeps far fewer
registers (offline nvcc, when it is on PATH)."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from conftest import load_example

import tilec
from tilec.ir.expr import Var
from tilec.ir.visit import walk
from tilec.lower.tir import Decl, LdMatrix, Loop, TCall

from .helpers import simt, thread_ir


def flash(remat: bool = True) -> tilec.JITKernel:
    func = load_example("03_flash_attention").flash_attention.fn(1, 2, 100, 64, False)
    return tilec.JITKernel(func, "simt:sm_80", [3], pass_configs={"remat_addresses": remat})


def _vars(node) -> set[str]:  # noqa: ANN001
    return {v.name for v in walk(node) if isinstance(v, Var)}


def test_loop_loads_address_through_the_trips_thread_index():
    tk = thread_ir(flash())
    (loop,) = [n for n in walk(tk.body) if isinstance(n, Loop) and n.var.name == "k"]
    decl = loop.body.stmts[0]
    assert isinstance(decl, Decl) and decl.var.name == "tx_trip"
    assert isinstance(decl.value, TCall) and decl.value.name == "opaque" and decl.value.args == (tk.tx,)
    loads = [n for n in walk(loop.body) if isinstance(n, LdMatrix)]
    assert len(loads) >= 3  # Q and K for Q @ K^T, V for P @ V
    assert all("tx_trip" in _vars(ld.src_off) and "tx" not in _vars(ld.src_off) for ld in loads)


def test_the_pass_is_opt_in_and_skips_loop_free_kernels():
    for kernel in (flash(remat=False), simt(load_example("03_flash_attention").flash_attention(1, 2, 100, 64, False))):
        assert thread_ir(kernel) is kernel.state.artifacts["barriers"]  # off, and off by default: unchanged
    softmax = tilec.JITKernel(load_example("02_softmax").softmax.fn(64, 100), "simt:sm_80",
                              pass_configs={"remat_addresses": True})
    assert thread_ir(softmax) is softmax.state.artifacts["barriers"]  # no ldmatrix: the kernel object unchanged


def test_rematerialized_kernel_runs_in_the_thread_interpreter():
    rng = np.random.default_rng()
    fa = load_example("03_flash_attention")
    q, k, v = (rng.standard_normal((1, 2, 100, 64)).astype(np.float16) for _ in range(3))
    out = flash()(q, k, v)
    ref = fa.reference(q, k, v, False)
    assert np.abs(out.astype(np.float64) - ref).max() < 1e-2


NVCC = shutil.which("nvcc")


def _ptxas(source: str, tmp_path) -> tuple[int, int]:  # noqa: ANN001
    cu = tmp_path / "k.cu"
    cu.write_text(source)
    res = subprocess.run([NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-cubin", "-Xptxas", "-v",
                          "-o", str(tmp_path / "k.cubin"), str(cu)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    regs = re.search(r"Used (\d+) registers", res.stderr + res.stdout)
    spills = re.search(r"(\d+) bytes spill stores", res.stderr + res.stdout)
    return int(regs.group(1)), int(spills.group(1))


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
def test_ptxas_keeps_fewer_registers(tmp_path):
    """Flash attention (8, 16, 2048, 128), 64x64 tiles fed by TMA: 235 registers without the pass, 158 with it
    (CUDA 13.0); 128x64 tiles with four warps spill 352 bytes without it, 16 with it."""
    fa = load_example("03_flash_attention")

    def regs(bm: int, remat: bool) -> tuple[int, int]:
        func = fa.flash_attention.fn(8, 16, 2048, 128, False, block_M=bm, block_N=64, num_stages=2, threads=128)
        jk = tilec.JITKernel(func, "cuda:sm_90a", [3], pass_configs={"tma": True, "remat_addresses": remat})
        return _ptxas(jk.get_kernel_source(), tmp_path)

    (off, _), (on, spills) = regs(64, False), regs(64, True)
    assert spills == 0 and on < off - 40, (off, on)
    (_, off_spills), (_, on_spills) = regs(128, False), regs(128, True)
    assert on_spills < off_spills // 4, (off_spills, on_spills)
