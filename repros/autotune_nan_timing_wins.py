"""A timer that returns NaN (or a negative or infinite time) for a candidate: that candidate was kept as the best,
since min() over times compares nothing with NaN, and cached on disk."""
import os
import tempfile

os.environ["TILEC_CACHE_DIR"] = tempfile.mkdtemp()
import tilec  # noqa: E402
import tilec.language as T  # noqa: E402


@tilec.jit(out_idx=[-1], target="cpu")
def axpy(N, block_N=64):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), threads=32) as bx:
            for i in T.Parallel(block_N):
                B[bx * block_N + i] = A[bx * block_N + i] * 2.0

    return main


ms = {32: float("nan"), 64: 5.0, 128: 3.0}
tuned = tilec.autotune(configs=[{"block_N": b} for b in ms], progress=False, timer=lambda run, cfg: ms[cfg["block_N"]])
tuned = tuned(axpy)
tuned(256)
print(tuned.last)
print("BUG REPRODUCED" if tuned.last.best != {"block_N": 128} else "no failure")
