"""Stage 8: source text of a thread-IR kernel for the target's language."""

from __future__ import annotations

from tilec.backends.cemit import CEmitter
from tilec.lower.tir import ThreadKernel
from tilec.target import Target


def emit_source(kernel: ThreadKernel, target: Target) -> str:
    if target.backend == "hip":
        from tilec.backends.hip.table import HIP as table
    else:
        from tilec.backends.cuda.table import CUDA as table
    return CEmitter(table).kernel(kernel)
