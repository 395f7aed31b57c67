"""Warp specialization and persistence chosen by the compiler, for kernels whose pass configs leave them open.

On sm_90a's Hopper path (pass configs ``wgmma`` and ``tma``, the defaults there) a kernel whose pass configs do not
name ``warp_specialize`` gets it where its main loop can take a producer warpgroup and loses nothing by one:

- a ``T.Pipelined`` loop of two stages or more at the kernel's top level, its gemms on tensor cores;
- whole warpgroups of threads, with 64 of the gemms' rows or more for each;
- a block that runs alone on its SM either way: its tiles in flight take more than half the SM's shared memory, or
  its accumulators more than half its registers.

Then ``persistent`` is on too, unless the pass configs name it: one block an SM looping over the tiles. Both were
measured faster on every kernel of the benchmark suite that meets the rule: the GEMMs at 128x256 tiles in 16-bit,
fp8 and TF32, and flash attention at D=128 and at D=64 on 192x128 tiles (perf notes I, J, AF, AH and the suite's
tables). Where two blocks fit an SM they overlap each other's copies and gemms as a producer warpgroup would, and the
kernel keeps its block-wide pipeline: flash attention at D=64 on 128x128 tiles (80 KB a block) is 3-8 % faster that
way. So is a kernel whose gemms have fewer rows than 64 a warpgroup: MLA decode, 64 heads on two warpgroups, 2 %.

The choice and its reason are a report note. Pass configs given explicitly are never overridden.
"""

from __future__ import annotations

import math

from tilec.errors import where
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import Copy, For, Gemm, SeqStmt
from tilec.ir.visit import walk
from tilec.target import Target

KB = 1024
# registers a thread needs beside its gemms' accumulators (addresses, loop counters, softmax rows): a floor
OTHER_REGISTERS = 32


def _tensor_core(g: Gemm) -> bool:
    """Whether the gemm's operands are of a kind tensor cores read: 16- or 8-bit floats, float32 as TF32."""
    dtype = g.A.buffer.dtype
    return dtype.name.startswith(("float16", "bfloat16", "float8")) or (dtype.name == "float32" and g.allow_tf32)


def main_loop(func: PrimFunc) -> tuple[For, list[Gemm]] | None:
    """The first ``T.Pipelined`` loop of two stages or more at the kernel's top level with gemms in it, all of them
    on tensor cores, and its gemms."""
    body = func.launch.body
    for s in body.stmts if isinstance(body, SeqStmt) else (body,):
        if isinstance(s, For) and s.kind == "pipelined" and (s.ann("num_stages") or 0) >= 2:
            gemms = [n for n in walk(s.body) if isinstance(n, Gemm)]
            if gemms and all(map(_tensor_core, gemms)):
                return s, gemms
    return None


def block_shared_bytes(func: PrimFunc, loop: For) -> int:
    """A block's shared memory with ``loop``'s pipeline filled: the tiles its copies write, one a stage, and the
    kernel's other shared buffers once."""
    staged = {id(n.dst.buffer) for n in walk(loop.body) if isinstance(n, Copy) and n.dst.buffer.scope == "shared"}
    stages = int(loop.ann("num_stages"))
    return sum(math.ceil(b.numel * b.dtype.bits / 8) * (stages if id(b) in staged else 1)
               for b in func.launch.allocs if b.scope == "shared")


def accumulator_registers(func: PrimFunc, gemms: list[Gemm]) -> int:
    """Registers a thread holds for the accumulators of ``gemms``: a floor of what the block needs."""
    accs = {id(g.C.buffer): g.C.buffer for g in gemms}
    words = sum(b.numel * b.dtype.bits // 32 for b in accs.values())
    return math.ceil(words / func.launch.num_threads)


def choose_specialization(func: PrimFunc, target: Target, options: dict) -> tuple[dict, list[str]]:
    """``options`` with ``warp_specialize`` (and ``persistent``) chosen where they are left open, and the note that
    says what was chosen and why; ``options`` itself and no note where there is nothing to choose."""
    if (target.arch != "sm_90a" or not options.get("tma") or not options.get("wgmma")
            or "warp_specialize" in options):
        return options, []
    main = main_loop(func)
    if main is None or any(b.static_shape is None for b in func.launch.allocs if b.scope in ("shared", "fragment")):
        return options, []
    loop, gemms = main
    from tilec.arch import table_model

    at = f"T.Kernel at {where(func.launch.loc)}"
    threads = func.launch.num_threads
    dev = table_model(target.arch)  # the architecture's, not a device's: the choice is the source's
    smem, regs = block_shared_bytes(func, loop), accumulator_registers(func, gemms) + OTHER_REGISTERS
    rows = min(int(g.mnk[0]) for g in gemms)
    if threads % 128:
        why = f"{threads} threads are not whole warpgroups"
    elif rows < 64 * (threads // 128):
        why = (f"its gemms' {rows} rows leave its {threads // 128} warpgroups less than 64 rows each (such a kernel, "
               "MLA decode's, measured 2 % faster with the block-wide pipeline; pass config 'warp_specialize': True "
               "specializes it)")
    elif 2 * smem <= dev.smem_per_sm and 2 * threads * regs <= dev.regs_per_sm:
        why = (f"its tiles in flight take {smem / KB:.0f} KB of shared memory and its accumulators and addresses "
               f"about {regs} registers a thread, so two blocks share an SM and overlap each other's copies and "
               "gemms (pass config 'warp_specialize': True specializes it)")
    else:
        alone = (f"its tiles in flight take {smem / KB:.0f} KB of shared memory, more than half an SM's"
                 if 2 * smem > dev.smem_per_sm else
                 f"its {threads} threads need about {regs} registers each, more than half an SM's")
        chosen = {"warp_specialize": True, **({} if "persistent" in options else {"persistent": True})}
        how = "warp specialization and persistence" if "persistent" in chosen else "warp specialization"
        return {**options, **chosen}, [
            f"{at}: {how} chosen by the compiler: the T.Pipelined loop at {where(loop.loc)} runs a gemm and "
            f"{alone}, so the block runs alone on its SM (pass config 'warp_specialize': False keeps the block-wide "
            "pipeline)"]
    return {**options, "warp_specialize": False}, [f"{at}: no warp specialization, chosen by the compiler: {why}"]
