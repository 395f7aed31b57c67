"""Compile HIP source with hiprtc, keep the code object in the disk cache, and launch it through hip-python.

hip-python (``pip install hip-python``, the release matching the installed ROCm) is imported only here, when a
HIP kernel is compiled or launched; without it that is a :class:`~tilec.errors.TilecRuntimeError` saying so.
The architecture is the device's (``gcnArchName``, e.g. ``gfx90a:sramecc+:xnack-``) unless the target names one.

Launch arguments: tensors pass as their device pointers (torch tensors on ROCm by ``data_ptr()``, hip-python
``DeviceArray`` by their CUDA-array-interface pointer), scalars as ctypes values; hip-python packs them into the
``extra`` buffer with the kernel's alignment. The stream is torch's current stream when the first tensor is a
torch tensor, else the null stream.

Not run in tilec's CI (there is no AMD GPU there): written against hip-python's documented API.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

import tilec
from tilec.backends.cemit import kernel_name
from tilec.errors import TilecRuntimeError, TilecTypeError, TilecValueError
from tilec.ir.buffer import Buffer
from tilec.ir.evaluate import check_grid_sign
from tilec.lower.tir import ThreadKernel
from tilec.runtime import cache
from tilec.runtime.args import Bound
from tilec.target import Target

LDS_BYTES = 64 * 1024  # shared memory (LDS) of one workgroup on CDNA2 / CDNA3
_CTYPES = {"int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32, "int64": ctypes.c_int64,
           "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64,
           "float32": ctypes.c_float, "float64": ctypes.c_double, "bool": ctypes.c_bool}


@functools.lru_cache(maxsize=1)
def hip_modules() -> tuple[Any, Any]:
    """hip-python's ``hip`` and ``hiprtc`` modules (imported on first use)."""
    try:
        from hip import hip, hiprtc
    except ImportError as e:
        raise TilecRuntimeError("the HIP target needs hip-python to compile and launch kernels: pip install "
                                "hip-python (the release matching your ROCm, e.g. hip-python==6.2.*); "
                                "kernel.get_kernel_source() works without it") from e
    return hip, hiprtc


def check(result: Any, what: str) -> Any:
    """The values of a hip-python call's ``(status, *values)`` result; a failed status raises naming the call."""
    hip, hiprtc = hip_modules()
    status, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    ok = status in (hip.hipError_t.hipSuccess, hiprtc.hiprtcResult.HIPRTC_SUCCESS)
    if not ok:
        raise TilecRuntimeError(f"{what} failed: {getattr(status, 'name', status)}")
    return values[0] if len(values) == 1 else values


def current_device() -> int:
    hip, _ = hip_modules()
    return int(check(hip.hipGetDevice(), "hipGetDevice"))


@functools.lru_cache(maxsize=8)
def device_arch(device: int) -> str:
    """The device's full target id, e.g. ``gfx90a:sramecc+:xnack-`` (``--offload-arch`` takes it as it is)."""
    hip, _ = hip_modules()
    props = hip.hipDeviceProp_t()
    check(hip.hipGetDeviceProperties(props, device), "hipGetDeviceProperties")
    name = props.gcnArchName
    return (name.decode() if isinstance(name, bytes) else str(name)).strip("\0 ")


def compile_arch(target: Target, device: int) -> str:
    """The architecture to compile for: the device's, which must be the target's when the target names one."""
    arch = device_arch(device)
    base = arch.split(":")[0]
    if target.arch and base != target.arch:
        raise TilecRuntimeError(f"target {target} but device {device} is a {base}; use target='hip' (the device's "
                                "architecture) or the device's own")
    if base not in ("gfx90a", "gfx940", "gfx941", "gfx942"):
        raise TilecRuntimeError(f"device {device} is a {base}; tilec's HIP backend targets CDNA2/CDNA3 (gfx90a, "
                                "gfx942): MFMA with 64-lane wavefronts")
    return arch


def hiprtc_version() -> str:
    _, hiprtc = hip_modules()
    return ".".join(str(x) for x in check(hiprtc.hiprtcVersion(), "hiprtcVersion"))


HIPRTC_FLAGS = ("-O3",)  # part of a binary's cache key


def hiprtc_compile(source: str, arch: str, name: str) -> tuple[bytes, str]:
    """(code object, compile log) of ``source`` for ``arch``."""
    _, hiprtc = hip_modules()
    prog = check(hiprtc.hiprtcCreateProgram(source.encode(), f"{name}.hip".encode(), 0, [], []), "hiprtcCreateProgram")
    try:
        opts = [f"--offload-arch={arch}".encode(), *(f.encode() for f in HIPRTC_FLAGS)]
        status = hiprtc.hiprtcCompileProgram(prog, len(opts), opts)
        status = status[0] if isinstance(status, tuple) else status
        log = _program_log(prog)
        if status != hiprtc.hiprtcResult.HIPRTC_SUCCESS:
            why = getattr(status, "name", status)
            raise TilecRuntimeError(f"hiprtc failed to compile kernel {name!r} for {arch}: {why}\n{log}")
        code = bytearray(int(check(hiprtc.hiprtcGetCodeSize(prog), "hiprtcGetCodeSize")))
        check(hiprtc.hiprtcGetCode(prog, code), "hiprtcGetCode")
    finally:
        try:
            hiprtc.hiprtcDestroyProgram(prog)
        except Exception:  # noqa: BLE001 - best-effort cleanup; never hide the compile error
            pass
    return bytes(code), log


def _program_log(prog: Any) -> str:
    _, hiprtc = hip_modules()
    size = int(check(hiprtc.hiprtcGetProgramLogSize(prog), "hiprtcGetProgramLogSize"))
    if size <= 1:
        return ""
    log = bytearray(size)
    check(hiprtc.hiprtcGetProgramLog(prog, log), "hiprtcGetProgramLog")
    return log.decode(errors="replace").rstrip("\0")


@dataclass
class CompiledKernel:
    """A loaded HIP kernel and how to launch it (``module`` keeps the code object loaded)."""

    module: Any
    function: Any
    smem: int
    threads: int
    grid: Any  # a Python function of the symbolic sizes -> (gx, gy, gz)
    n_regs: int
    n_spills: int  # bytes of scratch (private) memory per lane, where spills go; -1 when not reported
    arch: str
    device: int = 0
    align: tuple[tuple[int, int], ...] = ()  # (parameter index, bytes)


def grid_of(grid: tuple, dyn_vars: tuple) -> Any:
    """A function of the symbolic sizes giving the launch grid ``(gx, gy, gz)``."""
    from tilec.ir.evaluate import eval_int

    def fn(*sizes: int) -> tuple[int, int, int]:
        env = dict(zip(dyn_vars, sizes))
        dims = [int(eval_int(g, env)) for g in grid]
        return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]

    return fn


def _attribute(fn: Any, name: str) -> int:
    hip, _ = hip_modules()
    try:
        return int(check(hip.hipFuncGetAttribute(getattr(hip.hipFunction_attribute, name), fn), name))
    except (TilecRuntimeError, AttributeError, TypeError):
        return -1


def load(kernel: ThreadKernel, source: str, target: Target, func: Any, options: dict) -> CompiledKernel:
    """Compile (or fetch from the disk cache) and load ``kernel`` on the current device."""
    hip, _ = hip_modules()
    if kernel.smem_bytes > LDS_BYTES:
        raise TilecValueError(f"kernel {kernel.name!r} needs {kernel.smem_bytes} bytes of shared memory; an AMD "
                              f"workgroup has {LDS_BYTES} (use smaller tiles or fewer pipeline stages)")
    device = current_device()
    arch = compile_arch(target, device)
    key = "h" + hashlib.sha256("\0".join([source, arch, hiprtc_version(), tilec.__version__, *HIPRTC_FLAGS])
                               .encode()).hexdigest()
    name = kernel_name(kernel)
    entry = cache.get(key)
    if entry is None:
        code, log = hiprtc_compile(source, arch, name)
        cache.put(key, code, json.dumps({"name": name, "arch": arch, "log": log[-4000:]}), source)
    else:
        code = entry[0]
    module = check(hip.hipModuleLoadData(code), "hipModuleLoadData")
    fn = check(hip.hipModuleGetFunction(module, name.encode()), f"hipModuleGetFunction({name})")
    return CompiledKernel(module, fn, kernel.smem_bytes, kernel.threads, grid_of(kernel.grid, kernel.dyn_vars),
                          _attribute(fn, "HIP_FUNC_ATTRIBUTE_NUM_REGS"),
                          _attribute(fn, "HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"), arch, device, kernel.align)


WORK_ITEMS = 2**32  # HIP launches fewer work-items (blocks x threads) than this along each grid dimension


def check_grid(grid: tuple[int, int, int], threads: int, kernel: str) -> None:
    """Raise :class:`~tilec.errors.TilecValueError` when ``grid`` of ``threads``-thread blocks has 2^32 or more
    work-items along a dimension, which HIP refuses (or, in some releases, drops without an error)."""
    for d, items in enumerate((grid[0] * threads, grid[1], grid[2])):
        if items >= WORK_ITEMS:
            raise TilecValueError(f"kernel {kernel!r}: its launch grid {tuple(grid)} of {threads}-thread blocks has "
                                  f"{items} work-items along {'xyz'[d]}; HIP launches fewer than 2^32 work-items "
                                  "along each dimension (loop over part of the extent inside the kernel)")


class HipExecutable:
    """Launches a compiled HIP kernel with the bound arguments of one call."""

    def __init__(self, compiled: CompiledKernel, func: Any) -> None:
        self.ck = compiled
        self.func = func
        self.kinds = ["ptr" if isinstance(p, Buffer) else p.dtype for p in func.params]
        self.dyn = list(func.dyn_vars)

    def args_of(self, bound: Bound) -> tuple[list[Any], tuple[int, int, int]]:
        args: list[Any] = []
        for p, kind, v, info in zip(self.func.params, self.kinds, bound.values, bound.infos):
            if kind == "ptr":
                if info.device != f"cuda:{self.ck.device}":
                    raise TilecValueError(f"argument {p.name!r} is on {info.device}; the kernel was loaded on device "
                                          f"{self.ck.device} (cuda:{self.ck.device} in torch)")
                args.append(ctypes.c_void_p(info.data_ptr))
            elif kind.name in _CTYPES:
                args.append(_CTYPES[kind.name](v))
            elif kind.is_float and kind.bits == 16:  # _Float16 / tl::bf16: its bits, in a 2-byte cell
                args.append(ctypes.c_uint16(int(np.array(v, kind.np).view(np.uint16))))
            else:
                raise TilecTypeError(f"argument {p.name!r}: {kind} scalars cannot be passed to a HIP kernel")
        sizes = [bound.sizes[v] for v in self.dyn]
        args += [ctypes.c_int32(s) for s in sizes]
        return args, self.ck.grid(*sizes)

    def stream(self, bound: Bound) -> Any:
        first = next((v for v, i in zip(bound.values, bound.infos) if i is not None), None)
        if first is not None and type(first).__module__.startswith("torch"):
            import torch

            return int(torch.cuda.current_stream(first.device).cuda_stream) or None
        return None

    def check_alignment(self, bound: Bound) -> None:
        for i, nbytes in self.ck.align:
            ptr = bound.infos[i].data_ptr
            if ptr % nbytes:
                raise TilecValueError(f"argument {self.func.params[i].name!r}: the kernel reads it in {nbytes}-byte "
                                      f"vectors, so its data must start at a multiple of {nbytes} bytes; this "
                                      f"tensor's starts at {ptr:#x} (a slice with an offset: pass a contiguous copy)")

    def __call__(self, bound: Bound) -> None:
        hip, _ = hip_modules()
        self.check_alignment(bound)
        args, grid = self.args_of(bound)
        check_grid_sign(grid, self.func.name)
        if 0 in grid:
            return
        check_grid(grid, self.ck.threads, self.func.name)
        check(hip.hipModuleLaunchKernel(self.ck.function, *grid, self.ck.threads, 1, 1, sharedMemBytes=self.ck.smem,
                                        stream=self.stream(bound), kernelParams=None, extra=tuple(args)),
              "hipModuleLaunchKernel")


def hip_empty(shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """A new hip-python ``DeviceArray`` of ``shape`` and ``dtype`` (the caller frees it with ``hip.hipFree``)."""
    hip, _ = hip_modules()
    dtype = np.dtype(dtype)
    if dtype.kind not in "biuf":
        raise TilecTypeError(f"hip-python arrays of dtype {dtype} cannot be allocated (no array-interface typestr); "
                             "pass torch tensors for bfloat16")
    nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
    arr = check(hip.hipMalloc(nbytes), "hipMalloc")
    return arr.configure(typestr=dtype.str, shape=tuple(shape))
