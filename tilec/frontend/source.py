"""The source of a kernel function: its AST with absolute line numbers, and the names it can see."""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import textwrap
from collections import ChainMap
from dataclasses import dataclass
from typing import Any

from tilec.errors import SourceLoc, TilecSyntaxError


@dataclass(frozen=True)
class FunctionSource:
    """A parsed Python function.

    ``tree`` has line numbers and columns of the original file (the dedent is undone), so every
    :class:`SourceLoc` made from it points at the user's text.
    """

    tree: ast.FunctionDef
    file: str
    name: str

    def loc(self, node: ast.AST) -> SourceLoc:
        return SourceLoc(self.file, getattr(node, "lineno", self.tree.lineno), getattr(node, "col_offset", 0),
                         self.name)


@functools.lru_cache(maxsize=512)
def _parse(code: Any) -> FunctionSource:
    file = code.co_filename
    try:
        lines, first = inspect.findsource(code)
    except OSError as e:
        raise TilecSyntaxError(f"cannot read the source of kernel {code.co_name!r} ({file}): {e}; tilec parses "
                               "the kernel's source, so it must live in a file or a notebook cell") from e
    block = inspect.getblock(lines[first:])
    text = "".join(block)
    dedented = textwrap.dedent(text)
    indent = len(text.splitlines()[0]) - len(dedented.splitlines()[0])
    tree = ast.parse(dedented)
    for node in ast.walk(tree):
        if hasattr(node, "lineno"):
            node.lineno += first
            if getattr(node, "end_lineno", None) is not None:
                node.end_lineno += first
            node.col_offset += indent
            if getattr(node, "end_col_offset", None) is not None:
                node.end_col_offset += indent
    fdef = tree.body[0]
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise TilecSyntaxError(f"kernel {code.co_name!r}: expected a function definition")
    return FunctionSource(fdef, file, code.co_name)  # type: ignore[arg-type]


def function_source(fn: Any) -> FunctionSource:
    """The :class:`FunctionSource` of ``fn`` (cached per code object)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        raise TilecSyntaxError(f"expected a Python function, got {type(fn).__name__}")
    return _parse(code)


def function_env(fn: Any) -> ChainMap:
    """Names visible in ``fn``: its closure cells, then its module globals, then the builtins."""
    closure: dict[str, Any] = {}
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                closure[name] = cell.cell_contents
            except ValueError:  # a cell not yet filled (defined later in the enclosing function)
                pass
    return ChainMap(closure, fn.__globals__, vars(builtins))
