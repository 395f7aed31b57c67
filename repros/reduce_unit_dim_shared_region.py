"""T.reduce_sum over a shared region with a unit dim (s[1, :, :] of a 3-D tile) on simt:sm_80: the lowering took
the result's coordinates in the wrong dims (out-of-bounds read for a fragment result, a race for a shared one)."""
import numpy as np

import tilec
import tilec.language as T

failed = False
for dst in ("fragment", "shared"):
    @T.prim_func
    def main(A: T.Tensor((2, 8, 16), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            s = T.alloc_shared((2, 8, 16), "float32")
            r = T.alloc_fragment((8,), "float32") if dst == "fragment" else T.alloc_shared((8,), "float32")
            T.copy(A, s)
            T.reduce_sum(s[1, :, :], r, dim=2)
            T.copy(r, B)

    a = np.random.default_rng(0).standard_normal((2, 8, 16)).astype(np.float32)
    b = np.full((8,), np.nan, np.float32)
    try:
        tilec.compile(main, target="simt:sm_80")(a, b)
        ok = np.allclose(b, a[1].astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    except Exception as e:  # noqa: BLE001
        print(dst, type(e).__name__, str(e).splitlines()[0])
        ok = False
    failed |= not ok
print("BUG REPRODUCED" if failed else "no failure")
