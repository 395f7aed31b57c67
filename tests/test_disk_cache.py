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
