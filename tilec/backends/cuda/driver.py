"""The few CUDA driver calls tilec's runtime makes, through ctypes on ``libcuda.so.1`` (no cuda.h, no CuPy).

Loading a cached kernel and launching it need only these; CuPy (and its import, ~0.1 s) is left to what needs it:
NVRTC compiles and cupy arrays. Modules load into the calling thread's current context, the device's primary
context (the one torch and CuPy use), made current when no context is.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from tilec.errors import TilecRuntimeError

_ATTR_CC_MAJOR, _ATTR_CC_MINOR, _ATTR_SMEM_OPTIN = 75, 76, 97  # CUdevice_attribute
_FUNC_NUM_REGS, _FUNC_MAX_DYNAMIC_SMEM = 4, 8  # CUfunction_attribute

_u32, _vp = ctypes.c_uint32, ctypes.c_void_p
_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID


class LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute``: an id, then a 64-byte union of values at offset 8 (this one's: an int)."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int),
                ("rest", ctypes.c_char * 60)]


class LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig``: what ``cuLaunchKernelEx`` takes in place of ``cuLaunchKernel``'s arguments."""

    _fields_ = [("grid", _u32 * 3), ("block", _u32 * 3), ("smem", _u32), ("stream", _vp),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("n_attrs", _u32)]


_SIGNATURES: dict[str, list[Any]] = {
    "cuInit": [ctypes.c_uint],
    "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    "cuDeviceGetCount": [ctypes.POINTER(ctypes.c_int)],
    "cuDeviceGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
    "cuCtxGetCurrent": [ctypes.POINTER(_vp)],
    "cuCtxSetCurrent": [_vp],
    "cuCtxGetDevice": [ctypes.POINTER(ctypes.c_int)],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_vp), ctypes.c_int],
    "cuModuleLoadData": [ctypes.POINTER(_vp), ctypes.c_char_p],
    "cuModuleGetFunction": [ctypes.POINTER(_vp), _vp, ctypes.c_char_p],
    "cuFuncSetAttribute": [_vp, ctypes.c_int, ctypes.c_int],
    "cuFuncGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, _vp],
    "cuLaunchKernel": [_vp, _u32, _u32, _u32, _u32, _u32, _u32, _u32, _vp, _vp, _vp],
    "cuLaunchKernelEx": [_vp, _vp, _vp, _vp],
    "cuTensorMapEncodeTiled": [_vp, ctypes.c_int, _u32, _vp, ctypes.POINTER(ctypes.c_uint64),
                               ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(_u32), ctypes.POINTER(_u32),
                               ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int],
}


@functools.lru_cache(maxsize=1)
def lib() -> Any:
    """``libcuda.so.1`` with the signatures of the calls tilec makes, initialized."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise TilecRuntimeError(f"the CUDA driver (libcuda.so.1) cannot be loaded: {e}") from e
    for name, args in _SIGNATURES.items():
        fn = getattr(cuda, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    check(cuda.cuInit(0), "cuInit")
    return cuda


def check(status: int, what: str) -> None:
    """Raise on a driver call's nonzero status, with the driver's name for it."""
    if not status:
        return
    msg = ctypes.c_char_p()
    try:
        ctypes.CDLL("libcuda.so.1").cuGetErrorString(status, ctypes.byref(msg))
    except OSError:
        pass
    text = msg.value.decode() if msg.value else "no description"
    raise TilecRuntimeError(f"CUDA driver: {what} failed with error {status} ({text})")


def device_count() -> int:
    """NVIDIA GPUs the driver sees; 0 without a driver or GPU."""
    try:
        cuda = lib()
    except TilecRuntimeError:
        return 0
    n = ctypes.c_int()
    return n.value if cuda.cuDeviceGetCount(ctypes.byref(n)) == 0 else 0


def _attribute(attr: int, device: int) -> int:
    v = ctypes.c_int()
    check(lib().cuDeviceGetAttribute(ctypes.byref(v), attr, device), "cuDeviceGetAttribute")
    return v.value


def compute_capability(device: int) -> int:
    """``90`` for an H100/H200."""
    return _attribute(_ATTR_CC_MAJOR, device) * 10 + _attribute(_ATTR_CC_MINOR, device)


def max_shared_optin(device: int) -> int:
    """The most dynamic shared memory a block of this device may ask for (bytes)."""
    return _attribute(_ATTR_SMEM_OPTIN, device)


def current_device() -> int:
    """The device of the calling thread's context, after making device 0's primary context current when the thread
    has none (what the CUDA runtime, and so torch and CuPy, would use)."""
    cuda = lib()
    ctx = _vp()
    check(cuda.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:
        check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "cuDevicePrimaryCtxRetain")
        check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    dev = ctypes.c_int()
    check(cuda.cuCtxGetDevice(ctypes.byref(dev)), "cuCtxGetDevice")
    return dev.value


_MODULES: list[int] = []  # loaded modules stay loaded for the life of the process (their functions are in use)


def load_function(cubin: bytes, name: str, smem: int) -> tuple[int, int]:
    """(``CUfunction`` handle, registers per thread) of kernel ``name`` in ``cubin``, loaded into the current
    context; its dynamic shared-memory limit raised to ``smem`` when above the default 48 KB."""
    cuda = lib()
    current_device()
    module, fn = _vp(), _vp()
    check(cuda.cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
    _MODULES.append(module.value)
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()), f"cuModuleGetFunction({name!r})")
    if smem > 48 * 1024:
        check(cuda.cuFuncSetAttribute(fn, _FUNC_MAX_DYNAMIC_SMEM, smem), "cuFuncSetAttribute")
    regs = ctypes.c_int()
    check(cuda.cuFuncGetAttribute(ctypes.byref(regs), _FUNC_NUM_REGS, fn), "cuFuncGetAttribute")
    return fn.value, regs.value


def launcher() -> tuple[Any, bool]:
    """(``launch(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra)``, whether it takes pointers as ints): the
    fast launcher's ``cuLaunchKernel``. CuPy's (Cython; raises on failure) where CuPy is installed: 0.7-1.3 us a call
    less than ctypes on the H200's host (perf notes S). Else ctypes without argument conversions: pointers as
    ``c_void_p``, returning the status unchecked (the caller checks)."""
    try:
        from cupy_backends.cuda.api.driver import launchKernel

        return launchKernel, True
    except ImportError:
        raw = type(lib().cuLaunchKernel)(("cuLaunchKernel", lib()))
        raw.restype = ctypes.c_int
        return raw, False


def dependent_launcher() -> Any:
    """A launch function with ``cuLaunchKernel``'s arguments (the kernel, stream and argument block as ints) that
    launches through ``cuLaunchKernelEx`` as a programmatic dependent of the stream's previous kernel (PDL, sm_90):
    the kernel may start launching once that kernel's blocks have all run ``griddepcontrol.launch_dependents``,
    and waits for it to complete (``griddepcontrol.wait``) before touching memory. Returns the status unchecked.
    Each call makes a configuration of its own, which every launch through the returned function reuses."""
    raw = lib().cuLaunchKernelEx  # argtypes: four pointers, which it takes as ints
    attr = LaunchAttribute(id=_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
    cfg = LaunchConfig(attrs=ctypes.pointer(attr), n_attrs=1)
    cfg_ptr = ctypes.addressof(cfg)
    last: list[tuple] = [()]

    def launch(fn: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, smem: int, stream: int, params: int,
               extra: int) -> int:
        if (shape := (gx, gy, gz, bx, by, bz, smem, stream)) != last[0]:  # the same from launch to launch, mostly
            cfg.grid[:], cfg.block[:], cfg.smem, cfg.stream = shape[:3], shape[3:6], smem, stream
            last[0] = shape
        return raw(cfg_ptr, fn, params, None)

    launch._keep = (attr, cfg)  # the configuration lives as long as the function
    return launch


GRID_LIMITS = (2**31 - 1, 65535, 65535)  # gridDim.x, .y, .z (every CUDA GPU from sm_30 on)


def check_grid(grid: tuple[int, int, int], kernel: str) -> None:
    """Raise :class:`~tilec.errors.TilecValueError` when ``grid`` is over CUDA's limits, which the driver would
    refuse with a bare ``CUDA_ERROR_INVALID_VALUE``."""
    for d, (g, top) in enumerate(zip(grid, GRID_LIMITS)):
        if g > top:
            from tilec.errors import TilecValueError

            raise TilecValueError(f"kernel {kernel!r}: its launch grid {tuple(grid)} needs gridDim.{'xyz'[d]} = {g}; "
                                  f"CUDA allows at most {top} blocks along {'xyz'[d]} (put the larger extent in "
                                  "T.Kernel's first dimension, or loop over it inside the kernel)")


def launch(fn: int, grid: tuple[int, int, int], threads: int, smem: int, stream: int, params: int,
           dependent: Any = None) -> None:
    """Launch ``fn`` with the argument block at address ``params`` (an array of pointers to each argument); through
    ``dependent`` (a :func:`dependent_launcher`) as a programmatic dependent of the stream's previous kernel."""
    if dependent is not None:
        check(dependent(fn, *grid, threads, 1, 1, smem, stream, params, 0), "cuLaunchKernelEx")
    else:
        check(lib().cuLaunchKernel(fn, *grid, threads, 1, 1, smem, stream, params, None), "cuLaunchKernel")
