"""Every example, lowered for HIP (gfx90a: MFMA over 64-lane wavefronts) and run by the thread interpreter, against
float64 numpy at small shapes, ragged ones included. The interpreter emulates MFMA with the CDNA ISA's lane
layouts (written independently of tilec.layout) and checks every shared-memory access for races and bounds; the
gemms must run on MFMA, not on the scalar fallback."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, assert_close, load_example, randn

from .helpers import assert_mfma, hip_simt

GEMM = [  # (M, N, K, tile kwargs)
    (64, 64, 64, {"block_M": 64, "block_N": 64}),
    (100, 72, 40, {"block_M": 64, "block_N": 64}),  # M, N, K all ragged (K not even a multiple of 16)
    (33, 70, 96, {"block_M": 32, "block_N": 64, "block_K": 32, "threads": 64}),  # one wave
    (48, 40, 50, {"block_M": 32, "block_N": 32, "block_K": 16, "num_stages": 1, "threads": 128}),
    (130, 200, 64, {"block_M": 128, "block_N": 128, "threads": 256, "dtype": "bfloat16"}),  # 4 waves, bf16
]


@pytest.mark.parametrize(("M", "N", "K", "tiles"), GEMM, ids=lambda x: str(x) if not isinstance(x, dict) else "")
def test_gemm(rng, M, N, K, tiles):
    kernel = hip_simt(load_example("01_gemm").matmul(M, N, K, **tiles), out_idx=[-1])
    dtype = tiles.get("dtype", "float16")
    a, b = randn(rng, (M, K), dtype), randn(rng, (K, N), dtype)
    c = kernel(a, b)
    assert c.shape == (M, N) and c.dtype == a.dtype
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), dtype)
    assert_mfma(kernel)


def test_gemm_on_gfx942():
    """CDNA3 lowers the same way (same MFMA layouts and wavefront size)."""
    kernel = hip_simt(load_example("01_gemm").matmul(64, 64, 32, block_M=64, block_N=64), [-1], "simt:gfx942")
    rng = np.random.default_rng(0)
    a, b = randn(rng, (64, 32), "float16"), randn(rng, (32, 64), "float16")
    assert_close(kernel(a, b), a.astype(np.float64) @ b.astype(np.float64), "float16")
    assert_mfma(kernel)


@pytest.mark.parametrize(("M", "N", "tiles"), [(16, 256, {}), (37, 300, {}), (5, 130, {"block_M": 4, "block_N": 64})])
def test_softmax(rng, M, N, tiles):
    kernel = hip_simt(load_example("02_softmax").softmax(M, N, **tiles), out_idx=[-1])
    x = (randn(rng, (M, N), "float16") * 3).astype(np.float16)
    y = kernel(x)
    xd = x.astype(np.float64)
    ref = np.exp(xd - xd.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    assert_close(y, ref, "float16", scale=1.0)


FLASH = [  # (batch, heads, seq, dim, causal, tile kwargs)
    (1, 1, 64, 32, False, {}),
    (1, 2, 100, 32, False, {}),  # seq not a multiple of the 64-row blocks
    (1, 2, 100, 32, True, {}),
    (2, 1, 70, 64, True, {"block_M": 32, "block_N": 32, "threads": 64}),
    (1, 1, 45, 64, False, {"block_M": 32, "block_N": 32, "threads": 64, "num_stages": 2}),  # register prefetch
]


@pytest.mark.parametrize(("b", "h", "n", "d", "causal", "tiles"), FLASH,
                         ids=lambda x: str(x) if not isinstance(x, dict) else "")
def test_flash_attention(rng, b, h, n, d, causal, tiles):
    fa = load_example("03_flash_attention")
    kernel = hip_simt(fa.flash_attention(b, h, n, d, causal, **tiles), out_idx=[3])
    q, k, v = (randn(rng, (b, h, n, d), "float16") for _ in range(3))
    o = kernel(q, k, v)
    assert_close(o, fa.reference(q, k, v, causal), "float16", scale=float(np.abs(v.astype(np.float64)).max()))
    assert_mfma(kernel)
    # the scores' MFMA accumulator layout is the A operand layout: P feeds the second gemm from registers
    assert "layout conversion" not in kernel.report()


def test_every_example_is_covered():
    # the kernel examples (04_recommend only ranks their configurations; 06_fp8_gemm: CDNA2 has no fp8, and
    # test_lowering_hip.py checks that the backend refuses it)
    kernels = {p.stem for p in EXAMPLES.glob("*.py")} - {"04_recommend"}
    assert kernels == {"01_gemm", "02_softmax", "03_flash_attention", "05_norms", "06_fp8_gemm", "07_mla_decode"}


def test_mla_decode(rng):
    mla = load_example("07_mla_decode")
    b, h, kvh, s = 1, 128, 2, 70
    # 16 heads x 32 keys a tile: the default 64 x 64 needs 152 KB of shared memory, gfx90a's blocks have 64 KB
    kernel = hip_simt(mla.mla_decode(b, h, kvh, s, block_H=16, block_N=32, threads=128), out_idx=[4])
    q, q_pe = (randn(rng, (b, h, d), "float16") for d in (512, 64))
    kv, k_pe = (randn(rng, (b, s, kvh, d), "float16") for d in (512, 64))
    assert_close(kernel(q, q_pe, kv, k_pe), mla.reference(q, q_pe, kv, k_pe), "float16",
                 scale=float(np.abs(kv.astype(np.float64)).max()))
    assert_mfma(kernel)


def test_norms_on_hip_simt(rng):
    norms = load_example("05_norms")
    M, N = 10, 128
    x = (randn(rng, (M, N), "float16") * 2 + 0.5).astype(np.float16)
    w, b = randn(rng, (N,), "float16"), randn(rng, (N,), "float16")
    k = hip_simt(norms.layer_norm(M, N), out_idx=[-1])
    assert_close(k(x, w, b), norms.reference_layer(x, w, b), "float16")


def test_example_script_on_the_hip_simt_target():
    """A script as a user runs it, with ``TILEC_TARGET=simt:gfx90a`` (its default shapes are ragged)."""
    env = dict(os.environ, TILEC_TARGET="simt:gfx90a")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, str(EXAMPLES / "03_flash_attention.py"), "1", "1", "70", "32", "causal"],
                         capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    m = re.search(r" on simt:gfx90a: max abs error (\S+)$", res.stdout, re.M)
    assert m, res.stdout
    assert float(m.group(1)) < 1e-2
