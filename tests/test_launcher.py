"""The generated CUDA launcher (tilec/runtime/launcher.py) on the CPU, with torch and cuLaunchKernel replaced by
fakes: what it accepts, what it hands to the checked path, and the arguments it passes to cuLaunchKernel."""

from __future__ import annotations

import ctypes
import dataclasses
import sys
import types

import pytest
from test_interp import gemm_kernel, rows_scaled

A, B, C = 1 << 32, 2 << 32, 3 << 32  # the fake tensors' addresses, far enough apart not to overlap


class FakeTensor:
    def __init__(self, shape, dtype, ptr=4096, contiguous=True, device=0):
        self.shape, self.dtype, self._ptr, self._contiguous, self._device = tuple(shape), dtype, ptr, contiguous, device

    def get_device(self):
        return self._device

    def is_contiguous(self):
        return self._contiguous

    def data_ptr(self):
        return self._ptr


@pytest.fixture
def fakes(monkeypatch):
    """(fake torch module, list of launchKernel calls)."""
    torch = types.ModuleType("torch")
    torch.Tensor, torch.float32, torch.float16 = FakeTensor, "f32", "f16"
    torch.empty = lambda shape, dtype, device: FakeTensor(shape, dtype, 8192)
    torch.device = lambda *a: a
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda dev: 77)
    calls: list[tuple] = []
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr("tilec.backends.cuda.driver.launcher", lambda: (lambda *a: calls.append(a) or 0, False))
    return torch, calls


def _launcher(func, align=()):
    from tilec.backends.cuda.runtime import _grid_fn, grid_code
    from tilec.runtime.launcher import build_fast_launcher

    compiled = types.SimpleNamespace(function=5, threads=128, smem=1024, align=align,
                                     grid=_grid_fn(grid_code(func.launch.grid, func.dyn_vars)), tensor_maps=())
    return build_fast_launcher(func, compiled, 0, lambda *args: "checked")


def _args(call):
    """The values behind cuLaunchKernel's kernelParams (all 8-byte cells here but the int32 sizes)."""
    ptrs = ctypes.cast(call[9].value, ctypes.POINTER(ctypes.c_void_p))
    return ptrs


def test_a_failed_launch_raises_with_the_drivers_status(monkeypatch, fakes):
    from tilec.errors import TilecRuntimeError

    monkeypatch.setattr("tilec.backends.cuda.driver.launcher", lambda: (lambda *a: 701, False))
    launch = _launcher(gemm_kernel(64, 96, 64, 32, 32, 32, "float16", "float32"))
    a, b, c = FakeTensor((64, 64), "f16", A), FakeTensor((64, 96), "f16", B), FakeTensor((64, 96), "f32", C)
    with pytest.raises(TilecRuntimeError, match="cuLaunchKernel failed with error 701"):
        launch(a, b, c)


def test_launch_call_taking_int_pointers_gets_ints(monkeypatch, fakes):
    """CuPy's launchKernel (when CuPy is installed) takes the kernel, stream and argument block as ints."""
    _, calls = fakes
    monkeypatch.setattr("tilec.backends.cuda.driver.launcher", lambda: (lambda *a: calls.append(a), True))
    launch = _launcher(gemm_kernel(64, 96, 64, 32, 32, 32, "float16", "float32"))
    a, b, c = FakeTensor((64, 64), "f16", A), FakeTensor((64, 96), "f16", B), FakeTensor((64, 96), "f32", C)
    assert launch(a, b, c) is None
    fn, gx, gy, gz, tx, ty, tz, smem, stream, params, extra = calls[-1]
    assert (fn, gx, gy, gz, tx, smem, stream, extra) == (5, 3, 2, 1, 128, 1024, 77, 0)
    ptrs = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
    assert [ctypes.c_uint64.from_address(ptrs[i]).value for i in range(3)] == [A, B, C]


def test_static_kernel_launches_with_its_constant_grid(fakes):
    _, calls = fakes
    launch = _launcher(gemm_kernel(64, 96, 64, 32, 32, 32, "float16", "float32"))
    a, b, c = FakeTensor((64, 64), "f16", A), FakeTensor((64, 96), "f16", B), FakeTensor((64, 96), "f32", C)
    assert launch(a, b, c) is None
    fn, gx, gy, gz, tx, ty, tz, smem, stream = calls[-1][:9]
    assert (fn.value, gx, gy, gz, tx, smem, stream.value) == (5, 3, 2, 1, 128, 1024, 77)
    ptrs = _args(calls[-1])
    assert [ctypes.c_uint64.from_address(ptrs[i]).value for i in range(3)] == [A, B, C]


@pytest.mark.parametrize("bad", [dict(shape=(64, 65)), dict(dtype="f32"), dict(contiguous=False), dict(device=1),
                                 dict(shape=(64,))])
def test_anything_unusual_goes_to_the_checked_path(fakes, bad):
    _, calls = fakes
    launch = _launcher(gemm_kernel(64, 64, 64, 32, 32, 32, "float16", "float32"))
    spec = dict(shape=(64, 64), dtype="f16") | bad
    a = FakeTensor(spec.pop("shape"), spec.pop("dtype"), **spec)
    assert launch(a, FakeTensor((64, 64), "f16"), FakeTensor((64, 64), "f32")) == "checked"
    assert launch(FakeTensor((64, 64), "f16"), FakeTensor((64, 64), "f16")) == "checked"  # wrong count
    assert not calls


def test_an_int_scalar_outside_its_type_goes_to_the_checked_path(fakes):
    """The generated launcher stores an int parameter in a ctypes cell of its width, which wraps what does not fit:
    such a value goes to the checked path (which rejects it)."""
    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), n: T.int32, m: T.uint8):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                A[i] = A[i] * n + m

    _, calls = fakes
    launch = _launcher(main)
    a = FakeTensor((64,), "f32", 4096)
    assert launch(a, 2**31, 1) == "checked"
    assert launch(a, -(2**31) - 1, 1) == "checked"
    assert launch(a, 3, 256) == "checked"
    assert launch(a, 3, -1) == "checked"
    assert not calls
    assert launch(a, -(2**31), 255) is None
    ptrs = _args(calls[-1])
    assert (ctypes.c_int32.from_address(ptrs[1]).value, ctypes.c_uint8.from_address(ptrs[2]).value) == (-(2**31), 255)


def test_dynamic_sizes_outputs_and_alignment(fakes):
    _, calls = fakes
    launch = _launcher(rows_scaled().prim_func, align=((0, 16),))
    assert launch(FakeTensor((2**31, 64), "f32", 4096)) == "checked"  # over int32: the checked path refuses it
    assert not calls
    y = launch(FakeTensor((300, 64), "f32", 4096))
    assert isinstance(y, FakeTensor) and y.shape == (300, 64) and y.dtype == "f32"
    assert calls[-1][1:4] == (3, 1, 1)
    ptrs = _args(calls[-1])
    assert ctypes.c_uint64.from_address(ptrs[0]).value == 4096
    assert ctypes.c_uint64.from_address(ptrs[1]).value == 8192  # the output
    assert ctypes.c_int32.from_address(ptrs[2]).value == 300
    assert launch(FakeTensor((300, 64), "f32", 4100)) == "checked"  # misaligned
    assert launch(FakeTensor((300, 63), "f32")) == "checked"
    n = len(calls)
    assert launch(FakeTensor((0, 64), "f32")).shape == (0, 64)  # an empty grid launches nothing
    assert len(calls) == n


def test_a_tensor_past_int32_offsets_goes_to_the_checked_path(fakes):
    """Kernels address a tensor by int32 element offsets: a (40000, 60000) tensor (each size within int32) went to
    the kernel, whose offsets wrapped; it and an output that large go to the checked path (which refuses them)."""
    import tilec.language as T

    M, N = T.dynamic("M"), T.dynamic("N")

    @T.prim_func
    def outer(X: T.Tensor((M,), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
            for i, j in T.Parallel(64, 64):
                Z[by * 64 + i, bx * 64 + j] = X[by * 64 + i] * Y[bx * 64 + j]

    _, calls = fakes
    launch = _launcher(rows_scaled().prim_func)
    assert launch(FakeTensor((2**25 + 1, 64), "f32")) == "checked"
    assert not calls
    assert launch(FakeTensor((2**25, 64), "f32")).shape == (2**25, 64)  # offsets up to 2**31 - 1
    launch = _launcher(dataclasses.replace(outer, out_params=(2,)))
    assert launch(FakeTensor((40000,), "f32"), FakeTensor((60000,), "f32")) == "checked"
    assert launch(FakeTensor((4000,), "f32"), FakeTensor((6000,), "f32")).shape == (4000, 6000)


def test_poison_fills_with_what_shows_an_unwritten_element():
    """TILEC_POISON's fill (CuPy's array API, which numpy shares): NaN, the integer minimum, and fp8's NaN byte."""
    import ml_dtypes
    import numpy as np

    from tilec import dtypes as dt
    from tilec.runtime.args import _poison

    f16, i32, f8 = np.zeros(4, np.float16), np.zeros(4, np.int32), np.zeros(4, ml_dtypes.float8_e4m3fn)
    for a, d in ((f16, dt.float16), (i32, dt.int32), (f8, dt.float8_e4m3)):
        _poison(a, "cupy", d)
    assert np.isnan(f16).all() and (i32 == np.iinfo(np.int32).min).all() and np.isnan(f8.astype(np.float32)).all()



def test_dependent_kernel_launches_through_cuLaunchKernelEx(monkeypatch, fakes):
    """A kernel compiled as a programmatic dependent (PDL, sm_90) goes through the dependent launcher, with the
    kernel, stream and argument block as ints; its failure names cuLaunchKernelEx."""
    from tilec.errors import TilecRuntimeError

    calls, status = [], [0]
    monkeypatch.setattr("tilec.backends.cuda.driver.dependent_launcher",
                        lambda: lambda *a: calls.append(a) or status[0])
    func = gemm_kernel(64, 96, 64, 32, 32, 32, "float16", "float32")
    from tilec.backends.cuda.runtime import _grid_fn, grid_code
    from tilec.runtime.launcher import build_fast_launcher

    compiled = types.SimpleNamespace(function=5, threads=128, smem=1024, align=(), dependent=True,
                                     grid=_grid_fn(grid_code(func.launch.grid, func.dyn_vars)), tensor_maps=())
    launch = build_fast_launcher(func, compiled, 0, lambda *args: "checked")
    a, b, c = FakeTensor((64, 64), "f16", A), FakeTensor((64, 96), "f16", B), FakeTensor((64, 96), "f32", C)
    launch(a, b, c)
    fn, gx, gy, gz, tx, ty, tz, smem, stream, params, extra = calls[-1]
    assert (fn, gx, gy, gz, tx, smem, stream, extra) == (5, 3, 2, 1, 128, 1024, 77, 0)
    status[0] = 700
    with pytest.raises(TilecRuntimeError, match="cuLaunchKernelEx failed with error 700"):
        launch(a, b, c)


def test_launch_config_structures_match_cuda_h():
    """``CUlaunchAttribute`` is 72 bytes with its value at offset 8; ``CUlaunchConfig`` has the stream at 32, the
    attributes at 40 and their count at 48 (cuda.h of CUDA 12 and 13)."""
    from tilec.backends.cuda.driver import LaunchAttribute, LaunchConfig

    assert ctypes.sizeof(LaunchAttribute) == 72 and LaunchAttribute.value.offset == 8
    assert (LaunchConfig.stream.offset, LaunchConfig.attrs.offset, LaunchConfig.n_attrs.offset) == (32, 40, 48)
    assert ctypes.sizeof(LaunchConfig) == 56


def _rows_on_y():
    """A kernel whose grid's y dimension is the runtime row count."""
    import tilec.language as T

    M = T.dynamic("M")

    @T.prim_func
    def rows(X: T.Tensor((M, 64), "float32"), Y: T.Tensor((M, 64), "float32")):
        with T.Kernel(1, M, threads=64) as (bx, by):
            for j in T.Parallel(64):
                Y[by, j] = X[by, j] * 2.0

    return rows


def test_a_grid_over_cudas_limits_goes_to_the_checked_path(fakes):
    _, calls = fakes
    launch = _launcher(_rows_on_y())
    assert launch(FakeTensor((65535, 64), "f32"), FakeTensor((65535, 64), "f32", B)) is None
    assert calls[-1][1:4] == (1, 65535, 1)
    n = len(calls)
    assert launch(FakeTensor((65536, 64), "f32"), FakeTensor((65536, 64), "f32", B)) == "checked"
    assert len(calls) == n


def test_the_checked_path_names_the_grid_dimension_over_cudas_limits(monkeypatch):
    from tilec.backends.cuda.runtime import CudaExecutable, _grid_fn, grid_code
    from tilec.errors import TilecValueError
    from tilec.runtime.args import Bound

    func = _rows_on_y()
    launched = []
    monkeypatch.setattr("tilec.backends.cuda.driver.launch", lambda *a: launched.append(a))
    compiled = types.SimpleNamespace(function=5, threads=64, smem=0, align=(), tensor_maps=(), dependent=False,
                                     grid=_grid_fn(grid_code(func.launch.grid, func.dyn_vars)), device=0)
    exe = CudaExecutable(compiled, func)
    exe.stream = lambda bound: 0
    infos = [types.SimpleNamespace(data_ptr=4096, device="cuda:0"),
             types.SimpleNamespace(data_ptr=8192, device="cuda:0")]
    (m,) = func.dyn_vars
    exe(Bound([None, None], infos, {m: 65535}, []))
    assert launched[-1][1] == (1, 65535, 1)
    with pytest.raises(TilecValueError, match=r"gridDim.y = 65536; CUDA allows at most 65535"):
        exe(Bound([None, None], infos, {m: 65536}, []))
    assert len(launched) == 1


def _rows_minus_8():
    """A kernel whose grid's x dimension is the row count less 8: negative for fewer than 8 rows."""
    import tilec.language as T

    M = T.dynamic("M")

    @T.prim_func
    def rows8(X: T.Tensor((M, 64), "float32"), Y: T.Tensor((M, 64), "float32")):
        with T.Kernel(M - 8, threads=64) as bx:
            for j in T.Parallel(64):
                Y[bx, j] = X[bx, j] * 2.0

    return rows8


def test_a_negative_grid_goes_to_the_checked_path_which_names_it(monkeypatch, fakes):
    """T.Kernel(M - 8) with M = 4: the fast path launched gridDim.x = -4 (the driver's bare 'invalid argument'), the
    checked path too; the interpreters ran no block. Now every path raises, naming the grid."""
    from tilec.backends.cuda.runtime import CudaExecutable, _grid_fn, grid_code
    from tilec.errors import TilecValueError
    from tilec.runtime.args import Bound

    _, calls = fakes
    func = _rows_minus_8()
    launch = _launcher(func)
    assert launch(FakeTensor((4, 64), "f32"), FakeTensor((4, 64), "f32", 8192)) == "checked"
    assert launch(FakeTensor((8, 64), "f32"), FakeTensor((8, 64), "f32", 8192)) is None  # an empty grid
    assert not calls
    launched = []
    monkeypatch.setattr("tilec.backends.cuda.driver.launch", lambda *a: launched.append(a))
    compiled = types.SimpleNamespace(function=5, threads=64, smem=0, align=(), tensor_maps=(), dependent=False,
                                     grid=_grid_fn(grid_code(func.launch.grid, func.dyn_vars)), device=0)
    exe = CudaExecutable(compiled, func)
    infos = [types.SimpleNamespace(data_ptr=4096, device="cuda:0"),
             types.SimpleNamespace(data_ptr=8192, device="cuda:0")]
    (m,) = func.dyn_vars
    with pytest.raises(TilecValueError, match=r"kernel 'rows8': its launch grid \(-4, 1, 1\) has -4 blocks along x"):
        exe(Bound([None, None], infos, {m: 4}, []))
    assert not launched


def test_a_16_bit_float_scalar_goes_to_the_checked_path(fakes):
    """ctypes has no 16-bit float cell: a kernel with a float16 / bfloat16 scalar builds no fast launcher (it raised
    KeyError building one) and every call takes the checked path, which packs the value itself."""
    import tilec.language as T

    @T.prim_func
    def half(A: T.Tensor((64,), "float32"), s: T.float16):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                A[i] = A[i] * s

    @T.prim_func
    def brain(A: T.Tensor((64,), "float32"), s: T.bfloat16):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                A[i] = A[i] * s

    assert _launcher(half) is None and _launcher(brain) is None


def test_a_float32_scalar_beyond_its_type_goes_to_the_checked_path(fakes):
    """A ctypes float cell turns a finite double beyond float32 into inf: such a value goes to the checked path
    (which refuses it); the largest float32, infinities and NaN launch."""
    import math

    import tilec.language as T

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), s: T.float32):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                A[i] = A[i] * s

    _, calls = fakes
    launch = _launcher(main)
    a = FakeTensor((64,), "f32", 4096)
    assert launch(a, 1e300) == "checked"
    assert launch(a, -3.5e38) == "checked"
    assert not calls
    for s in (3.4028234663852886e38, -math.inf, math.nan):
        assert launch(a, s) is None
        got = ctypes.c_float.from_address(_args(calls[-1])[1]).value
        assert got == s or (math.isnan(s) and math.isnan(got))


def test_outputs_of_a_kernel_without_array_inputs_are_allocated_on_the_gpu(monkeypatch):
    """With no array argument to allocate like, the checked CUDA path allocated the outputs as numpy arrays and
    launched the kernel on their host addresses; they are torch tensors on the current GPU (CuPy arrays without
    torch)."""
    import tilec.language as T
    from tilec.runtime.args import allocate_like, bind

    class dtype:  # noqa: N801 - torch's names
        __module__ = "torch"

        def __init__(self, name):
            self.name = name

        def __str__(self):
            return f"torch.{self.name}"

    class Tensor:
        __module__ = "torch"

        def __init__(self, shape, dtype, device):
            self.shape, self.dtype, self.device = tuple(shape), dtype, device

        def stride(self):
            return (1,) * len(self.shape)

        def data_ptr(self):
            return 8192

    torch = types.ModuleType("torch")
    torch.Tensor, torch.float32 = Tensor, dtype("float32")
    torch.empty = lambda shape, dtype, device: Tensor(shape, dtype, device)
    torch.device = lambda kind, index=None: types.SimpleNamespace(type=kind, index=index)
    torch.cuda = types.SimpleNamespace(current_device=lambda: 1)
    monkeypatch.setitem(sys.modules, "torch", torch)

    @T.prim_func
    def fill(n: T.int32, A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                A[i] = n

    import dataclasses

    bound = bind(dataclasses.replace(fill, out_params=(1,)), (3,), "cuda", allocate_like)
    (out,) = bound.outputs
    assert isinstance(out, Tensor) and out.shape == (64,) and out.dtype is torch.float32
    assert bound.infos[1].device == "cuda:1" and bound.infos[1].data_ptr == 8192


def test_the_checked_path_refuses_an_array_on_another_gpu(monkeypatch):
    """The checked path took any CUDA array: a tensor on cuda:1 (which the generated launcher hands to it) was launched
    with the kernel loaded on cuda:0."""
    from tilec.backends.cuda.runtime import CudaExecutable, _grid_fn, grid_code
    from tilec.errors import TilecValueError
    from tilec.runtime.args import Bound

    func = _rows_on_y()
    launched = []
    monkeypatch.setattr("tilec.backends.cuda.driver.launch", lambda *a: launched.append(a))
    compiled = types.SimpleNamespace(function=5, threads=64, smem=0, align=(), tensor_maps=(), dependent=False,
                                     grid=_grid_fn(grid_code(func.launch.grid, func.dyn_vars)), device=0)
    exe = CudaExecutable(compiled, func)
    exe.stream = lambda bound: 0
    (m,) = func.dyn_vars
    infos = [types.SimpleNamespace(data_ptr=4096, device="cuda:0"),
             types.SimpleNamespace(data_ptr=8192, device="cuda:1")]
    with pytest.raises(TilecValueError, match=r"argument 'Y': the kernel was loaded on cuda:0, got an array on cuda:1"):
        exe(Bound([None, None], infos, {m: 4}, []))
    assert not launched
    infos[1].device = "cuda:0"
    exe(Bound([None, None], infos, {m: 4}, []))
    assert len(launched) == 1


def test_a_written_tensor_sharing_bytes_with_another_argument_goes_to_the_checked_path(fakes):
    """C over A's or B's bytes (the checked path names the two arguments); tensors that only touch, or that the
    kernel only reads, launch. With a runtime size, the bytes come from the shape."""
    _, calls = fakes
    launch = _launcher(gemm_kernel(64, 96, 64, 32, 32, 32, "float16", "float32"))
    a, b = FakeTensor((64, 64), "f16", A), FakeTensor((64, 96), "f16", B)
    assert launch(a, b, FakeTensor((64, 96), "f32", A + 64 * 64 * 2 - 4)) == "checked"  # C's first bytes in A's last
    assert launch(a, b, FakeTensor((64, 96), "f32", B - 64 * 96 * 4 + 2)) == "checked"  # C's last bytes in B's first
    assert not calls
    assert launch(a, FakeTensor((64, 96), "f16", A), FakeTensor((64, 96), "f32", C)) is None  # A, B only read
    assert launch(a, b, FakeTensor((64, 96), "f32", A + 64 * 64 * 2)) is None  # C right after A
    assert launch(a, b, FakeTensor((64, 96), "f32", B - 64 * 96 * 4)) is None  # C right before B
    assert len(calls) == 3
    launch = _launcher(_rows_on_y())
    assert launch(FakeTensor((300, 64), "f32", A), FakeTensor((300, 64), "f32", A + 299 * 256)) == "checked"
    assert launch(FakeTensor((300, 64), "f32", A), FakeTensor((300, 64), "f32", A + 300 * 256)) is None
    assert "if p0 < p1 + sh1[0] * sh1[1] * 4 and p1 < p0 + sh0[0] * sh0[1] * 4:" in launch._source
