"""The host's TMA tensor maps (tilec/runtime/tensor_map.py) with cuTensorMapEncodeTiled replaced by a stand-in:
the arguments it gets, and the maps refused, naming the parameter, before the driver sees them."""

from __future__ import annotations

import types

import pytest

from tilec import dtypes as dt
from tilec.errors import TilecValueError
from tilec.lower.tir import TensorMap


@pytest.fixture
def encoded(monkeypatch):
    calls: list[tuple] = []

    def encode(addr, dtype, rank, ptr, dims, strides, box, ones, interleave, swizzle, l2, oob):
        calls.append((addr, dtype, rank, ptr, list(dims[:rank]), list(strides[:max(1, rank - 1)]), list(box[:rank]),
                      list(ones[:rank]), interleave, swizzle, l2, oob))
        return 0

    monkeypatch.setattr("tilec.backends.cuda.driver.lib", lambda: types.SimpleNamespace(cuTensorMapEncodeTiled=encode))
    return calls


def test_a_valid_map_reaches_the_driver_as_cuda_h_spells_it(encoded):
    from tilec.runtime.tensor_map import encode

    t = TensorMap("A_tmap0", 0, dt.float16, (1024, 512), (2048,), (64, 128), 128)
    _, addr = encode(t, 4096)
    (c,) = encoded
    assert addr % 64 == 0 and c[0] == addr
    assert c[1:] == (6, 2, 4096, [1024, 512], [2048], [64, 128], [1, 1], 0, 3, 2, 0)
    encode(TensorMap("F_tmap0", 0, dt.float8_e4m3, (256, 64), (256,), (128, 64), 128), 4096)
    assert encoded[-1][1] == 0 and encoded[-1][9] == 3  # fp8: UINT8 bits, 128-byte boxes in a 128-byte swizzle


@pytest.mark.parametrize("dtype, dims, strides, box, sw, what", [
    (dt.float64, (64, 64), (512,), (16, 64), 128, "tensorDataType: float64"),
    (dt.float16, (1001, 64), (2002,), (64, 64), 128, r"globalStrides\[0\] = 2002 bytes"),
    (dt.float16, (1024, 64), (2048,), (128, 64), 128, r"boxDim\[0\] = 128 \(256 bytes\)"),
    (dt.float16, (1024, 512), (2048,), (4, 64), 0, r"boxDim\[0\] = 4 \(8 bytes\)"),
    (dt.float16, (1024, 512), (2048,), (64, 512), 128, r"boxDim\[1\] = 512"),
    (dt.float16, (8,) * 6, (16,) * 5, (8,) * 6, 0, "tensorRank 6"),
])
def test_an_invalid_map_is_refused_naming_the_parameter(encoded, dtype, dims, strides, box, sw, what):
    from tilec.runtime.tensor_map import encode

    with pytest.raises(TilecValueError, match=what):
        encode(TensorMap("A_tmap0", 0, dtype, dims, strides, box, sw), 4096)
    assert not encoded
