"""T.* primitives swallowed unknown keywords (`**_`): a misspelled TileLang keyword was silently ignored.

`T.gemm(A_s, B_s, C_f, transpose_b=True)` computed A @ B instead of A @ B.T, `T.reduce_max(x, m, dims=0)` reduced
dim -1, `T.Pipelined(n, num_stage=3)` did not pipeline.
"""
import tilec.language as T
from tilec.errors import TilecError


def build(kw):
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float16"), C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32) as bx:
            A_s = T.alloc_shared((16, 16), "float16")
            C_f = T.alloc_fragment((16, 16), "float32")
            T.copy(A, A_s)
            T.clear(C_f)
            T.gemm(A_s, A_s, C_f, **kw)
            T.copy(C_f, C)

    return main


bugs = 0
try:
    f = build({"transpose_b": True})
    print("T.gemm(..., transpose_b=True) accepted; IR:", [ln.strip() for ln in str(f).splitlines() if "gemm" in ln])
    bugs += 1
except TilecError as e:
    print("refused:", str(e).splitlines()[0])
print("BUG REPRODUCED" if bugs else "no failure")
