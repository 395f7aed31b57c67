"""Errors of tilec. Each carries the user's source location (file:line:col) and prints a caret line."""

from __future__ import annotations

import linecache
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLoc:
    """A position in the user's kernel source.

    ``kernel_file`` is the file of the kernel a ``T.macro`` of another file was inlined into ('' for the kernel's
    own lines): :func:`where` then names ``file``, whose line number alone would read as one of the kernel's.
    ``site`` is where the ``T.macro`` whose line this is was called (None for the kernel's own lines): the lines of
    a macro called twice are told apart (:func:`called_at`).
    """

    file: str
    line: int
    col: int = 0
    func: str = ""
    kernel_file: str = ""
    site: SourceLoc | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"

    def caret(self) -> str:
        """The source line and a caret under the column, or '' when the file cannot be read."""
        text = linecache.getline(self.file, self.line).rstrip("\n")
        if not text:
            return ""
        return f"    {text}\n    {' ' * self.col}^"


def where(loc: SourceLoc | None) -> str:
    """Where a statement is, for notes, messages and comments that name it: 'line 12' for a line of the kernel's own
    file, 'helpers.py:7' for one of a ``T.macro`` defined in another file ('line 0' for a node with no location)."""
    if loc is None:
        return "line 0"
    if loc.kernel_file and loc.kernel_file != loc.file:
        return f"{os.path.basename(loc.file)}:{loc.line}"
    return f"line {loc.line}"


def called_at(loc: SourceLoc | None) -> str:
    """The ``T.macro`` calls a line was inlined through, innermost first, for a note that must tell a macro's uses
    apart: ' (in the T.macro called at line 30)', '' for a line of the kernel itself."""
    sites = []
    while loc is not None and loc.site is not None:
        loc = loc.site
        sites.append(where(loc))
    return f" (in the T.macro called at {', called at '.join(sites)})" if sites else ""


def caller_loc() -> SourceLoc | None:
    """Where user code called the tilec function that calls this: the location of its caller's caller, or None
    where that is tilec itself (the frontend evaluating a kernel's line, which gives the error that line)."""
    import sys

    frame = sys._getframe(2)
    if frame.f_code.co_filename.startswith(_PACKAGE):
        return None
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno, 0, frame.f_code.co_name)


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


class TilecError(Exception):
    """Base class of every error tilec raises about a kernel or its arguments.

    Parameters
    ----------
    message : str
        What is wrong and what is expected instead.
    loc : SourceLoc, optional
        Where in the user's kernel the problem is.
    """

    def __init__(self, message: str, loc: SourceLoc | None = None):
        self.message = message
        self.loc = loc
        super().__init__(self._format())

    def _format(self) -> str:
        if self.loc is None:
            return self.message
        caret = self.loc.caret()
        text = f"{self.loc}: {self.message}"
        return f"{text}\n{caret}" if caret else text


class TilecSyntaxError(TilecError):
    """A Python construct that tilec does not support inside a kernel."""


class TilecTypeError(TilecError, TypeError):
    """A wrong dtype, shape or kind of value in a kernel, or a wrong argument at launch."""


class TilecValueError(TilecError, ValueError):
    """A wrong value: an out-of-bounds region, a bad parameter, a mismatched argument at launch."""


class TilecBoundsError(TilecError, IndexError):
    """An access outside a buffer (or a vector access not aligned to its width), found by an interpreter at run
    time."""


class TilecVerifyError(TilecError):
    """The IR broke an invariant between two pipeline stages (a compiler bug, or a bad hand-built IR)."""


class LayoutConflictError(TilecError):
    """Two tile ops demand different layouts for one buffer."""


class RaceError(TilecError):
    """Two threads touched one shared-memory address without a barrier between, one of them writing."""


class TilecRuntimeError(TilecError, RuntimeError):
    """Compilation or launch failed on the device."""
