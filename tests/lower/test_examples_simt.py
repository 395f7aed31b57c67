"""Every example, lowered for sm_80 and run by the thread interpreter (``simt:sm_80``), against float64 numpy at
small shapes, ragged ones included (sizes that are not multiples of the tiles; flash attention with a sequence
that is not a multiple of the block, causal or not). The interpreter also checks every shared-memory access for
races and bounds while it runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, assert_close, load_example, poisoned, randn

import tilec

from .helpers import simt

GEMM = [  # (M, N, K, tile kwargs)
    (64, 64, 64, {"block_M": 64, "block_N": 64}),
    (100, 72, 40, {"block_M": 64, "block_N": 64}),  # M, N, K all ragged (K not even a multiple of 16)
    (33, 70, 96, {"block_M": 32, "block_N": 64, "block_K": 32, "threads": 64}),
    (48, 40, 50, {"block_M": 32, "block_N": 32, "block_K": 16, "num_stages": 1, "threads": 128}),
]


@pytest.mark.parametrize(("M", "N", "K", "tiles"), GEMM, ids=lambda x: str(x) if not isinstance(x, dict) else "")
def test_gemm(rng, M, N, K, tiles):
    kernel = simt(load_example("01_gemm").matmul(M, N, K, **tiles), out_idx=[-1])
    a, b = randn(rng, (M, K), "float16"), randn(rng, (K, N), "float16")
    c = kernel(a, b)
    assert c.shape == (M, N) and c.dtype == np.float16
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert_close(c, ref, "float16")


@pytest.mark.parametrize(("M", "N", "tiles"), [(16, 256, {}), (37, 300, {}), (5, 130, {"block_M": 4, "block_N": 64})])
def test_softmax(rng, M, N, tiles):
    kernel = simt(load_example("02_softmax").softmax(M, N, **tiles), out_idx=[-1])
    x = (randn(rng, (M, N), "float16") * 3).astype(np.float16)
    y = kernel(x)
    xd = x.astype(np.float64)
    ref = np.exp(xd - xd.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    assert_close(y, ref, "float16", scale=1.0)


@pytest.mark.parametrize(("M", "N", "block_M"), [(8, 128, 4), (37, 256, 4), (3, 96, 2)])
def test_norms(rng, M, N, block_M):
    norms = load_example("05_norms")
    x = (randn(rng, (M, N), "float16") * 2 + 0.5).astype(np.float16)
    w, b = randn(rng, (N,), "float16"), randn(rng, (N,), "float16")
    y = simt(norms.rms_norm(M, N, block_M=block_M), out_idx=[-1])(x, w)
    assert_close(y, norms.reference_rms(x, w), "float16")
    y = simt(norms.layer_norm(M, N, block_M=block_M), out_idx=[-1])(x, w, b)
    assert_close(y, norms.reference_layer(x, w, b), "float16")


MLA = [  # (batch, heads, kv_heads, seqlen, tile kwargs)
    (1, 64, 1, 100, {}),  # seqlen not a multiple of block_N: masked columns
    (2, 128, 2, 64, {"num_stages": 2, "block_N": 32}),  # two KV heads of 64 query heads each, a pipelined KV loop
    # (32 keys a tile: two stages of 64 need 225 KB of shared memory, sm_80's blocks have 163 KB)
    (1, 32, 1, 80, {"block_H": 32, "block_N": 32, "threads": 128}),
]


@pytest.mark.parametrize(("b", "h", "kvh", "s", "tiles"), MLA, ids=lambda x: str(x) if not isinstance(x, dict) else "")
def test_mla_decode(rng, b, h, kvh, s, tiles):
    mla = load_example("07_mla_decode")
    kernel = simt(mla.mla_decode(b, h, kvh, s, **tiles), out_idx=[4])
    q, q_pe = (randn(rng, (b, h, d), "float16") for d in (512, 64))
    kv, k_pe = (randn(rng, (b, s, kvh, d), "float16") for d in (512, 64))
    assert_close(kernel(q, q_pe, kv, k_pe), mla.reference(q, q_pe, kv, k_pe), "float16",
                 scale=float(np.abs(kv.astype(np.float64)).max()))
    assert kernel.report().count("mma (FullRow)") == 3


SCALAR_MLA = [  # (target, heads, seqlen, mla_decode kwargs): QK^T or PV (or both) on the scalar FMA path
    *((t, 16, 17, {"block_N": 32, "dv": 64, "dpe": 16, "dtype": "float32"})  # every gemm scalar (fp32 operands)
      for t in ("simt:sm_80", "simt:sm_90a", "simt:gfx90a")),
    *((t, 16, 37, {"block_N": 16, "dv": 64, "dpe": 16})  # S scalar (no FullRow partition of 4 warps), O on mma/MFMA
      for t in ("simt:sm_80", "simt:sm_90a", "simt:gfx90a")),
    *((t, 16, 40, {"block_N": 32, "dv": 100, "dpe": 3})  # K=100, N=100: scalar; O does not spread over 128 threads
      for t in ("simt:sm_80", "simt:sm_90a", "simt:gfx90a")),
    ("simt:sm_80", 16, 20, {"block_N": 8, "dv": 64, "dpe": 16}),  # S 16x8 and PV's K=8: scalar
    ("simt:gfx90a", 16, 23, {"block_N": 17, "dv": 32, "dpe": 16}),  # a 17-key tile, masked
    ("simt:gfx90a", 16, 20, {"block_N": 32, "dv": 64, "dpe": 16, "threads": 32}),  # half a wavefront: no MFMA
]


@pytest.mark.parametrize(("target", "h", "s", "tiles"), SCALAR_MLA,
                         ids=lambda x: str(x) if not isinstance(x, dict) else "-".join(f"{v}" for v in x.values()))
def test_mla_decode_with_a_scalar_gemm(rng, target, h, s, tiles):
    """A gemm on the scalar FMA path whose accumulator's rows are tied to another gemm's by the softmax (S's row
    maxima rescale O): compiling failed with a LayoutConflictError ('m' ... not held where the loop at line 67 runs,
    S spread over the threads); S is now laid out around O's rows (or O around S's)."""
    mla = load_example("07_mla_decode")
    dtype, dv, dpe = tiles.get("dtype", "float16"), tiles["dv"], tiles["dpe"]
    kernel = tilec.JITKernel(mla.mla_decode(1, h, 1, s, block_H=16, **{"threads": 128, **tiles}).prim_func, target, [],
                             pass_configs={"wgmma": True} if target.endswith("90a") else None)
    assert "scalar FMA path" in kernel.report()
    q, q_pe = (randn(rng, (1, h, d), dtype) for d in (dv, dpe))
    kv, k_pe = (randn(rng, (1, s, 1, d), dtype) for d in (dv, dpe))
    o = poisoned((1, h, dv), dtype)
    kernel(q, q_pe, kv, k_pe, o)
    assert_close(o, mla.reference(q, q_pe, kv, k_pe), dtype, scale=float(np.abs(kv.astype(np.float64)).max()))


FLASH = [  # (batch, heads, seq, dim, causal, tile kwargs)
    (1, 1, 64, 32, False, {}),
    (1, 2, 100, 32, False, {}),  # seq not a multiple of the 64-row blocks
    (1, 2, 100, 32, True, {}),
    (2, 1, 70, 64, True, {"block_M": 32, "block_N": 32, "threads": 64}),
    (1, 1, 45, 64, False, {"block_M": 32, "block_N": 32, "threads": 64}),
]


@pytest.mark.parametrize(("b", "h", "n", "d", "causal", "tiles"), FLASH,
                         ids=lambda x: str(x) if not isinstance(x, dict) else "")
def test_flash_attention(rng, b, h, n, d, causal, tiles):
    fa = load_example("03_flash_attention")
    kernel = simt(fa.flash_attention(b, h, n, d, causal, **tiles), out_idx=[3])
    q, k, v = (randn(rng, (b, h, n, d), "float16") for _ in range(3))
    o = kernel(q, k, v)
    assert_close(o, fa.reference(q, k, v, causal), "float16", scale=float(np.abs(v.astype(np.float64)).max()))


def test_every_example_is_covered():
    # 01-03, 05 and 07 are kernels (run above and below); 04 ranks their configurations and runs as a script
    # below; 06 (fp8) runs in test_hopper_simt.py on the sm_89/sm_90a paths and on sm_80's fallback
    assert {p.stem for p in EXAMPLES.glob("*.py")} == {"01_gemm", "02_softmax", "03_flash_attention", "04_recommend",
                                                       "05_norms", "06_fp8_gemm", "07_mla_decode"}


def test_recommend_example_runs_on_the_simt_target():
    env = dict(os.environ, TILEC_TARGET="simt:sm_80")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, str(EXAMPLES / "04_recommend.py")], capture_output=True, text=True,
                         env=env, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "block_M" in res.stdout


@pytest.mark.parametrize("args", [["01_gemm.py"], ["02_softmax.py"], ["03_flash_attention.py"],
                                  ["03_flash_attention.py", "1", "1", "70", "32", "causal"]], ids=" ".join)
def test_example_script_on_the_simt_target(args):
    """The scripts as a user runs them, with ``TILEC_TARGET=simt:sm_80`` (their default shapes are ragged)."""
    env = dict(os.environ, TILEC_TARGET="simt:sm_80")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, str(EXAMPLES / args[0]), *args[1:]], capture_output=True, text=True,
                         env=env, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    m = re.search(r" on simt:sm_80: (relative|max abs) error (\S+)$", res.stdout, re.M)
    assert m, res.stdout
    assert float(m.group(2)) < 1e-2
