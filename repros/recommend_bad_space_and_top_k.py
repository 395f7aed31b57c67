"""tilec.recommend(space={"block_N": 64}) raised a bare TypeError ('int' object is not iterable) from tilec's
knobs module; top_k=0 gave an empty recommendation whose .best said no configuration can run (five can), and
top_k=-1 silently dropped the last row."""
import tilec
import tilec.language as T


@tilec.jit(out_idx=[-1], target="cpu")
def axpy(N, block_N=64):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), threads=32) as bx:
            for i in T.Parallel(block_N):
                B[bx * block_N + i] = A[bx * block_N + i] * 2.0

    return main


bugs = 0
for kw in ({"space": {"block_N": 64}}, {"top_k": 0}, {"top_k": -1}):
    try:
        rec = tilec.recommend(axpy, 1000, **kw)
        print(kw, "->", len(rec), "rows of", len(rec.ranked))
        bugs += 1
    except tilec.TilecValueError as e:
        print(kw, "->", type(e).__name__, e)
    except Exception as e:  # noqa: BLE001
        print(kw, "->", type(e).__name__, e)
        bugs += 1
print("BUG REPRODUCED" if bugs else "no failure")
