"""Compile CUDA source with NVRTC (through CuPy), keep the binary in the disk cache, load and launch it through the
driver (:mod:`tilec.backends.cuda.driver`: a kernel from the disk cache needs no CuPy import).

Launch arguments: tensors pass as their device pointers (torch tensors by ``data_ptr()``, never wrapped per
call), on the caller's current stream (torch's when the first tensor is a torch tensor, else CuPy's).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

import tilec
from tilec.backends.cemit import kernel_name
from tilec.backends.cuda import driver
from tilec.errors import TilecRuntimeError, TilecValueError
from tilec.ir.buffer import Buffer
from tilec.ir.evaluate import check_grid_sign
from tilec.lower.tir import ThreadKernel
from tilec.runtime import cache
from tilec.runtime.args import Bound
from tilec.target import Target


@functools.lru_cache(maxsize=1)
def _nvrtc() -> Any:
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError as e:
        raise TilecRuntimeError("the CUDA target needs CuPy (tilec's NVRTC) to compile and launch kernels: pip "
                                "install -e \".[cuda]\" (or the cupy-cuda12x or cupy-cuda13x wheel); "
                                "kernel.get_kernel_source() and kernel.report() work without it, and "
                                f"target='simt:<arch>' runs the lowered kernel on the CPU ({e})") from e
    return nvrtc


@functools.lru_cache(maxsize=8)
def device_arch(device: int = 0) -> str:
    """``sm_90a`` on Hopper (its arch-specific instructions), else ``sm_XY`` from the device."""
    cc = driver.compute_capability(device)
    return "sm_90a" if cc == 90 else f"sm_{cc}"


@functools.lru_cache(maxsize=1)
def _include_dirs() -> list[str]:
    """Directories holding cuda_fp16.h and friends: $CUDA_PATH, CuPy's CUDA, /usr/local/cuda, pip's nvidia/*."""
    import glob
    import os

    import cupy

    roots = [os.environ.get("CUDA_PATH", ""), os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    try:
        roots.append(cupy.cuda.get_cuda_path() or "")
    except Exception:  # noqa: BLE001 - best effort
        pass
    site = os.path.dirname(os.path.dirname(cupy.__file__))
    cands = [os.path.join(r, "include") for r in roots if r]
    cands += glob.glob(os.path.join(site, "nvidia", "*", "include"))
    return [d for d in dict.fromkeys(cands) if os.path.isfile(os.path.join(d, "cuda_fp16.h"))]


NVRTC_FLAGS = ("-std=c++17", "--ptxas-options=-v", "-default-device", "-DNDEBUG")  # part of a binary's cache key


def nvrtc_compile(source: str, arch: str, name: str) -> tuple[bytes, str]:
    """(cubin, compile log) of ``source`` for ``arch`` (e.g. ``sm_90a``)."""
    nvrtc = _nvrtc()
    opts = [f"--gpu-architecture={arch}", *NVRTC_FLAGS] + [f"-I{d}" for d in _include_dirs()]
    prog = nvrtc.createProgram(source, f"{name}.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except Exception as e:  # noqa: BLE001 - NVRTC raises its own error type with the log separately
            log = nvrtc.getProgramLog(prog)
            raise TilecRuntimeError(f"NVRTC failed to compile kernel {name!r} for {arch}:\n{log}"
                                    + ptxas_hint(log)) from e
        log = nvrtc.getProgramLog(prog)
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    return bytes(cubin), log


def ptxas_hint(log: str) -> str:
    """What to change, for the ptxas failures a tile configuration causes (appended to the compile log)."""
    m = re.search(r"Insufficient registers \((\d+)\).*?register target of (\d+)", log)
    if m is None:
        return ""
    have, need = m.groups()
    return (f"\nhint: one instruction (a wgmma with its accumulator, most often) needs {need} registers a thread, and "
            f"ptxas holds every single instruction to the {have} the block's launch size allows, even after "
            "setmaxnreg gives a warp-specialized kernel's consumers more: a narrower block_N (fewer accumulator "
            "registers per wgmma) or fewer threads per block (fewer consumer warpgroups) compiles")


def _spills(log: str) -> int:
    m = re.findall(r"(\d+) bytes spill stores", log)
    return sum(int(x) for x in m)


def ptxas_warnings(log: str) -> tuple[str, ...]:
    """ptxas's performance warnings in a compile log (a serialized wgmma pipeline, injected waits)."""
    keep = ("Potential Performance Loss", "is injected")
    return tuple(dict.fromkeys(line.split("ptxas info    : ")[-1].strip() for line in log.splitlines()
                               if any(k in line for k in keep)))


@dataclass
class CompiledKernel:
    """A loaded CUDA kernel and how to launch it."""

    function: int  # the CUfunction handle
    smem: int
    threads: int
    grid: Any  # a Python function of the symbolic sizes -> (gx, gy, gz)
    n_regs: int
    n_spills: int
    arch: str
    device: int = 0
    align: tuple[tuple[int, int], ...] = ()  # (parameter index, bytes)
    tensor_maps: tuple = ()  # tilec.lower.tir.TensorMap: TMA descriptors passed after the sizes
    warnings: tuple[str, ...] = ()  # ptxas's performance warnings
    dependent: bool = False  # launched as a programmatic dependent of the stream's previous kernel (PDL)


def _maps_to_json(maps: tuple) -> list[dict]:
    return [{"name": t.name, "param": t.param, "dtype": t.dtype.name, "dims": list(t.dims),
             "strides": list(t.strides), "box": list(t.box), "swizzle": t.swizzle} for t in maps]


def _maps_from_json(items: list[dict]) -> tuple:
    from tilec.dtypes import dtype
    from tilec.lower.tir import TensorMap

    return tuple(TensorMap(d["name"], d["param"], dtype(d["dtype"]), tuple(d["dims"]), tuple(d["strides"]),
                           tuple(d["box"]), d["swizzle"]) for d in items)


def grid_code(grid: tuple, dyn_vars: tuple) -> str:
    """The source of a Python function computing the launch grid from the symbolic sizes. It is kept in the disk
    cache's metadata: the lowered kernel's grid is not the Tile IR's when the kernel is persistent."""
    from tilec.ir.printer import Names, expr_str

    names = Names()
    params = [names(v) for v in dyn_vars]
    dims = [expr_str(g, names).replace("T.min", "min").replace("T.max", "max") for g in grid]
    dims += ["1"] * (3 - len(dims))
    return f"lambda {', '.join(params)}: ({', '.join(f'int({g})' for g in dims)},)"


def _grid_fn(code: str) -> Any:
    return eval(code, {"min": min, "max": max})  # noqa: S307 - generated from the kernel's own IR (grid_code)


@functools.lru_cache(maxsize=1)
def _nvrtc_version() -> str:
    """NVRTC's version, part of the cache keys: from the libnvrtc the dynamic loader finds, through ctypes (a kernel
    from the disk cache then starts without importing CuPy), else from CuPy's NVRTC. Either way the same process
    gets the same answer, so keys agree; a stale answer can only make a valid binary look current."""
    for name in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        major, minor = ctypes.c_int(), ctypes.c_int()
        if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) == 0:
            return f"{major.value}.{minor.value}"
    return ".".join(str(x) for x in _nvrtc().getVersion())


def front_key(func: Any, target: Target, options: dict) -> str:
    """The cache key of a kernel before compilation: its Tile IR text, target, options and the compiler (tilec's
    version and sources: :func:`tilec.runtime.cache.compiler_id`).

    A hit skips the whole pipeline (a new process gets its kernel without importing sympy or networkx)."""
    text = "\0".join([str(func), str(target), json.dumps(options, sort_keys=True, default=str), cache.compiler_id(),
                      _nvrtc_version()])
    return "f" + hashlib.sha256(text.encode()).hexdigest()


def _load_module(cubin: bytes, name: str, smem: int) -> tuple[int, int]:
    """(the kernel function, its registers per thread); raises its dynamic shared-memory limit as needed."""
    limit = driver.max_shared_optin(driver.current_device())
    if limit and smem > limit:
        raise TilecRuntimeError(f"kernel {name!r} needs {smem} bytes of shared memory; this GPU gives a block at "
                                f"most {limit}: use smaller tiles or fewer pipeline stages (num_stages)")
    return driver.load_function(cubin, name, smem)


def load_cached(func: Any, target: Target, options: dict) -> CompiledKernel | None:
    """The kernel from the disk cache by its front key, or None."""
    meta = _json_object(cache.get_text(front_key(func, target, options)))
    if meta is None or not isinstance(meta.get("binary"), str):
        return None
    entry = cache.get(meta["binary"])
    if entry is None or "grid" not in meta:
        return None
    try:  # a damaged or foreign entry is a miss: the kernel is compiled again and the entry rewritten
        name, smem, threads, spills, arch = meta["name"], meta["smem"], meta["threads"], meta["spills"], meta["arch"]
        grid, align = _grid_fn(meta["grid"]), tuple(tuple(a) for a in meta["align"])
        maps, warnings = _maps_from_json(meta.get("tensor_maps", [])), tuple(meta.get("warnings", []))
    except (KeyError, TypeError, ValueError, SyntaxError, AttributeError):
        return None
    fn, regs = _load_module(entry[0], name, smem)
    return CompiledKernel(fn, smem, threads, grid, regs, spills, arch, driver.current_device(), align, maps, warnings,
                          meta.get("dependent", False))


def _json_object(text: str | None) -> dict | None:
    """The JSON object ``text`` holds, or None (no text, or text that is not a JSON object: a damaged entry)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


_BUILT: dict[str, tuple[bytes, int]] = {}  # binaries this process compiled (key -> cubin, spills), newest last
_WARNINGS: dict[str, tuple[str, ...]] = {}  # binary key -> ptxas's performance warnings
_BUILT_KEEP = 256


def build_binary(source: str, arch: str, name: str) -> tuple[str, bytes, int]:
    """(cache key, cubin, spill bytes) of ``source`` for ``arch``: from this process's recent builds, the disk cache,
    or NVRTC (ptxas's performance warnings are kept for :func:`load`).
    Needs no GPU context, so it may run in a worker thread (NVRTC releases the GIL); the autotuner
    compiles its candidates this way, in parallel, before loading them."""
    key = "b" + hashlib.sha256("\0".join([source, arch, _nvrtc_version(), tilec.__version__, *NVRTC_FLAGS])
                               .encode()).hexdigest()
    built = _BUILT.get(key)
    if built is not None:
        return key, built[0], built[1]
    entry = cache.get(key)
    meta = _json_object(entry[1]) if entry is not None else None
    if meta is None or not isinstance(meta.get("spills"), int):  # not cached, or a damaged entry: compile again
        cubin, log = nvrtc_compile(source, arch, name)
        spills = _spills(log)
        _WARNINGS[key] = ptxas_warnings(log)
        cache.put(key, cubin, json.dumps({"name": name, "arch": arch, "spills": spills, "log": log[-4000:]}), source)
    else:
        cubin = entry[0]
        spills = meta["spills"]
        _WARNINGS[key] = ptxas_warnings(str(meta.get("log", "")))
    _BUILT[key] = (cubin, spills)
    while len(_BUILT) > _BUILT_KEEP:
        _BUILT.pop(next(iter(_BUILT)))
    return key, cubin, spills


def load(kernel: ThreadKernel, source: str, target: Target, func: Any, options: dict) -> CompiledKernel:
    """Compile (or fetch from the disk cache) and load ``kernel``; records the front key for next time."""
    arch = target.arch or device_arch(driver.current_device())
    name = kernel_name(kernel)
    key, cubin, spills = build_binary(source, arch, name)
    fn, regs = _load_module(cubin, name, kernel.smem_bytes)
    warnings = _WARNINGS.get(key, ())
    grid = grid_code(kernel.grid, kernel.dyn_vars)
    meta = {"binary": key, "name": name, "smem": kernel.smem_bytes, "threads": kernel.threads, "grid": grid,
            "spills": spills, "arch": arch, "align": [list(a) for a in kernel.align],
            "tensor_maps": _maps_to_json(kernel.tensor_maps),
            "warnings": list(warnings), "dependent": kernel.dependent_launch}
    cache.put_meta(front_key(func, target, options), json.dumps(meta))
    return CompiledKernel(fn, kernel.smem_bytes, kernel.threads, _grid_fn(grid), regs,
                          spills, arch, driver.current_device(), kernel.align, kernel.tensor_maps, warnings,
                          kernel.dependent_launch)


class CudaExecutable:
    """Launches a compiled kernel with the bound arguments of one call."""

    def __init__(self, compiled: CompiledKernel, func: Any) -> None:
        self.ck = compiled
        self.func = func
        self.kinds = ["ptr" if isinstance(p, Buffer) else p.dtype for p in func.params]
        self.dyn = list(func.dyn_vars)
        from tilec.runtime.tensor_map import TensorMapCache

        self.tmaps = [TensorMapCache(t) for t in compiled.tensor_maps]
        self.dependent = driver.dependent_launcher() if compiled.dependent else None  # one configuration, reused

    def args_of(self, bound: Bound) -> tuple[list[Any], tuple[int, int, int]]:
        args: list[Any] = []
        for kind, v, info in zip(self.kinds, bound.values, bound.infos):
            if kind == "ptr":
                args.append(np.uint64(info.data_ptr))
            else:
                args.append(kind.np.type(v))
        sizes = [bound.sizes[v] for v in self.dyn]
        args += [np.int32(s) for s in sizes]
        return args, self.ck.grid(*sizes)

    def stream(self, bound: Bound) -> int:
        """The caller's current stream: torch's when the first array is a torch tensor, else CuPy's."""
        first = next((v for v, i in zip(bound.values, bound.infos) if i is not None), None)
        if first is not None and type(first).__module__.startswith("torch"):
            import torch

            return torch.cuda.current_stream(first.device).cuda_stream
        import cupy

        return cupy.cuda.get_current_stream().ptr

    def check_device(self, bound: Bound) -> None:
        want = f"cuda:{self.ck.device}"
        for p, info in zip(self.func.params, bound.infos):
            if info is not None and info.device != want:
                raise TilecValueError(f"argument {p.name!r}: the kernel was loaded on {want}, got an array on "
                                      f"{info.device} (move it with .to('{want}'))")

    def check_alignment(self, bound: Bound) -> None:
        for i, nbytes in self.ck.align:
            ptr = bound.infos[i].data_ptr
            if ptr % nbytes:
                name = self.func.params[i].name
                raise TilecValueError(f"argument {name!r}: the kernel reads it in {nbytes}-byte vectors, so its data "
                                      f"must start at a multiple of {nbytes} bytes; this tensor's starts at {ptr:#x} "
                                      "(a slice with an offset: pass a .contiguous() copy)")

    def __call__(self, bound: Bound) -> None:
        self.check_device(bound)
        self.check_alignment(bound)
        args, grid = self.args_of(bound)
        check_grid_sign(grid, self.func.name)
        if 0 in grid:
            return
        driver.check_grid(grid, self.func.name)
        # the argument block: a pointer to each argument's bytes, then to each 128-byte TMA descriptor
        cells = [(ctypes.c_char * a.nbytes).from_buffer_copy(a.tobytes()) for a in args]
        addrs = [ctypes.addressof(c) for c in cells]
        addrs += [m(bound.infos[m.tmap.param].data_ptr) for m in self.tmaps]
        ptrs = (ctypes.c_void_p * max(1, len(addrs)))(*addrs)
        driver.launch(self.ck.function, grid, self.ck.threads, self.ck.smem, self.stream(bound),
                      ctypes.addressof(ptrs), self.dependent)
