"""Evaluate integer expressions of sizes (shapes, grids, strides) on bound symbolic dimensions."""

from __future__ import annotations

from typing import Any

from tilec.errors import TilecValueError
from tilec.ir.expr import BinOp, Cast, Const, Expr, Table, UnOp, Var

_OPS = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "//": lambda a, b: a // b,
    "%": lambda a, b: a % b, "min": min, "max": max,
}  # fmt: skip


def check_grid_sign(grid: Any, kernel: str) -> None:
    """Raise when a launch grid evaluated for a call's sizes is negative along a dimension (``T.Kernel(M - 8)`` with
    ``M = 4``): the interpreters ran no block and a CUDA launch failed with the driver's bare 'invalid argument'."""
    for d, g in enumerate(grid):
        if g < 0:
            raise TilecValueError(f"kernel {kernel!r}: its launch grid {tuple(int(x) for x in grid)} has {int(g)} "
                                  f"blocks along {'xyz'[d]} for these arguments' sizes (a T.Kernel extent below zero)")


def eval_int(e: Any, env: dict[Var, int]) -> int:
    """The value of a size expression given the values of its variables."""
    if isinstance(e, int):
        return e
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        if e not in env:
            raise TilecValueError(f"the size {e.name!r} is not bound by any argument's shape")
        return int(env[e])
    if isinstance(e, BinOp) and e.op in _OPS:
        return int(_OPS[e.op](eval_int(e.a, env), eval_int(e.b, env)))
    if isinstance(e, UnOp) and e.op == "-":
        return -eval_int(e.a, env)
    if isinstance(e, Cast):
        return eval_int(e.value, env)
    if isinstance(e, Table):
        return int(e.at(eval_int(e.index, env)))
    if isinstance(e, Expr):
        raise TilecValueError(f"cannot evaluate the size expression {e} on the host")
    return int(e)
