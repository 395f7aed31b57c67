"""`A[i] or 7` in a kernel was `(A[i] != 0) or True`, folded to the constant 1 (Python: A[i] where non-zero, else 7);
`A[i] and 4` was a bool (Python: 4 or 0)."""
import tilec.language as T


@T.prim_func
def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32")):
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(8):
            B[i] = A[i] or 7


line = [ln.strip() for ln in str(main).splitlines() if ln.strip().startswith("B[i]")][0]
print(line)
print("BUG REPRODUCED" if line == "B[i] = 1" else "no failure")
