"""Emulation of AMD MFMA for the thread interpreter: ``v_mfma_f32_16x16x16f16`` and ``v_mfma_f32_16x16x16bf16_1k``
(CDNA2 gfx90a; CDNA3 gfx94x has the same operand layouts) over 64-lane wavefronts.

The lane layouts are written here from AMD's CDNA ISA description of the 16x16x16 instructions (one block, four
16-bit values of A and B and four fp32 values of C/D per lane), independently of :mod:`tilec.layout`, so the
interpreter checks the lowering instead of repeating it:

* A (16 x 16, M x K): lane ``l`` item ``v`` is ``A[l % 16][4 * (l // 16) + v]``;
* B (16 x 16, K x N): lane ``l`` item ``v`` is ``B[4 * (l // 16) + v][l % 16]``;
* C, D (16 x 16, M x N, fp32): lane ``l`` item ``v`` is ``D[4 * (l // 16) + v][l % 16]``.

Products are exact in fp32 (16-bit inputs) and summed in fp32, ``D = A @ B + C``.
"""

from __future__ import annotations

import numpy as np

from tilec.dtypes import typed
from tilec.interp.thread import ThreadInterpreter, full_warps, stmt_rule, uniform_offset
from tilec.lower.tir import Mfma

LANES = 64


def mfma_tables() -> tuple[np.ndarray, ...]:
    """(lane, item) of every element of the A (M x K), B (K x N) and D (M x N) 16x16 matrices."""
    a_lane, a_item = np.zeros((16, 16), int), np.zeros((16, 16), int)
    b_lane, b_item = np.zeros((16, 16), int), np.zeros((16, 16), int)
    d_lane, d_item = np.zeros((16, 16), int), np.zeros((16, 16), int)
    for lane in range(LANES):
        col, block = lane % 16, lane // 16  # a lane's column (A: row) and its group of four along K (D: M)
        for v in range(4):
            a_lane[col, 4 * block + v], a_item[col, 4 * block + v] = lane, v
            b_lane[4 * block + v, col], b_item[4 * block + v, col] = lane, v
            d_lane[4 * block + v, col], d_item[4 * block + v, col] = lane, v
    return a_lane, a_item, b_lane, b_item, d_lane, d_item


_TABLES = mfma_tables()


def mfma_16x16x16(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """One MFMA per wavefront: ``a``, ``b`` (waves, 64, 4) 16-bit values, ``c`` (waves, 64, 4) fp32 accumulators
    in lane order; returns D in the same shape."""
    a_lane, a_item, b_lane, b_item, d_lane, d_item = _TABLES
    A = a.astype(np.float32)[:, a_lane, a_item]  # (waves, 16, 16)
    B = b.astype(np.float32)[:, b_lane, b_item]
    D = c.astype(np.float32)[:, d_lane, d_item] + A @ B
    out = np.empty_like(c, dtype=np.float32)
    out[:, d_lane, d_item] = D
    return out


@stmt_rule(Mfma)
def _mfma(it: ThreadInterpreter, s: Mfma, env: dict, mask: np.ndarray) -> None:
    if it.W != LANES:
        it.fail(f"MFMA needs {LANES}-lane wavefronts; this kernel has {it.W}-lane warps")
    waves = full_warps(it, mask, "MFMA", LANES)
    ao, bo, co = (uniform_offset(it, x, env, mask, "MFMA") for x in (s.a_off, s.b_off, s.c_off))
    for mem, off in ((s.a, ao), (s.b, bo), (s.c, co)):
        if off < 0 or off + 4 > it.regs[mem].shape[1]:
            it.fail(f"MFMA operand {mem.name}[{off}:{off + 4}] outside its {it.regs[mem].shape[1]} registers")
    ra = it.regs[s.a][:, ao : ao + 4].reshape(-1, LANES, 4)
    rb = it.regs[s.b][:, bo : bo + 4].reshape(-1, LANES, 4)
    rc = it.regs[s.c][:, co : co + 4].reshape(-1, LANES, 4)
    out = mfma_16x16x16(ra, rb, rc).reshape(-1, 4)
    sel = np.repeat(waves, LANES)
    it.regs[s.c][sel, co : co + 4] = typed(out[sel], s.c.dtype)
