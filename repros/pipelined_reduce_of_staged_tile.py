"""T.reduce_sum of a tile that a T.Pipelined copy fills (num_stages=2) on simt:sm_80: the pipelining pass gives
the tile a version dim in front, but the reduction's dim kept counting from the old first dim (it reduced over
the version, reading into the stage a cp.async was still filling)."""
import numpy as np

import tilec
import tilec.language as T

N = 200


@T.prim_func
def main(A: T.Tensor((N, 16), "float16"), B: T.Tensor((16,), "float32")):
    with T.Kernel(1, threads=64) as bx:
        s = T.alloc_shared((8, 16), "float16")
        acc = T.alloc_fragment((16,), "float32")
        r = T.alloc_fragment((16,), "float32")
        T.clear(acc)
        for k in T.Pipelined(0, 21, num_stages=2):
            T.copy(A[k * 8, 0], s)
            T.reduce_sum(s, r, dim=0)
            for j in T.Parallel(16):
                acc[j] += r[j]
        T.copy(acc, B)


a = np.random.default_rng(0).standard_normal((N, 16)).astype(np.float16)
b = np.full((16,), np.nan, np.float32)
try:
    tilec.compile(main, target="simt:sm_80")(a, b)
    ok = np.allclose(b, a[:168].astype(np.float64).sum(0), rtol=1e-4, atol=1e-3)
except Exception as e:  # noqa: BLE001
    print(type(e).__name__, (str(e).splitlines() or [""])[0])
    ok = False
print("no failure" if ok else "BUG REPRODUCED")
