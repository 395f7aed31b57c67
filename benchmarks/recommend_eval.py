"""How good is the cost model? Time every buildable candidate on the GPU and compare with the model's ranking.

    python benchmarks/recommend_eval.py [--only gemm,attention,autotune] [--shapes S,...] [--quick] [--model-only]
                                        [--json PATH]

For each GEMM shape (4096^3, 8192^3, 1x4096x4096, 4096x4096x1000) and flash-attention shape (ANCHORS.md), the
candidate space is enumerated, costed (tilec.recommend), and every candidate that builds is timed on the GPU
with tilec.autotune (CUDA events, median; outputs checked against the model's top pick). Printed per shape: the
measured time of the model's top-1 over the measured best (target <= 1.10), Spearman's rho between predicted and
measured times over the candidates the model ranks (target >= 0.7), and ptxas registers against the model's
estimate. ``autotune`` times a cold autotuning of 50 GEMM configs (a new process, an empty disk cache).
``--model-only`` prints the model's side only (no GPU needed); ``--replay JSON...`` scores today's model against
the measurements kept in earlier reports (no GPU needed either). The JSON (``--json``, or ``$OUT/recommend_eval.json``
when ``$OUT`` is set) keeps every candidate's prediction terms and measurement, for calibrating the device model.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

GEMM_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (1, 4096, 4096), (4096, 4096, 1000)]
GEMM_SPACE = {"block_M": [64, 128, 256], "block_N": [64, 128, 256], "block_K": [32, 64], "num_stages": [2, 3, 4],
              "threads": [128, 256]}
SKINNY_SPACE = {"block_M": [16, 32], "block_N": [32, 64, 128], "block_K": [64, 128], "num_stages": [2, 4],
                "threads": [128, 256]}
ATTENTION_SHAPES = [(8, 16, 2048, 128, False), (8, 16, 2048, 128, True), (2, 16, 8192, 128, False),
                    (2, 16, 8192, 128, True), (8, 16, 2048, 64, False)]
ATTENTION_SPACE = {"block_M": [64, 128], "block_N": [32, 64, 128], "num_stages": [1, 2, 3], "threads": [128, 256]}
QUICK = {"block_M": [64, 128], "block_N": [128, 256], "block_K": [32, 64], "num_stages": [2, 3], "threads": [128, 256]}


def ranks(values: list[float]) -> list[float]:
    """Ranks from 1, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation of two equally long lists (nan for fewer than 3 pairs)."""
    if len(x) < 3:
        return float("nan")
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx, vy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return cov / (vx * vy) ** 0.5 if vx and vy else float("nan")


def _tag(cfg: dict) -> str:
    return json.dumps(cfg, sort_keys=True)


def _model_rows(rec: Any) -> list[dict]:
    rows = []
    for rank, c in enumerate(rec.ranked + rec.rejected, 1):
        row = {"config": c.config, "model_rank": rank if c.reason is None else None, "rejected": c.reason}
        if c.cost is not None:
            row.update(predicted_us=c.cost.time_s * 1e6, regs_est=c.cost.regs_per_thread, bound=c.cost.bound,
                       smem=c.cost.smem_per_block, terms_us={k: v * 1e6 for k, v in c.cost.times.items()},
                       factors=c.cost.factors)
        rows.append(row)
    return rows


def evaluate(name: str, jit_fn: Any, args: tuple, space: dict, warmup: float, rep: float,
             model_only: bool, timer: Any = None) -> dict:
    """The model's ranking of ``space`` for ``jit_fn(*args)`` and, unless ``model_only``, the measured times
    (``timer``: the autotuner's, CUDA events by default)."""
    import tilec
    from tilec.runtime.jit import default_pass_configs

    t0 = time.perf_counter()
    rec = tilec.recommend(jit_fn, *args, space=space)
    entry: dict[str, Any] = {"name": name, "pass_configs": {**default_pass_configs(), **(jit_fn.pass_configs or {})},
                             "candidates": len(rec.ranked) + len(rec.rejected),
                             "model_ranked": len(rec.ranked), "model_s": time.perf_counter() - t0,
                             "model_top": rec[0] if rec.rows else None, "rows": _model_rows(rec)}
    print(f"{name}: {entry['candidates']} candidates, {len(rec.ranked)} ranked by the model in "
          f"{entry['model_s']:.1f} s; top pick {entry['model_top']}")
    if model_only or not rec.rows:
        return entry
    buildable = [c.config for c in rec.ranked] + [c.config for c in rec.rejected if c.cost is not None]
    tuned = tilec.autotune(configs=buildable, warmup=warmup, rep=rep, cache=False, timer=timer)(jit_fn)
    result = tuned.tune(*args)
    trials = {_tag(t.config): t for t in result.trials}
    for row in entry["rows"]:
        t = trials.get(_tag(row["config"]))
        row.update(measured_ms=t.ms if t else None, status=t.status if t else "not built",
                   note=t.note if t else "")
        k = jit_fn.get_kernel(*args, **row["config"]) if t is not None and t.status == "ok" else None
        if k is not None and k.target.kind == "cuda":
            row.update(regs_ptxas=k.n_regs, spills=k.n_spills)
    _summarize(entry, result)
    return entry


def _summarize(entry: dict, result: Any) -> None:
    rows = entry["rows"]
    timed = [r for r in rows if r.get("measured_ms") is not None]
    ranked = [r for r in timed if r["model_rank"] is not None]
    best = min(timed, key=lambda r: r["measured_ms"])
    top = next((r for r in rows if r["model_rank"] == 1), None)
    ratio = top["measured_ms"] / best["measured_ms"] if top and top.get("measured_ms") else float("nan")
    rho = spearman([r["predicted_us"] for r in ranked], [r["measured_ms"] for r in ranked])
    regs = [(r["regs_est"], r["regs_ptxas"]) for r in ranked if r.get("regs_ptxas")]
    reg_err = sum(abs(a - b) for a, b in regs) / len(regs) if regs else float("nan")
    entry.update(measured_best=best["config"], measured_best_ms=best["measured_ms"], top1_ratio=ratio,
                 spearman=rho, timed=len(timed), register_error=reg_err, build_s=result.build_s,
                 bench_s=result.bench_s, best_was_rejected=best["model_rank"] is None)
    flag = lambda ok: "ok" if ok else "MISSED"  # noqa: E731
    print(f"  timed {len(timed)}: best {best['config']} {best['measured_ms']:.4f} ms"
          f"{' (the model rejected it)' if best['model_rank'] is None else ''}; model top-1 "
          f"{(top or {}).get('measured_ms', float('nan')):.4f} ms: ratio {ratio:.3f} [{flag(ratio <= 1.10)}], "
          f"Spearman rho {rho:.3f} over {len(ranked)} [{flag(rho >= 0.7)}]; registers off by {reg_err:.1f} on "
          f"average; build {result.build_s:.1f} s, timing {result.bench_s:.1f} s")


def shape_names(quick: bool) -> dict[str, list[str]]:
    """The entry names each part runs (``--shapes`` picks among them)."""
    return {"gemm": [f"gemm {M}x{N}x{K}" for M, N, K in (GEMM_SHAPES[:2] if quick else GEMM_SHAPES)],
            "attention": [f"attention {b}x{h}x{n}x{d}{' causal' if c else ''}"
                          for b, h, n, d, c in (ATTENTION_SHAPES[:2] if quick else ATTENTION_SHAPES)]}


def _selected(opts: argparse.Namespace, name: str) -> bool:
    return not opts.shapes or any(s.strip() and s.strip() in name for s in opts.shapes.split(","))


def part_gemm(opts: argparse.Namespace) -> list[dict]:
    g = __import__("01_gemm")
    out = []
    for M, N, K in GEMM_SHAPES[:2] if opts.quick else GEMM_SHAPES:
        if not _selected(opts, f"gemm {M}x{N}x{K}"):
            continue
        space = QUICK if opts.quick else (SKINNY_SPACE if M < 64 else GEMM_SPACE)
        out.append(evaluate(f"gemm {M}x{N}x{K}", g.matmul, (M, N, K), space, opts.warmup, opts.rep, opts.model_only))
    return out


def part_attention(opts: argparse.Namespace) -> list[dict]:
    fa = __import__("03_flash_attention")
    out = []
    for b, h, n, d, causal in ATTENTION_SHAPES[:2] if opts.quick else ATTENTION_SHAPES:
        name = f"attention {b}x{h}x{n}x{d}{' causal' if causal else ''}"
        if not _selected(opts, name):
            continue
        out.append(evaluate(name, fa.flash_attention, (b, h, n, d, causal), ATTENTION_SPACE, opts.warmup, opts.rep,
                            opts.model_only))
    return out


def part_autotune(opts: argparse.Namespace) -> dict:
    """Cold autotuning of 50 GEMM configs (4096^3): a new process with an empty disk cache."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TILEC_CACHE_DIR=d, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get(
            "PYTHONPATH", "")]))
        res = subprocess.run([sys.executable, __file__, "--cold-autotune-child"], capture_output=True, text=True,
                             env=env, timeout=900)
    if res.returncode != 0:
        print(res.stdout + res.stderr)
        return {"error": res.stderr[-2000:]}
    out = json.loads(res.stdout.strip().splitlines()[-1])
    print(f"autotune 50 GEMM configs cold (4096^3, new process, empty cache): {out['wall_s']:.1f} s in all "
          f"(import {out['import_s']:.2f} s, build {out['build_s']:.1f} s, check {out['check_s']:.1f} s, timing "
          f"{out['bench_s']:.1f} s); best {out['best']}")
    return out


def _cold_autotune_child() -> None:
    t0 = time.perf_counter()
    import tilec

    g = __import__("01_gemm")
    t1 = time.perf_counter()
    rec = tilec.recommend(g.matmul, 4096, 4096, 4096, space=GEMM_SPACE)
    configs = [c.config for c in rec.ranked][:50]
    t2 = time.perf_counter()
    tuned = tilec.autotune(configs=configs, progress=False)(g.matmul)
    tuned(4096, 4096, 4096)
    t3 = time.perf_counter()
    r = tuned.last
    print(json.dumps({"wall_s": t3 - t0, "import_s": t1 - t0, "recommend_s": t2 - t1, "tune_s": t3 - t2,
                      "build_s": r.build_s, "check_s": r.check_s, "bench_s": r.bench_s, "configs": len(configs),
                      "excluded": sum(t.status != "ok" for t in r.trials), "best": r.best}))


def _shape_args(name: str) -> tuple[Any, tuple]:
    """The kernel factory and arguments of an entry name ("gemm 1x4096x4096", "attention 8x16x2048x128 causal")."""
    kind, dims, *rest = name.split()
    sizes = tuple(int(x) for x in dims.split("x"))
    if kind == "gemm":
        return __import__("01_gemm").matmul, sizes
    return __import__("03_flash_attention").flash_attention, sizes + (bool(rest),)


SM80_PATH = {"wgmma": False, "tma": False}


class ReplayError(ValueError):
    """A --replay file that cannot be read or holds no measurements."""


def replay(paths: list[str]) -> list[dict]:
    """Score today's model against measurements kept in earlier JSON reports (no GPU needed): each entry's
    candidate space is re-ranked and joined with its measured times by configuration."""
    out = []
    for path in paths:
        try:
            report = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise ReplayError(str(e)) from None
        entries = [e for part in ("gemm", "attention") for e in report.get(part, [])] if isinstance(report, dict) \
            else []
        if not any(r.get("measured_ms") is not None for e in entries for r in e.get("rows", [])):
            raise ReplayError(f"{path}: no measured candidates to replay (a report of recommend_eval.py run on a GPU "
                             "without --model-only holds them under 'gemm' / 'attention')")
        for entry in entries:
            measured = {_tag(r["config"]): r for r in entry["rows"] if r.get("measured_ms") is not None}
            if not measured:
                continue
            space = {k: sorted({r["config"][k] for r in entry["rows"]}) for k in entry["rows"][0]["config"]}
            fn, args = _shape_args(entry["name"])
            # the pass configs of the measurement; reports from before the Hopper path became the default on
            # sm_90a (2026-12-03) record none and measured the sm_80 path
            configs = entry.get("pass_configs", SM80_PATH)
            import tilec

            fn = tilec.jit(out_idx=fn.out_idx, target=fn.target, pass_configs=configs)(fn.fn)
            new = evaluate(f"{entry['name']} ({Path(path).name})", fn, args, space, 0, 0, True)
            for row in new["rows"]:
                m = measured.get(_tag(row["config"]))
                row.update(measured_ms=m["measured_ms"] if m else None, regs_ptxas=(m or {}).get("regs_ptxas"))
            _summarize(new, types.SimpleNamespace(build_s=0.0, bench_s=0.0))
            out.append(new)
    return out


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="gemm,attention,autotune")
    p.add_argument("--quick", action="store_true", help="two shapes per kernel and a smaller space")
    p.add_argument("--model-only", action="store_true", help="the model's rankings only (no GPU)")
    p.add_argument("--warmup", type=float, default=10.0, help="ms of warm-up per candidate")
    p.add_argument("--rep", type=float, default=50.0, help="ms of timed repetitions per candidate")
    p.add_argument("--shapes", default="", help="comma-separated parts of shape names to run, e.g. "
                   "'gemm 1x4096x4096,attention 2x16' (default: all)")
    p.add_argument("--replay", nargs="+", metavar="JSON", help="score the model against the measurements in "
                   "these reports instead of measuring (no GPU needed)")
    p.add_argument("--json", default=None)
    p.add_argument("--cold-autotune-child", action="store_true", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if opts.cold_autotune_child:
        _cold_autotune_child()
        return
    if opts.replay:
        try:
            replay(opts.replay)
        except ReplayError as e:
            p.error(f"--replay: {e}")
        return
    parts = [s.strip() for s in opts.only.split(",") if s.strip()]
    unknown = [s for s in parts if s not in ("gemm", "attention", "autotune")]
    if unknown or not parts:
        p.error(f"--only: unknown part(s) {', '.join(unknown) or repr(opts.only)}; the parts are gemm, attention, "
                "autotune")
    names = [n for part in parts for n in shape_names(opts.quick).get(part, [])]
    missing = [s.strip() for s in opts.shapes.split(",") if s.strip() and not any(s.strip() in n for n in names)]
    if missing:  # a misspelt part of a name would otherwise run nothing without a word
        p.error(f"--shapes: {', '.join(map(repr, missing))} is part of no shape name of "
                f"{', '.join(parts)}{' (--quick)' if opts.quick else ''}: {', '.join(names)}")
    if not opts.model_only:
        from tilec import target

        if not target.gpu_available():  # else the model's ranking ran, then the autotuner ended in a traceback
            sys.exit("benchmarks/recommend_eval.py times the candidates on an NVIDIA GPU (through CuPy), and no GPU "
                     "is visible: pass --model-only for the model's rankings alone, or --replay JSON... to score the "
                     "model against the measurements of an earlier report")
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "host": platform.node(),
                              "model_only": opts.model_only}
    t0 = time.perf_counter()
    for part in parts:
        t = time.perf_counter()
        if part == "autotune" and opts.model_only:
            continue
        report[part] = {"gemm": part_gemm, "attention": part_attention, "autotune": part_autotune}[part](opts)
        print(f"# {part}: {time.perf_counter() - t:.0f} s")
    report["wall_s"] = time.perf_counter() - t0
    path = opts.json or (os.path.join(os.environ["OUT"], "recommend_eval.json") if os.environ.get("OUT") else None)
    if path:
        Path(path).write_text(json.dumps(report, indent=1, default=str))
        print(f"# wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
