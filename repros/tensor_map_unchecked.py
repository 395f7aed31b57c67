"""tensor_map.encode hands cuTensorMapEncodeTiled maps that break its rules (a 2002-byte stride, a 256-byte inner
box in a 128-byte swizzle) and raises a bare KeyError for 64-bit elements. Driver replaced by a stand-in."""
from tilec import dtypes as dt
from tilec.backends.cuda import driver
from tilec.errors import TilecError
from tilec.lower.tir import TensorMap
from tilec.runtime import tensor_map

seen = []
driver.lib = lambda: type("L", (), {"cuTensorMapEncodeTiled": staticmethod(lambda *a: seen.append(a) or 0)})()
bugs = []
for t in [TensorMap("A", 0, dt.float16, (1001, 64), (2002,), (64, 64), 128),
          TensorMap("B", 0, dt.float16, (1024, 64), (2048,), (128, 64), 128),
          TensorMap("C", 0, dt.float64, (64, 64), (512,), (16, 64), 128)]:
    n = len(seen)
    try:
        tensor_map.encode(t, 4096)
    except TilecError as e:
        print("refused:", e)
        continue
    except Exception as e:  # noqa: BLE001
        bugs.append(f"{t.name}: {type(e).__name__} {e}")
        continue
    if len(seen) > n:
        bugs.append(f"{t.name}: invalid map passed to the driver")
print("BUG REPRODUCED: " + "; ".join(bugs) if bugs else "no failure")
