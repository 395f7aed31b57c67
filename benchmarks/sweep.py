"""Time a handful of tilec configurations of the GEMM and flash-attention examples side by side with torch
(used to choose the defaults the benchmark suite reports; prints one line per configuration).

    python benchmarks/sweep.py [gemm] [attention]   (both when none is named; needs a GPU, torch and Triton)
"""

import argparse
import importlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

import tilec  # noqa: E402


def gemm(M=4096, N=4096, K=4096) -> None:
    import torch
    from triton.testing import do_bench

    g = importlib.import_module("01_gemm")
    a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
    ref = torch.matmul(a, b)
    t = do_bench(lambda: torch.matmul(a, b), warmup=25, rep=100, return_mode="median")
    print(f"gemm {M}x{N}x{K} torch {2 * M * N * K / t / 1e9:.1f} TFLOP/s")
    configs = [(128, 128, 32, 3, 128, False), (128, 128, 64, 3, 128, False), (128, 256, 32, 3, 256, False),
               (128, 256, 64, 3, 256, False), (256, 128, 64, 3, 256, False), (128, 128, 64, 3, 128, True),
               (128, 256, 64, 3, 256, True), (128, 256, 64, 4, 256, True)]
    for bm, bn, bk, st, th, wg in configs:
        try:
            k = tilec.JITKernel(g.matmul.fn(M, N, K, block_M=bm, block_N=bn, block_K=bk, num_stages=st, threads=th),
                                "cuda", [-1], pass_configs={"wgmma": wg, "tma": wg})
            c = k(a, b)
            err = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
            t = do_bench(lambda k=k: k(a, b), warmup=25, rep=100, return_mode="median")
            tag = f"{bm}x{bn}x{bk} s{st} t{th}{' wgmma' if wg else ''}"
            print(f"  tilec {tag}: {2 * M * N * K / t / 1e9:.1f} TFLOP/s regs {k.n_regs} spills {k.n_spills} "
                  f"err {err:.1e}")
        except Exception as e:  # noqa: BLE001
            print(f"  tilec {bm}x{bn}x{bk} s{st} t{th}: {type(e).__name__}: {str(e)[:200]}")


def attention(b=8, h=16, n=2048, d=128) -> None:
    import torch
    from triton.testing import do_bench

    fa = importlib.import_module("03_flash_attention")
    q, k_, v = (torch.randn(b, h, n, d, device="cuda").half() for _ in range(3))
    for causal in (False, True):
        flops = 4 * b * h * n * n * d * (0.5 if causal else 1)
        for bm, bn, st, th, wg in [(128, 64, 2, 256, False), (128, 128, 2, 256, False), (64, 64, 2, 128, False),
                                   (128, 64, 2, 256, True), (128, 128, 2, 256, True)]:
            try:
                kern = tilec.JITKernel(fa.flash_attention.fn(b, h, n, d, causal, block_M=bm, block_N=bn,
                                                             num_stages=st, threads=th), "cuda", [3],
                                       pass_configs={"wgmma": wg, "tma": wg})
                kern(q, k_, v)
                t = do_bench(lambda kern=kern: kern(q, k_, v), warmup=25, rep=100, return_mode="median")
                print(f"  attention causal={causal} {bm}x{bn} s{st} t{th}{' wgmma' if wg else ''}: "
                      f"{flops / t / 1e9:.1f} TFLOP/s "
                      f"regs {kern.n_regs} spills {kern.n_spills}")
            except Exception as e:  # noqa: BLE001
                print(f"  attention {bm}x{bn}: {type(e).__name__}: {str(e)[:200]}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", metavar="part", help="gemm and/or attention (default: both)")
    parts = ap.parse_args().parts or ["gemm", "attention"]
    if set(parts) - {"gemm", "attention"}:
        ap.error(f"unknown part(s) {', '.join(sorted(set(parts) - {'gemm', 'attention'}))}; the parts are gemm, "
                 "attention")
    t0 = time.time()
    for name in parts:
        {"gemm": gemm, "attention": attention}[name]()
    print(f"# {time.time() - t0:.0f} s")
