"""Take a loop-invariant wgmma A operand into registers (sm_90a with ``wgmma`` and ``warp_specialize``, pass config
``operand_registers``, on by default).

Pre: parsed Tile IR. Post: where the kernel's body copies a global tile into a shared tile ``S`` before a pipelined
loop, and the only other use of ``S`` anywhere is as the A operand (not transposed, 16-bit) of ``T.gemm`` in
pipelined loops after that copy, ``S`` is also copied once into a fragment ``S_regs`` right after it and those gemms
read ``S_regs`` instead: wgmma's RS form takes A from registers, so the tensor cores no longer read ``S`` from shared
memory at every trip (flash attention's Q: 16 KB a warpgroup and key block at D=128, a fifth of what its two
gemms read). What the kernel computes is unchanged; the example's ``q_registers=True`` writes the same thing by
hand. Software pipelining then lets the producer load ``S`` and the consumers release it right after their copy.

Only in warp-specialized kernels, whose consumers get the registers the producer gives up (``setmaxnreg``), and
only while the kernel's register tiles, the new one included, take at most 800 bytes a consumer thread (each
tile's bytes shared evenly among the threads): flash attention at D=128 with 128-key tiles (S, P, O, Q and the
row statistics: 778 bytes) compiles to 168 registers without spills, with 160 keys (874 bytes) it spills (nvcc
13.0). Not with three consumer warpgroups or more: 512 threads launch at 128 registers a thread and ``setmaxnreg``
gives the consumers 160, and flash attention at D=64 in 192-row tiles spills 148 bytes with Q in registers, none
without. Without a producer the extra registers cost occupancy (perf notes AV: 127 → 140 registers left one block an
SM where there were two, 5-25 % slower). The report says which tiles moved and why others stayed.
"""

from __future__ import annotations

import dataclasses

from tilec.arch import table_model
from tilec.errors import where
from tilec.ir.buffer import Buffer
from tilec.ir.expr import Load
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import AtomicRMW, Copy, For, Gemm, SeqStmt, Stmt, Store, TileOp
from tilec.ir.visit import transform, walk
from tilec.target import Target

MAX_BYTES_PER_THREAD = 800  # the register tiles' share of a consumer thread's registers, this one's included
MIN_REGISTERS = 168  # what the budget above was calibrated at: two consumer warpgroups beside the producer


def operands_to_registers(func: PrimFunc, target: Target, options: dict | None = None) -> tuple[PrimFunc, list[str]]:
    """``func`` with its loop-invariant wgmma A tiles read from registers (the same object when none is)."""
    opts = options or {}
    launch = func.launch
    stmts = launch.body.stmts if isinstance(launch.body, SeqStmt) else (launch.body,)
    if target.arch != "sm_90a" or not (opts.get("wgmma") and opts.get("tma") and opts.get("warp_specialize")):
        return func, _inert(func, opts, "it acts only beside a producer warpgroup (pass configs 'wgmma', 'tma' and "
                            "'warp_specialize' on sm_90a)")
    if all(_invariant_a_operand(s, stmts[i + 1:], launch.body)[0] is None for i, s in enumerate(stmts)):
        return func, _inert(func, opts, "the kernel has none")
    if not opts.get("operand_registers", True):
        return func, []
    model = table_model(target.arch)
    names = {b.name for b in launch.allocs}
    moved: dict[Buffer, Buffer] = {}
    notes: list[str] = []
    out: list[Stmt] = []
    for i, s in enumerate(stmts):
        out.append(s)
        shared, gemms = _invariant_a_operand(s, stmts[i + 1:], launch.body)
        if shared is None:
            continue
        what = f"T.copy into {shared.name!r} at {where(s.loc)}"
        name = f"{shared.name}_regs"
        while name in names:
            name += "_"
        frag = Buffer(name, shared.shape, shared.dtype, "fragment", loc=shared.loc)
        regs = model.regs_at_launch(launch.num_threads + 128)  # the producer warpgroup beside the consumers
        if regs < MIN_REGISTERS:
            notes.append(f"{what}: {shared.name!r} stays in shared memory for T.gemm's A ({launch.num_threads} "
                         f"consumer threads beside the producer leave ptxas {regs} registers a thread, fewer than "
                         f"the {MIN_REGISTERS} this is calibrated at)")
            continue
        nbytes = _bytes_per_thread(frag, launch.num_threads)
        total = sum(_bytes_per_thread(b, launch.num_threads) for b in (*launch.allocs, *moved.values(), frag)
                    if b.scope in ("fragment", "local"))
        if total > MAX_BYTES_PER_THREAD:
            notes.append(f"{what}: {shared.name!r} stays in shared memory for T.gemm's A (with it, the kernel's "
                         f"register tiles would take {total} bytes a thread, more than {MAX_BYTES_PER_THREAD})")
            continue
        if any(_plan_from_registers(g, frag, launch.num_threads) is None for g in gemms):
            notes.append(f"{what}: {shared.name!r} stays in shared memory for T.gemm's A (wgmma cannot take it from "
                         "registers: each warpgroup needs 64 rows of A of its own)")
            continue
        names.add(name)
        moved[shared] = frag
        out.append(Copy(shared.full_region(), frag.full_region(), loc=s.loc))
        notes.append(f"{what}: T.gemm reads {shared.name!r} as A only, so it is copied once into registers "
                     f"({name!r}, {nbytes} bytes a thread) and wgmma takes A from there")
    if not moved:
        return func, notes

    def swap(node: object) -> object | None:
        if isinstance(node, Gemm) and node.A.buffer in moved:
            return dataclasses.replace(node, A=moved[node.A.buffer].full_region())
        return None

    body = SeqStmt(tuple(transform(s, swap) for s in out), loc=launch.body.loc)
    new = dataclasses.replace(launch, body=body, allocs=launch.allocs + tuple(moved.values()))
    return dataclasses.replace(func, body=new), notes


def _inert(func: PrimFunc, opts: dict, why: str) -> list[str]:
    """The report note of pass config ``operand_registers`` given by the user where it has nothing to act on."""
    if "operand_registers" not in opts:
        return []
    return [f"T.Kernel at {where(func.launch.loc)}: pass config 'operand_registers' has no effect: it takes into "
            f"registers a shared tile loaded before a T.Pipelined loop and read in it only as T.gemm's A, and {why}"]


def _invariant_a_operand(s: Stmt, after: tuple[Stmt, ...], body: Stmt) -> tuple[Buffer | None, list[Gemm]]:
    """(the shared tile ``s`` fills from global memory, the gemms reading it) when its only other uses anywhere in
    ``body`` are as the untransposed 16-bit A operand of gemms inside pipelined loops among ``after``; else
    (None, [])."""
    if not (isinstance(s, Copy) and s.dst.buffer.scope == "shared" and s.dst.is_full()
            and s.src.buffer.scope == "global" and s.dst.buffer.dtype.bits == 16):
        return None, []
    shared = s.dst.buffer
    gemms = [g for loop in after if isinstance(loop, For) and loop.kind == "pipelined" for g in walk(loop)
             if isinstance(g, Gemm) and g.A.buffer is shared]
    if not gemms or any(g.transpose_A or not g.A.is_full() or g.B.buffer is shared for g in gemms):
        return None, []
    for node in walk(body):  # nothing else reads or writes it, as a tile or element by element
        if isinstance(node, TileOp) and node is not s and not any(node is g for g in gemms) and \
                any(r.buffer is shared for r in (*node.reads(), *node.writes())):
            return None, []
        if isinstance(node, (Load, Store, AtomicRMW)) and node.buffer is shared:
            return None, []
    return shared, gemms


def _bytes_per_thread(b: Buffer, threads: int) -> int:
    """A register tile's bytes in each thread: a fragment spread over the block, a local array in every thread."""
    nbytes = int(b.numel) * b.dtype.bits // 8
    return nbytes // threads if b.scope == "fragment" else nbytes


def _plan_from_registers(g: Gemm, frag: Buffer, threads: int) -> object | None:
    """The wgmma plan of ``g`` with its A operand read from ``frag`` (None where wgmma cannot run it so)."""
    from tilec.lower.wgmma import wgmma_plan

    moved = dataclasses.replace(g, A=frag.full_region())
    m, n, k = moved.mnk
    if not all(isinstance(d, int) for d in (m, n, k)):
        return None
    return wgmma_plan(moved, m, n, k, threads)
