"""DRAM bytes of a persistent GEMM by an LRU model of L2 (no GPU): the blocks of a round take tiles in panels of
``panel`` grid rows (``T.use_swizzle``) and run in lock step along k; each k-step touches its A tile (block_M x
block_K) and B tile (block_K x block_N), and a miss reads it from DRAM. With ``--serpentine`` odd rounds run k
descending (pass config ``k_serpentine``). The output C counts once.

It reproduces ncu's DRAM bytes of the twelfth session at 8192³ on 132 blocks (panels of 8: 1.627 GB modelled, 1.626
measured; panels of 16: 1.359 / 1.362).

Run: python benchmarks/l2_model.py [--sizes 4096,8192] [--blocks 128] [--panels 8,16,32] [--l2-mb 50]
"""

from __future__ import annotations

import argparse
from collections import OrderedDict


def panel_order(gm: int, gn: int, panel: int) -> list[tuple[int, int]]:
    """The tiles (row, column) in the order blocks take them: down each column of a panel of ``panel`` rows."""
    out = []
    for p0 in range(0, gm, panel):
        rows = min(panel, gm - p0)
        out += [(p0 + i, j) for j in range(gn) for i in range(rows)]
    return out


def dram_bytes(M: int, N: int, K: int, bm: int = 128, bn: int = 256, bk: int = 64, blocks: int = 128,
               panel: int = 16, l2_mb: float = 50, serpentine: bool = False, itemsize: int = 2) -> int:
    gm, gn, ks = -(-M // bm), -(-N // bn), -(-K // bk)
    order = panel_order(gm, gn, panel)
    cap, used, dram = l2_mb * 2**20, 0, 0
    lru: OrderedDict = OrderedDict()
    a_bytes, b_bytes = bm * bk * itemsize, bk * bn * itemsize
    for r in range(0, len(order), blocks):
        down = serpentine and (r // blocks) % 2 == 1
        for s in range(ks):
            kk = ks - 1 - s if down else s
            for i, j in order[r:r + blocks]:
                for key, size in ((("A", i, kk), a_bytes), (("B", kk, j), b_bytes)):
                    if key in lru:
                        lru.move_to_end(key)
                        continue
                    dram += size
                    used += size
                    lru[key] = size
                    while used > cap:
                        used -= lru.popitem(last=False)[1]
    return dram + M * N * itemsize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--blocks", type=int, default=128)
    ap.add_argument("--panels", default="8,16,32")
    ap.add_argument("--l2-mb", type=float, default=50)
    args = ap.parse_args()
    for n in map(int, args.sizes.split(",")):
        for panel in map(int, args.panels.split(",")):
            up = dram_bytes(n, n, n, blocks=args.blocks, panel=panel, l2_mb=args.l2_mb)
            serp = dram_bytes(n, n, n, blocks=args.blocks, panel=panel, l2_mb=args.l2_mb, serpentine=True)
            print(f"{n}^3 on {args.blocks} blocks, panels of {panel:2d}: k ascending {up / 1e9:.3f} GB, "
                  f"serpentine {serp / 1e9:.3f} GB ({serp / up - 1:+.1%})")


if __name__ == "__main__":
    main()
