"""Tile recommendation and autotuning for the GEMM and flash-attention examples.

Run: python examples/04_recommend.py [M N K]

Prints the cost model's ranking of configurations (no GPU needed: without one it models an H200). With a GPU,
it then times the top candidates (tilec.autotune) and runs the fastest; on the CPU it checks the top pick on a
small problem with the interpreter.
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np

import tilec


def _example(name: str):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


matmul = _example("01_gemm").matmul
flash_attention = _example("03_flash_attention").flash_attention

GEMM_SPACE = {"block_M": [64, 128, 256], "block_N": [64, 128, 256], "block_K": [32, 64], "num_stages": [2, 3, 4],
              "threads": [128, 256]}
ATTENTION_SPACE = {"block_M": [64, 128], "block_N": [32, 64, 128], "num_stages": [1, 2], "threads": [128, 256]}


USAGE = "usage: python examples/04_recommend.py [M N K]"


def _size(name: str, word: str) -> int:
    """A size argument: a positive integer, else the usage naming the argument."""
    if not (word.isdecimal() and int(word) > 0):
        sys.exit(f"{USAGE}: {name} must be a positive integer, got {word!r}")
    return int(word)


def main(argv: list[str]) -> None:
    if argv and not 3 <= len(argv) <= 3:
        sys.exit(f"{USAGE} (got {len(argv)} arguments)")
    sizes = [_size(name, x) for name, x in zip(["M", "N", "K"], argv)]
    M, N, K = sizes or (4096, 4096, 4096)
    rec = tilec.recommend(matmul, M, N, K, space=GEMM_SPACE, top_k=8)
    print(rec)
    print()
    print(tilec.recommend(flash_attention, 8, 16, 2048, 128, True, space=ATTENTION_SPACE, top_k=5))
    print()
    best = rec[0]
    if matmul.target is None and tilec.target.parse_target(None).kind == "cuda":
        import torch

        tuned = tilec.autotune(configs=rec)(matmul)
        kernel = tuned(M, N, K)
        print(tuned.last)
        a, b = (torch.randn(s, device="cuda").half() for s in ((M, K), (K, N)))
        c, ref = kernel(a, b).double(), a.double() @ b.double()
        err = ((c - ref).norm() / ref.norm()).item()
        print(f"gemm {M}x{N}x{K} with {tuned.last.best} on {kernel.target}: relative error {err:.2e}")
    else:  # no GPU: check the model's pick computes the right thing, on a small problem
        M, N, K = 256, 192, 128
        kernel = matmul(M, N, K, **best)
        rng = np.random.default_rng()
        a = rng.standard_normal((M, K)).astype(np.float16)
        b = rng.standard_normal((K, N)).astype(np.float16)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = np.linalg.norm(kernel(a, b).astype(np.float64) - ref) / np.linalg.norm(ref)
        print(f"gemm {M}x{N}x{K} with the top pick {best} on {kernel.target}: relative error {err:.2e}")
    print(kernel.ftg.summary())
    assert err < 2e-3, err


if __name__ == "__main__":
    main(sys.argv[1:])
