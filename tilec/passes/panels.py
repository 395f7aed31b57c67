"""Panels chosen by the compiler for a persistent kernel's tiles, where ``T.use_swizzle`` leaves them open.

A persistent kernel's blocks take its tiles round by round, ``P`` at a time. In row-major order a round spans few
rows of a GEMM's grid and many columns, so it reads few tiles of A from DRAM and many of B. In panels of ``r`` grid
rows (:mod:`.raster`) a round spans ``r`` rows and ``P / r`` columns. If the main loop's copies that depend on the
row alone move ``a`` bytes a step and those that depend on the column alone ``b``, a round touches ``r * a + P / r * b``
bytes a step, least at ``r = sqrt(P * b / a)``. The compiler takes the power of two nearest that: 16 for 128x256
tiles of any dtype on 132 SMs, the panel size measured best for those (perf notes AS: panels of 16 against 8 cut DRAM
reads by 16 %; without panels the persistent 8192³ GEMM ran 6 % slower).

It chooses only where the kernel will be persistent (pass configs ``warp_specialize`` and ``persistent``, chosen or
given, on sm_90a's TMA path), its grid is 2-D with more tiles than blocks, no ``T.use_swizzle`` is enabled and no
cluster is asked for, and its first pipelined loop copies tiles that depend on one block index each (a GEMM's A and
B; flash attention's K and V depend on neither of its grid's two indices alone). ``T.use_swizzle(1)`` keeps
row-major order. The choice is a report note.
"""

from __future__ import annotations

import dataclasses
import math

from tilec.errors import where
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import Copy
from tilec.ir.visit import vars_in, walk
from tilec.passes.specialize import main_loop
from tilec.target import Target


def _bytes_by_index(func: PrimFunc) -> tuple[int, int] | None:
    """Bytes a step of the main loop's global-to-shared copies whose source depends on the grid's x index alone, and
    on its y index alone; None where some copy depends on both or there is no such loop."""
    main = main_loop(func)
    if main is None:
        return None
    x, y = (id(v) for v in func.launch.block_vars[:2])
    moved = [0, 0]
    for c in walk(main[0].body):
        if isinstance(c, Copy) and c.src.buffer.scope == "global" and c.dst.buffer.scope == "shared":
            uses = {id(v) for e in c.src.starts for v in vars_in(e)} & {x, y}
            if uses == {x, y}:
                return None
            if uses and all(isinstance(e, int) for e in c.dst.extents):
                moved[uses == {y}] += math.prod(c.dst.extents) * c.dst.buffer.dtype.bits // 8
    return moved[0], moved[1]


def choose_panels(func: PrimFunc, target: Target, options: dict) -> tuple[PrimFunc, list[str]]:
    """``func`` with ``T.use_swizzle``'s panels chosen for a persistent kernel that names none (see the module's
    docstring), and the note saying so; ``func`` itself and no note elsewhere."""
    launch = func.launch
    blocks = options.get("persistent")
    if (target.arch != "sm_90a" or not (options.get("tma") and options.get("wgmma") and
                                         options.get("warp_specialize") and blocks)
            or options.get("cluster", 0) > 1 or launch.swizzle is not None or len(launch.grid) != 2
            or not all(isinstance(getattr(g, "value", None), int) for g in launch.grid)):
        return func, []
    from tilec.arch import device_model

    P = device_model(target).sms if blocks is True else int(blocks)
    gx, gy = (int(g.value) for g in launch.grid)
    moved = _bytes_by_index(func)
    if moved is None or not all(moved) or gx * gy <= P:
        return func, []
    b, a = moved  # along x (a GEMM's B tiles), along y (its A tiles)
    panel = min(gy, 2 ** round(math.log2(math.sqrt(P * b / a))))
    if panel <= 1:
        return func, []
    up_to = "up to " if blocks is True else ""  # one block an SM: the pipeline may launch fewer in whole rounds
    note = (f"T.Kernel at {where(launch.loc)}: tiles in panels of {panel} rows, chosen by the compiler: a round of "
            f"{up_to}{P} blocks then spans {panel} rows of tiles and about {math.ceil(P / panel)} columns, the fewest "
            f"operand bytes a step ({a} a row's tile, {b} a column's; T.use_swizzle(n) gives panels of n rows, "
            "T.use_swizzle(1) row-major order)")
    return dataclasses.replace(func, body=dataclasses.replace(launch, swizzle=(panel, "row"))), [note]
