"""Helpers of the HIP tests: compile for the thread interpreter with HIP lowering, look at the gemm plans."""

from __future__ import annotations

from typing import Any

import tilec

SIMT_HIP = "simt:gfx90a"


def hip_simt(func: Any, out_idx: Any = None, target: str = SIMT_HIP) -> tilec.JITKernel:
    """``func`` (a PrimFunc or a JITKernel) lowered for HIP and run by the thread interpreter (64-lane waves)."""
    if isinstance(func, tilec.JITKernel):
        func = func.prim_func
    return tilec.JITKernel(func, target, out_idx)


def gemm_instrs(kernel: tilec.JITKernel) -> list[str]:
    """The instruction of every T.gemm of the kernel, from its layout plan."""
    return [p.instr for p in kernel.state.artifacts["layout_inference"].gemms.values()]


def assert_mfma(kernel: tilec.JITKernel) -> None:
    """Every gemm of the kernel runs on MFMA (not the scalar fallback), as planned and as reported."""
    instrs = gemm_instrs(kernel)
    assert instrs and all(i == "mfma" for i in instrs), instrs
    report = kernel.report()
    assert "mfma" in report and "scalar FMA" not in report and "fallback" not in report, report
