"""The HIP runtime's host side against a stand-in for hip-python (there is no AMD GPU here): what it compiles and
with which options, the disk cache, argument checks, output allocation, and the launch. The stand-in's
``hipModuleLaunchKernel`` runs the kernel's thread IR in the thread interpreter on the memory its pointer
arguments point at, so the packed arguments (order, pointers, scalars, sizes), grid, block and shared-memory size
are checked by the numbers they produce. What hip-python itself does is not checked here."""

from __future__ import annotations

import builtins
import ctypes
import enum
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import assert_close, load_example, randn

import tilec
import tilec.language as T
from tilec.backends.hip import runtime
from tilec.errors import TilecRuntimeError, TilecValueError
from tilec.interp.thread import ThreadInterpreter
from tilec.ir.buffer import Buffer


class DeviceArray:
    """hip-python's DeviceArray as tilec sees it: a CUDA-array-interface dict; the data live in a numpy array."""

    def __init__(self, nbytes: int) -> None:
        self.host = np.zeros(nbytes, np.uint8)
        self._cai = {"shape": (nbytes,), "typestr": "|u1", "data": (self.host.ctypes.data, False), "version": 3,
                     "strides": None}

    def configure(self, typestr: str, shape: tuple) -> DeviceArray:
        self._cai = dict(self._cai, typestr=typestr, shape=tuple(shape))
        return self

    @property
    def __cuda_array_interface__(self) -> dict:
        return self._cai

    def numpy(self) -> np.ndarray:
        return self.host.view(np.dtype(self._cai["typestr"])).reshape(self._cai["shape"])


DeviceArray.__module__ = "hip._util.types"


def device_array(arr: np.ndarray) -> DeviceArray:
    d = DeviceArray(arr.nbytes).configure(arr.dtype.str, arr.shape)
    d.numpy()[...] = arr
    return d


class Status(enum.IntEnum):
    hipSuccess = 0
    hipErrorInvalidValue = 1


class RtcStatus(enum.IntEnum):
    HIPRTC_SUCCESS = 0
    HIPRTC_ERROR_COMPILATION = 6


class FakeHip:
    hipError_t = Status
    hipFunction_attribute = SimpleNamespace(HIP_FUNC_ATTRIBUTE_NUM_REGS=1, HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES=2)

    def __init__(self, arch: str = "gfx90a:sramecc+:xnack-") -> None:
        self.arch, self.calls, self.kernels = arch, [], {}
        self.memory: dict[int, DeviceArray] = {}

    def hipGetDevice(self):  # noqa: N802
        return Status.hipSuccess, 0

    def hipDeviceProp_t(self):  # noqa: N802
        return SimpleNamespace(gcnArchName=b"")

    def hipGetDeviceProperties(self, props, device):  # noqa: N802, ANN001
        props.gcnArchName = self.arch.encode()
        return (Status.hipSuccess,)

    def hipModuleLoadData(self, code):  # noqa: N802, ANN001
        self.calls.append(("load", bytes(code)))
        return Status.hipSuccess, "module"

    def hipModuleGetFunction(self, module, name):  # noqa: N802, ANN001
        return Status.hipSuccess, ("function", name.decode())

    def hipFuncGetAttribute(self, attr, fn):  # noqa: N802, ANN001
        return Status.hipSuccess, {1: 96, 2: 0}[attr]

    def hipMalloc(self, nbytes):  # noqa: N802, ANN001
        arr = DeviceArray(nbytes)
        self.memory[arr.host.ctypes.data] = arr
        return Status.hipSuccess, arr

    def hipModuleLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, sharedMemBytes, stream, kernelParams, extra):  # noqa: N802, N803, ANN001
        self.calls.append(("launch", fn, (gx, gy, gz), (bx, by, bz), sharedMemBytes, stream, extra))
        self.kernels[fn[1]](extra, (gx, gy, gz), (bx, by, bz), sharedMemBytes)
        return (Status.hipSuccess,)


class FakeHiprtc:
    hiprtcResult = RtcStatus

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.compiled = fail, []

    def hiprtcCreateProgram(self, src, name, n, headers, names):  # noqa: N802, ANN001
        return RtcStatus.HIPRTC_SUCCESS, {"src": src.decode(), "name": name.decode()}

    def hiprtcCompileProgram(self, prog, n, opts):  # noqa: N802, ANN001
        assert n == len(opts)
        self.compiled.append((prog["name"], [o.decode() for o in opts]))
        return (RtcStatus.HIPRTC_ERROR_COMPILATION if self.fail else RtcStatus.HIPRTC_SUCCESS,)

    def hiprtcGetProgramLogSize(self, prog):  # noqa: N802, ANN001
        return RtcStatus.HIPRTC_SUCCESS, 12

    def hiprtcGetProgramLog(self, prog, log):  # noqa: N802, ANN001
        log[:] = b"error: oops\0"
        return (RtcStatus.HIPRTC_SUCCESS,)

    def hiprtcGetCodeSize(self, prog):  # noqa: N802, ANN001
        return RtcStatus.HIPRTC_SUCCESS, 8

    def hiprtcGetCode(self, prog, code):  # noqa: N802, ANN001
        code[:] = b"CODEOBJ\0"
        return (RtcStatus.HIPRTC_SUCCESS,)

    def hiprtcVersion(self):  # noqa: N802
        return RtcStatus.HIPRTC_SUCCESS, 6, 2

    def hiprtcDestroyProgram(self, prog):  # noqa: N802, ANN001
        return (RtcStatus.HIPRTC_SUCCESS,)


@pytest.fixture
def fake(monkeypatch, tmp_path):  # noqa: ANN001, ANN201
    hip, rtc = FakeHip(), FakeHiprtc()
    monkeypatch.setattr(runtime, "hip_modules", lambda: (hip, rtc))
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    runtime.device_arch.cache_clear()
    yield SimpleNamespace(hip=hip, rtc=rtc)
    runtime.device_arch.cache_clear()


def interpret_launches(fake, kernel: tilec.JITKernel) -> None:  # noqa: ANN001
    """Make the stand-in run ``kernel``'s thread IR on launch, reading its arguments back from ``extra``."""
    tk = kernel.state.artifacts["thread_ir"]
    func = kernel.prim_func

    def run(extra, grid, block, smem):  # noqa: ANN001
        assert block == (tk.threads, 1, 1) and smem == tk.smem_bytes
        values = list(extra)
        mems, scalars = {}, {}
        for p, m in zip(func.params, tk.params):
            v = values.pop(0)
            if isinstance(p, Buffer):
                assert isinstance(v, ctypes.c_void_p)
                arr = next(a for a in fake.arrays() if a.host.ctypes.data == v.value)
                mems[m] = arr.numpy().reshape(-1)
            elif p.dtype.bits == 16 and p.dtype.is_float:  # passed as its bits
                scalars[p] = np.array(v.value, np.uint16).view(p.dtype.np)[()]
            else:
                scalars[p] = v.value
        for d in func.dyn_vars:
            scalars[d] = values.pop(0).value
        assert not values
        ThreadInterpreter(tk).run(mems, scalars)
        got = tuple(int(g) for g in [ThreadInterpreter(tk).eval(g, scalars, None) for g in tk.grid])
        assert grid[: len(got)] == got

    fake.hip.kernels[runtime.kernel_name(tk)] = run


def test_gemm_compiles_for_the_device_arch_caches_and_launches(fake, rng):
    kernel = tilec.JITKernel(load_example("01_gemm").matmul(100, 72, 40, block_M=64, block_N=64).prim_func, "hip",
                             [-1])
    a, b = randn(rng, (100, 40), "float16"), randn(rng, (40, 72), "float16")
    da, db = device_array(a), device_array(b)
    fake.arrays = lambda: [da, db, *fake.hip.memory.values()]
    interpret_launches(fake, kernel)
    c = kernel(da, db)
    assert type(c).__name__ == "DeviceArray" and c.__cuda_array_interface__["shape"] == (100, 72)
    assert_close(c.numpy(), a.astype(np.float64) @ b.astype(np.float64), "float16")
    assert fake.rtc.compiled == [("main_kernel.hip", ["--offload-arch=gfx90a:sramecc+:xnack-", "-O3"])]
    launch = [c for c in fake.hip.calls if c[0] == "launch"][0]
    assert launch[2] == (2, 2, 1) and launch[3] == (128, 1, 1) and launch[5] is None
    assert kernel.n_regs == 96 and kernel.n_spills == 0
    again = tilec.JITKernel(kernel.prim_func, "hip", [-1])  # a new kernel object: the code object is on disk
    interpret_launches(fake, again)
    again(da, db)
    assert len(fake.rtc.compiled) == 1 and [c for c in fake.hip.calls if c[0] == "load"][-1][1] == b"CODEOBJ\0"


@tilec.jit(target="hip")
def scale(N, block=256):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), alpha: T.float32, n: T.int32):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    Y[bx * block + i] = X[bx * block + i] * alpha

    return main


def test_scalars_are_packed_in_order(fake, rng):
    x = randn(rng, (1000,), "float32")
    dx, dy = device_array(x), device_array(np.full(1000, np.nan, np.float32))
    fake.arrays = lambda: [dx, dy]
    k = scale(1000)
    interpret_launches(fake, k)
    k(dx, dy, 2.5, 900)
    launch = [c for c in fake.hip.calls if c[0] == "launch"][0]
    assert [type(v) for v in launch[6]] == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_int32]
    y = dy.numpy()
    np.testing.assert_allclose(y[:900], x[:900] * 2.5, rtol=1e-6)
    assert np.isnan(y[900:]).all()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_float_scalars_are_passed_as_their_bits(fake, rng, dtype):
    """A float16 / bfloat16 scalar parameter travels as a 2-byte ctypes cell holding its bits, as the kernel's
    ``_Float16`` / ``tl::bf16`` parameter reads it (it raised TypeError: cannot be passed to a HIP kernel)."""
    N = 256

    @T.prim_func
    def f16(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), alpha: T.float16, n: T.int32):
        with T.Kernel(1, threads=N) as bx:
            for i in T.Parallel(N):
                if i < n:
                    Y[i] = X[i] * T.cast(alpha, "float32")

    @T.prim_func
    def bf16(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), alpha: T.bfloat16, n: T.int32):
        with T.Kernel(1, threads=N) as bx:
            for i in T.Parallel(N):
                if i < n:
                    Y[i] = X[i] * T.cast(alpha, "float32")

    x = randn(rng, (N,), "float32")
    dx, dy = device_array(x), device_array(np.full(N, np.nan, np.float32))
    fake.arrays = lambda: [dx, dy]
    k = tilec.JITKernel(f16 if dtype == "float16" else bf16, "hip")
    interpret_launches(fake, k)
    k(dx, dy, 1.3, 200)
    alpha = np.array(1.3, tilec.dtypes.dtype(dtype).np)
    launch = [c for c in fake.hip.calls if c[0] == "launch"][0]
    assert type(launch[6][2]) is ctypes.c_uint16 and launch[6][2].value == alpha.view(np.uint16)
    y = dy.numpy()
    np.testing.assert_array_equal(y[:200], x[:200] * np.float32(alpha))
    assert np.isnan(y[200:]).all()


def test_host_checks_before_launch(fake, rng):
    k = scale(1000)
    dx = device_array(randn(rng, (1000,), "float32"))
    with pytest.raises(TypeError, match="dtype"):
        k(device_array(np.zeros(1000, np.float16)), dx, 1.0, 1)
    with pytest.raises(ValueError, match="dimension 0"):
        k(device_array(np.zeros(999, np.float32)), dx, 1.0, 1)
    with pytest.raises(ValueError, match="expected an array in a CUDA device|host"):
        k(np.zeros(1000, np.float32), dx, 1.0, 1)
    assert not [c for c in fake.hip.calls if c[0] == "launch"]


def test_grid_over_hips_work_item_limit_is_refused_before_launch(fake):
    """HIP launches no grid with 2^32 or more work-items (blocks x threads) along a dimension: tilec says so,
    naming the dimension, instead of handing hipModuleLaunchKernel a launch it refuses or drops."""

    @T.prim_func
    def wide(X: T.Tensor((64,), "float32")):
        with T.Kernel(2**26, threads=64) as bx:
            for i in T.Parallel(64):
                if bx == 0:
                    X[i] = X[i] + 1.0

    dx = device_array(np.zeros(64, np.float32))
    fake.arrays = lambda: [dx]
    why = r"grid \(67108864, 1, 1\) of 64-thread blocks has 4294967296 work-items along x"
    with pytest.raises(TilecValueError, match=why):
        tilec.JITKernel(wide, "hip")(dx)
    assert not [c for c in fake.hip.calls if c[0] == "launch"]
    runtime.check_grid((2**26 - 1, 1, 1), 64, "wide")  # one block fewer: launched


def test_compile_errors_show_the_log(fake):
    fake.rtc.fail = True
    why = "(?s)failed to compile kernel 'main_kernel' for gfx90a.*HIPRTC_ERROR_COMPILATION.*oops"
    with pytest.raises(TilecRuntimeError, match=why):
        scale(64).compile()


def test_device_must_be_cdna_and_match_the_target(fake):
    fake.hip.arch = "gfx942:sramecc+:xnack-"
    with pytest.raises(TilecRuntimeError, match="target hip:gfx90a but device 0 is a gfx942"):
        tilec.JITKernel(scale.get_kernel(64).prim_func, "hip:gfx90a").compile()
    runtime.device_arch.cache_clear()
    fake.hip.arch = "gfx1100"
    with pytest.raises(TilecRuntimeError, match="targets CDNA2/CDNA3"):
        scale(128).compile()


def test_shared_memory_beyond_the_lds_is_refused(fake):
    k = tilec.JITKernel(load_example("01_gemm").matmul(512, 512, 512, block_M=256, block_N=256, block_K=128).prim_func,
                        "hip", [-1])
    with pytest.raises(TilecValueError, match="needs 131072 bytes of shared memory; an AMD workgroup has 65536"):
        k.compile()


def test_missing_hip_python_is_a_clear_error(monkeypatch):
    real_import = builtins.__import__

    def no_hip(name, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        if name == "hip" or name.startswith("hip."):
            raise ImportError("No module named 'hip'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_hip)
    monkeypatch.delitem(sys.modules, "hip", raising=False)
    runtime.hip_modules.cache_clear()
    try:
        with pytest.raises(TilecRuntimeError, match="pip install hip-python"):
            scale(32).compile()
        assert "__global__" in scale(32).get_kernel_source()  # the source needs no hip-python
    finally:
        runtime.hip_modules.cache_clear()
