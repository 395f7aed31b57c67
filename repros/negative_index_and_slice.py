"""S[:-1] (Python: all but the last element) was accepted as a region of extent -1, and S[-1] (Python: the last
element) as the position before the buffer."""
import tilec.language as T
from tilec.errors import TilecError

try:
    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            S = T.alloc_shared((8,), "float32")
            T.fill(S[:-1], 0)

    print([ln.strip() for ln in str(main).splitlines() if "fill" in ln])
    print("BUG REPRODUCED")
except TilecError as e:
    print("refused:", str(e).splitlines()[0])
    print("no failure")
