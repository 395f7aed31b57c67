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
    :class:`SourceLoc` made from it points at the user's text. ``kernel_file`` is the kernel's file where this is a
    ``T.macro`` inlined into it ('' for the kernel itself), ``site`` where that macro was called.
    """

    tree: ast.FunctionDef
    file: str
    name: str
    kernel_file: str = ""
    site: SourceLoc | None = None

    def loc(self, node: ast.AST) -> SourceLoc:
        return SourceLoc(self.file, getattr(node, "lineno", self.tree.lineno), getattr(node, "col_offset", 0),
                         self.name, self.kernel_file, self.site)


@functools.lru_cache(maxsize=512)
def _parse(file: str, name: str, first: int, text: str) -> FunctionSource:
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
        raise TilecSyntaxError(f"kernel {name!r}: expected a function definition")
    return FunctionSource(fdef, file, name)  # type: ignore[arg-type]


# code object -> (file, first line, the lines of its definition and the line after it) last read: spares
# inspect.getblock's tokenizing when they are unchanged
_BLOCKS: dict[Any, tuple[str, int, int, list[str]]] = {}


def function_source(fn: Any) -> FunctionSource:
    """The :class:`FunctionSource` of ``fn``, read from its file (or notebook cell) as it is now and parsed once per
    text. Not cached by code object alone: code objects compare equal across files and ignore what Python compiles
    to nothing (``x: T.float16 = ...`` and ``x: T.float32 = ...`` give equal code), so a kernel redefined that way
    would get the first definition's parse back."""
    code = getattr(fn, "__code__", None)
    if code is None:
        raise TilecSyntaxError(f"expected a Python function, got {type(fn).__name__}")
    file = code.co_filename
    try:
        lines, first = inspect.findsource(code)
    except OSError as e:
        raise TilecSyntaxError(f"cannot read the source of kernel {code.co_name!r} ({file}): {e}; tilec parses "
                               "the kernel's source, so it must live in a file or a notebook cell") from e
    known = _BLOCKS.get(code)
    if known is not None and known[:2] == (file, first) and lines[first:first + known[2] + 1] == known[3]:
        block = known[3][:known[2]]
    else:
        block = inspect.getblock(lines[first:])
        if len(_BLOCKS) >= 512:
            _BLOCKS.pop(next(iter(_BLOCKS)))
        _BLOCKS[code] = (file, first, len(block), lines[first:first + len(block) + 1])
    return _parse(file, code.co_name, first, "".join(block))


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
