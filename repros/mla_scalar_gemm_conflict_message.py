"""MLA decode at 16 heads x 16 keys a tile on 128 threads (simt:sm_80): S = Q K^T has no FullRow partition of four
warps and falls back to scalar code; the layout conflict that follows named only 'spread over the threads', not the
gemm or why it left the tensor cores."""
import sys

sys.path.insert(0, "tests")
import tilec  # noqa: E402
from conftest import load_example  # noqa: E402

mla = load_example("07_mla_decode")
try:
    tilec.JITKernel(mla.mla_decode(1, 16, 1, 37, block_H=16, block_N=16, threads=128).prim_func, "simt:sm_80",
                    [4]).report()
    print("no failure (compiled)")
except tilec.errors.TilecError as e:
    print("no failure" if "in scalar code (fallback: no FullRow partition" in str(e) else "BUG REPRODUCED", "\n", e)
