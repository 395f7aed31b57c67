"""A kernel whose grid's y dimension follows a runtime size: with M = 70000 rows the grid is (1, 70000, 1), over
CUDA's gridDim.y limit of 65535. Neither launch path checks: cuLaunchKernel is called with it (a GPU answers
CUDA_ERROR_INVALID_VALUE, naming no parameter). Driver replaced by a stand-in that records the launch."""
import sys
import types

import tilec.language as T
from tilec.backends.cuda import driver
from tilec.backends.cuda.runtime import _grid_fn, grid_code
from tilec.errors import TilecError

M = T.dynamic("M")


@T.prim_func
def rows(X: T.Tensor((M, 64), "float32"), Y: T.Tensor((M, 64), "float32")):
    with T.Kernel(1, M, threads=64) as (bx, by):
        for j in T.Parallel(64):
            Y[by, j] = X[by, j] * 2.0


class FakeTensor:
    def __init__(self, shape, dtype, ptr=4096):
        self.shape, self.dtype, self._ptr = shape, dtype, ptr

    def get_device(self):
        return 0

    def is_contiguous(self):
        return True

    def data_ptr(self):
        return self._ptr


torch = types.ModuleType("torch")
torch.Tensor, torch.float32 = FakeTensor, "f32"
torch.empty = lambda shape, dtype, device: FakeTensor(shape, dtype, 8192)
torch.device = lambda *a: a
torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda dev: 77)
sys.modules["torch"] = torch
calls = []
driver.launcher = lambda: (lambda *a: calls.append(a) or 0, False)

from tilec.runtime.launcher import build_fast_launcher  # noqa: E402

compiled = types.SimpleNamespace(function=5, threads=64, smem=0, align=(), tensor_maps=(),
                                 grid=_grid_fn(grid_code(rows.launch.grid, rows.dyn_vars)))
launch = build_fast_launcher(rows, compiled, 0, lambda *a: "checked")

try:
    r = launch(FakeTensor((70000, 64), "f32"), FakeTensor((70000, 64), "f32", 8192))
except TilecError as e:
    r = f"TilecError: {e}"
if calls:
    print("BUG REPRODUCED: cuLaunchKernel called with grid", calls[-1][1:4])
else:
    print("no failure:", r)
