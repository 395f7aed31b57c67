"""Damaged files in $TILEC_CACHE_DIR crash instead of being cache misses: a CUDA kernel's front-key metadata that is
not JSON, not UTF-8 or lacks fields (JSONDecodeError / UnicodeDecodeError / KeyError / TypeError from
kernel.compile()), and an autotuning result that is not UTF-8 or is `null` (UnicodeDecodeError / AttributeError)."""
import os
import pathlib
import tempfile

d = tempfile.mkdtemp()
os.environ["TILEC_CACHE_DIR"] = d
import tilec  # noqa: E402
import tilec.language as T  # noqa: E402
from tilec.backends.cuda import runtime  # noqa: E402
from tilec.errors import TilecError  # noqa: E402

runtime._nvrtc_version = lambda: "13.0"  # no CuPy needed to compute the key
bugs = []


@T.prim_func
def add(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(8):
            B[i] = A[i] + 1


k = tilec.compile(add, target="cuda:sm_80", out_idx=[1])
key = runtime.front_key(k.prim_func, k.target, k.pass_configs)
for content in [b"{trunc", b"\xff\xfe\x00garbage", b'{"foo": 1}', b"[]"]:
    pathlib.Path(d, key + ".json").write_bytes(content)
    try:
        print(content, "->", runtime.load_cached(k.prim_func, k.target, k.pass_configs))
    except Exception as e:  # noqa: BLE001
        bugs.append(f"front entry {content!r}: {type(e).__name__}: {e}")


@tilec.jit(out_idx=[-1], target="cpu")
def axpy(N, block_N=64):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), threads=32) as bx:
            for i in T.Parallel(block_N):
                B[bx * block_N + i] = A[bx * block_N + i] * 2.0
    return main


def tuned():
    return tilec.autotune(configs=[{"block_N": 32}, {"block_N": 64}], timer=lambda run, c: (run(), c["block_N"])[1],
                          progress=False)(axpy)


tuned()(128)
f = next(pathlib.Path(d, "autotune").glob("*.json"))
for content in [b"\xff\xfe\x00garbage", b"null", b"[1]"]:
    f.write_bytes(content)
    try:
        t = tuned()
        t.get_kernel(128)
        print(content, "->", t.last.best)
    except TilecError as e:
        bugs.append(f"autotune entry {content!r}: {type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001
        bugs.append(f"autotune entry {content!r}: {type(e).__name__}: {e}")
print("BUG REPRODUCED:\n  " + "\n  ".join(bugs) if bugs else "no failure")
