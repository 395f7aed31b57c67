"""tilec.autotune(key=[...]) with a name that is not a parameter (a typo) was accepted: the key read None for it, so
calls with different problem sizes shared one tuning result -- N=256 tuned, N=100000 reused its config untimed."""
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


timed = []
try:
    tuned = tilec.autotune(configs=[{"block_N": 32}, {"block_N": 64}], key=["n"], progress=False,
                           timer=lambda run, cfg: timed.append(cfg) or cfg["block_N"])(axpy)
    tuned(256)
    tuned(1000)
except tilec.TilecError as e:
    print(f"{type(e).__name__}: {e}")
    print("no failure")
else:
    print(f"timed {len(timed)} candidates for two problem sizes; keys: {list(tuned.results)}")
    print("BUG REPRODUCED")
