"""The GPU evaluation script of the cost model, on the CPU: its statistics, and one evaluation with a fake timer."""

from __future__ import annotations

import importlib.util
import math

import pytest
from conftest import ROOT, load_example

import tilec


def _script():
    spec = importlib.util.spec_from_file_location("recommend_eval", ROOT / "benchmarks" / "recommend_eval.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_spearman():
    ev = _script()
    assert ev.ranks([3.0, 1.0, 2.0, 1.0]) == [4.0, 1.5, 3.0, 1.5]
    assert ev.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert ev.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(ev.spearman([1, 2], [1, 2]))


def test_evaluation_with_a_timer_that_agrees_with_the_model(capsys):
    ev = _script()
    matmul = tilec.jit(out_idx=[-1], target="cpu")(load_example("01_gemm").matmul.fn)
    space = {"block_M": [32, 64], "block_N": [32, 64], "block_K": [32], "num_stages": [2], "threads": [128]}
    predicted = {}

    def timer(run, config):  # the model's own estimate: a perfect model
        return predicted[tuple(sorted(config.items()))]

    rec = tilec.recommend(matmul, 64, 64, 64, space=space)
    predicted.update({tuple(sorted(c.config.items())): c.cost.time_s * 1e3 for c in rec.ranked})
    entry = ev.evaluate("gemm 64^3", matmul, (64, 64, 64), space, 1, 1, False, timer=timer)
    assert entry["top1_ratio"] == pytest.approx(1.0) and entry["spearman"] == pytest.approx(1.0)
    assert entry["timed"] == entry["model_ranked"] == 4 and entry["measured_best"] == rec[0]
    assert "ratio 1.000 [ok], Spearman rho 1.000 over 4 [ok]" in capsys.readouterr().out


def test_model_only_run_writes_its_json(tmp_path, monkeypatch):
    ev = _script()
    monkeypatch.setattr(ev, "GEMM_SHAPES", [(256, 256, 256)])
    monkeypatch.setattr(ev, "QUICK", {"block_M": [64], "block_N": [64, 128], "block_K": [32], "num_stages": [2],
                                      "threads": [128]})
    out = tmp_path / "r.json"
    ev.main(["--only", "gemm", "--model-only", "--quick", "--json", str(out)])
    import json

    report = json.loads(out.read_text())
    (entry,) = report["gemm"]
    assert entry["candidates"] == 2 and entry["rows"][0]["model_rank"] == 1 and "terms_us" in entry["rows"][0]


@pytest.mark.parametrize("argv", [[], ["--only", "autotune"], ["--only", "gemm", "--quick"]])
def test_measuring_without_a_gpu_points_to_model_only(monkeypatch, argv):
    """``python benchmarks/recommend_eval.py`` without a GPU costed the first GEMM's candidates and then ended in a
    traceback from tilec.autotune ("tuning needs a GPU"). It now exits, before any part runs, with a message that
    measuring needs an NVIDIA GPU and that --model-only (or --replay) runs without one."""
    import tilec.target

    ev = _script()
    monkeypatch.setattr(tilec.target, "gpu_available", lambda: False)
    ran: list[str] = []
    for part in ("part_gemm", "part_attention", "part_autotune"):
        monkeypatch.setattr(ev, part, lambda opts, part=part: ran.append(part) or [])
    with pytest.raises(SystemExit) as e:
        ev.main(argv)
    assert isinstance(e.value.code, str), e.value.code  # a message and exit status 1, not a traceback
    assert "times the candidates on an NVIDIA GPU (through CuPy), and no GPU is visible" in e.value.code
    assert "--model-only" in e.value.code and "--replay" in e.value.code
    assert not ran
    ev.main(["--only", "gemm", "--model-only"])  # what the message points to runs without a GPU
    assert ran == ["part_gemm"]


def test_replay_scores_the_model_against_kept_h200_measurements(tmp_path, capsys):
    """The D=64 attention entry of a kept H200 report, re-ranked by today's model (the recorded top-1 was the
    measured best; with register crowding priced in, it still is)."""
    import json

    ev = _script()
    report = json.loads((ROOT / "benchmarks" / "results" / "2026-12-02-h200-recommend-2.json").read_text())
    entry = next(e for e in report["attention"] if e["name"] == "attention 8x16x2048x64")
    small = tmp_path / "one.json"
    small.write_text(json.dumps({"attention": [entry]}))
    (out,) = ev.replay([str(small)])
    assert out["timed"] == entry["timed"] == 36
    assert out["top1_ratio"] <= 1.10 and out["spearman"] >= 0.7
    assert "Spearman rho" in capsys.readouterr().out


def test_register_crowding_stretches_the_estimate():
    """A flash-attention config whose best schedule wants more registers than the cap is costed slower than the
    same totals without the penalty, and the JSON keeps what it wanted."""
    from tilec.passes import cost_model

    fa = tilec.jit(out_idx=[3], pass_configs={"wgmma": False, "tma": False})(  # the mma.sync path's fragments
        load_example("03_flash_attention").flash_attention.fn)
    space = {"block_M": [128], "block_N": [32], "num_stages": [2], "threads": [128]}
    (c,) = tilec.recommend(fa, 8, 16, 2048, 128, True, space=space).ranked
    f = c.cost.factors
    assert c.cost.regs_per_thread == 255 and f["regs_wanted"] > 255 > f["regs_least"]
    saved = cost_model.REGISTER_CROWDING
    try:
        cost_model.REGISTER_CROWDING = 0.0
        (plain,) = tilec.recommend(fa, 8, 16, 2048, 128, True, space=space).ranked
    finally:
        cost_model.REGISTER_CROWDING = saved
    assert c.cost.time_s > plain.cost.time_s * 1.05


@pytest.mark.parametrize("argv,says", [
    (["--only", "gemmm", "--model-only"], "--only: unknown part(s) gemmm"),
    (["--model-only", "--quick", "--shapes", "gemm 8912"], "'gemm 8912' is part of no shape name"),
    (["--replay", str(ROOT / "benchmarks" / "results" / "2026-12-02-h200-autotune.json")], "no measured candidates"),
    (["--replay", "no-such-report.json"], "No such file"),
])
def test_typos_and_empty_replays_are_errors(argv, says, capsys):
    """A misspelt part or shape, or a replay of a file without measurements, is a usage error (it was a KeyError
    traceback, or a run of nothing that exited 0)."""
    with pytest.raises(SystemExit) as e:
        _script().main(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err
