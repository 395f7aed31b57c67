"""Lowering of stream-K's partial sums (:class:`PartialSave`, :class:`PartialAdd`; made by software pipelining,
:mod:`tilec.passes.stream_k`) and the printing of the flags they meet on.

A slot of the workspace holds one block's accumulator registers as its threads hold them: register ``4i + j`` of
thread ``t`` at ``(4i * T + 4t) + j`` (``T`` the block's threads), so that a warp saves or loads 512 contiguous
bytes with each 16-byte vector instruction. The block whose sums are added runs the same code with the same
fragment layout, so no element is moved between threads. A flag is set (an atomic exchange) by one thread after a
barrier of its block and a fence at GPU scope (release), and waited for by one thread with acquiring loads before a
barrier of its block; the waiting thread clears it, so every flag is zero again when the launch ends (the module's
workspace is zero at load and is kept from launch to launch: two launches of one kernel at once, on two streams,
would share it; a block finding its flag already set traps, which catches most such overlaps, not all).

Both traps are a call of one function that is not inlined (``tl::flag_fail``): a ``trap`` inlined into the consumer
warpgroups of a warp-specialized kernel makes ptxas keep their registers to the kernel's launch count (168 at 384
threads), not the 232 that ``setmaxnreg`` gives them, so a 128 x 256 accumulator and an epilogue's 64 loads of a
per-column vector spilled 204 bytes.
"""

from __future__ import annotations

from tilec import dtypes as dt
from tilec.backends.cemit import CEmitter, emit_rule
from tilec.errors import TilecError
from tilec.ir.expr import Expr, Var, binop, const
from tilec.ir.stmt import PartialAdd, PartialSave
from tilec.lower.context import Lowerer, lower_rule
from tilec.lower.tir import FlagSignal, FlagWait, If, Loop, Mem, MemRef, Sync, TStmt, Write, seq

SPIN_LIMIT = 1 << 26  # a flag's wait gives up (traps: an error, not a hang) after this many polls (~10 s)


def _slot(lw: Lowerer, reg: Mem, slot: Expr, i: int, lanes: int) -> Expr:
    """The workspace offset of registers ``i .. i + lanes`` of this thread in slot ``slot``."""
    T = lw.T
    return binop("+", binop("*", slot, int(reg.size) * T), binop("+", i * T, binop("*", lw.tx, lanes)))


def _accumulator(lw: Lowerer, s: PartialSave | PartialAdd) -> tuple[Mem, int]:
    """(the fragment's registers, the lanes of one workspace access), once every element is held by one thread."""
    buf = s.C.buffer
    reg = lw.mem_of(buf)
    if buf.scope != "fragment" or int(reg.size) * lw.T != buf.numel:
        raise TilecError(f"stream-K: the partial sums of {buf.name!r} are saved register by register, which needs "
                         f"a fragment whose elements each live on one thread ({int(reg.size)} registers x {lw.T} "
                         f"threads for {buf.numel} elements)", lw.loc)
    return reg, 4 if int(reg.size) % 4 == 0 else 1


@lower_rule(PartialSave)
def _lower_save(lw: Lowerer, s: PartialSave) -> TStmt:
    reg, lanes = _accumulator(lw, s)
    ws, flags = lw.mem_of(s.workspace), lw.mem_of(s.flags)
    saves = [Write(ws, _slot(lw, reg, s.slot, i, lanes), MemRef(reg, const(i), lanes), lanes)
             for i in range(0, int(reg.size), lanes)]
    return seq(saves + [Sync(), If(binop("==", lw.tx, 0), FlagSignal(flags, s.slot))])


@lower_rule(PartialAdd)
def _lower_add(lw: Lowerer, s: PartialAdd) -> TStmt:
    reg, lanes = _accumulator(lw, s)
    ws, flags = lw.mem_of(s.workspace), lw.mem_of(s.flags)
    count = binop("-", s.last, s.first)
    q, q2 = Var(lw.fresh("slot"), dt.int32), Var(lw.fresh("slot"), dt.int32)
    tmp = lw.scratch_reg("partial", dt.float32, lanes)
    adds: list[TStmt] = []
    for i in range(0, int(reg.size), lanes):
        adds.append(Write(tmp, const(0), MemRef(ws, _slot(lw, reg, binop("+", s.first, q2), i, lanes), lanes), lanes))
        adds += [Write(reg, const(i + j), binop("+", MemRef(reg, const(i + j)), MemRef(tmp, const(j))))
                 for j in range(lanes)]
    wait = If(binop("==", lw.tx, 0), Loop(q, count, FlagWait(flags, binop("+", s.first, q))))
    return seq([wait, Sync(), Loop(q2, count, seq(adds))])


# each flag statement is a call of one device function on the flag's address: (its name, the body after its signature)
_FLAG_HELPERS = {
    FlagSignal: ("flag_signal", (
        "  int was;\n"
        '  asm volatile("fence.acq_rel.gpu;" ::: "memory");\n'
        '  asm volatile("atom.relaxed.gpu.global.exch.b32 %0, [%1], %2;" : "=r"(was) : "l"(flag), "r"(1) : "memory");\n'
        "  if (was) flag_fail();  // set already: another launch of this kernel runs at the same time\n")),
    FlagWait: ("flag_wait", (
        "  int v;\n"
        "  for (unsigned polls = 0;; ++polls) {\n"
        '    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");\n'
        "    if (v) break;\n"
        f"    if (polls == {SPIN_LIMIT}u) flag_fail();  // a flag nobody sets: an error, not a hang\n"
        "    __nanosleep(128);\n"
        "  }\n"
        '  asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" :: "l"(flag), "r"(0) : "memory");\n')),
}


# not inlined: an inlined trap keeps the registers of warps after ``setmaxnreg.inc`` to the launch count
_FAIL = "__device__ __noinline__ void flag_fail() {\n  __trap();\n}\n"


@emit_rule(FlagSignal)
@emit_rule(FlagWait)
def _emit_flag(e: CEmitter, s: FlagSignal | FlagWait, d: int) -> None:
    name, body = _FLAG_HELPERS[type(s)]
    e.helper("flag_fail", _FAIL)  # printed before its callers
    fn = e.helper(name, f"__device__ __forceinline__ void {name}(int* flag) {{\n{body}}}\n")
    e.emit(d, f"{fn}({e.names(s.mem)} + {e.e(s.off)});")
