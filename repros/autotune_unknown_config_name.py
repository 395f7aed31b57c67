"""autotune configs naming a parameter the function does not have (a typo) were each tried and failed to build;
with some configs spelled right, the misspelled ones were silently dropped (only a stderr line said why) and tuning
went on over fewer candidates."""
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


try:
    tuned = tilec.autotune(configs=[{"block_N": 32}, {"blockN": 128}], progress=False,
                           timer=lambda run, cfg: 1.0)(axpy)
    tuned(256)
except tilec.TilecValueError as e:
    print(f"{type(e).__name__}: {e}")
    print("no failure")
else:
    print(tuned.last)
    print("BUG REPRODUCED")
