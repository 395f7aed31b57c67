"""Stage the register operands of scalar-path gemms through shared memory (the move opposite to
:mod:`tilec.passes.operand_registers`).

Pre: Tile IR after the passes that rewrite loops (pipelining, clusters, epilogue) and its FTG. Post: every ``T.gemm``
that layout inference would run on the scalar FMA path (:func:`~tilec.passes.layout_inference.gemm_plan`: a dtype or
a shape the tensor cores do not take, too few threads, ...) and that reads its A or B operand from a fragment reads
it instead from a shared buffer of the compiler's (``<name>_staged``), which a ``T.copy`` right before the gemm fills
from the fragment: the scalar path reads each operand element on the threads holding the element of C it feeds,
which only shared memory gives them (flash attention's P in float32, or in float16 where P·V has no tensor-core
partition). The barrier pass then orders the copy's writes before the gemm's reads, and a loop's next trip's copy
after this trip's reads. What the kernel computes is unchanged; the report says which operand was staged and why the
gemm is on the scalar path. Where only the operand's being in registers kept the gemm off the tensor cores (a
transposed operand, part of a fragment), it runs on them from shared memory, as the note says. The buffer counts
against the block's shared memory, and the error of a kernel that needs too much names it (``staged``: buffer -> what
it serves, for :func:`tilec.passes.lower.lower_kernel`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tilec.errors import where
from tilec.ir.buffer import Buffer, Region
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import Copy, Gemm, SeqStmt
from tilec.ir.visit import transform
from tilec.passes.gemm_select import TF32_FALLBACK, GemmPlan
from tilec.passes.layout_inference import gemm_plan
from tilec.target import Target


def stage_operands(func: PrimFunc, ftg: Any, target: Target, options: dict | None = None,
                   staged: dict[Buffer, str] | None = None) -> tuple[PrimFunc, list[str]]:
    """``func`` with the fragment operands of its scalar-path gemms staged through shared buffers (the same object
    when there are none); each new buffer and what it serves go into ``staged``."""
    launch = func.launch
    ops = [ftg.node(n)["op"] for n in ftg.nodes]
    names = {b.name for b in launch.allocs} | {p.name for p in func.params if isinstance(p, Buffer)}
    buffers: dict[tuple[Any, Buffer], Buffer] = {}  # (gemm line, fragment) -> its staging buffer
    swaps: dict[Gemm, tuple[Gemm, tuple[Copy, ...]]] = {}
    notes: list[str] = []
    for g in ops:
        if not isinstance(g, Gemm) or "fragment" not in (g.A.buffer.scope, g.B.buffer.scope):
            continue
        plan = gemm_plan(g, ops, launch.num_threads, target, options)
        if plan.instr != "simt":
            continue
        new, copies, added = _staged_gemm(g, buffers, names)
        swaps[g] = (new, copies)
        after = gemm_plan(new, [swaps.get(op, (op,))[0] for op in ops], launch.num_threads, target, options)
        for role, r, buf in added:
            if staged is not None:
                staged[buf] = f"tilec's staging of T.gemm's {role} operand {r.buffer.name!r} at {where(g.loc)}"
            notes.append(_note(g, role, r, buf, plan, after))
    if not swaps:
        return func, []
    made: set[int] = set()  # the sequences made here, flattened into the sequence around them

    def swap(node: object) -> object | None:
        if isinstance(node, Gemm) and node in swaps:
            new, copies = swaps[node]
            out = SeqStmt((*copies, new), loc=node.loc)
            made.add(id(out))
            return out
        if isinstance(node, SeqStmt) and any(id(s) in made for s in node.stmts):
            return SeqStmt(tuple(x for s in node.stmts for x in (s.stmts if id(s) in made else (s,))), loc=node.loc)
        return None

    body = transform(launch.body, swap)
    new_launch = dataclasses.replace(launch, body=body, allocs=launch.allocs + tuple(buffers.values()))
    return dataclasses.replace(func, body=new_launch), list(dict.fromkeys(notes))


def _staged_gemm(g: Gemm, buffers: dict[tuple[Any, Buffer], Buffer], names: set[str]
                 ) -> tuple[Gemm, tuple[Copy, ...], list[tuple[str, Region, Buffer]]]:
    """``g`` reading its fragment operands from shared buffers, the copies filling those, and the buffers made here
    (role, operand, buffer). Copies of one gemm that a pass made share its buffers (``buffers``, by line and
    fragment); a new buffer's name is unique among ``names``."""
    new, copies, added = g, [], []
    for role in ("A", "B"):
        r: Region = getattr(g, role)
        if r.buffer.scope != "fragment":
            continue
        key = (g.loc, r.buffer)
        if key not in buffers:
            name = f"{r.buffer.name}_staged"
            while name in names:
                name += "_"
            names.add(name)
            buffers[key] = Buffer(name, tuple(r.extents), r.dtype, "shared", loc=g.loc)
            added.append((role, r, buffers[key]))
        copies.append(Copy(r, buffers[key].full_region(), loc=g.loc))
        new = dataclasses.replace(new, **{role: buffers[key].full_region()})
    return new, tuple(copies), added


def _note(g: Gemm, role: str, r: Region, buf: Buffer, plan: GemmPlan, after: GemmPlan) -> str:
    """The report note of operand ``r`` of ``g`` staged in ``buf``: why (``plan``, the gemm's plan with the operand
    in registers), and where the gemm runs now (``after``: tensor cores take a transposed operand, or part of a
    fragment, from shared memory)."""
    because = plan.why.removeprefix("(fallback: ").removesuffix(")")
    head = (f"T.gemm at {where(g.loc)}: its {role} operand {r.buffer.name!r} is staged through shared memory "
            f"({buf.name!r}, {int(buf.numel) * buf.dtype.bits // 8} bytes, written from the fragment before each run "
            f"of the gemm): ")
    if after.instr == "simt":
        return head + f"the gemm runs on the scalar FMA path ({because}), which reads its operands from shared memory"
    because = because.replace(TF32_FALLBACK, "")  # staged, it runs on them
    return head + (f"{after.instr} cannot take it from registers ({because}), and the scalar FMA path reads its "
                   f"operands from shared memory; from there the gemm runs on {after.instr}")
