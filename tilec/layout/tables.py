"""Text rendering of 2-D tables for ``show()``."""

from __future__ import annotations

import numpy as np

__all__ = ["show_table"]


def show_table(title: str, cells: np.ndarray, max_rows: int = 16, max_cols: int = 16) -> str:
    """Format an array of cell strings as an aligned table under ``title``.

    Arrays with more than two dimensions are shown with the leading dimensions merged into rows;
    1-D arrays as a single row.  At most ``max_rows`` x ``max_cols`` cells are printed; elided
    rows and columns are marked with ``...``.
    """
    note = ""
    if cells.ndim == 1:
        cells = cells.reshape(1, -1)
    elif cells.ndim > 2:
        note = f"  (rows merge dims {cells.shape[:-1]})"
        cells = cells.reshape(-1, cells.shape[-1])
    n_rows, n_cols = cells.shape
    rows = list(range(min(n_rows, max_rows)))
    cols = list(range(min(n_cols, max_cols)))
    shown = [[str(cells[r, c]) for c in cols] for r in rows]
    width = max([len(s) for row in shown for s in row] + [len(str(cols[-1]))])
    label_w = len(str(rows[-1]))
    more_cols = n_cols > len(cols)
    header = " " * (label_w + 1) + " ".join(str(c).rjust(width) for c in cols) + (" ..." if more_cols else "")
    lines = [title + note, header]
    for r, row in zip(rows, shown):
        lines.append(
            str(r).rjust(label_w) + " " + " ".join(s.rjust(width) for s in row) + (" ..." if more_cols else "")
        )
    if n_rows > len(rows):
        lines.append("...".rjust(label_w))
    return "\n".join(lines)
