"""tilec.compile(func, [1]) (TileLang's argument order: out_idx second) or target=42: an AttributeError
('list' object has no attribute 'strip') from parse_target instead of an error naming the target argument."""
import tilec
import tilec.language as T
from tilec.errors import TilecError


@T.prim_func
def add(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(8):
            B[i] = A[i] + 1


bugs = []
for bad in ([1], 42):
    try:
        tilec.compile(add, bad)
    except TilecError as e:
        print("ok:", e)
    except Exception as e:  # noqa: BLE001
        bugs.append(f"target={bad!r}: {type(e).__name__}: {e}")
print("BUG REPRODUCED: " + "; ".join(bugs) if bugs else "no failure")
