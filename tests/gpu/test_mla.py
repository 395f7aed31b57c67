"""MLA decode (examples/07_mla_decode.py) on the GPU against a float64 reference: the mma.sync path everywhere,
the wgmma path (two warpgroups splitting the columns) on Hopper."""

import numpy as np
import pytest

import tilec

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


_HOPPER_ONLY = pytest.mark.skipif(not _hopper(), reason="wgmma needs sm_90")


@pytest.mark.parametrize("path", ["mma", pytest.param("wgmma", marks=_HOPPER_ONLY),
                                  pytest.param("tma", marks=_HOPPER_ONLY), pytest.param("tma ws", marks=_HOPPER_ONLY)])
@pytest.mark.parametrize(("batch", "kv_heads", "seqlen", "stages"), [(4, 1, 1000, 1), (2, 2, 2048, 2)])
def test_mla_decode(examples, path, batch, kv_heads, seqlen, stages):
    mla = examples["07_mla_decode"]
    heads = 128
    k = tilec.JITKernel(mla.mla_decode.fn(batch, heads, kv_heads, seqlen, num_stages=stages), "cuda", [4],
                        pass_configs={"wgmma": path != "mma", "tma": path.startswith("tma"),
                                      "warp_specialize": path == "tma ws"})
    assert ("wgmma" in k.report()) == (path != "mma")
    fed = any("T.Pipelined" in line and "TMA" in line and "not a TMA pipeline" not in line
              for line in k.report().splitlines())
    assert fed == (path.startswith("tma") and stages > 1)  # the output's TMA store comes with "tma" either way
    assert ("warp-specialized" in k.report()) == (path == "tma ws" and stages > 1)
    rng = np.random.default_rng()
    q, q_pe = (rng.standard_normal((batch, heads, d)).astype(np.float16) for d in (512, 64))
    kv, k_pe = (rng.standard_normal((batch, seqlen, kv_heads, d)).astype(np.float16) for d in (512, 64))
    out = k(*(torch.from_numpy(x).cuda() for x in (q, q_pe, kv, k_pe))).cpu().numpy().astype(np.float64)
    ref = mla.reference(q, q_pe, kv, k_pe)
    assert np.isfinite(out).all()
    assert np.abs(out - ref).max() < 1e-2
