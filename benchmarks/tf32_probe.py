"""TF32 GEMM on the Hopper path beside cuBLAS, on raw float32 inputs and on inputs rounded to TF32 beforehand.

    python benchmarks/tf32_probe.py [--rounds 3] [--json PATH]   (run.py's options)

A question of the thirtieth session's perf notes: at the power cap cuBLAS's TF32 GEMM holds a higher clock than
tilec's wgmma kernel, which is ahead per cycle; cuBLAS rounds its operands to TF32 (its error is the rounded
operands'), so its shared-memory tiles hold words whose low 13 bits are zero, where tilec's wgmma reads raw float32
words. If fewer toggling bits cost less power, both run faster on pre-rounded inputs and tilec gains more. Beside
the suite's 128x256x32 kernel, three variants: 64-deep K tiles in two stages (half the trips), clusters of two
sharing B by multicast, and no wgmma overlap in four stages. Rows as run.py's (``gemm tf32`` / ``gemm tf32 rounded
inputs``), 4096³ and 8192³, C = A @ B^T.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "examples")]

import run  # noqa: E402

CONFIGS = [dict(block_M=128, block_N=256, block_K=32, num_stages=3, threads=256, wgmma=True, tma=True, ws=True,
                persistent=True, panel=16),
           dict(block_M=128, block_N=256, block_K=64, num_stages=2, threads=256, wgmma=True, tma=True, ws=True,
                persistent=True, panel=16),
           dict(block_M=128, block_N=256, block_K=32, num_stages=3, threads=256, wgmma=True, tma=True, ws=True,
                persistent=True, cluster=2),
           dict(block_M=128, block_N=256, block_K=32, num_stages=4, threads=256, wgmma=True, tma=True, ws=True,
                persistent=True, panel=16, overlap=False)]


def case_tf32_probe(rows: list, quick: bool, peers: dict) -> None:
    import torch

    def rounded(x: Any) -> Any:  # to nearest, ties away from zero, as cvt.rna.tf32.f32
        return ((x.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)

    for M in (4096,) if quick else (4096, 8192):
        for pre_rounded in (False, True):
            def make(M: int = M, pre_rounded: bool = pre_rounded) -> tuple:
                a, b = torch.randn(M, M, device="cuda"), torch.randn(M, M, device="cuda")
                return (rounded(a), rounded(b)) if pre_rounded else (a, b)

            sets = run.input_sets(make)
            a, b = sets[0]
            impls: dict[str, Any] = {"torch tf32": run.torch_tf32}
            tilec_impls, times = run.tilec_configs(CONFIGS, lambda cfg, passes, n=M: run.tf32_gemm(
                n, n, n, cfg, passes))
            impls.update(tilec_impls)
            run._measure(rows, "gemm tf32" + (" rounded inputs" if pre_rounded else ""), f"{M}x{M}x{M}", impls,
                         sets, a.double() @ b.double().T, 2.0 * M ** 3, 0, quick, times)


if __name__ == "__main__":
    run.CASES["tf32_probe"] = case_tf32_probe
    run.main(["--only", "tf32_probe", *sys.argv[1:]])
