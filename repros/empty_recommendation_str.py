"""print(tilec.recommend(...)) raised TypeError ('int' object is not iterable) when no configuration can run --
exactly when the table of rejected candidates and their reasons is what the user needs."""
import tilec
import tilec.language as T


@tilec.jit(out_idx=[1], target="cpu")
def rows(block=128):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, 64), "float32"), Y: T.Tensor((M, 64), "float32")):
        with T.Kernel(T.ceildiv(M, block), threads=128) as bx:
            for i, j in T.Parallel(block, 64):
                Y[bx * block + i, j] = X[bx * block + i, j] * 3.0

    return main


rec = tilec.recommend(rows, space={"block": [32, 64]})  # no sizes= for M: every candidate is rejected
try:
    text = str(rec)
except TypeError as e:
    print(f"str(rec): {type(e).__name__}: {e}")
    print("BUG REPRODUCED")
else:
    print(text)
    print("no failure")
