"""Python names inside bodies that run a run-time number of times: loops and ``if`` on kernel values.

The parser reads a kernel's body once, so ``name = value`` binds the name once, at compile time. Inside a loop or
under an ``if`` whose condition is a kernel value, that differs from what the Python text says:

* ``acc = acc + A[k]`` in a loop would read the value ``acc`` had before the loop in every iteration;
* ``if A[i] > 0: y = 1 else: y = 2`` would leave ``y`` bound to the last branch parsed.

Rather than give such a kernel a meaning its text does not have, the parser tracks these bodies here: reading a
name in a loop body and then rebinding it raises an error, and a name assigned in such a body is undefined after
it (reading it raises an error naming the body). ``T.alloc_var`` scalars are stores, not bindings, and are the
way to carry a value across iterations or out of a branch. On-chip buffers allocated in a body stay visible.

A name bound to a kernel expression (``t = x[i]``) is likewise evaluated where it is used, not where it is
assigned: after a store to an element it reads, it would read the new value. Such a name becomes :class:`Stale`
(reading it raises an error naming the store), and a store in a loop to what a name bound before the loop and
read in its body reads is an error: the next iteration would read the new value.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tilec.errors import TilecSyntaxError
from tilec.ir import affine
from tilec.ir.buffer import Buffer
from tilec.ir.expr import Expr, Load
from tilec.ir.stmt import AtomicRMW, Parallel, Stmt, Store, TileOp
from tilec.ir.visit import walk

_MISSING = object()


@dataclass
class RuntimeBody:
    """A loop body or a branch of a run-time ``if`` being parsed."""

    what: str  # e.g. "the T.serial loop at line 12" (at helpers.py:7 in a T.macro of another file)
    is_loop: bool
    before: dict[str, Any]  # the bindings when the body began
    assigned: set[str] = field(default_factory=set)
    read_outer: set[str] = field(default_factory=set)  # names read while still bound to their value from before
    after: dict[str, Any] = field(default_factory=dict)


class Undefined:
    """The binding of a name after a run-time body that assigned it; reading it raises :attr:`error`."""

    def __init__(self, name: str, body: RuntimeBody) -> None:
        self.name = name
        self.body = body

    def error(self) -> TilecSyntaxError:
        n, what = self.name, self.body.what
        if self.body.is_loop:
            return TilecSyntaxError(f"{n!r} is assigned in the body of {what}, so after the loop it has no single "
                                    f"value; assign it before the loop, or keep a value that changes in a T.alloc_var")
        return TilecSyntaxError(f"{n!r} is assigned under {what}, whose condition is a kernel value, so after it {n!r} "
                                "has no single value; use T.if_then_else(cond, a, b), or a T.alloc_var assigned in "
                                "each branch")

    def __repr__(self) -> str:
        return f"<undefined {self.name}>"


class Stale(Undefined):
    """The binding of a name whose kernel expression reads an element that a later statement stored to."""

    def __init__(self, name: str, buffer: Buffer, where: str) -> None:
        self.name = name
        self.buffer = buffer
        self.where = where

    def error(self) -> TilecSyntaxError:
        n, b = self.name, self.buffer.name
        return TilecSyntaxError(f"{n!r} reads {b}, which the statement at {self.where} stored to after {n!r} was "
                                f"assigned: a name bound to a kernel expression is evaluated where it is used, so it "
                                f"would read the new value, not the one assigned; keep the value in a T.alloc_var (or "
                                f"a fragment inside T.Parallel) before the store, or use {n!r} before it")

    def __repr__(self) -> str:
        return f"<stale {self.name}>"


Write = tuple[Buffer, tuple, tuple]  # a buffer and the starts and extents of what a statement writes in it


def writes_of(stmt: Stmt) -> list[Write]:
    out: list[Write] = []
    for node in walk(stmt):
        if isinstance(node, (Store, AtomicRMW)):
            out.append((node.buffer, node.indices, (1,) * len(node.indices)))
        elif isinstance(node, TileOp) and not isinstance(node, Parallel):  # a T.Parallel's stores are walked
            out.extend((r.buffer, r.starts, r.extents) for r in node.writes())
    return out


def _outside(index: Any, start: Any, extent: Any) -> bool:
    """``index`` is provably outside ``[start, start + extent)``: it differs from ``start`` by a constant."""
    a, b = affine.linear(index), affine.linear(start)
    if a is None or b is None or not isinstance(extent, int):
        return False
    diff = dict(a)
    for k, v in b.items():
        diff[k] = diff.get(k, 0) - v
    if any(k is not None and v != 0 for k, v in diff.items()):
        return False
    return not 0 <= diff.get(None, 0) < extent


def reads_written(value: Any, w: Write) -> bool:
    """``value`` (a kernel expression, or a tuple or list of them) may read an element that ``w`` writes."""
    if isinstance(value, (tuple, list)):
        return any(reads_written(v, w) for v in value)
    if not isinstance(value, Expr):
        return False
    buf, starts, extents = w
    return any(isinstance(ld, Load) and ld.buffer is buf and len(ld.indices) == len(starts) and
               not any(_outside(i, s, e) for i, s, e in zip(ld.indices, starts, extents)) for ld in walk(value))


class ScopeTracker:
    """The part of the parser that keeps Python names honest in run-time bodies (see the module docstring)."""

    local: dict[str, Any]
    bodies: list[RuntimeBody]

    def note_read(self, name: str) -> None:
        for body in self.bodies:
            if name not in body.assigned and name in body.before:
                body.read_outer.add(name)

    def bind(self, name: str, value: Any) -> None:
        """``name = value`` as a compile-time binding."""
        for body in self.bodies:
            if body.is_loop and name in body.read_outer and name not in body.assigned:
                raise TilecSyntaxError(
                    f"{name!r} is read in the body of {body.what} and then reassigned there: a Python name is bound "
                    "once, when the kernel is parsed, so its value would not carry from one iteration to the next; "
                    f"keep it in a T.alloc_var (`{name} = T.alloc_var(dtype)` before the loop, then `{name} = ...` "
                    f"or `{name} += ...` store into it)")
            body.assigned.add(name)
        self.local[name] = value

    def note_writes(self, stmt: Stmt, where: str) -> None:
        """After the statement at ``where`` (:func:`tilec.errors.where`) emitted ``stmt``: names reading what it wrote
        become :class:`Stale`; a name bound before an enclosing loop, read in its body and reading what it wrote is an
        error."""
        for w in writes_of(stmt):
            for body in self.bodies:
                for n in sorted(body.read_outer) if body.is_loop else ():
                    if reads_written(body.before.get(n), w):
                        raise TilecSyntaxError(
                            f"{n!r} is bound before {body.what} to an expression reading {w[0].name} and read in its "
                            f"body, where this statement stores to {w[0].name}: a name is evaluated where it is used, "
                            f"so later iterations would read the new value; keep the value in a T.alloc_var before "
                            f"the loop")
            for n, v in list(self.local.items()):
                if reads_written(v, w):
                    self.local[n] = Stale(n, w[0], where)

    @contextlib.contextmanager
    def runtime_body(self, what: str, is_loop: bool) -> Iterator[RuntimeBody]:
        """Parse a body inside this context; on exit the bindings it made are undone (see :meth:`close_bodies`)."""
        body = RuntimeBody(what, is_loop, dict(self.local))
        self.bodies.append(body)
        try:
            yield body
        finally:
            self.bodies.pop()
        body.after = {n: self.local.get(n, _MISSING) for n in body.assigned}
        for n in body.assigned:
            if n in body.before:
                self.local[n] = body.before[n]
            else:
                self.local.pop(n, None)

    def close_bodies(self, bodies: list[RuntimeBody]) -> None:
        """After the bodies of one statement: names they assigned become :class:`Undefined`, except an on-chip
        buffer allocated there (the same one on every path that assigned the name)."""
        names: dict[str, None] = {}
        for body in bodies:
            names.update(dict.fromkeys(sorted(body.assigned)))
        for n in names:
            values = [b.after[n] for b in bodies if n in b.assigned]
            first = values[0]
            same = all(v is first for v in values)
            before = bodies[0].before.get(n, _MISSING)
            if same and isinstance(first, Buffer) and first.scope != "global" and before in (_MISSING, first):
                self.local[n] = first
            else:
                owner = next(b for b in bodies if n in b.assigned)
                self.local[n] = Undefined(n, owner)
            for outer in self.bodies:
                outer.assigned.add(n)
