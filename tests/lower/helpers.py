"""Helpers of the lowering tests: compile for the thread interpreter, look at the compile state."""

from __future__ import annotations

from typing import Any

import tilec

SIMT = "simt:sm_80"


def simt(func: Any, out_idx: Any = None) -> tilec.JITKernel:
    """``func`` (a PrimFunc or a JITKernel) compiled for the thread interpreter."""
    if isinstance(func, tilec.JITKernel):
        func = func.prim_func
    return tilec.JITKernel(func, SIMT, out_idx)


def plan_of(kernel: tilec.JITKernel) -> Any:
    return kernel.state.artifacts["layout_inference"]


def thread_ir(kernel: tilec.JITKernel) -> Any:
    return kernel.state.artifacts["thread_ir"]

