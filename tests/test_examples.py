"""Every example script runs as a user would run it, and prints its error line."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import EXAMPLES, ROOT

SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py"))
ERROR_LINE = re.compile(r"^\w[\w ]* .* on cpu: (relative|max abs) error (\d\.\d+e[-+]\d+)$", re.M)


def _env() -> dict[str, str]:
    env = dict(os.environ, TILEC_TARGET="cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])  # this checkout's tilec
    return env


def test_there_are_examples():
    assert {"01_gemm.py", "02_softmax.py", "03_flash_attention.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_runs(script):
    res = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, env=_env(),
                         timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    m = ERROR_LINE.search(res.stdout)
    assert m, res.stdout
    assert float(m.group(2)) < 1e-2
    assert "FTG main:" in res.stdout


def test_flash_attention_example_causal_argument():
    args = [sys.executable, str(EXAMPLES / "03_flash_attention.py"), "1", "1", "70", "32", "causal"]
    res = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "flash attention b=1 h=1 n=70 d=32 causal=True on cpu: max abs error" in res.stdout


@pytest.mark.parametrize(("word", "causal"), [("True", True), ("CAUSAL", True), ("yes", True), ("0", False),
                                              ("False", False), ("no", False)])
def test_flash_attention_example_causal_words(word, causal):
    """`03_flash_attention.py 1 1 70 32 True` ran the non-causal kernel (only '1', 'true' and 'causal' counted)."""
    args = [sys.executable, str(EXAMPLES / "03_flash_attention.py"), "1", "1", "70", "32", word]
    res = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"flash attention b=1 h=1 n=70 d=32 causal={causal} on cpu: max abs error" in res.stdout


def test_flash_attention_example_refuses_an_unknown_causal_word():
    args = [sys.executable, str(EXAMPLES / "03_flash_attention.py"), "1", "1", "70", "32", "maybe"]
    res = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=120, cwd=ROOT)
    assert res.returncode != 0
    assert "causal: expected 1/true/yes/causal or 0/false/no, got 'maybe'" in res.stderr


@pytest.mark.parametrize("heads", [16, 48])
def test_mla_decode_example_with_fewer_heads_than_its_default_tile(heads):
    """`python examples/07_mla_decode.py 1 16 3` failed its own assertion (block_H=64 must divide the 16 query
    heads): the example picks a tile of 32 or 16 heads where 64 does not divide them."""
    args = [sys.executable, str(EXAMPLES / "07_mla_decode.py"), "1", str(heads), "3"]
    res = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"mla decode b=1 h={heads} seqlen=3 on cpu: max abs error" in res.stdout


USAGES = [
    ("01_gemm.py", ["512", "512"], "[M N K]"), ("02_softmax.py", ["64"], "[M N]"),
    ("03_flash_attention.py", ["1", "2", "64"], "[batch heads seq dim [causal]]"),
    ("04_recommend.py", ["1", "2", "3", "4"], "[M N K]"), ("05_norms.py", ["1", "2", "3"], "[M N]"),
    ("06_fp8_gemm.py", ["64"], "[M N K]"), ("07_mla_decode.py", ["1", "16"], "[batch heads seqlen]"),
]


@pytest.mark.parametrize(("script", "args", "usage"), USAGES)
def test_examples_refuse_a_wrong_number_of_sizes(script, args, usage):
    """`python examples/01_gemm.py 512 512` ran (and reported on) the default 200x136x96 GEMM, ignoring the sizes it
    was given; a wrong number of arguments now prints the usage and fails."""
    res = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                         env=_env(), timeout=120, cwd=ROOT)
    assert res.returncode != 0, res.stdout
    assert f"usage: python examples/{script} {usage} (got {len(args)} arguments)" in res.stderr


SIZES = {"01_gemm.py": "M N K", "02_softmax.py": "M N", "03_flash_attention.py": "batch heads seq dim",
         "04_recommend.py": "M N K", "05_norms.py": "M N", "06_fp8_gemm.py": "M N K",
         "07_mla_decode.py": "batch heads seqlen"}


@pytest.mark.parametrize("bad", ["a", "0", "-16", "2.5"])
@pytest.mark.parametrize(("script", "usage"), [(s, u) for s, _, u in USAGES])
def test_examples_refuse_a_size_that_is_not_a_positive_integer(script, usage, bad):
    """`python examples/01_gemm.py a b c` ended in a ValueError traceback from int() (and a size of 0 or -16 in an
    AssertionError, a TilecTypeError or numpy's ValueError): each example now prints its usage naming the argument."""
    assert sorted(SIZES) == SCRIPTS  # every example takes sizes
    names = SIZES[script].split()
    for i, name in enumerate(names):
        args = ["16"] * len(names)
        args[i] = bad
        res = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                             env=_env(), timeout=120, cwd=ROOT)
        assert res.returncode != 0, res.stdout
        assert "Traceback" not in res.stderr, res.stderr
        assert f"usage: python examples/{script} {usage}: {name} must be a positive integer, got {bad!r}" \
            in res.stderr, res.stderr


@pytest.mark.parametrize(("script", "usage"), [(s, u) for s, _, u in USAGES])
def test_the_run_line_of_each_example_is_its_usage(script, usage):
    """The ``Run:`` line of an example's docstring gives the arguments its usage message takes (03's said
    ``[batch heads seq dim causal]``, though causal may be left out)."""
    doc = (EXAMPLES / script).read_text().split('"""')[1]
    assert f"Run: python examples/{script} {usage}" in doc


def test_mla_decode_example_refuses_heads_its_tiles_do_not_divide():
    """`python examples/07_mla_decode.py 1 8 100` ended in an AssertionError traceback; it now prints the usage with
    the reason, as for a wrong number of arguments."""
    args = [sys.executable, str(EXAMPLES / "07_mla_decode.py"), "1", "8", "100"]
    res = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=120, cwd=ROOT)
    assert res.returncode != 0, res.stdout
    assert "Traceback" not in res.stderr, res.stderr
    assert ("usage: python examples/07_mla_decode.py [batch heads seqlen]: heads=8 is not a multiple of 16 (a block "
            "takes 16, 32 or 64 heads)") in res.stderr
