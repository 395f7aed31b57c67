"""The benchmark harness's table and JSON code on recorded results (no GPU needed)."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*-h200-full*.json"))  # benchmark runs (rows)


@pytest.fixture(scope="module")
def report():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import report

    yield report
    sys.path.remove(str(ROOT / "benchmarks"))


@pytest.mark.skipif(not RESULTS, reason="no recorded results")
def test_table_from_recorded_results(report):
    result = json.loads(RESULTS[0].read_text())
    text = report.render_table(result)
    assert text.startswith("Benchmarks of ")
    assert "| gemm float16 | 4096x4096x4096 | torch |" in text
    rows = [r for r in result["rows"] if r["kernel"] == "gemm float16" and r["shape"] == "4096x4096x4096"]
    best = min(r["ms"] for r in rows if r["impl"].startswith("tilec") and r["ms"])
    torch_ms = next(r["ms"] for r in rows if r["impl"] == "torch")
    assert f"{torch_ms / best:.2f}x" in text


def test_ratios_and_missing_values(report):
    result = {"date": "d", "environment": {"gpu": "G"}, "notes": ["peer X skipped"], "rows": [
        {"kernel": "k", "shape": "s", "impl": "tilec a", "ms": 2.0, "tflops": 1.0, "gbs": None, "error": 1e-4,
         "note": "", "extra": {}},
        {"kernel": "k", "shape": "s", "impl": "tilec b", "ms": 1.0, "tflops": 2.0, "gbs": None, "error": 1e-4,
         "note": "", "extra": {}},
        {"kernel": "k", "shape": "s", "impl": "peer", "ms": 3.0, "tflops": 0.7, "gbs": None, "error": float("nan"),
         "note": "", "extra": {}},
        {"kernel": "k", "shape": "s", "impl": "broken", "ms": None, "tflops": None, "gbs": None, "error": None,
         "note": "RuntimeError: x", "extra": {}},
        {"kernel": "launch", "shape": "tiny", "impl": "tilec", "ms": None, "tflops": None, "gbs": None,
         "error": None, "note": "", "extra": {"us_per_launch": 4.5}},
    ]}
    text = report.render_table(result)
    assert "| k | s | peer | 3.000 | 0.7 | — | NaN | 3.00x |" in text  # ratio against the best tilec row
    assert "broken (RuntimeError: x)" in text
    assert "us_per_launch 4.5" in text
    assert "note: peer X skipped" in text
