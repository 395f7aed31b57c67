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


def test_a_damaged_cache_entry_is_a_miss(monkeypatch, tmp_path):
    """Metadata in the cache that is not JSON, not UTF-8, not an object or lacks fields makes load_cached / build_binary
    compile again (they raised JSONDecodeError, UnicodeDecodeError, KeyError or TypeError)."""
    import tilec
    from tilec.backends.cuda import runtime
    from tilec.runtime import cache

    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runtime, "_nvrtc_version", lambda: "13.0")
    kernel = tilec.compile(_add_kernel(), target="cuda:sm_80", out_idx=[1])
    key = runtime.front_key(kernel.prim_func, kernel.target, kernel.pass_configs)
    cache.put("b0", b"cubin", "{}")  # a sound binary entry: only the front metadata is damaged
    damaged = [b"{trunc", b"\xff\xfe\x00not utf-8", b'{"foo": 1}', b"[]", b'{"binary": 7}',
               b'{"binary": "b0", "grid": "lambda: (", "name": "k"}', b'{"binary": "b0", "grid": "lambda: (1, 1, 1)"}']
    for content in damaged:
        (tmp_path / f"{key}.json").write_bytes(content)
        assert runtime.load_cached(kernel.prim_func, kernel.target, kernel.pass_configs) is None, content
    compiled = []
    monkeypatch.setattr(runtime, "nvrtc_compile", lambda source, arch, name: compiled.append(name) or (b"new", ""))
    source = kernel.get_kernel_source()
    for content in [b"{trunc", b"\xff\xfe", b"[]", b'{"spills": "x"}']:
        key, _, _ = runtime.build_binary(source, "sm_80", "add_kernel")
        runtime._BUILT.pop(key)
        (tmp_path / f"{key}.json").write_bytes(content)
        n = len(compiled)
        assert runtime.build_binary(source, "sm_80", "add_kernel")[1:] == (b"new", 0) and len(compiled) == n + 1
        runtime._BUILT.pop(key)


def test_the_cache_directory_expands_a_tilde_and_an_empty_value_means_the_default(monkeypatch, tmp_path):
    """TILEC_CACHE_DIR='~/tilec-cache' (quoted in a shell, so not expanded) put the cache in a directory named '~'
    under the current directory, and TILEC_CACHE_DIR='' in the current directory itself; now '~' is the home
    directory and an empty value the default (the same for TILEC_DUMP_DIR)."""
    from tilec.config import config
    from tilec.runtime import cache

    home, cwd = tmp_path / "home", tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("TILEC_DISABLE_CACHE", raising=False)
    for value, where in [("~/tilec-cache", home / "tilec-cache"), ("", home / ".cache" / "tilec")]:
        monkeypatch.setenv("TILEC_CACHE_DIR", value)
        monkeypatch.setenv("TILEC_DUMP_DIR", value)
        assert config().cache_dir == where
        assert config().dump_dir == (where if value else None)
        cache.write_json("autotune", "k", "{}")
        assert (where / "autotune" / "k.json").read_text() == "{}"
    assert list(cwd.iterdir()) == []


def test_a_truncated_binary_in_the_cache_is_a_miss(monkeypatch, tmp_path):
    """A binary cut short on disk (a crash or full disk after the rename, a partial copy of the cache) came back
    from the cache as it was: build_binary returned the short cubin and load_cached handed it to the driver, which
    fails to load it. The cache now checks each binary against the digest written with it: a damaged one is a
    miss, compiled again."""
    import tilec
    from tilec.backends.cuda import runtime

    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TILEC_DISABLE_CACHE", raising=False)
    monkeypatch.setattr(runtime, "_nvrtc_version", lambda: "13.0")
    cubin = bytes(range(256)) * 64
    compiled = []
    monkeypatch.setattr(runtime, "nvrtc_compile", lambda source, arch, name: compiled.append(name) or (cubin, ""))
    loaded = []
    monkeypatch.setattr(runtime, "_load_module", lambda binary, name, smem: loaded.append(binary) or (1, 32))
    monkeypatch.setattr(runtime.driver, "current_device", lambda: 0)
    kernel = tilec.compile(_add_kernel(), target="cuda:sm_80", out_idx=[1])
    source = kernel.get_kernel_source()
    key, got, _ = runtime.build_binary(source, "sm_80", "add_kernel")
    assert got == cubin and len(compiled) == 1
    state = kernel.state
    runtime.load(state.artifacts["thread_ir"], source, kernel.target, state.artifacts["input_func"],
                 kernel.pass_configs)
    assert runtime.load_cached(kernel.prim_func, kernel.target, kernel.pass_configs) is not None
    assert loaded[-1] == cubin
    runtime._BUILT.pop(key)
    path = tmp_path / f"{key}.bin"
    for damage in (lambda b: b[: len(b) // 2], lambda b: b"", lambda b: b[:-1] + bytes([b[-1] ^ 1])):
        path.write_bytes(damage(path.read_bytes()))
        n, c = len(loaded), len(compiled)
        assert runtime.load_cached(kernel.prim_func, kernel.target, kernel.pass_configs) is None
        assert len(loaded) == n  # the driver never saw the damaged binary
        assert runtime.build_binary(source, "sm_80", "add_kernel")[1] == cubin and len(compiled) == c + 1
        runtime._BUILT.pop(key)
        assert runtime.build_binary(source, "sm_80", "add_kernel")[1] == cubin and len(compiled) == c + 1  # rewritten
        runtime._BUILT.pop(key)


def test_a_binary_key_names_the_compile_flags(monkeypatch, tmp_path):
    """The key of a compiled binary held the source, arch, NVRTC's version and tilec's version, not NVRTC's flags:
    with a flag changed (-DNDEBUG dropped, -lineinfo added in a working tree), an unchanged kernel got the binary
    built with the old flags back from the disk cache."""
    from tilec.backends.cuda import runtime

    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TILEC_DISABLE_CACHE", raising=False)
    monkeypatch.setattr(runtime, "_nvrtc_version", lambda: "13.0")
    seen = []

    def compile_(source, arch, name):  # a "binary" that tells which flags built it
        seen.append(runtime.NVRTC_FLAGS)
        return " ".join(runtime.NVRTC_FLAGS).encode(), ""

    monkeypatch.setattr(runtime, "nvrtc_compile", compile_)
    source = "extern \"C\" __global__ void k() {}"
    first = runtime.build_binary(source, "sm_80", "k")
    monkeypatch.setattr(runtime, "NVRTC_FLAGS", (*runtime.NVRTC_FLAGS, "-lineinfo"))
    second = runtime.build_binary(source, "sm_80", "k")
    assert first[0] != second[0] and second[1].endswith(b"-lineinfo") and len(seen) == 2
    for key, _, _ in (first, second):
        runtime._BUILT.pop(key, None)
