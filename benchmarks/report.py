"""Tables from benchmark results (the JSON that ``benchmarks/run.py --json`` writes).

    python benchmarks/report.py benchmarks/results/2026-12-02-h200.json [more.json ...] > BENCHMARKS.md
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
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


if __name__ == "__main__":
    print(render_table(merge([json.loads(open(p).read()) for p in sys.argv[1:]])))
