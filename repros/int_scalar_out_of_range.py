"""An int32 / uint8 scalar parameter given a value outside its type: the call ran with the value wrapped
(2**40 -> 0, 300 -> 44, -1 -> 255) instead of saying that the value does not fit."""
import numpy as np

import tilec
import tilec.language as T


@T.prim_func
def main(A: T.Tensor((4,), "float32"), n: T.int32, m: T.uint8, B: T.Tensor((4,), "float32")):
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(4):
            B[i] = A[i] * n + m


k = tilec.compile(main, target="cpu", out_idx=[-1])
bug = False
for n, m in [(2**40, 1), (3, 300), (3, -1)]:
    try:
        out = k(np.ones(4, np.float32), n, m)
        print(f"n={n} m={m}: ran, got {out[0]} (wanted {n + m} or an error)")
        bug = True
    except ValueError as e:
        print(f"n={n} m={m}: {e}")
print("BUG REPRODUCED" if bug else "no failure")
