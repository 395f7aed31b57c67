"""tilec.autotune's output check (tilec.tune.bench.mismatch) passed any candidate whose output had an infinity
where the reference has one: inf - inf is NaN, and the NaN maximum hid every other difference (even +inf against
-inf passed)."""
import numpy as np

from tilec.tune.bench import mismatch

ref = np.array([np.inf, 1.0, 2.0], np.float16)
bad = np.array([np.inf, 100.0, -7.0], np.float16)
why = [mismatch(ref, bad, "float16"), mismatch(np.array([np.inf, 1.0]), np.array([-np.inf, 1.0]), "float32")]
print(why)
print("BUG REPRODUCED" if None in why else "no failure")
