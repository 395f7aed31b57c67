"""The device header's float floor division and modulo (``tl::ffloordiv`` / ``tl::ffloormod``, behind ``//`` and
``%`` on floats in CUDA and HIP) give what the interpreters give (numpy's, Python's exact semantics): their text,
compiled for the host with the system's C++ compiler, against numpy on edge cases and random values, bit for bit.
Skipped where no C++ compiler is present."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from tilec.backends.common_header import COMMON

CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler")

_DRIVER = r"""
#include <cmath>
#include <cstdio>
using std::copysign; using std::floor; using std::fmod;
#define __device__
#define __forceinline__ inline
namespace tl {
%s
}
int main() {
  double a, b;
  while (std::scanf("%%la %%la", &a, &b) == 2) {
    float x = (float)a, y = (float)b;
    std::printf("%%a %%a %%a %%a\n", (double)tl::ffloordiv(x, y), (double)tl::ffloormod(x, y), tl::ffloordiv(a, b),
                tl::ffloormod(a, b));
  }
}
"""


def _helpers() -> str:
    """The header's ffloordiv / ffloormod definitions (templates over float and double), as written."""
    found = re.findall(r"template <class F> __device__ __forceinline__ F ffloor(?:div|mod)\(.*?\n}\n", COMMON, re.S)
    assert len(found) == 2, found
    return "".join(found)


def test_float_floor_division_and_modulo_match_numpy(tmp_path):
    src, exe = tmp_path / "fdiv.cpp", tmp_path / "fdiv"
    src.write_text(_DRIVER % _helpers())
    subprocess.run([CXX, "-O2", "-ffp-contract=off", "-o", str(exe), str(src)], check=True, capture_output=True)
    rng = np.random.default_rng()
    edge = [(1.0, 0.1), (-1.0, 0.1), (1.0, -0.1), (7.5, 2.0), (-7.5, 2.0), (7.5, -2.0), (0.0, 3.0), (-0.0, 3.0),
            (0.0, -3.0), (3.0, 0.0), (-3.0, 0.0), (0.0, 0.0), (5.0, np.inf), (-5.0, np.inf), (np.inf, 2.0),
            (1e30, 1e-30), (0.3, 0.1), (2.9999998, 1.0)]
    rand = [tuple(x) for x in rng.standard_normal((400, 2)) * rng.choice([1e-3, 1.0, 1e3], (400, 2))]
    pairs = edge + rand
    out = subprocess.run([str(exe)], input="".join(f"{float(a).hex()} {float(b).hex()}\n" for a, b in pairs),
                         capture_output=True, text=True, check=True).stdout.split("\n")
    for (a, b), line in zip(pairs, out):
        got = [float.fromhex(v) for v in line.split()]
        with np.errstate(all="ignore"):
            a32, b32 = np.float32(a), np.float32(b)
            want = [float(np.floor_divide(a32, b32)), float(np.remainder(a32, b32)), float(np.floor_divide(a, b)),
                    float(np.remainder(a, b))]
        for g, w, what in zip(got, want, ("float //", "float %", "double //", "double %")):
            assert (np.isnan(g) and np.isnan(w)) or (g == w and np.signbit(g) == np.signbit(w)), (a, b, what, g, w)
