"""Emulation of ``mma.sync`` and ``ldmatrix`` for the thread interpreter (:mod:`.thread`), with the lane layouts of
the PTX ISA: ``m16n8k16`` (16-bit operands), ``m16n8k32`` (fp8) and ``m16n8k8`` (TF32), and ``ldmatrix`` of one, two
or four 8x8 matrices, transposed or not. The tables are written from the ISA text, independently of
:mod:`tilec.layout`, so the interpreter checks the lowering instead of repeating it."""

from __future__ import annotations

import numpy as np

from tilec.dtypes import float32, truncate_tf32, typed
from tilec.interp.thread import ThreadInterpreter, full_warps, stmt_rule, uniform_offset
from tilec.lower.tir import LdMatrix, Mma


def _mma_tables() -> tuple[np.ndarray, ...]:
    """(lane, register) of each element of the m16n8k16 A (16x16), B (16x8) and C (16x8) fragments."""
    a_lane, a_reg = np.zeros((16, 16), int), np.zeros((16, 16), int)
    b_lane, b_reg = np.zeros((16, 8), int), np.zeros((16, 8), int)
    c_lane, c_reg = np.zeros((16, 8), int), np.zeros((16, 8), int)
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        for i in range(8):  # a0..a7: rows g / g+8, columns 2t+(i&1) (+8 for a4..a7)
            row = g + (8 if i in (2, 3, 6, 7) else 0)
            col = 2 * t + (i & 1) + (8 if i >= 4 else 0)
            a_lane[row, col], a_reg[row, col] = lane, i
        for i in range(4):  # b0..b3: rows (k) 2t+(i&1) (+8 for b2, b3), column (n) g
            k = 2 * t + (i & 1) + (8 if i >= 2 else 0)
            b_lane[k, g], b_reg[k, g] = lane, i
        for i in range(4):  # c0..c3: rows g / g+8, columns 2t+(i&1)
            row, col = g + (8 if i >= 2 else 0), 2 * t + (i & 1)
            c_lane[row, col], c_reg[row, col] = lane, i
    return a_lane, a_reg, b_lane, b_reg, c_lane, c_reg


def _mma_k32_tables() -> tuple[np.ndarray, ...]:
    """(lane, register) of each element of the m16n8k32 fp8 A (16x32) and B (32x8) fragments (C as m16n8k16)."""
    a_lane, a_reg = np.zeros((16, 32), int), np.zeros((16, 32), int)
    b_lane, b_reg = np.zeros((32, 8), int), np.zeros((32, 8), int)
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        for i in range(16):  # a0..a15: rows g / g+8 (a4..a7, a12..a15), columns 4t+(i&3) (+16 for a8..a15)
            row = g + (8 if (i // 4) % 2 else 0)
            col = 4 * t + (i & 3) + (16 if i >= 8 else 0)
            a_lane[row, col], a_reg[row, col] = lane, i
        for i in range(8):  # b0..b7: rows (k) 4t+(i&3) (+16 for b4..b7), column (n) g
            k = 4 * t + (i & 3) + (16 if i >= 4 else 0)
            b_lane[k, g], b_reg[k, g] = lane, i
    return a_lane, a_reg, b_lane, b_reg, *_mma_tables()[4:]


def _mma_tf32_tables() -> tuple[np.ndarray, ...]:
    """(lane, register) of each element of the m16n8k8 TF32 A (16x8) and B (8x8) fragments (C as m16n8k16)."""
    a_lane, a_reg = np.zeros((16, 8), int), np.zeros((16, 8), int)
    b_lane, b_reg = np.zeros((8, 8), int), np.zeros((8, 8), int)
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        for i in range(4):  # a0..a3: rows g / g+8 (a1, a3), column t (+4 for a2, a3)
            a_lane[g + 8 * (i & 1), t + 4 * (i >> 1)], a_reg[g + 8 * (i & 1), t + 4 * (i >> 1)] = lane, i
        for i in range(2):  # b0, b1: row (k) t (+4 for b1), column (n) g
            b_lane[t + 4 * i, g], b_reg[t + 4 * i, g] = lane, i
    return a_lane, a_reg, b_lane, b_reg, *_mma_tables()[4:]


MMA_M16N8K16 = _mma_tables()  # also the lane layout of a wgmma A operand from registers, warp by warp
_MMA_K32 = _mma_k32_tables()
_MMA_TF32 = _mma_tf32_tables()
# operand dtype bits -> (registers of A, registers of B, the fragment tables) of one mma.sync: m16n8k16 (16-bit),
# m16n8k32 (fp8), m16n8k8 (TF32 in float32 registers)
_MMA_SHAPES = {16: (8, 4, MMA_M16N8K16), 8: (16, 8, _MMA_K32), 32: (4, 2, _MMA_TF32)}


@stmt_rule(Mma)
def _mma(it: ThreadInterpreter, s: Mma, env: dict, mask: np.ndarray) -> None:
    warps = full_warps(it, mask, "mma.sync")
    na, nb, (a_lane, a_reg, b_lane, b_reg, c_lane, c_reg) = _MMA_SHAPES[s.a.dtype.bits]
    ao, bo, co = (uniform_offset(it, x, env, mask, "mma.sync") for x in (s.a_off, s.b_off, s.c_off))
    ra = it.regs[s.a][:, ao : ao + na].astype(np.float32).reshape(-1, 32, na)
    rb = it.regs[s.b][:, bo : bo + nb].astype(np.float32).reshape(-1, 32, nb)
    if s.a.dtype is float32:  # .tf32 operands: the tensor cores read no more than TF32's bits
        ra, rb = truncate_tf32(ra), truncate_tf32(rb)
    rc = it.regs[s.c][:, co : co + 4].astype(np.float32).reshape(-1, 32, 4)
    A = ra[:, a_lane, a_reg]
    B = rb[:, b_lane, b_reg]
    C = rc[:, c_lane, c_reg] + A @ B
    out = rc.copy()
    out[:, c_lane, c_reg] = C
    flat = out.reshape(-1, 4)
    sel = np.repeat(warps, 32)
    it.regs[s.c][sel, co : co + 4] = typed(flat[sel], s.c.dtype)


@stmt_rule(LdMatrix)
def _ldmatrix(it: ThreadInterpreter, s: LdMatrix, env: dict, mask: np.ndarray) -> None:
    warps = full_warps(it, mask, "ldmatrix")
    addr = np.broadcast_to(np.asarray(it.eval(s.src_off, env, mask), np.int64), (it.T,)).reshape(-1, 32)
    sh = it.shared[s.src]
    per = 128 // s.src.dtype.bits  # elements of a 16-byte row: 8 (16-bit) or 16 (8-bit)
    e = per // 8  # elements of one 16-bit slot
    if s.trans and e != 1:
        it.fail("ldmatrix .trans of 8-bit elements (it transposes 16-bit ones)")
    rows_from = addr[:, : 8 * s.num]  # lane 8*m + r gives row r of matrix m
    offs = rows_from[:, :, None] + np.arange(per)[None, None, :]  # (warps, 8*num, per)
    sel_w = np.flatnonzero(warps)
    o = offs[sel_w]
    if o.size and (o.min() < 0 or o.max() >= sh.data.size):
        it.fail(f"ldmatrix reads {s.src.name} outside its {sh.data.size} elements")
    it.check_aligned(s.src, rows_from[sel_w].reshape(-1), per, "ldmatrix row")
    t = (sel_w[:, None, None] * 32 + np.arange(8 * s.num)[None, :, None]).repeat(per, axis=2)
    if o.size:
        it.track_read(sh, s.src, t.reshape(-1), o.reshape(-1, 1))
    mats = sh.data[o].reshape(len(sel_w), s.num, 8, 8, e)  # (warps, matrix, row, 16-bit column, element)
    lane = np.arange(32)
    r, c = lane // 4, 2 * (lane % 4)
    w = 2 * e  # elements of one lane's 32-bit register
    out = np.empty((len(sel_w), 32, w * s.num), dtype=sh.data.dtype)
    for m in range(s.num):
        pair = mats[:, m, c[:, None] + np.arange(2), r[:, None]] if s.trans else \
            mats[:, m, r[:, None], c[:, None] + np.arange(2)]  # (warps, lane, 2, e)
        out[:, :, w * m : w * (m + 1)] = pair.reshape(len(sel_w), 32, w)
    tid = (sel_w[:, None] * 32 + lane[None, :]).reshape(-1)
    do = uniform_offset(it, s.dst_off, env, mask, "ldmatrix")
    it.regs[s.dst][tid, do : do + w * s.num] = typed(out.reshape(-1, w * s.num), s.dst.dtype)
