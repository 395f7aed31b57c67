"""What programmatic dependent launch (the ``pdl`` pass config) does for kernels launched back to back.

    python benchmarks/pdl_chain.py [--calls 400] [--rounds 5] [--json PATH]

Each kernel is built twice, with ``pdl`` on and off, and each build launched ``--calls`` times back to back on
rotating inputs (no L2 flush in between, unlike ``run.py``'s timings: a kernel's predecessor is the same kernel),
timed by CUDA events around the whole chain; the builds take turns over ``--rounds`` rounds and the median per
launch is printed with the ratio. Short kernels (a few µs), where a launch's latency is a visible share, first.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))


def chain_us(fn: Callable, sets: list, calls: int) -> float:
    """Microseconds per launch of ``fn`` called ``calls`` times back to back."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(calls):
        fn(*sets[i % len(sets)])
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / calls


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)

    import torch

    import tilec

    sm, norms, gemm = (__import__(n) for n in ("02_softmax", "05_norms", "01_gemm"))
    ws = {"wgmma": True, "tma": True, "warp_specialize": True, "persistent": True}
    cases = [  # (name, make(pdl) -> kernel, make the inputs)
        ("softmax fp16 1024x4096", lambda p: tilec.JITKernel(sm.softmax.fn(1024, 4096), "cuda", [-1],
                                                             pass_configs={"pdl": p}),
         lambda: (torch.randn(1024, 4096, device="cuda").half(),)),
        ("rms_norm fp16 4096x4096", lambda p: tilec.JITKernel(norms.rms_norm.fn(4096, 4096), "cuda", [-1],
                                                              pass_configs={"pdl": p}),
         lambda: (torch.randn(4096, 4096, device="cuda").half(), torch.randn(4096, device="cuda").half())),
        ("gemm fp16 1024³ persistent", lambda p: tilec.JITKernel(
            gemm.matmul.fn(1024, 1024, 1024, block_M=128, block_N=256, block_K=64, threads=256), "cuda", [2],
            pass_configs={**ws, "pdl": p}),
         lambda: (torch.randn(1024, 1024, device="cuda").half(), torch.randn(1024, 1024, device="cuda").half())),
        ("gemm fp16 4096³ persistent", lambda p: tilec.JITKernel(
            gemm.matmul.fn(4096, 4096, 4096, block_M=128, block_N=256, block_K=64, threads=256, panel=16), "cuda",
            [2], pass_configs={**ws, "pdl": p}),
         lambda: (torch.randn(4096, 4096, device="cuda").half(), torch.randn(4096, 4096, device="cuda").half())),
    ]
    out = []
    for name, make, inputs in cases:
        sets = [inputs() for _ in range(4)]
        kernels = {"pdl": make(True), "no pdl": make(False)}
        for k in kernels.values():
            k(*sets[0])
        times: dict[str, list[float]] = {k: [] for k in kernels}
        for r in range(args.rounds + 1):  # the first round warms up
            for label in (list(kernels) if r % 2 else list(kernels)[::-1]):
                t = chain_us(kernels[label], sets, args.calls)
                if r:
                    times[label].append(t)
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        print(f"{name:<28} pdl {med['pdl']:8.2f} us  no pdl {med['no pdl']:8.2f} us  "
              f"no pdl / pdl {med['no pdl'] / med['pdl']:.3f}", flush=True)
        out.append({"case": name, "us_per_launch": med, "rounds": times})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
