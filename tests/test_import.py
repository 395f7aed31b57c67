"""``import tilec`` is light: well under a second, and no GPU library, sympy or ml_dtypes is imported."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

_ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def test_import_pulls_in_no_heavy_module():
    code = ("import tilec, tilec.language, sys; "
            "heavy = [m for m in ('cupy', 'torch', 'sympy', 'ml_dtypes', 'networkx', 'hip') if m in sys.modules]; "
            "assert not heavy, heavy; print(tilec.__file__)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_ENV, cwd="/")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(ROOT / "tilec" / "__init__.py")  # the code under test, not another install


def test_import_time():
    code = ("import time; t = time.perf_counter(); import tilec, tilec.language; "
            "print(time.perf_counter() - t)")
    times = []
    for _ in range(3):  # the best of three: a cold disk cache is not tilec's import time
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_ENV, cwd="/")
        assert res.returncode == 0, res.stderr
        times.append(float(res.stdout))
    print(f"import tilec, tilec.language: {min(times) * 1e3:.0f} ms")
    assert min(times) < 0.5


def test_the_suite_tests_this_checkout():
    import tilec

    assert tilec.__file__ == str(ROOT / "tilec" / "__init__.py")
