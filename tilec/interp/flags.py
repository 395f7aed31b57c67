"""The thread interpreter's flags in global memory (stream-K's partial sums, :mod:`tilec.lower.stream_k`).

Blocks run one after another here, so a flag is set or not when it is waited for: a wait for a flag that no block
has set is reported (on the GPU the block would spin until its wait traps), as is setting a flag that is already
set (a slot saved twice before its sums were added, or a flag left set by an earlier launch)."""

from __future__ import annotations

import numpy as np

from tilec.errors import RaceError
from tilec.interp.thread import ThreadInterpreter, stmt_rule
from tilec.lower.tir import FlagSignal, FlagWait


@stmt_rule(FlagSignal)
def _signal(it: ThreadInterpreter, s: FlagSignal, env: dict, mask: np.ndarray) -> None:
    data, off = _at(it, s, env, mask, "a signal")
    if data[off]:
        it.fail(f"flag {s.mem.name}[{off}] is set again before a block waited for it (a slot of partial sums saved "
                "twice, or a flag an earlier launch left set)", RaceError)
    data[off] = 1


@stmt_rule(FlagWait)
def _wait(it: ThreadInterpreter, s: FlagWait, env: dict, mask: np.ndarray) -> None:
    data, off = _at(it, s, env, mask, "a wait")
    if not data[off]:
        it.fail(f"a wait for flag {s.mem.name}[{off}], which no block has set (block {off}'s partial sums: on the "
                "GPU a block waiting for a block that runs later, or never saves them, spins until the wait traps)",
                RaceError)
    data[off] = 0


def _at(it: ThreadInterpreter, s: FlagSignal | FlagWait, env: dict, mask: np.ndarray,
        what: str) -> tuple[np.ndarray, int]:
    """The flags' memory and the element one thread (the only active one) signals or waits on."""
    if np.count_nonzero(mask) != 1:
        it.fail(f"{what} on flag {s.mem.name} by {int(np.count_nonzero(mask))} threads (one thread does it)")
    off = np.broadcast_to(np.asarray(it.eval(s.off, env, mask), np.int64), (it.T,))[mask][0]
    data = it.globals_[s.mem]
    if not 0 <= off < data.size:
        it.fail(f"flag {s.mem.name}[{int(off)}] outside its {data.size} elements")
    return data, int(off)
