"""Summarize the prints of ``hopper_variants.py``'s ``wait profile`` row: where, by tile, the persistent GEMM's
consumer warpgroups waited for full stages (perf notes, thirty-sixth session).

    python benchmarks/hopper_variants.py --profile --sizes 4096 --only "tma ws persistent panel16 wait profile" \\
        > waits-4096.txt
    python benchmarks/waits_summary.py waits-4096.txt

Each line ``waits pid tile wg k0 k1-3 rest total start`` is one warpgroup's tile: the cycles it waited at the tile's
first k-step, its second to fourth and the rest, the tile's cycles from its first wait to its epilogue's end, and
the tile's start on the global timer (ns). ``--profile`` calls each kernel twice; the summary takes the last call.
"""

from __future__ import annotations

import sys

import numpy as np


def calls(text: str) -> list[np.ndarray]:
    """The ``waits`` lines of each profiled call of the variant, as integer rows."""
    out, cur = [], []
    for line in text.splitlines():
        if line.startswith("waits "):
            cur.append([int(x) for x in line.split()[1:]])
        elif line.startswith("# profiled ") and cur:
            out.append(np.array(cur))
            cur = []
    if cur:
        out.append(np.array(cur))
    return out


def summary(rows: np.ndarray) -> str:
    """Per tile: the mean waits and tile cycles over the warpgroups, and when the tile started across blocks."""
    _, tile, _, k0, k13, rest, total, start = rows.T
    lines = ["tile |  k0 wait | k1-3 wait | rest wait | tile cycles | first start (us) | start spread (us)"]
    for t in range(int(tile.max()) + 1):
        m = tile == t
        lines.append(f"{t:4d} | {k0[m].mean():8.0f} | {k13[m].mean():9.0f} | {rest[m].mean():9.0f} | "
                     f"{total[m].mean():11.0f} | {(start[m].min() - start.min()) / 1e3:16.2f} | "
                     f"{np.ptp(start[m]) / 1e3:17.2f}")
    waits = k0 + k13 + rest
    lines.append(f"waits {waits.sum() / total.sum():.1%} of the tiles' cycles; the first tile's share of them "
                 f"{waits[tile == 0].sum() / waits.sum():.1%}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: python benchmarks/waits_summary.py FILE (the wait-profile run's output)")
    found = calls(open(argv[0]).read())
    if not found:
        sys.exit(f"{argv[0]}: no 'waits' lines (was the 'wait profile' row run with --profile?)")
    print(f"{argv[0]}: {len(found)} call(s), the last of {len(found[-1])} warpgroup tiles")
    print(summary(found[-1]))


if __name__ == "__main__":
    main(sys.argv[1:])
