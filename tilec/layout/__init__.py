"""Layout algebra for tilec: where element ``(i, j, ...)`` of a tile lives.

Two kinds of maps, both on sympy integer expressions (simplified with index ranges, cached):

* :class:`Layout` -- multi-index -> linear offset (memory layouts, swizzles) or -> another
  multi-index (transposes, views); supports ``compose``, ``inverse``, ``reshape``, ``repeat``,
  ``equals``, ``eval_table``, ``to_c``.
* :class:`Fragment` -- multi-index (plus a replica number) -> ``(thread, local register)`` for
  register tiles spread over a block; supports ``repeat`` (over threads or registers),
  ``replicated``, ``inverse``, ``is_valid``, ``to_c``.

Named constructors cover row/column-major, padded and strided memory, the TMA/wgmma XOR
swizzles, the ``mma.sync.m16n8k16``, ``ldmatrix``, ``wgmma.m64nNk16`` and MFMA 16x16x16 register
layouts, and block-level GEMM fragments (``make_*_fragment``).  See :mod:`tilec.layout.named`
and :mod:`tilec.layout.partition` for the register-order conventions.

Expression helpers usable inside layout lambdas (on ints and on symbols): :func:`floordiv`,
:func:`floormod`, :func:`bitxor`, :func:`bitand`, :func:`shr` (Python's ``//`` and ``%`` also
work on the symbols).
"""

from .expr import BitAnd, BitXor, FloorDiv, FloorMod, Lut, ShiftRight, bitand, bitxor, floordiv, floormod, shr
from .fragment import Fragment
from .layout import Layout
from .named import (
    LdmatrixLayout,
    col_major,
    ldmatrix,
    mfma_16x16x16_a,
    mfma_16x16x16_b,
    mfma_16x16x16_c,
    mma_m16n8k16_a,
    mma_m16n8k16_b,
    mma_m16n8k16_c,
    padded,
    row_major,
    strided,
    swizzle,
    wgmma_m64nNk16_c,
)
from .partition import (
    make_mfma_a_fragment,
    make_mfma_b_fragment,
    make_mfma_c_fragment,
    make_mma_a_fragment,
    make_mma_b_fragment,
    make_mma_c_fragment,
    make_wgmma_a_fragment,
    make_wgmma_c_fragment,
)
from .simplify import simplify_expr

__all__ = [
    "BitAnd",
    "BitXor",
    "FloorDiv",
    "FloorMod",
    "Fragment",
    "Layout",
    "LdmatrixLayout",
    "Lut",
    "ShiftRight",
    "bitand",
    "bitxor",
    "col_major",
    "floordiv",
    "floormod",
    "ldmatrix",
    "make_mfma_a_fragment",
    "make_mfma_b_fragment",
    "make_mfma_c_fragment",
    "make_mma_a_fragment",
    "make_mma_b_fragment",
    "make_mma_c_fragment",
    "make_wgmma_a_fragment",
    "make_wgmma_c_fragment",
    "mfma_16x16x16_a",
    "mfma_16x16x16_b",
    "mfma_16x16x16_c",
    "mma_m16n8k16_a",
    "mma_m16n8k16_b",
    "mma_m16n8k16_c",
    "padded",
    "row_major",
    "shr",
    "simplify_expr",
    "strided",
    "swizzle",
    "wgmma_m64nNk16_c",
]
