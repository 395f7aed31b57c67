"""Instruction selection for ``T.gemm`` (part of layout inference, :mod:`.layout_inference`): the tensor-core
instruction and the warp partition a gemm runs with (:class:`GemmPlan`): wgmma where the pass configs and the gemm
allow it, else ``mma.sync`` (TF32 or fp8 variants where the operands ask for them) or MFMA on AMD, else the scalar FMA
path with the reasons, which the report shows."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tilec import dtypes as dt
from tilec.errors import where
from tilec.ir.stmt import Gemm
from tilec.layout import (
    Fragment,
    make_mfma_a_fragment,
    make_mfma_b_fragment,
    make_mfma_c_fragment,
    make_mma_a_fragment,
    make_mma_b_fragment,
    make_mma_c_fragment,
)
from tilec.target import Target

if TYPE_CHECKING:
    from tilec.passes.layout_inference import Inference


@dataclass(frozen=True)
class TensorCore:
    """A tensor-core instruction family as layout inference sees it: its lanes per warp, its accumulator atom
    (rows x columns one warp's instruction covers) and the block-level fragment constructors of C, A and B
    (``(rows, cols, warp_m, warp_n) -> Fragment``)."""

    instr: str
    name: str
    unit: str  # what its warps are called in messages
    lanes: int
    atom: tuple[int, int]
    c: Callable[..., Fragment]
    a: Callable[..., Fragment] | None  # None: operands from shared memory only
    b: Callable[..., Fragment] | None
    dtypes: tuple[dt.DType, ...] = (dt.float16, dt.bfloat16)  # operand dtypes (fp8 on mma: fp8_reasons)
    k: int = 0  # K of one instruction; 0: 16 for 16-bit operands, 32 for 8-bit ones


TENSOR_CORES = {
    "mma": TensorCore("mma", "mma.m16n8k16", "warps", 32, (16, 8), make_mma_c_fragment, make_mma_a_fragment,
                      make_mma_b_fragment),
    # float32 operands rounded to TF32 (T.gemm's allow_tf32): mma.sync.m16n8k8 with m16n8k16's accumulator layout;
    # operands from shared memory by 32- and 64-bit loads (tilec.lower.gemm)
    "mma_tf32": TensorCore("mma_tf32", "mma.m16n8k8.tf32", "warps", 32, (16, 8), make_mma_c_fragment, None, None,
                           (dt.float32,), 8),
    # MFMA accumulators are the operand-swapped product's (lane l holds C[l % 16, 4 (l // 16) + v], see
    # tilec.lower.mfma): the A operand's layout, so a gemm result (flash attention's P) feeds the next from registers
    "mfma": TensorCore("mfma", "v_mfma_f32_16x16x16", "waves", 64, (16, 16),
                       functools.partial(make_mfma_c_fragment, swapped=True), make_mfma_a_fragment,
                       make_mfma_b_fragment),
}
INSTR_OF = {"cuda": "mma", "hip": "mfma"}  # a backend's tensor-core instruction
TF32_OF = {"cuda": ("mma_tf32", 80)}  # a backend's TF32 tensor-core instruction (allow_tf32) and its least sm
FP8 = (dt.float8_e4m3, dt.float8_e5m2)
# the plan's note on a gemm with allow_tf32 that the TF32 tensor cores cannot run (the reasons before it say why)
TF32_FALLBACK = "; allow_tf32: TF32 tensor cores cannot run it, so it stays exact float32"


@dataclass
class GemmPlan:
    """How one ``T.gemm`` runs: a ``warp_m x warp_n`` grid of warps (64-lane wavefronts on AMD), and the
    instruction (``mma``, ``mfma`` or ``simt``)."""

    warp_m: int
    warp_n: int
    instr: str
    why: str = ""


def partition(inf: Inference, g: Gemm, m: int, n: int, k: int) -> GemmPlan:
    """How gemm ``g`` (``m x n x k``) runs among the ops of ``inf``: wgmma where ``inf.wgmma`` and the gemm allow it
    (and no gemm whose rows its rows must follow stays off it), else the target's tensor-core instruction over a warp
    grid its policy picks, else the scalar FMA path, the plan's ``why`` listing the reasons."""
    not_wgmma = ""
    if inf.wgmma:
        from tilec.lower.wgmma import wgmma_plan, wgmma_refusal

        plan = wgmma_plan(g, m, n, k, inf.T)
        beside = register_a_fallback(inf, g, m)
        if plan is not None and beside is None:
            return plan
        not_wgmma = f"; not wgmma: {wgmma_refusal(g, m, n, k, inf.T) if plan is None else beside}"
    tf32, tf32_note = tf32_instr(g, inf.target) if g.allow_tf32 else (None, "")
    if tf32 is not None and inf.target.sm >= 90 and not inf.wgmma:
        tf32_note = "; TF32 on mma.sync, not wgmma"
    tc = TENSOR_CORES.get(tf32 or INSTR_OF.get(inf.target.backend, ""))
    lanes = tc.lanes if tc is not None else 32
    warps = inf.T // lanes
    reasons = []
    if tc is None or (inf.target.sm and inf.target.sm < 80):
        reasons.append(f"target {inf.target}")
    if g.A.dtype in FP8 and g.B.dtype in FP8 and tc is not None and tc.instr == "mma":
        reasons += fp8_reasons(g, inf.target)
    elif g.A.dtype not in (tc.dtypes if tc is not None else (dt.float16, dt.bfloat16)) or \
            g.B.dtype is not g.A.dtype:
        reasons.append(f"operand dtype {g.A.dtype}")
    if tc is not None and tc.a is None and "fragment" in (g.A.buffer.scope, g.B.buffer.scope):
        reasons.append(f"{tc.name} takes its operands from shared memory only")
    if g.C.dtype is not dt.float32:
        reasons.append(f"accumulator dtype {g.C.dtype}")
    if (g.A.buffer.scope == "fragment" and g.transpose_A) or (g.B.buffer.scope == "fragment" and g.transpose_B):
        reasons.append("a transposed register operand")
    if not g.C.is_full() or g.C.buffer.scope != "fragment":
        reasons.append("C is not a whole fragment")
    reasons += [f"register operand {r} is part of a fragment" for r in (g.A, g.B)
                if r.buffer.scope == "fragment" and not r.is_full()]  # the atoms' registers are the whole one's
    k_atom = (tc.k if tc is not None else 0) or (256 // g.A.dtype.bits if g.A.dtype.bits in (8, 16) else 16)
    if inf.T % lanes or k % k_atom:
        reasons.append(f"K={k} is not a multiple of {k_atom}" if k % k_atom else f"{inf.T} threads")
    grid = None if reasons or tc is None else warp_grid(g.policy, warps, m, n, tc.atom)
    if grid is None:
        if not reasons and tc is not None:
            reasons.append(f"no {g.policy} partition of {warps} {tc.unit} tiles {m}x{n} in "
                           f"{tc.atom[0]}x{tc.atom[1]} atoms")
        if tf32 is not None:
            tf32_note = TF32_FALLBACK
        return GemmPlan(1, 1, "simt", "(fallback: " + ", ".join(reasons) + tf32_note + not_wgmma + ")")
    return GemmPlan(grid[0], grid[1], tc.instr, f"({g.policy}{tf32_note}{not_wgmma})")


def register_a_fallback(inf: Inference, g: Gemm, m: int) -> str | None:
    """Why gemm ``g`` (``m`` rows) stays off wgmma for another's sake, or None: a gemm of as many rows whose A is
    in registers, or whose accumulator is tied to ``g``'s by fragments the kernel's loops, reductions and copies
    share (MLA decode's rescale of O by the softmax of S), cannot use wgmma (its N split between warpgroups, say),
    and values computed row by row from one accumulator are used with the other (flash attention's softmax
    between QK^T and PV), so their rows must lie alike over the threads: both on mma.sync."""
    from tilec.lower.wgmma import wgmma_plan, wgmma_refusal

    tied = inf.ties
    for op in inf.ops:
        if op is g or not isinstance(op, Gemm):
            continue
        if op.A.buffer.scope != "fragment" and tied(op.C.buffer) != tied(g.C.buffer):
            continue
        om, on, ok = (int(x) for x in op.mnk)
        if om == m and wgmma_plan(op, om, on, ok, inf.T) is None:
            return (f"the gemm at {where(op.loc)} ({om} rows too) reads A from registers off wgmma "
                    f"({wgmma_refusal(op, om, on, ok, inf.T)}), and their accumulators' rows must lie alike")
    return None


def tf32_instr(g: Gemm, target: Target) -> tuple[str | None, str]:
    """The TF32 tensor-core instruction of a gemm with ``allow_tf32`` (None where there is none), and the report's
    note on it: why the flag changes nothing."""
    if not (g.A.dtype is g.B.dtype is dt.float32):
        return None, f"; allow_tf32 has no effect: operands are {g.A.dtype}, not float32"
    instr, least = TF32_OF.get(target.backend, (None, 0))
    if instr is None or (target.sm and target.sm < least):
        return None, f"; allow_tf32: target {target} has no TF32 tensor cores, so it stays exact float32"
    return instr, ""


def fp8_reasons(g: Gemm, target: Target) -> list[str]:
    """Why ``mma.sync.m16n8k32`` cannot run an fp8 gemm (none when it can): it needs sm_89+ and K-major operands
    in shared memory (ldmatrix transposes only 16-bit elements)."""
    out = []
    if target.sm < 89:
        out.append(f"fp8 tensor cores need sm_89 or newer, target {target}")
    if g.A.buffer.scope != "shared" or g.B.buffer.scope != "shared":
        out.append("an fp8 operand in registers")
    if g.transpose_A or not g.transpose_B:
        out.append("fp8 operands must be K-major (A stored M x K, B stored N x K with transpose_B=True)")
    return out


def warp_grid(policy: str, warps: int, m: int, n: int, atom: tuple[int, int] = (16, 8)) -> tuple[int, int] | None:
    """(warp_m, warp_n) with warp_m * warp_n == warps tiling m x n in atoms (16x8 for mma, 16x16 for MFMA),
    following the policy."""
    options = [(wm, warps // wm) for wm in range(1, warps + 1) if warps % wm == 0]
    ok = [(wm, wn) for wm, wn in options if m % (atom[0] * wm) == 0 and n % (atom[1] * wn) == 0]
    if not ok:
        return None
    if policy == "FullRow":
        return max(ok, key=lambda g: g[0])
    if policy == "FullCol":
        return max(ok, key=lambda g: g[1])
    return min(ok, key=lambda g: (abs((m / g[0]) / (n / g[1]) - 1.0), -g[0]))
