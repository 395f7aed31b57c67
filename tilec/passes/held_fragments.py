"""Which fragments a thread must hold in registers at once, and layout inference's register note on them.

A fragment's elements are not all live together just because the tile exists: a tile copied in, computed on element
by element (T.copy, T.fill, T.Parallel) and copied out is streamed by the CUDA compiler a few elements at a time
(a 128 x 64 float32 copy-scale-copy at 32 threads: 64 registers, no spills, where the tile is 256 registers a thread;
nvcc 13.0). So the estimate is a liveness analysis over the kernel's statements (loops iterated to a fixed point, both
arms of a branch joined), a fragment being live from a write to the reads it reaches, and at each statement it counts:

* at an element-wise copy, fill or T.Parallel loop, the fragments live both before and after it (what it only reads
  for the last time or only writes is streamed through it);
* at any other statement (a gemm holds its accumulator and register operands over its k-steps, a reduction all of its
  source, a barrier wait what is live across it), the fragments live before or after it.

The note takes the statement where these add up to most. A fragment every write of which the compiler can do again
where the value is read (a fill, or a copy / T.Parallel loop reading only global tensors the kernel never writes) is
not counted: a softmax that reloads its row tile from a read-only input compiles to 64 registers, one written back in
place spills. Registers for addresses, indices and loop counters are not counted either.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tilec.ir.buffer import Buffer
from tilec.ir.stmt import AtomicRMW, Copy, Fill, For, IfThenElse, Parallel, SeqStmt, Stmt, Store, TileOp, WarpRoles
from tilec.ir.visit import accessed_buffers, walk

if TYPE_CHECKING:
    from tilec.layout import Fragment


@dataclass(frozen=True)
class Held:
    """The fragments held at the kernel's most crowded statement ``where`` (None: no fragment held anywhere)."""

    fragments: tuple[Buffer, ...]
    where: Stmt | None


def _access(s: Stmt) -> tuple[frozenset[Buffer], frozenset[Buffer]]:
    """(buffers read, buffers written) by a statement that is not a sequence, loop or branch."""
    if isinstance(s, TileOp) and not isinstance(s, Parallel):
        return frozenset(r.buffer for r in s.reads()), frozenset(r.buffer for r in s.writes())
    return (frozenset(accessed_buffers(s, loads=True, stores=False)),
            frozenset(accessed_buffers(s, loads=False, stores=True)))


def _streamed(s: Stmt) -> bool:
    """An element-wise op the compiler streams: a fill, a T.Parallel loop, a copy to or from a fragment."""
    if isinstance(s, (Fill, Parallel, Store)):
        return True
    return type(s) is Copy and "fragment" in (s.src.buffer.scope, s.dst.buffer.scope)


class _Liveness:
    def __init__(self, fragments: dict[Buffer, int], skip: frozenset[Buffer]) -> None:
        self.regs = fragments
        self.skip = skip
        self.best = Held((), None)
        self.most = 0

    def before(self, s: Stmt | None, after: frozenset[Buffer], record: bool) -> frozenset[Buffer]:
        """The fragments live before ``s`` given those live after it (``record``: note each statement's count)."""
        if s is None:
            return after
        if isinstance(s, SeqStmt):
            for c in reversed(s.stmts):
                after = self.before(c, after, record)
            return after
        if isinstance(s, IfThenElse):
            return self.before(s.then_body, after, record) | self.before(s.else_body, after, record)
        if isinstance(s, For):
            live = after
            while True:  # what is live at the loop's head: after it, or at the body's start (the next trip)
                head = after | self.before(s.body, live, False)
                if head == live:
                    break
                live = head
            self.before(s.body, live, record)
            return live
        reads, writes = _access(s)
        live_in = (after - writes) | (reads & self.regs.keys())
        if record:
            held = (live_in & after) if _streamed(s) else (live_in | after)
            total = sum(self.regs[f] for f in held - self.skip)
            if total > self.most:
                self.most = total
                self.best = Held(tuple(sorted(held - self.skip, key=lambda f: (-self.regs[f], f.name))), s)
        return live_in


def held_fragments(body: Stmt, fragments: dict[Buffer, int]) -> Held:
    """The fragments of ``fragments`` (buffer -> registers a thread) held together at the statement where their
    registers add up to most (see the module docstring)."""
    leaves = list(_leaves(body))
    written = {b for s in leaves for b in _access(s)[1]} | {n.buffer for n in walk(body) if isinstance(n, AtomicRMW)}

    def reloadable(s: Stmt) -> bool:  # a write the compiler can do again where the value is read
        reads = _access(s)[0]
        return isinstance(s, Fill) or (_streamed(s) and all(b.scope == "global" and b not in written for b in reads))

    skip = frozenset(f for f in fragments
                     if all(reloadable(s) for s in leaves if f in _access(s)[1]))
    liveness = _Liveness(fragments, skip)
    liveness.before(body, frozenset(), True)
    return liveness.best


def _leaves(s: Stmt | None) -> Iterator[Stmt]:
    """The statements under ``s`` that are not sequences, loops or branches."""
    if isinstance(s, SeqStmt):
        for c in s.stmts:
            yield from _leaves(c)
    elif isinstance(s, For):
        yield from _leaves(s.body)
    elif isinstance(s, IfThenElse):
        yield from _leaves(s.then_body)
        yield from _leaves(s.else_body)
    elif s is not None:
        yield s


def register_note(body: Stmt, fragments: dict[Buffer, Fragment], by: dict, arch: str, threads: int,
                  roles: WarpRoles | None, producer_regs: int) -> str | None:
    """The report's note where the fragments a thread holds at once (:func:`held_fragments`: live across a statement,
    not streamed element by element) take more 32-bit registers than a thread of this block can have (the target
    table's per-thread limit, or the register file shared out over the threads; warp-specialized, what setmaxnreg
    leaves the consumers): the compiler then spills them to local memory, correct but slow. At the line of the
    largest; the figures are each fragment's elements a thread holds (``fragments``: buffer -> its layout) times
    their size over 4 bytes; ``by`` names the op that laid out a fragment without a line of its own. None where they
    fit."""
    from tilec.arch import table_model
    from tilec.errors import where

    model = table_model(arch)
    limit = model.thread_register_limit(threads)
    if roles is not None:  # warp-specialized: the consumers get what setmaxnreg leaves them
        from tilec.lower.tma import consumer_registers

        limit = consumer_registers(model, threads * roles.copies, roles.producer_threads, producer_regs)
    regs = {b: math.ceil(f.num_locals * b.dtype.bits / 32) for b, f in fragments.items()}
    held = held_fragments(body, regs)
    total = sum(regs[b] for b in held.fragments)
    if total <= limit:
        return None
    big = held.fragments
    each = ", ".join(f"{b.name!r} {regs[b]}" for b in big)
    loc = big[0].loc or getattr(by.get(big[0]), "loc", None)
    op = held.where
    name = f"T.{op.kind}" if isinstance(op, TileOp) and op.kind != "op" else type(op).__name__
    return (f"T.alloc_fragment at {where(loc)}: the fragments live at once at the {name} at {where(op.loc)} take about "
            f"{total} 32-bit registers a thread ({each}; an estimate: each fragment live across that statement, its "
            "elements a thread holds times their size over 4 bytes; fragments only streamed element by element "
            "through copies and T.Parallel loops, or reloadable from read-only inputs, and registers for addresses "
            f"are not counted), more than the {limit} a thread of a {threads}-thread block can have on "
            f"{arch}{' after setmaxnreg (what the producer warpgroup leaves)' if roles else ''}: "
            "the compiler spills them to local memory, correct but slow; "
            f"smaller tiles{' or more threads' if limit == model.regs_per_thread else ''} keep them in registers")
