"""Backends: what turns a compile state into something that runs. One entry per target kind."""

from __future__ import annotations

from typing import Any

from tilec.errors import TilecRuntimeError


def executable_for(state: Any, options: dict | None = None) -> Any:
    """The executable of a compiled kernel: ``exe(bound_args)`` runs it."""
    kind = state.target.kind
    options = options or {}
    if kind == "cpu":
        from tilec.backends.cpu import CpuExecutable

        return CpuExecutable(state.func)
    if kind == "cuda":
        from tilec.backends.cuda.runtime import CudaExecutable, load

        kernel = state.artifacts["thread_ir"]
        func = state.artifacts["input_func"]
        return CudaExecutable(load(kernel, state.artifacts["source"], state.target, func, options), func)
    if kind == "hip":
        from tilec.backends.hip.runtime import HipExecutable
        from tilec.backends.hip.runtime import load as hip_load

        func = state.artifacts["input_func"]
        return HipExecutable(hip_load(state.artifacts["thread_ir"], state.artifacts["source"], state.target, func,
                                      options), func)
    if kind == "simt":
        from tilec.backends.simt import SimtExecutable

        return SimtExecutable(state.artifacts["thread_ir"], state.func)
    raise TilecRuntimeError(f"target {state.target} cannot run kernels in this version of tilec; the CPU tile "
                            "interpreter (target='cpu') can")


def prebuild(state: Any) -> None:
    """The part of building the executable that needs no device, done ahead (NVRTC for CUDA; nothing for the
    interpreters), so that a later :func:`executable_for` only loads it. Safe to call from a worker thread."""
    if state.target.kind == "cuda":
        from tilec.backends.cemit import kernel_name
        from tilec.backends.cuda.runtime import build_binary

        build_binary(state.artifacts["source"], state.target.arch, kernel_name(state.artifacts["thread_ir"]))
