"""Compile time of the pipeline up to lowering (parse + FTG + layout inference + lower + barriers) and up to
emitting CUDA, for the GEMM and flash-attention examples on ``cuda:sm_80`` (no GPU needed).

*cold* is the first build in a fresh Python process, after ``import tilec`` and the one-time imports of sympy
and networkx (which the first build would otherwise pay; both are timed separately); *warm* the best of
further builds of the same kernel in that process (memoized layout constructors are then hot). Target: under
0.5 s each.

Run: python benchmarks/compile_time.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = "cuda:sm_80"

CASES = {
    "gemm 4096^3, 128x128x32 tiles": ("01_gemm", "matmul", (4096, 4096, 4096), {}),
    "gemm 512^3, 64x64x32 tiles": ("01_gemm", "matmul", (512, 512, 512), {"block_M": 64, "block_N": 64}),
    "flash attention 1x8x1024x64": ("03_flash_attention", "flash_attention", (1, 8, 1024, 64, False), {}),
    "flash attention 1x8x1024x128 causal": ("03_flash_attention", "flash_attention", (1, 8, 1024, 128, True), {}),
}


def _factory(example: str, name: str):  # noqa: ANN202
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"example_{example}", ROOT / "examples" / f"{example}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def _build(factory, args: tuple, kwargs: dict) -> tuple[float, float]:  # noqa: ANN001
    """Seconds to parse the kernel and run the pipeline through ``barriers`` (the thread IR), and through ``emit``."""
    from tilec.passes.pipeline import run_pipeline
    from tilec.target import parse_target

    target = parse_target(TARGET)
    t0 = time.perf_counter()
    func = factory.fn(*args, **kwargs)  # the @T.prim_func, parsed (the JIT's memo is bypassed)
    parse = time.perf_counter() - t0
    state = run_pipeline(func, target, until="emit")
    stages = dict(state.timings)
    return parse + sum(t for n, t in stages.items() if n != "emit"), parse + sum(stages.values())


def child(case: str, repeat: int) -> None:
    t0 = time.perf_counter()
    import tilec  # noqa: F401

    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    import networkx  # noqa: F401  - imported by the first FTG build
    import sympy  # noqa: F401  - imported by the first layout inference

    t_libs = time.perf_counter() - t0
    example, name, args, kwargs = CASES[case]
    factory = _factory(example, name)
    cold = _build(factory, args, kwargs)
    warm = [_build(factory, args, kwargs) for _ in range(max(repeat, 1))]
    best = tuple(min(w[i] for w in warm) for i in range(2))
    print(json.dumps({"import": t_import, "libs": t_libs, "cold": cold, "warm": best}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="warm builds per case (best is shown)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.child:
        child(opts.child, opts.repeat)
        return
    print(f"compile time on {TARGET} (seconds; parse included; target < 0.5)")
    heads = ("import", "sympy+nx", "cold lower", "cold emit", "warm lower", "warm emit")
    print(f"{'kernel':<38}" + "".join(f" {h:>10}" for h in heads))
    worst = 0.0
    # As for an installed package, modules load from cached bytecode (a first child writes it; with
    # PYTHONDONTWRITEBYTECODE set, ~0.1 s of every cold build would go to compiling tilec's sources).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    first = next(iter(CASES))
    subprocess.run([sys.executable, __file__, "--child", first, "--repeat", "0"], capture_output=True, check=True,
                   cwd=ROOT, env=env)
    for case in CASES:
        out = subprocess.run([sys.executable, __file__, "--child", case, "--repeat", str(opts.repeat)],
                             capture_output=True, text=True, check=True, cwd=ROOT, env=env).stdout
        r = json.loads(out.strip().splitlines()[-1])
        cold, warm = r["cold"], r["warm"]
        worst = max(worst, cold[1])
        print(f"{case:<38}" + "".join(f" {x:>10.3f}" for x in (r["import"], r["libs"], *cold, *warm)))
    print(f"slowest cold build up to emit: {worst:.3f} s ({'within' if worst < 0.5 else 'over'} the 0.5 s target)")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
