"""Generic traversal of IR trees: walk every node, or rebuild a tree through a function.

Rebuilding follows the frozen-dataclass rule: a node whose children did not change is returned as is, so a
pass that changes nothing returns its input object.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import Expr, Load, Var
from tilec.ir.stmt import AtomicRMW, Stmt, Store

Node = Any
_NODE_TYPES: tuple[type, ...] = (Expr, Stmt, Region, Buffer)


_LEAVES: tuple[type, ...] = ()  # node types whose fields are not traversed (thread IR mems)


def register_leaf_type(cls: type) -> None:
    global _NODE_TYPES, _LEAVES
    _NODE_TYPES = _NODE_TYPES + (cls,)
    _LEAVES = _LEAVES + (cls,)


def register_node_type(cls: type) -> None:
    """Make the generic traversal descend into another IR's nodes (the thread IR registers its statements)."""
    global _NODE_TYPES
    if cls not in _NODE_TYPES:
        _NODE_TYPES = _NODE_TYPES + (cls,)


@functools.cache
def _fields(cls: type) -> tuple[str, ...]:
    if not dataclasses.is_dataclass(cls):
        return ()
    data = ("loc", "dtype", "name", *getattr(cls, "DATA_FIELDS", ()))  # fields that hold no child nodes
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in data)


def children(node: Node) -> Iterator[Node]:
    """The direct child nodes of ``node`` (exprs, stmts, regions, buffers), in field order."""
    if isinstance(node, (Buffer, *_LEAVES)):
        return
    for name in _fields(type(node)):
        yield from _nodes_in(getattr(node, name))


def _nodes_in(value: Any) -> Iterator[Node]:
    if isinstance(value, _NODE_TYPES):
        yield value
    elif isinstance(value, tuple):
        for v in value:
            yield from _nodes_in(v)


def walk(node: Node) -> Iterator[Node]:
    """Every node under ``node`` (itself included), pre-order; shared subtrees are visited once."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        stack.extend(reversed(list(children(n))))


def rebuild(node: Node, f: Callable[[Node], Node]) -> Node:
    """``node`` with ``f`` applied to each direct child; ``node`` itself when no child changed."""
    if isinstance(node, (Buffer, *_LEAVES)):
        return node
    changes = {}
    for name in _fields(type(node)):
        old = getattr(node, name)
        new = _map(old, f)
        if new is not old:
            changes[name] = new
    return dataclasses.replace(node, **changes) if changes else node


def _map(value: Any, f: Callable[[Node], Node]) -> Any:
    if isinstance(value, _NODE_TYPES):
        return f(value)
    if isinstance(value, tuple):
        items = tuple(_map(v, f) for v in value)
        return value if all(a is b for a, b in zip(items, value)) else items
    return value


def transform(node: Node, fn: Callable[[Node], Node | None]) -> Node:
    """Post-order rewrite: children first, then ``fn(new_node)``; ``fn`` returns a replacement or None."""
    memo: dict[int, Node] = {}

    def go(v: Node) -> Node:
        key = id(v)
        if key in memo:
            return memo[key]
        new = rebuild(v, go)
        out = fn(new)
        out = new if out is None else out
        memo[key] = out
        return out

    return go(node)


def substitute(node: Node, mapping: dict[Any, Any]) -> Node:
    """Replace variables (or any nodes, buffers included) by identity according to ``mapping``."""
    if not mapping:
        return node
    return transform(node, lambda n: mapping.get(n) if isinstance(n, (Var, Buffer)) else None)


def loads_in(node: Node) -> list[Load]:
    return [n for n in walk(node) if isinstance(n, Load)]


def vars_in(node: Node) -> list[Var]:
    return [n for n in walk(node) if isinstance(n, Var)]


def accessed_buffers(node: Node, loads: bool = True, stores: bool = True) -> list[Buffer]:
    """Buffers read (``loads``) and/or written (``stores``) by element accesses under ``node``, in order."""
    out: dict[int, Buffer] = {}
    for n in walk(node):
        if loads and isinstance(n, Load):
            out.setdefault(id(n.buffer), n.buffer)
        if stores and isinstance(n, (Store, AtomicRMW)):
            out.setdefault(id(n.buffer), n.buffer)
        if loads and isinstance(n, AtomicRMW):
            out.setdefault(id(n.buffer), n.buffer)
    return list(out.values())
