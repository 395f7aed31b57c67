"""str(prim_func) printed `(A[i] < 3) == (i > 2)` as `A[i] < 3 == (i > 2)`, which Python (and tilec's parser) reads
as the chained comparison `A[i] < 3 and 3 == (i > 2)`."""
import tilec.language as T


@T.prim_func
def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "bool")):
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(8):
            B[i] = (A[i] < 3) == (i > 2)


line = [ln.strip() for ln in str(main).splitlines() if ln.strip().startswith("B[i]")][0]
print(line)
print("BUG REPRODUCED" if line == "B[i] = A[i] < 3 == (i > 2)" else "no failure")
