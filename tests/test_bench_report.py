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
        {"kernel": "launch", "shape": "tiny", "impl": "peer (a published figure)", "ms": None, "tflops": None,
         "gbs": None, "error": None, "note": "", "extra": {"import_s": "5.7-6.3"}},
    ]}
    text = report.render_table(result)
    assert "| k | s | peer | 3.000 | 0.7 | — | NaN | 3.00x |" in text  # ratio against the best tilec row
    assert "broken (RuntimeError: x)" in text
    assert "us_per_launch 4.5" in text and "| peer (a published figure) | import_s 5.7-6.3 |" in text
    assert "note: peer X skipped" in text


def test_ratio_range_over_paired_rounds(report):
    row = {"kernel": "k", "shape": "s", "tflops": 1.0, "gbs": None, "error": 1e-4, "note": ""}
    result = {"rows": [dict(row, impl="tilec a", ms=1.0, extra={"rounds_ms": [1.0, 0.9, 1.1]}),
                       dict(row, impl="peer", ms=1.05, extra={"rounds_ms": [1.02, 1.05, 1.0]}),
                       dict(row, impl="peer without rounds", ms=2.0, extra={})]}
    text = report.render_table(result)
    # round by round: 1.02 / 1.0, 1.05 / 0.9, 1.0 / 1.1, not the rounds sorted on their own
    assert "| k | s | peer | 1.050 | 1.0 | — | 1.0e-04 | 1.05x (0.91-1.17) |" in text
    assert "| peer without rounds | 2.000 | 1.0 | — | 1.0e-04 | 2.00x |" in text


def test_compile_times_get_their_column(report):
    row = {"kernel": "k", "shape": "s", "ms": 1.0, "tflops": 1.0, "gbs": None, "error": 1e-4, "note": ""}
    result = {"rows": [dict(row, impl="tilec a", extra={"compile_cold_s": 0.25, "compile_cached_s": 0.002}),
                       dict(row, impl="peer", ms=2.0, extra={})]}
    text = report.render_table(result)
    assert "compile s, cold / cached |" in text
    assert "| k | s | tilec a | 1.000 | 1.0 | — | 1.0e-04 |  | 0.25 / 0.002 |" in text
    assert "| k | s | peer | 2.000 | 1.0 | — | 1.0e-04 | 2.00x | |" in text


def test_every_recorded_result_renders_or_says_what_it_is(report, capsys):
    """Every JSON under benchmarks/results/ renders (the suite's, hopper_variants.py's older bare lists of rows and
    files of named runs), or is a one-line error naming what it holds (recommend_eval.py's and pdl_chain.py's
    reports), never a traceback; --help works."""
    with pytest.raises(SystemExit) as e:
        report.main(["--help"])
    assert e.value.code == 0
    kinds = {"rendered": 0, "refused": 0}
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        rc = report.main([str(path)])
        out, err = capsys.readouterr()
        if rc == 0:
            kinds["rendered"] += 1
            assert "| kernel | shape | implementation |" in out, path.name
        else:
            kinds["refused"] += 1
            assert rc == 2 and err.startswith(f"report.py: {path}: not benchmark rows: "), (path.name, err)
            assert "recommend_eval.py" in err or "pdl_chain.py" in err, err
    assert kinds["rendered"] > 100 and kinds["refused"] <= 6
    assert report.main([str(ROOT / "benchmarks" / "results" / "2026-12-03-h200-variants-10a.json")]) == 0
    out = capsys.readouterr().out
    assert out.count("## ") == 3 and "variants-10a.json: g_bf16" in out


class _FakeTensor:
    def __init__(self, nbytes: int, tag: int) -> None:
        self.nbytes, self.tag = nbytes, tag

    def numel(self) -> int:
        return self.nbytes

    def element_size(self) -> int:
        return 1


@pytest.fixture(scope="module")
def harness():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import run

    yield run
    sys.path.remove(str(ROOT / "benchmarks"))


def test_inputs_rotate_between_calls(harness, monkeypatch):
    """Input sets span twice the L2 (at most 8); the timed calls take them in turn, the error uses the first."""
    made = iter(range(100))
    sets = harness.input_sets(lambda: (_FakeTensor(harness.L2_BYTES // 2, next(made)),))
    assert len(sets) == 4 and [s[0].tag for s in sets] == list(range(4))
    assert len(harness.input_sets(lambda: (_FakeTensor(harness.L2_BYTES * 4, 0),))) == 1
    assert len(harness.input_sets(lambda: (_FakeTensor(1, 0),))) == 8
    seen: list[int] = []
    monkeypatch.setattr(harness, "_bench", lambda fn, quick, warming=False: [fn() for _ in range(9)] and 0.5)
    rows: list = []
    harness._measure(rows, "k", "s", {"tilec x": lambda t: seen.append(t.tag)}, sets, None, 1e9, 0, True,
                     {"tilec x": {"compile_cold_s": 0.1, "compile_cached_s": 0.01}})
    assert seen == [0] + [i % 4 for i in range(9)]  # the check on set 0, then every set in turn
    (row,) = rows
    assert row.ms == 0.5 and row.tflops == 2.0 and row.extra["compile_cold_s"] == 0.1 and row.note == ""


def test_implementations_take_turns_over_rounds(harness, monkeypatch):
    """Without --quick every implementation is timed in a warm-up round (not counted) and three more, each round
    starting one implementation further on; a row's time is the median of its three rounds (perf notes AE)."""
    order: list[tuple[str, bool]] = []
    times = {"a": iter([9.0, 3.0, 1.0, 2.0]), "b": iter([9.0, 5.0, 4.0, 6.0]), "c": iter([9.0, 7.0, 8.0, 9.5])}

    def bench(fn, quick, warming=False):  # noqa: ANN001, ANN202
        name = fn()
        order.append((name, warming))
        return next(times[name])

    monkeypatch.setattr(harness, "_bench", bench)
    rows: list = []
    impls = {n: (lambda t, n=n: n) for n in "abc"}
    harness._measure(rows, "k", "s", impls, [(_FakeTensor(1, 0),)], None, 1e9, 0, False)
    assert order == [("a", True), ("b", True), ("c", True), ("b", False), ("c", False), ("a", False),
                     ("c", False), ("a", False), ("b", False), ("a", False), ("b", False), ("c", False)]
    assert [r.ms for r in rows] == [2.0, 5.0, 8.0] and rows[0].extra["rounds_ms"] == [3.0, 1.0, 2.0]


def test_impls_and_rounds_select_what_is_timed(harness, monkeypatch):
    """``--impls`` keeps the implementations whose label contains one of its strings (the rest get no row and are
    never called); ``--rounds`` sets how many timed rounds follow the warm-up round."""
    called: list[str] = []
    monkeypatch.setattr(harness, "_bench", lambda fn, quick, warming=False: fn() or 1.0)
    monkeypatch.setattr(harness, "SELECT", ("persistent", "torch"))
    monkeypatch.setattr(harness, "ROUNDS", 5)
    impls = {n: (lambda t, n=n: called.append(n)) for n in ("torch", "tilec ws", "tilec ws persistent", "triton")}
    rows: list = []
    harness._measure(rows, "k", "s", impls, [(_FakeTensor(1, 0),)], None, 1e9, 0, False)
    assert [r.impl for r in rows] == ["torch", "tilec ws persistent"]
    assert set(called) == {"torch", "tilec ws persistent"} and len(called) == 2 * (1 + 1 + 5)
    assert len(rows[1].extra["rounds_ms"]) == 5
    assert harness.wanted("tilec 128x256x64 wgmma tma ws persistent panel16") and not harness.wanted("triton")
    with pytest.raises(SystemExit):
        harness.main(["--rounds", "0"])
    with pytest.raises(SystemExit):
        harness.main(["--warmup", "-1"])


def test_impls_and_only_typos_are_errors(harness, monkeypatch, capsys):
    """An --impls string that matches no label of the cases run is an error naming the labels (after the run: it
    used to drop its rows without a word); an --only that names no case is an error before anything runs."""
    monkeypatch.setattr(harness, "environment", lambda: {})
    monkeypatch.setattr(harness, "_peers", lambda: ({}, []))
    monkeypatch.setattr(harness, "_bench", lambda fn, quick, warming=False: 1.0)
    for name, value in (("LABELS", set()), ("SELECT", ()), ("ROUNDS", harness.ROUNDS)):  # main sets them
        monkeypatch.setattr(harness, name, value)
    monkeypatch.setattr(harness, "CASES", {"fake": lambda rows, quick, peers: harness._measure(
        rows, "k", "s", {"torch": lambda: 1, "tilec 128x256x64 persistent": lambda: 1}, [()], None, 0, 0, True)})
    monkeypatch.setattr(harness, "WARMUP_MS", harness.WARMUP_MS)  # main sets it
    harness.main(["--only", "fake", "--impls", "persistent", "--warmup", "1000"])
    out = capsys.readouterr().out
    assert "| k | s | tilec 128x256x64 persistent |" in out and harness.WARMUP_MS == 1000
    for argv, says in ((["--only", "fake", "--impls", "persistent,tirton"], "'tirton' matched no implementation"),
                       (["--only", ","], "--only: unknown case"), (["--impls", ","], "--impls: no label strings")):
        with pytest.raises(SystemExit) as e:
            harness.main(argv)
        assert e.value.code == 2
        assert says in capsys.readouterr().err, argv


@pytest.mark.parametrize("torch", [None, "no gpu"])
def test_the_suite_without_a_gpu_says_it_needs_one(harness, monkeypatch, torch):
    """``python benchmarks/run.py`` on a machine without torch or without a CUDA GPU ended in a traceback
    (ModuleNotFoundError: No module named 'torch', from the environment record); it now exits with a message saying
    that the suite needs an NVIDIA GPU and torch, before any case runs."""
    import types

    if torch is not None:
        torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", torch)  # None: `import torch` raises ImportError
    monkeypatch.setattr(harness, "_peers", lambda: ({}, []))
    ran: list[str] = []
    monkeypatch.setattr(harness, "CASES", {"fake": lambda rows, quick, peers: ran.append("fake")})
    with pytest.raises(SystemExit) as e:
        harness.main(["--only", "fake"])
    assert "benchmarks/run.py times kernels on an NVIDIA GPU" in str(e.value.code)
    assert ("torch is not installed" if torch is None else "no CUDA GPU is visible") in str(e.value.code)
    assert not ran


def test_rounds_carry_the_sm_clock(harness, monkeypatch):
    """Each timed round's SM clock (NVML, sampled while the timing runs) goes in the row beside its time; without
    NVML the rows carry no clock rather than a made-up one."""
    import threading
    import types

    clock = iter(range(1000, 100000, 10))
    fake = types.SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: "h", NVML_CLOCK_SM=0,
                                 nvmlDeviceGetClockInfo=lambda h, kind: next(clock))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(
        current_device=lambda: 0)))
    busy = threading.Event()

    def bench(fn, quick, warming=False):  # noqa: ANN001, ANN202
        busy.wait(0.03)  # long enough for a few samples
        return 1.0

    monkeypatch.setattr(harness, "_bench", bench)
    rows: list = []
    harness._measure(rows, "k", "s", {"a": lambda t: t}, [(_FakeTensor(1, 0),)], None, 1e9, 0, False)
    mhz = rows[0].extra["rounds_mhz"]
    assert len(mhz) == len(rows[0].extra["rounds_ms"]) == harness.ROUNDS
    assert all(isinstance(m, float) and m >= 1000 for m in mhz) and mhz == sorted(mhz) and mhz[0] < mhz[-1]
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: no clock
    rows = []
    harness._measure(rows, "k", "s", {"a": lambda t: t}, [(_FakeTensor(1, 0),)], None, 1e9, 0, False)
    assert "rounds_mhz" not in rows[0].extra and len(rows[0].extra["rounds_ms"]) == harness.ROUNDS


class _FakeTimer:
    """A GPU timeline for ``_interleaved``: each call advances a clock by its implementation's time, which grows
    with a shared slowdown over the passes (a falling SM clock), so only implementations timed at the same moments
    keep their true ratio."""

    def __init__(self, cost: dict[str, float]) -> None:
        self.now, self.cost, self.log, self.calls = 0.0, cost, [], 0

    def flush(self) -> None:
        self.log.append("flush")

    def event(self) -> float:
        return self.now

    def run(self, name: str) -> None:
        self.calls += 1
        self.log.append(name)
        self.now += self.cost[name] * (1 + self.calls / 1000)  # the clock falls call by call

    def elapsed(self, a: float, b: float) -> float:
        return b - a

    def sync(self) -> None:
        pass


def test_interleaved_timing_alternates_calls(harness, monkeypatch):
    """``--interleave``: each pass calls every implementation once, a flush before each call, the order rotating
    pass by pass; a round's time is the median of its calls, so two implementations timed while the clock falls
    keep their ratio (timed one after the other they would not); a failing implementation gets its error as a note
    and the others go on."""
    timer = _FakeTimer({"a": 1.0, "b": 2.0, "bad": 1.0})
    calls = {"a": lambda: timer.run("a"), "b": lambda: timer.run("b")}

    def bad():
        raise RuntimeError("boom\nmore")

    calls["bad"] = bad
    rows = {n: harness.Row("k", "s", n) for n in calls}
    monkeypatch.setattr(harness, "WARMUP_MS", 10)
    times, mhz = harness._interleaved(calls, 3, False, rows, timer)
    assert set(times) == {"a", "b", "bad"} and times["bad"] == [] and "bad" not in calls
    assert rows["bad"].note == "RuntimeError: boom"
    assert len(times["a"]) == len(times["b"]) == 3 and mhz["a"] == [None] * 3
    for ta, tb in zip(times["a"], times["b"]):
        assert tb / ta == pytest.approx(2.0, rel=0.01)
    assert times["a"][2] > times["a"][0] * 1.05  # the clock did fall between rounds
    names = [x for x in timer.log if x != "flush"]
    assert timer.log.count("flush") == len(names) + 1  # one flush before every call (and the failed one)
    assert names[:2] == ["a", "b"] and names[2:4] == ["b", "a"]  # the order rotates pass by pass
    assert abs(names.count("a") - names.count("b")) <= 1 and names.count("a") >= 3 * 5


def test_interleave_flag_sets_the_method(harness, monkeypatch, capsys):
    """``--interleave`` switches _measure to _interleaved and says so in the result's notes."""
    seen: list[bool] = []
    monkeypatch.setattr(harness, "environment", lambda: {})
    monkeypatch.setattr(harness, "_peers", lambda: ({}, []))
    monkeypatch.setattr(harness, "CASES", {"c": lambda rows, quick, peers: seen.append(harness.INTERLEAVE)})
    monkeypatch.setattr(harness, "INTERLEAVE", False)
    harness.main(["--only", "c", "--interleave"])
    assert seen == [True] and "timing: interleaved" in capsys.readouterr().out
