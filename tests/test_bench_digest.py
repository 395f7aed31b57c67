"""``benchmarks/codegen_digest.py`` (no GPU, no torch): the digests of the suite's kernels are stable from build to
build, change when the generated code does, and leave no torch stand-in behind."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cd():
    sys.path[:0] = [str(ROOT / "benchmarks")]
    import codegen_digest

    yield codegen_digest
    del sys.path[0]


def test_digests_are_stable_and_leave_torch_alone(cd):
    torch_before = sys.modules.get("torch")
    first = cd.digests(["softmax"], "cuda:sm_90a")
    assert sys.modules.get("torch") is torch_before
    assert sorted(first) == ["softmax 000 main (8192x4096,8192x4096)", "softmax 001 main (4096x16384,4096x16384)"]
    assert all(len(v) == 16 and int(v, 16) >= 0 for v in first.values())
    assert cd.digests(["softmax"], "cuda:sm_90a") == first
    assert cd.digests(["softmax"], "hip:gfx90a").keys() == first.keys()
    assert cd.digests(["softmax"], "hip:gfx90a") != first  # another target, other code


def test_a_change_to_the_generated_code_shows(cd, monkeypatch, tmp_path):
    before = tmp_path / "before.json"
    assert cd.main(["--cases", "softmax", "--json", str(before)]) == 0
    assert len(json.loads(before.read_text())) == 2
    assert cd.main(["--cases", "softmax", "--against", str(before)]) == 0
    from tilec.backends.cemit import CEmitter

    emit = CEmitter.emit
    monkeypatch.setattr(CEmitter, "emit", lambda self, depth, text: emit(self, depth, text + " "))
    assert cd.main(["--cases", "softmax", "--against", str(before)]) == 1
    assert cd.compare(json.loads(before.read_text()), cd.digests(["softmax"], "cuda:sm_90a")) == [
        "softmax 000 main (8192x4096,8192x4096): changed", "softmax 001 main (4096x16384,4096x16384): changed"]
    assert cd.compare({"a": "1"}, {"b": "1"}) == ["a: only before", "b: only now"]


def test_unknown_cases_are_refused(cd, capsys):
    with pytest.raises(SystemExit):
        cd.main(["--cases", "softmax,nope"])
    assert "--cases: unknown case(s) nope; the cases are gemm," in capsys.readouterr().err
