"""The disk cache's keys (tilec/runtime/cache.py, tilec/backends/cuda/runtime.py), on the CPU."""

from __future__ import annotations


def test_the_disk_cache_keys_name_the_compiler(monkeypatch):
    """A kernel's key in the disk cache holds tilec's version and a digest of its sources: after the compiler
    changes (a working tree being edited, not only a release), the same kernel and options miss the cache instead of
    getting an earlier compiler's binary back."""
    from conftest import load_example

    import tilec
    from tilec.backends.cuda import runtime
    from tilec.runtime import cache
    from tilec.target import parse_target

    monkeypatch.setattr(runtime, "_nvrtc_version", lambda: "13.0")
    func, target = load_example("01_gemm").matmul(256, 256, 256).prim_func, parse_target("cuda:sm_90a")
    assert cache.compiler_id().startswith(tilec.__version__ + "+") and cache.compiler_id() == cache.compiler_id()
    key = runtime.front_key(func, target, {})
    assert runtime.front_key(func, target, {}) == key
    monkeypatch.setattr(cache, "compiler_id", lambda: tilec.__version__ + "+edited")
    assert runtime.front_key(func, target, {}) != key


def _add_kernel():
    import tilec.language as T

    @T.prim_func
    def add(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(8):
                B[i] = A[i] + 1

    return add


def test_a_cuda_kernel_called_without_cupy_says_what_is_missing(monkeypatch, tmp_path):
    """Without CuPy, calling a kernel for an explicit CUDA arch is a TilecRuntimeError naming the package (it was a
    ModuleNotFoundError for 'cupy_backends' from the code computing the disk cache's key)."""
    import sys

    import numpy as np
    import pytest

    import tilec
    from tilec.backends.cuda import runtime
    from tilec.errors import TilecRuntimeError

    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "cupy_backends", None)  # `import cupy_backends...` raises ImportError
    runtime._nvrtc.cache_clear()
    try:
        kernel = tilec.compile(_add_kernel(), target="cuda:sm_80", out_idx=[1])
        with pytest.raises(TilecRuntimeError, match=r"needs CuPy .*pip install"):
            kernel(np.zeros(8, np.float32))
        assert "__global__" in kernel.get_kernel_source()
    finally:
        runtime._nvrtc.cache_clear()
