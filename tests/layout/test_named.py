"""Memory layouts and XOR swizzles, checked by enumeration against independent formulas."""

from __future__ import annotations

import numpy as np
import pytest

from tilec.layout import col_major, padded, row_major, strided, swizzle

from .helpers import check_to_c


def test_row_and_col_major() -> None:
    R = row_major(3, 4, 5)
    C = col_major(3, 4, 5)
    idx = np.indices((3, 4, 5))
    np.testing.assert_array_equal(R.eval_table(), idx[0] * 20 + idx[1] * 5 + idx[2])
    np.testing.assert_array_equal(C.eval_table(), idx[0] + idx[1] * 3 + idx[2] * 12)
    assert R.is_bijective() and C.is_bijective()
    assert row_major((3, 4, 5)) is R  # tuple form, cached
    check_to_c(C)


def test_padded_and_strided() -> None:
    P = padded((4, 8), 2)
    assert P.out_shape == (40,) and P(3, 7) == 37 and not P.is_bijective()
    assert padded((4, 8), 0).equals(row_major(4, 8))
    S = strided((4, 8), (1, 4))
    assert S.equals(col_major(4, 8)) and S.out_shape == (32,)
    B = strided((2, 3), (0, 1))
    assert B.out_shape == (3,) and not B.is_bijective()
    with pytest.raises(ValueError, match="strides must have 2 entries"):
        strided((4, 8), (1,))
    with pytest.raises(ValueError, match="pad must be an int >= 0; got -1"):
        padded((4, 8), -1)


_PHASE = {128: lambda r: r % 8, 64: lambda r: (r // 2) % 4, 32: lambda r: (r // 4) % 2}


def reference_swizzle(rows: int, cols: int, bits: int, sbytes: int) -> np.ndarray:
    """Per-mode description: panels of ``sbytes``-byte rows; the 16-byte chunk index of a row is
    XORed with the row phase of the mode (rows % 8 == 0 or a single panel)."""
    w = sbytes * 8 // bits
    out = np.empty((rows, cols), dtype=np.int64)
    for r in range(rows):
        for c in range(cols):
            panel, cc = divmod(c, w)
            chunk, within = divmod(cc * bits, 128)
            new_bit = (chunk ^ _PHASE[sbytes](r)) * 128 + within
            out[r, c] = panel * rows * w + r * w + new_bit // bits
    return out


def hardware_swizzle(rows: int, cols: int, bits: int, sbytes: int) -> np.ndarray:
    """Address-bit formula on the panel-major byte address (buffer 1024-byte aligned)."""
    w = sbytes * 8 // bits
    r, c = np.indices((rows, cols))
    lin_bits = ((c // w) * rows * w + r * w + c % w) * bits
    byte, sub = lin_bits // 8, lin_bits % 8
    byte = byte ^ (((byte >> 7) & (sbytes // 16 - 1)) << 4)
    return (byte * 8 + sub) // bits


@pytest.mark.parametrize("sbytes", [32, 64, 128])
@pytest.mark.parametrize("bits", [4, 8, 16, 32, 64])
@pytest.mark.parametrize("panels", [1, 2])
def test_swizzle_tables(sbytes: int, bits: int, panels: int) -> None:
    rows, cols = 16, panels * sbytes * 8 // bits
    S = swizzle((rows, cols), bits, sbytes)
    assert S.is_bijective() and S.out_shape == (rows * cols,)
    np.testing.assert_array_equal(S.eval_table(), reference_swizzle(rows, cols, bits, sbytes))
    check_to_c(S)


@pytest.mark.parametrize(("rows", "sbytes"), [(3, 128), (5, 64), (12, 64), (6, 32)])
def test_swizzle_hardware_formula_odd_rows(rows: int, sbytes: int) -> None:
    cols = 2 * sbytes // 2
    S = swizzle((rows, cols), 16, sbytes)
    assert S.is_bijective()
    np.testing.assert_array_equal(S.eval_table(), hardware_swizzle(rows, cols, 16, sbytes))


def test_swizzle_128b_formula_and_bank_conflicts() -> None:
    S = swizzle((64, 64), 16, 128)
    assert str(S) == "Layout((64, 64): (i, j) -> i*64 + (j ^ ((i % 8)*8)))"
    table = S.eval_table()
    for chunk in range(8):
        for row0 in range(0, 64, 8):
            offsets = table[row0 : row0 + 8, chunk * 8]
            bank_groups = (offsets * 2 // 16) % 8  # 16-byte group of the 128-byte bank line
            assert len(set(bank_groups.tolist())) == 8


def test_swizzle_errors() -> None:
    with pytest.raises(ValueError, match=r"multiple of swizzle_bytes=128; got 96 bytes"):
        swizzle((8, 48), 16, 128)
    with pytest.raises(ValueError, match=r"swizzle_bytes must be one of \(32, 64, 128\); got 16"):
        swizzle((8, 64), 16, 16)
    with pytest.raises(ValueError, match=r"dtype_bits must be one of \(4, 8, 16, 32, 64\); got 12"):
        swizzle((8, 64), 12, 128)
    with pytest.raises(ValueError, match=r"shape must be 2-D"):
        swizzle((2, 8, 64), 16, 128)
