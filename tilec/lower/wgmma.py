"""``T.gemm`` on Hopper through ``wgmma.mma_async`` (sm_90a; experimental: the ``wgmma`` pass config).

A block of ``threads / 128`` warpgroups splits the tile along M (and along N where M has too few 64-row atoms);
each computes its ``tile_m x tile_n`` in atoms of ``m64nNk16`` (fp16, bf16), ``m64nNk32`` (fp8) or ``m64nNk8``
(TF32: the float32 operands of a gemm with ``allow_tf32``, which the tensor cores read as TF32 by ignoring their low
13 mantissa bits, where the mma.sync path rounds them to nearest); N up to 256.
A comes from shared memory (K-major: the tile is stored M x K) or, for 16-bit types, from a register fragment (each
warp's 16 rows of each 64-row step in the mma.sync A layout, when N is not split); B comes from shared
memory, K-major (stored N x K, ``transpose_B``) or, for 16-bit types, N-major (stored K x N). Operand tiles use
tilec's swizzled layouts (:func:`~tilec.lower.layouts.operand_layout`), which are the PTX ISA's canonical layouts:
rows of S bytes (S = 128, 64 or 32) with the XOR swizzle of bits [4, 4+log2(S/16)) by bits [7, ...), panels of S
bytes one after another when a row is longer. In those terms, the matrix descriptor of a tile has

* K-major: stride byte offset (between 8-row groups) ``8 S``; leading byte offset unused (one instruction's K,
  32 bytes, fits a row of the swizzle atom); the start address advances 32 bytes per k-step inside a panel;
* N-major: stride byte offset (between groups of 8 K-rows) ``8 S``; leading byte offset (between panels of
  ``S / 2`` columns) ``rows x S``; the start address advances ``16 S`` per k-step.

Shared memory written by ordinary stores or cp.async reaches wgmma through the async proxy: the copy and the
``cp.async.wait_group`` rules add ``fence.proxy.async.shared::cta`` in kernels that use wgmma. A gemm ends with
``wgmma.wait_group 0`` (its results and its shared-memory reads are done when the op is), unless pipelining let its
group run on into the next trip (``Gemm.in_flight``): then it ends with ``wait_group 1`` and the first later op
that touches its accumulator or operands starts with ``wait_group 0``. In a statement sequence the wait moves down
to the first statement that touches the gemm's registers, past register-only statements (and other gemms), with
the count of the groups committed since (:func:`tilec.passes.lower.settle_wgmma`).
"""

from __future__ import annotations

from tilec import dtypes as dt
from tilec.backends.cemit import CEmitter, asm_rule, emit_rule
from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Expr, binop, const
from tilec.ir.stmt import Gemm
from tilec.layout import make_wgmma_a_fragment, make_wgmma_c_fragment
from tilec.lower.context import Lowerer
from tilec.lower.gemm import gemm_instr
from tilec.lower.layouts import operand_layout, swizzle_bytes
from tilec.lower.tir import FenceProxyAsync, Mem, TStmt, Wgmma, WgmmaCommit, WgmmaFence, WgmmaOperand, WgmmaWait, Write
from tilec.lower.tir import seq as tseq

WARPGROUP = 128
_FP8 = (dt.float8_e4m3, dt.float8_e5m2)
_PTX_TYPE = {"float16": "f16", "bfloat16": "bf16", "float8_e4m3": "e4m3", "float8_e5m2": "e5m2", "float32": "tf32"}
_MODE = {128: 1, 64: 2, 32: 3}  # the descriptor's swizzle field


def _tile(buf: Buffer) -> tuple[int, int]:
    return int(buf.shape[-2]), int(buf.shape[-1])


def wgmma_plan(g: Gemm, m: int, n: int, k: int, threads: int):  # noqa: ANN201 - a GemmPlan or None
    """The wgmma plan of a gemm, or None when wgmma cannot run it (:func:`wgmma_refusal` says why): warpgroups
    along M where M allows (64 rows each at least), the rest along N (MLA decode's 64-row head blocks on two
    warpgroups)."""
    plan = _plan(g, m, n, k, threads)
    return None if isinstance(plan, str) else plan


def wgmma_refusal(g: Gemm, m: int, n: int, k: int, threads: int) -> str | None:
    """Why wgmma cannot run this gemm (for the report's note on the fallback), or None when it can."""
    plan = _plan(g, m, n, k, threads)
    return plan if isinstance(plan, str) else None


def _plan(g: Gemm, m: int, n: int, k: int, threads: int):  # noqa: ANN202 - a GemmPlan, or why not (str)
    from tilec.passes.gemm_select import GemmPlan

    groups = threads // WARPGROUP
    a, b = g.A.buffer, g.B.buffer
    fp8 = g.A.dtype in _FP8 and g.B.dtype in _FP8
    tf32 = g.allow_tf32 and g.A.dtype is g.B.dtype is dt.float32
    if threads % WARPGROUP:
        return f"{threads} threads are not whole warpgroups of {WARPGROUP}"
    if not (fp8 or tf32 or (g.A.dtype in (dt.float16, dt.bfloat16) and g.B.dtype is g.A.dtype)):
        return (f"operands {g.A.dtype} x {g.B.dtype} (wgmma takes two float16, two bfloat16, two float8 or, with "
                "allow_tf32, two float32)")
    if (fp8 or tf32) and (a.scope != "shared" or not g.transpose_B):
        return (f"{'fp8' if fp8 else 'TF32'} operands must both be K-major in shared memory (A stored M x K, "
                "B stored N x K: transpose_B)")
    k_atom = 256 // g.A.dtype.bits  # 32 bytes of a row: 16 (16-bit types), 32 (fp8) or 8 (TF32)
    if g.C.dtype is not dt.float32 or g.C.buffer.scope != "fragment" or not g.C.is_full():
        return "the accumulator must be a whole float32 fragment"
    if k % k_atom:
        return f"K={k} is not a multiple of {k_atom}"
    if g.transpose_A:
        return "transpose_A (wgmma reads A stored M x K)"
    if a.scope == "fragment" and not g.A.is_full():
        return f"A in registers is part of a fragment ({g.A})"
    gm = next((d for d in range(groups, 0, -1) if groups % d == 0 and m % (64 * d) == 0), 0)
    if not gm:
        return f"M={m} is not a multiple of 64 rows a warpgroup"
    gn = groups // gm
    tn = n // gn
    if n % gn:
        return f"N={n} does not split evenly over the {gn} warpgroups that M={m} leaves along N"
    if tn % 8 or (tn > 256 and tn % 256):
        return f"N={tn} a warpgroup is not a multiple of 8 (of 256 above 256)"
    if a.scope == "fragment" and gn > 1:  # each warp holds the 16 rows of A of its accumulator rows
        return "A in registers needs N not split between warpgroups"
    if a.scope == "shared" and swizzle_bytes(_tile(a), a.dtype) is None:
        return f"A's shared tile {_tile(a)} has no wgmma swizzle layout"
    if b.scope != "shared" or a.scope not in ("shared", "fragment"):
        return "B must be a shared tile and A a shared tile or a fragment"
    sw = swizzle_bytes(_tile(b), b.dtype)
    if sw is None:
        return f"B's shared tile {_tile(b)} has no wgmma swizzle layout"
    panel = sw * 8 // b.dtype.bits
    if not g.transpose_B and min(tn, 256) % panel:
        return (f"B stored K x N in tiles {min(tn, 256)} columns wide: not a multiple of its swizzle panel of "
                f"{panel} columns")
    split = f"{gm} warpgroup(s) along M" + (f" x {gn} along N" if gn > 1 else "")
    return GemmPlan(gm, gn, "wgmma", f"(m64n{min(tn, 256)}k{k_atom}, {split})")


def wgmma_layouts(g: Gemm, m: int, n: int, k: int, plan) -> list:  # noqa: ANN001
    """(buffer, layout, why) the plan fixes: the accumulator, a register A operand, the shared operand tiles."""
    out = [(g.C.buffer, make_wgmma_c_fragment(m, n, plan.warp_m, plan.warp_n),
            f"wgmma accumulator, {plan.warp_m}x{plan.warp_n} warpgroups")]
    if g.A.buffer.scope == "fragment":
        out.append((g.A.buffer, make_wgmma_a_fragment(m, k, plan.warp_m), "wgmma A operand in registers"))
    for buf in (g.A.buffer, g.B.buffer):
        if buf.scope == "shared":
            out.append((buf, operand_layout(tuple(int(d) for d in buf.shape), buf.dtype), "wgmma operand"))
    return out


def _operand(lw: Lowerer, r: Region, row0: Expr, col0: Expr, k_major: bool) -> WgmmaOperand:
    """The descriptor of the tile of region ``r`` whose first element is (``row0``, ``col0``) of the 2-D tile."""
    buf = r.buffer
    rows, cols = _tile(buf)
    eb = buf.dtype.bits // 8
    sw = swizzle_bytes((rows, cols), buf.dtype)
    assert sw is not None
    per_row = sw // eb  # elements in one S-byte row of a panel
    stage: Expr = r.starts[0] if buf.ndim == 3 else const(0)
    row0 = binop("+", r.starts[-2], row0)
    col0 = binop("+", r.starts[-1], col0)
    byte = binop("+", binop("*", stage, rows * cols * eb),
                 binop("+", binop("*", binop("//", col0, per_row), rows * sw),
                       binop("+", binop("*", row0, sw), binop("*", binop("%", col0, per_row), eb))))
    lbo = 16 if k_major else rows * sw
    lw.mem_of(buf)
    return WgmmaOperand(lw.mem_of(buf), byte, lbo, 8 * sw, sw, k_major)


# Whether the fence before a gemm's wgmmas ties its accumulator and register A operand (WgmmaFence.regs): their
# writes (the zeroing, a flash-attention's rescale of O) then stay above the fence, as PTX requires. Without the
# ties LLVM may sink them below it; ptxas then reorders them itself or injects a warpgroup.arrive (C7519, the MLA
# decode kernel), which changes the schedule of the kernels with register writes before their gemms. Off until
# timed (perf notes, twenty-first session).
FENCE_TIES = False


@gemm_instr("wgmma")
def lower_wgmma(lw: Lowerer, g: Gemm, gm: int, gn: int) -> TStmt:
    m, n, k = (int(x) for x in g.mnk)
    tm, tn = m // gm, n // gn
    ka = 256 // g.A.dtype.bits  # K of one instruction, 32 bytes of a row: 16 (fp16, bf16), 32 (fp8) or 8 (TF32)
    am, n_atom, ks = tm // 64, min(tn, 256), k // ka
    an = tn // n_atom
    wg = binop("//", lw.tx, WARPGROUP)
    wg_m, wg_n = (binop("//", wg, gn), binop("%", wg, gn)) if gn > 1 else (wg, const(0))
    c = lw.mem_of(g.C.buffer)
    parts: list[TStmt] = []
    if g.clear_accum:
        parts += [Write(c, const(i), const(0.0)) for i in range(int(c.size))]
    a_regs = lw.mem_of(g.A.buffer) if g.A.buffer.scope == "fragment" else None
    parts.append(WgmmaFence(tuple(r for r in (c, a_regs) if r is not None) if FENCE_TIES else ()))
    for kk in range(ks):
        for mi in range(am):
            row = binop("+", binop("*", wg_m, tm), mi * 64)
            a = None if a_regs is not None else _operand(lw, g.A, row, const(kk * ka), True)
            a_off = const((mi * ks + kk) * 8)  # register A (16-bit only): make_wgmma_a_fragment's locals
            for ni in range(an):
                col = binop("+", binop("*", wg_n, tn), ni * n_atom)
                if g.transpose_B:  # stored N x K: K-major
                    b = _operand(lw, g.B, col, const(kk * ka), True)
                else:  # stored K x N: N-major
                    b = _operand(lw, g.B, const(kk * ka), col, False)
                off = const((mi * an + ni) * (n_atom // 2))
                parts.append(Wgmma(n_atom, a, a_regs, a_off, b, c, off, g.A.dtype))
    if g.in_flight:  # the group runs on: the next use of C or of the operands waits (tilec.passes.lower)
        for r in (g.A, g.B, g.C):
            lw.wgmma_pending[r.buffer] = [c]
        return tseq(parts + [WgmmaCommit(), WgmmaWait(g.in_flight)])
    if lw.defer_wgmma:  # the enclosing sequence waits where the results are first needed (tilec.passes.lower)
        lw.wgmma_deferred.append((frozenset(r.buffer for r in (g.A, g.B, g.C)), c))
        return tseq(parts + [WgmmaCommit()])
    return tseq(parts + [WgmmaCommit(), WgmmaWait(0, c)])


def uses_wgmma(lw: Lowerer) -> bool:
    """Whether the kernel has a wgmma gemm (then shared-memory writes need the async-proxy fence)."""
    return any(p.instr == "wgmma" for p in lw.plan.gemms.values())


# ------------------------------------------------------------------------------------------------- emission


def _helper(e: CEmitter, s: Wgmma) -> str:
    ka = 256 // s.dtype.bits
    ty = f"{_PTX_TYPE[s.dtype.name]}.{_PTX_TYPE[s.b.mem.dtype.name]}"
    kind = "ss" if s.a is not None else "rs"
    trans_b = 0 if s.b.k_major else 1
    name = f"wgmma_m64n{s.n}k{ka}_{kind}_{ty.replace('.', '_')}_t{trans_b}"
    if name not in e.helpers:
        regs = s.n // 2
        d = ", ".join(f"%{i}" for i in range(regs))
        outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
        if kind == "ss":  # scale-d = p, scale-a = scale-b = 1; the transpose immediates exist for 16-bit types only
            sig = "float* d, unsigned long long da, unsigned long long db"
            ops = f"%{regs}, %{regs + 1}, p, 1, 1" + (f", 0, {trans_b}" if s.dtype.bits == 16 else "")
            ins = '"l"(da), "l"(db)'
        else:
            sig = "float* d, const void* a, unsigned long long db"
            ops = f"{{%{regs}, %{regs + 1}, %{regs + 2}, %{regs + 3}}}, %{regs + 4}, p, 1, 1, {trans_b}"
            ins = ('"r"(reinterpret_cast<const unsigned*>(a)[0]), "r"(reinterpret_cast<const unsigned*>(a)[1]), '
                   '"r"(reinterpret_cast<const unsigned*>(a)[2]), "r"(reinterpret_cast<const unsigned*>(a)[3]), '
                   '"l"(db)')
        e.helpers[name] = (
            f"namespace tl {{\n__device__ __forceinline__ void {name}({sig}) {{\n"
            f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n"\n'
            f'               "wgmma.mma_async.sync.aligned.m64n{s.n}k{ka}.f32.{ty} {{{d}}}, {ops};\\n}}\\n"\n'
            f"               : {outs}\n               : {ins});\n}}\n}}  // namespace tl\n")
    return name


def _desc(e: CEmitter, op: WgmmaOperand) -> str:
    return f"tl::wgmma_desc({e.names(op.mem)}, {e.e(op.byte_off)}, {op.lbo}, {op.sbo}, {_MODE[op.swizzle]})"


@emit_rule(Wgmma)
def _emit_wgmma(e: CEmitter, s: Wgmma, d: int) -> None:
    fn = _helper(e, s)
    a = _desc(e, s.a) if s.a is not None else f"{e.names(s.a_regs)} + {e.e(s.a_off)}"
    e.emit(d, f"tl::{fn}({e.names(s.c)} + {e.e(s.c_off)}, {a}, {_desc(e, s.b)});")


def _tie(e: CEmitter, mem: Mem, d: int) -> None:
    """An empty asm statement that reads and writes every register of ``mem`` (32 at a time; 16-bit ones in pairs):
    no access to them moves across it."""
    name, size = e.names(mem), int(mem.size)
    if mem.dtype == dt.float32:
        regs = [f'"+f"({name}[{j}])' for j in range(size)]
    else:
        assert mem.dtype.bits == 16 and size % 2 == 0, mem
        regs = [f'"+r"(reinterpret_cast<unsigned*>({name})[{j}])' for j in range(size // 2)]
    for i in range(0, len(regs), 32):
        e.emit(d, f'asm volatile("" : {", ".join(regs[i:i + 32])} :: "memory");')


@emit_rule(WgmmaFence)
def _emit_fence(e: CEmitter, s: WgmmaFence, d: int) -> None:
    for mem in s.regs:  # their last writes stay above the fence
        _tie(e, mem, d)
    e.emit(d, 'asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");')


asm_rule(WgmmaCommit, r"wgmma.commit_group.sync.aligned;\n")
asm_rule(FenceProxyAsync, r"fence.proxy.async.shared::cta;\n")


@emit_rule(WgmmaWait)
def _emit_wait(e: CEmitter, s: WgmmaWait, d: int) -> None:
    if s.after is not None and s.anchor is not None:
        v = e.e(s.after)
        e.emit(d, f"if ({v} != {v}) *reinterpret_cast<volatile unsigned*>({e.names(s.anchor)}) = 0u;  // keeps the "
                  "wait below")
    e.emit(d, f'asm volatile("wgmma.wait_group.sync.aligned {s.n};\\n" ::: "memory");')
    if s.regs is not None:  # the accumulators are defined only now: no read of them may move above
        _tie(e, s.regs, d)

