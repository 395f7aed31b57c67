"""Tables from benchmark results (the JSON that ``benchmarks/run.py --json`` and ``hopper_variants.py --json``
write; also the older forms kept in benchmarks/results/: a bare list of rows, or runs by name).

    python benchmarks/report.py benchmarks/results/2026-12-02-h200.json [more.json ...] > BENCHMARKS.md

Several files of the suite are merged into one table; a file holding several named runs gets a table per run. A
file with no benchmark rows (``recommend_eval.py``'s or ``pdl_chain.py``'s reports) is an error that says what it
is.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any


def _fmt(x: Any, spec: str = ".1f") -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and x != x:
        return "NaN"
    return format(x, spec)


def _groups(rows: list[dict]) -> OrderedDict:
    out: OrderedDict = OrderedDict()
    for r in rows:
        out.setdefault((r["kernel"], r["shape"]), []).append(r)
    return out


def _best_tilec(rows: list[dict]) -> dict | None:
    mine = [r for r in rows if r["impl"].startswith("tilec") and r["ms"] is not None]
    return min(mine, key=lambda r: r["ms"]) if mine else None


def _paired(peer: dict, best: dict) -> tuple[float, float] | None:
    """The least and greatest of the peer's time over the best tilec row's within each round (the suite times
    every implementation once a round, in turn, so a round's pair shares the GPU's clock of that moment), or None
    where the rows carry no rounds."""
    a, b = peer["extra"].get("rounds_ms"), best["extra"].get("rounds_ms")
    if not a or not b or len(a) != len(b) or len(a) < 2:
        return None
    ratios = [x / y for x, y in zip(a, b)]
    return min(ratios), max(ratios)


def render_table(result: dict) -> str:
    """Markdown: one table of timed kernels with the best tilec config's ratio to each peer (the ratio of the
    medians, then the range of the ratios round by round where the rows carry their rounds), then host rows."""
    lines = [f"Benchmarks of {result.get('date', '?')} on {result.get('environment', {}).get('gpu', '?')}", ""]
    env = result.get("environment", {})
    lines.append(", ".join(f"{k} {v}" for k, v in env.items()))
    lines.append("")
    compiles = any("compile_cold_s" in r["extra"] and r["ms"] is not None for r in result["rows"])
    head = ("| kernel | shape | implementation | ms | TFLOP/s | GB/s | rel. error | best tilec ÷ this (speed-up; "
            "least-greatest of the rounds) |")
    rule = "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"
    lines += [head + (" compile s, cold / cached |" if compiles else ""), rule + (" ---: |" if compiles else "")]
    host: list[dict] = []
    for (kernel, shape), rows in _groups(result["rows"]).items():
        if all(r["ms"] is None and not r["note"] for r in rows) and rows[0]["extra"]:  # host-side measurements
            host += rows
            continue
        best = _best_tilec(rows)
        for r in rows:
            ratio = ""
            if best is not None and r["ms"] and not r["impl"].startswith("tilec"):
                ratio = f"{r['ms'] / best['ms']:.2f}x"
                span = _paired(r, best)
                ratio += f" ({span[0]:.2f}-{span[1]:.2f})" if span else ""
            note = f" ({r['note']})" if r["note"] else ""
            line = (f"| {kernel} | {shape} | {r['impl']}{note} | {_fmt(r['ms'], '.3f')} | {_fmt(r['tflops'])} | "
                    f"{_fmt(r['gbs'], '.0f')} | {_fmt(r['error'], '.1e')} | {ratio} |")
            if compiles:
                e = r["extra"]
                line += (f" {e['compile_cold_s']:.2f} / {e['compile_cached_s']:.3f} |" if "compile_cold_s" in e
                         else " |")
            lines.append(line)
    if host:
        lines += ["", "| measurement | what | implementation | figures |", "| --- | --- | --- | --- |"]
        for r in host:
            figs = ", ".join(f"{k} {v:.4g}" if isinstance(v, (int, float)) else f"{k} {v}"
                             for k, v in r["extra"].items())
            lines.append(f"| {r['kernel']} | {r['shape']} | {r['impl']} | {figs} |")
    for n in result.get("notes", []):
        lines.append(f"\nnote: {n}")
    return "\n".join(lines) + "\n"


def merge(results: list[dict]) -> dict:
    """One result from several runs of the suite (e.g. ``--only gemm`` and ``--only attention``)."""
    out = dict(results[0])
    seen: set = set()
    out["rows"] = []
    for res in results:  # a (kernel, shape, implementation) measured twice keeps its first run's figures
        for r in res["rows"]:
            key = (r["kernel"], r["shape"], r["impl"])
            if key not in seen:
                seen.add(key)
                out["rows"].append(r)
    out["notes"] = list(dict.fromkeys(n for res in results for n in res.get("notes", [])))
    return out


class NotRowsError(ValueError):
    """A JSON file that holds no benchmark rows."""


def _is_rows(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(r, dict) and {"kernel", "shape", "impl"} <= r.keys() for r in x)


def _as_result(x: Any) -> dict | None:
    """``x`` as a result with rows (``extra`` added where older rows lack it), or None."""
    if isinstance(x, dict) and _is_rows(x.get("rows")):
        return dict(x, rows=[dict({"extra": {}}, **r) for r in x["rows"]])
    if _is_rows(x):
        return {"rows": [dict({"extra": {}}, **r) for r in x]}
    return None


def results_of(data: Any, name: str) -> list[tuple[str, dict]]:
    """The results in one file's JSON as (title, result) pairs: one untitled result for the suite's JSON (and a bare
    list of rows), one per named run for a file of runs (``{"runs": {name: ...}}`` or ``{name: [rows], ...}``)."""
    one = _as_result(data)
    if one is not None:
        return [("", one)]
    if isinstance(data, dict):
        runs = data.get("runs") if isinstance(data.get("runs"), dict) else data
        out = []
        for run, x in runs.items():
            r = _as_result(x)
            if r is not None and r["rows"]:
                notes = [data["note"]] if isinstance(data.get("note"), str) else []
                out.append((f"{name}: {run}", dict(r, notes=notes + list(r.get("notes", [])))))
        if out:
            return out
    if isinstance(data, dict) and "model_only" in data:
        what = ("recommend_eval.py's report (the cost model's ranking against measured times; score it with "
                f"python benchmarks/recommend_eval.py --replay {name})")
    elif isinstance(data, list) and data and isinstance(data[0], dict) and "us_per_launch" in data[0]:
        what = "pdl_chain.py's result (launches back to back, printed by that script)"
    else:
        what = "no list of rows with kernel, shape and impl"
    raise NotRowsError(f"{name}: not benchmark rows: {what}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", metavar="JSON", help="results of run.py or hopper_variants.py (--json)")
    args = ap.parse_args(argv)
    pieces: list[tuple[str, dict]] = []  # (title, result); untitled: a suite's result, merged with the others
    try:
        for path in args.files:
            try:
                data = json.loads(Path(path).read_text())
            except (OSError, ValueError) as e:
                raise NotRowsError(f"{path}: {e}") from None
            pieces += results_of(data, path)
    except NotRowsError as e:
        print(f"report.py: {e}", file=sys.stderr)
        return 2
    plain = [r for title, r in pieces if not title]
    if plain:
        print(render_table(merge(plain)))
    for title, r in pieces:
        if title:
            print(f"## {title}\n\n{render_table(r)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
