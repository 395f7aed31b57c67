"""The statement builder the kernel primitives emit into while a kernel is being parsed.

The parser pushes a :class:`Builder` for the kernel and a frame for each block of statements; ``T.copy``
and the other primitives append to the innermost frame. Primitives called with no kernel being parsed raise
an error saying where they may be used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tilec.errors import SourceLoc, TilecSyntaxError
from tilec.ir.buffer import Buffer
from tilec.ir.stmt import SeqStmt, Stmt


@dataclass
class KernelFrame:
    """What ``with T.Kernel(...)`` collects from its body."""

    threads: tuple[int, ...]
    allocs: list[Buffer] = field(default_factory=list)
    layout_map: dict[Buffer, Any] = field(default_factory=dict)
    layout_locs: dict[Buffer, SourceLoc | None] = field(default_factory=dict)  # where each was annotated
    swizzle: tuple[int, str] | None = None
    outputs: list[Buffer] = field(default_factory=list)


class Builder:
    """Collects statements; one per kernel being parsed."""

    def __init__(self) -> None:
        self.frames: list[list[Stmt]] = [[]]
        self.kernel: KernelFrame | None = None
        self.loc: SourceLoc | None = None
        self.name_hint: str | None = None
        self.parallel_depth = 0
        self.macro_depth = 0  # how many @T.macro calls enclose the statement being parsed
        self.empties: list[Buffer] = []  # T.empty outputs of an eager kernel
        self._names: dict[str, int] = {}

    def emit(self, stmt: Stmt) -> None:
        self.frames[-1].append(stmt)

    @contextlib.contextmanager
    def frame(self) -> Iterator[list[Stmt]]:
        self.frames.append([])
        try:
            yield self.frames[-1]
        finally:
            self.frames.pop()

    def take_name(self, default: str) -> str:
        """The assignment target being parsed (``A_s = T.alloc_shared(...)``), else ``default``, made unique."""
        name = self.name_hint or default
        self.name_hint = None
        n = self._names.get(name, 0)
        self._names[name] = n + 1
        return name if n == 0 else f"{name}_{n}"

    def require_kernel(self, what: str) -> KernelFrame:
        if self.kernel is None:
            raise TilecSyntaxError(f"{what} must be used inside `with T.Kernel(...)`", self.loc)
        return self.kernel


def seq(stmts: list[Stmt]) -> Stmt:
    """One statement from a list (a SeqStmt unless there is exactly one)."""
    if len(stmts) == 1:
        return stmts[0]
    return SeqStmt(tuple(stmts))


_STACK: list[Builder] = []


@contextlib.contextmanager
def building(b: Builder) -> Iterator[Builder]:
    _STACK.append(b)
    try:
        yield b
    finally:
        _STACK.pop()


def current(what: str) -> Builder:
    """The builder of the kernel being parsed; ``what`` names the primitive for the error otherwise."""
    if not _STACK:
        raise TilecSyntaxError(f"{what} can only be used inside a kernel (a function decorated with @T.prim_func, "
                               "@T.macro or @tilec.jit)")
    return _STACK[-1]


def active() -> Builder | None:
    return _STACK[-1] if _STACK else None
