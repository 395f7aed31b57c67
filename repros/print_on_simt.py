"""T.print on the simt targets: the thread interpreter formats the lowered printf's C format with Python's `%`, which
has no `%lld` (ValueError: unsupported format character 'l') for every buffer print and every integer scalar print;
a msg holding `%` breaks the format on every target but cpu, and one holding `"` or a backslash breaks the CUDA
string literal."""
import contextlib
import io

import numpy as np

import tilec
import tilec.language as T

bugs = []


@T.prim_func
def k(A: T.Tensor((4,), "float32"), I: T.Tensor((4,), "int32")):
    with T.Kernel(2, threads=32) as bx:
        s = T.alloc_shared((4,), "float32")
        T.copy(A, s)
        T.print(s, msg='tile "s" 100%')
        T.print(I[bx], msg="i=")
        T.print(A[bx], msg="a\\b")


a = np.arange(4, dtype=np.float32)
i = np.arange(4, dtype=np.int32) * 10
for t in ("cpu", "simt:sm_80", "simt:gfx90a"):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            tilec.compile(k, target=t)(a, i)
    except Exception as e:  # noqa: BLE001
        bugs.append(f"{t}: {type(e).__name__}: {e}")
    else:
        text = out.getvalue()
        if 'tile "s" 100%' not in text or "i= 10" not in text or "a\\b 1" not in text:
            bugs.append(f"{t}: printed {text!r}")
src = tilec.compile(k, target="cuda:sm_80").get_kernel_source()
lines = [x.strip() for x in src.splitlines() if "printf(" in x]
if not any(r'"tile \"s\" 100%%' in x for x in lines) or not any(r'"a\\b %g' in x for x in lines):
    bugs.append(f"cuda printf lines: {lines}")
print("BUG REPRODUCED:\n  " + "\n  ".join(bugs) if bugs else "no failure")
