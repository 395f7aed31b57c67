"""T.cumsum(s[1, :, :], d, dim=2) from a 3-D shared tile into a 2-D shared tile on simt:sm_80 / simt:gfx90a: the
destination index took the source's coordinates dim by dim, so every line landed in row 0 of d."""
import numpy as np

import tilec
import tilec.language as T


@T.prim_func
def main(A: T.Tensor((2, 8, 16), "float32"), B: T.Tensor((8, 16), "float32")):
    with T.Kernel(1, threads=64) as bx:
        s = T.alloc_shared((2, 8, 16), "float32")
        d = T.alloc_shared((8, 16), "float32")
        T.copy(A, s)
        T.cumsum(s[1, :, :], d, dim=2)
        T.copy(d, B)


a = np.random.default_rng(0).standard_normal((2, 8, 16)).astype(np.float32)
b = np.full((8, 16), np.nan, np.float32)
tilec.compile(main, target="simt:sm_80")(a, b)
ok = np.allclose(b, np.cumsum(a[1].astype(np.float64), 1), rtol=1e-5, atol=1e-5)
print("no failure" if ok else "BUG REPRODUCED")
