"""tilec.recommend: knobs, candidate space, ranking, the printed table, T.auto."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, load_example

import tilec
import tilec.language as T
from tilec.errors import TilecValueError
from tilec.tune.knobs import candidate_configs, knob_names

SMALL = {"block_M": [64, 128], "block_N": [64, 128], "block_K": [32], "num_stages": [2, 3], "threads": [128, 256]}


def _matmul():
    return load_example("01_gemm").matmul


def test_knobs_are_the_tunable_defaults_less_what_the_call_pins():
    fn = _matmul().fn
    assert knob_names(fn, (256, 256, 256), {}) == ["block_M", "block_N", "block_K", "num_stages", "threads"]
    assert knob_names(fn, (256, 256, 256), {"threads": 128}) == ["block_M", "block_N", "block_K", "num_stages"]
    assert knob_names(fn, (256, 256, 256, 64), {}, {"dtype": ["float16"]})[-1] == "dtype"  # named by the space
    assert knob_names(fn, (256, 256, 256), {}, names=["block_K"]) == ["block_K"]
    with pytest.raises(TilecValueError, match="not parameters"):
        knob_names(fn, (), {}, {"block_Q": [1]})
    assert candidate_configs(["a", "b"], {"a": [1, 2], "b": [3]}) == [{"a": 1, "b": 3}, {"a": 2, "b": 3}]
    assert len(candidate_configs(["block_M", "block_N", "block_K", "num_stages", "threads"])) == 5 * 5 * 4 * 4 * 2


def test_recommendation_ranks_prints_and_iterates():
    rec = tilec.recommend(_matmul(), 1024, 1024, 1024, target="cuda:sm_90a", space=SMALL, top_k=4)
    assert len(rec) == 4 and len(rec.ranked) + len(rec.rejected) == 16
    times = [c.cost.time_s for c in rec.ranked]
    assert times == sorted(times)
    configs = list(rec)
    assert configs == rec[:4] and configs[0] == rec[0] == rec.best.config
    assert all(set(c) == set(SMALL) for c in configs)
    text = str(rec)
    assert "recommendation for matmul on H200 SXM" in text and "est_us" in text and "bound" in text
    assert text.count("\n") >= 5
    assert "<table>" in rec._repr_html_()
    json.dumps(rec.as_dicts())
    assert rec.top(2)[:] == configs[:2]


def test_ranking_is_deterministic_and_ties_break_on_the_config():
    a = tilec.recommend(_matmul(), 1024, 1024, 1024, target="cuda:sm_80", space=SMALL)
    b = tilec.recommend(_matmul(), 1024, 1024, 1024, target="cuda:sm_80", space=SMALL)
    assert list(a) == list(b) and str(a) == str(b)

    @tilec.jit(out_idx=[-1])
    def copy(N, block_N=128, tag=0):  # tag changes nothing: every candidate costs the same
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block_N), threads=128) as bx:
                for i in T.Parallel(block_N):
                    B[bx * block_N + i] = A[bx * block_N + i]

        return main

    rec = tilec.recommend(copy, 4096, target="cuda:sm_80", space={"tag": [3, 1, 2]}, block_N=128)
    assert [c["tag"] for c in rec] == [1, 2, 3]
    rec = tilec.recommend(copy, 4096, target="cuda:sm_80", space={"tag": [3, 10, 2, 128, 16]}, block_N=128)
    assert [c["tag"] for c in rec] == [2, 3, 10, 16, 128]  # numerically, not as text ('128' < '16' < '2')
    rec = tilec.recommend(copy, 4096, target="cuda:sm_80", space={"tag": [2.5, 10, "b", None, "a", 1, (2, 1)]},
                          block_N=128)
    assert [c["tag"] for c in rec] == [1, 2.5, 10, "a", "b", (2, 1), None]  # numbers, strings, tuples, others
    rec = tilec.recommend(copy, 4096, target="cuda:sm_80", space={"tag": [None, (2, 1), "b", 10, "a", 2.5, 1]},
                          block_N=128)
    assert [c["tag"] for c in rec] == [1, 2.5, 10, "a", "b", (2, 1), None]  # whatever the space's order


def test_impossible_candidates_are_kept_apart_with_reasons():
    space = {"block_M": [16, 128], "block_N": [16, 256], "block_K": [32, 256], "num_stages": [2],
             "threads": [128, 2048]}
    rec = tilec.recommend(_matmul(), 1024, 1024, 1024, target="cuda:sm_90a", space=space)
    reasons = {json.dumps(c.config, sort_keys=True): c.reason for c in rec.rejected}
    assert any("at most 1024 threads" in r for r in reasons.values())  # the frontend refuses the launch
    assert any("mma.m16n8k16" in r for r in reasons.values())  # a 16x16 tile over 4 warps
    assert any("registers" in r for r in reasons.values())  # 128x256 accumulators on 128 threads
    assert any("shared memory" in r for r in reasons.values())  # 2 x (128x256 + 256x256) halves
    assert all(c.cost.rejected is None for c in rec.ranked)
    assert "rejected (" in str(rec)


def test_a_factory_that_raises_rejects_that_candidate():
    @tilec.jit(out_idx=[-1])
    def picky(N, block_N=128):
        if block_N > 64:
            raise ValueError("block_N must be at most 64")

        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block_N), threads=64) as bx:
                for i in T.Parallel(block_N):
                    B[bx * block_N + i] = A[bx * block_N + i] + 1.0

        return main

    rec = tilec.recommend(picky, 1024, space={"block_N": [32, 64, 128]}, target="cuda:sm_80")
    assert sorted(c["block_N"] for c in rec) == [32, 64]
    assert rec.rejected[0].reason == "ValueError: block_N must be at most 64"
    with pytest.raises(TilecValueError, match="nothing to tune"):
        tilec.recommend(picky, 1024, block_N=32)


def test_attention_recommendation():
    fa = load_example("03_flash_attention").flash_attention
    space = {"block_M": [64, 128], "block_N": [32, 64], "num_stages": [1, 2], "threads": [128, 256]}
    rec = tilec.recommend(fa, 2, 4, 1024, 64, True, target="cuda:sm_90a", space=space, top_k=3)
    assert len(rec) == 3 and rec.best.cost.flops["tensor"] > 0
    assert rec.best.cost.loops["k"][0] < rec.best.cost.loops["k"][2]  # causal: trips vary over the blocks


@tilec.jit(out_idx=[-1], target="cpu")
def _scale(N, block_N=T.auto, threads=128):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bx:
            for i in T.Parallel(block_N):
                B[bx * block_N + i] = A[bx * block_N + i] * 2.0

    return main


def test_t_auto_takes_the_cost_models_pick():
    assert repr(T.auto) == "T.auto" and _scale.auto_params == ("block_N",)
    kernel = _scale(1000)
    best = tilec.recommend(_scale, 1000, knobs=["block_N"]).best.config["block_N"]
    assert f"T.Kernel({-(-1000 // best)}, threads=128)" in str(kernel.prim_func)
    assert _scale(1000) is kernel  # memoized by the call's arguments
    a = np.arange(1000, dtype=np.float32)
    np.testing.assert_array_equal(kernel(a), a * 2)
    assert "T.Kernel(16, threads=128)" in str(_scale(1000, block_N=64).prim_func)  # an explicit value wins


def test_t_auto_passed_by_position_takes_the_cost_models_pick():
    """_scale(1000, T.auto) leaves block_N open as _scale(1000, block_N=T.auto) does: it failed with 'nothing to
    tune -- ... or the call pins them all' (the positional T.auto counted as pinning the knob)."""
    want = str(_scale(1000).prim_func)
    assert str(_scale(1000, T.auto).prim_func) == want
    assert str(_scale(1000, T.auto, 128).prim_func) == want
    assert "threads=256" in str(_scale(1000, T.auto, 256).prim_func)
    a = np.arange(1000, dtype=np.float32)
    np.testing.assert_array_equal(_scale(1000, T.auto, 256)(a), a * 2)


def test_import_tilec_stays_light_and_exports_lazily():
    code = ("import sys, tilec; assert 'tilec.tune.recommend' not in sys.modules; "
            "assert 'tilec.passes.cost_model' not in sys.modules; f = tilec.recommend; "
            "assert f.__module__ == 'tilec.tune.recommend' and 'recommend' in dir(tilec); "
            "heavy = [m for m in ('cupy', 'torch', 'sympy', 'networkx') if m in sys.modules]; assert not heavy, heavy; "
            "assert tilec.autotune.__module__ == 'tilec.tune.autotune'")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr


def test_a_recommendation_where_nothing_can_run_prints_the_reasons():
    """Every candidate rejected (here: a T.dynamic size without sizes=): the table has its header and the reasons
    (printing it raised TypeError)."""

    @tilec.jit(out_idx=[1], target="cpu")
    def rows(block=128):
        M = T.dynamic("M")

        @T.prim_func
        def main(X: T.Tensor((M, 64), "float32"), Y: T.Tensor((M, 64), "float32")):
            with T.Kernel(T.ceildiv(M, block), threads=128) as bx:
                for i, j in T.Parallel(block, 64):
                    Y[bx * block + i, j] = X[bx * block + i, j] * 3.0

        return main

    rec = tilec.recommend(rows, space={"block": [32, 64]})
    assert len(rec) == 0 and len(rec.rejected) == 2
    text = str(rec)
    assert "0 of 2 configurations can run" in text and "rank  block" in text
    assert text.count("sizes={name: value}") == 2
    with pytest.raises(TilecValueError, match="no configuration of rows can run"):
        _ = rec.best
    assert len(tilec.recommend(rows, space={"block": [32, 64]}, sizes={"M": 1000})) == 2


@pytest.mark.parametrize("kw, message", [
    ({"space": {"block_N": 64}}, r"space\['block_N'\] is the list of values to try, got 64"),
    ({"space": {"block_N": "64"}}, r"space\['block_N'\] is the list of values to try, got '64'"),
    ({"top_k": 0}, "top_k is the number of rows to keep, an int >= 1 .* got 0"),
    ({"top_k": -1}, "top_k is the number of rows to keep, an int >= 1 .* got -1"),
])
def test_a_space_value_that_is_no_list_and_a_top_k_below_one_are_refused(kw, message):
    """space={"block_N": 64} raised a bare TypeError inside tilec; top_k=0 made .best say nothing can run and
    top_k=-1 dropped the last row."""
    with pytest.raises(TilecValueError, match=message):
        tilec.recommend(_matmul(), 256, 256, 256, **kw)
    assert len(tilec.recommend(_matmul(), 256, 256, 256, space={**SMALL, "block_N": range(64, 129, 64)},
                               top_k=3)) == 3


@pytest.mark.parametrize("kw, message", [
    ({"space": 3}, r"recommend: space is a dict \{knob name: list of values\}, got 3"),
    ({"space": [("block_N", [64])]}, r"recommend: space is a dict .* got \[\('block_N', \[64\]\)\]"),
    ({"knobs": 3}, r"recommend: knobs is a list of parameter names, got 3"),
    ({"knobs": "block_N"}, r"recommend: knobs is a list of parameter names, got 'block_N'"),
    ({"sizes": [1000]}, r"recommend: sizes is a dict \{T.dynamic name: value\}, got \[1000\]"),
])
def test_recommend_arguments_of_the_wrong_kind_are_refused(kw, message):
    """space=3 and knobs=3 raised a bare TypeError ('int' object is not iterable) from inside tilec, knobs="block_N"
    was taken letter by letter ("no parameter 'b', 'l', ...") and sizes=[1000] was accepted and unused; each is
    refused naming it."""
    with pytest.raises(TilecValueError, match=message):
        tilec.recommend(_matmul(), 256, 256, 256, **kw)
