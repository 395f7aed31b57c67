"""float32 -> float8 conversion of a value beyond the fp8 range: CUDA (the generated static_cast, __NV_SATFINITE)
gives +-448 (e4m3) / +-57344 (e5m2), infinities included; the interpreters gave NaN (e4m3) or inf (e5m2)."""
import numpy as np

import tilec
import tilec.language as T

bug = False
for dtype, top in (("float8_e4m3", 448.0), ("float8_e5m2", 57344.0)):
    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), dtype)):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(4):
                B[i] = A[i]

    a = np.array([1e6, -1e6, np.inf, 1.0], np.float32)
    for target in ("cpu", "simt:sm_80"):
        b = np.zeros(4, T.dtype.np.fget(getattr(T, dtype)))
        tilec.compile(main, target=target)(a, b)
        got = b.astype(np.float64)
        print(dtype, target, got)
        bug |= not np.array_equal(got, [top, -top, top, 1.0])
print("BUG REPRODUCED" if bug else "no failure")
