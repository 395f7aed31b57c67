"""Which fragments a thread must hold in registers at once, for layout inference's register note.

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

from collections.abc import Iterator
from dataclasses import dataclass

from tilec.ir.buffer import Buffer
from tilec.ir.stmt import AtomicRMW, Copy, Fill, For, IfThenElse, Parallel, SeqStmt, Stmt, Store, TileOp
from tilec.ir.visit import accessed_buffers, walk


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
