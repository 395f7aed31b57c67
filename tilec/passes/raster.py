"""Block rasterization for L2 reuse (``T.use_swizzle``): which tile of a 2-D grid the ``b``-th block takes.

Blocks are taken in groups of ``panel`` grid rows: within a group, consecutive blocks go down a column of the
panel, then to the next column, so the blocks running together share the operand tiles of few rows and few
columns (a GEMM's A row panels and B column panels) where row-major order spans whole rows. ``order="column"``
swaps the roles of the grid's dimensions. Used for the hardware block index (lowering) and for the tile counter
of a persistent kernel (software pipelining).
"""

from __future__ import annotations

from typing import Any

from tilec.ir.expr import binop


def panel_order(b: Any, grid_x: Any, grid_y: Any, panel: int, order: str) -> tuple[Any, Any]:
    """(x, y) of the tile the ``b``-th block (``b < grid_x * grid_y``) takes, as expressions."""
    gx, gy = (grid_y, grid_x) if order == "column" else (grid_x, grid_y)
    span = binop("*", gx, panel)
    first = binop("*", binop("//", b, span), panel)
    rows = binop("min", binop("-", gy, first), panel)
    within = binop("%", b, span)
    x, y = binop("//", within, rows), binop("+", first, binop("%", within, rows))
    return (y, x) if order == "column" else (x, y)
