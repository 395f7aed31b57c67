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


_BF16_DRIVER = r"""
#include <cstdio>
#define __host__
#define __device__
%s
int main() {
  double d;
  while (std::scanf("%%la", &d) == 1) std::printf("%%u\n", (unsigned)bf16_rn(d).bits);
}
"""


def test_hip_bfloat16_from_double_rounds_once(tmp_path):
    """The HIP header's tl::bf16_rn (the emitter's path from ints and float64 to bfloat16) rounds once to nearest
    even, as CUDA's conversion and the interpreters do (checked against a table lookup, tests/conftest.py); through
    float it rounded twice (2^24 + 2^16 + 1 gave 2^24, not 2^24 + 2^17)."""
    from conftest import bf16_exact

    from tilec.backends.hip.header import HEADER

    struct = re.search(r"struct bf16 \{.*?\n\};\n", HEADER, re.S)
    fn = re.search(r"__host__ __device__ inline bf16 bf16_rn\(double d\) \{.*?\n\}\n", HEADER, re.S)
    assert struct and fn, "no struct bf16 or bf16_rn in the HIP header"
    src, exe = tmp_path / "bf16.cpp", tmp_path / "bf16"
    src.write_text(_BF16_DRIVER % (struct.group(0) + fn.group(0)))
    subprocess.run([CXX, "-O2", "-std=c++20", "-o", str(exe), str(src)], check=True, capture_output=True)
    rng = np.random.default_rng()
    ints = rng.integers(-(2**40), 2**40, 300) >> rng.integers(0, 30, 300)
    ties = np.array([2**24 + 2**16 + 1, -(2**24 + 2**16 + 1), 2**24 + 2**16, 2**31 - 1, 2**24 + 3 * 2**16 - 1])
    edge = [0.0, -0.0, np.inf, -np.inf, 3.4e38, -3.4e38, 3.3961e38, 1e-40, -1e-45, 2.0**-133, 2.0**-134 * 1.5]
    doubles = np.concatenate([ints.astype(np.float64), ties.astype(np.float64), edge,
                              rng.standard_normal(300) * 10.0 ** rng.integers(-30, 30, 300)])
    out = subprocess.run([str(exe)], input="".join(f"{float(v).hex()}\n" for v in doubles), capture_output=True,
                         text=True, check=True).stdout.split()
    want = bf16_exact(doubles).view(np.uint16)
    bad = [(v, int(g), int(w)) for v, g, w in zip(doubles, out, want) if int(g) != int(w)]
    assert not bad, f"{len(bad)} differ (value, got bits, want bits): {bad[:5]}"
    nan = subprocess.run([str(exe)], input="nan\n", capture_output=True, text=True, check=True).stdout
    assert (int(nan) & 0x7f80) == 0x7f80 and int(nan) & 0x7f, "NaN must stay NaN"


_ATOMIC_DRIVER = r"""
#include <cstdio>
#define __device__
#define __forceinline__ inline
unsigned atomicCAS(unsigned* p, unsigned expected, unsigned desired) {  // one thread: no race to lose
  const unsigned old = *p;
  if (old == expected) *p = desired;
  return old;
}
%s
alignas(4) signed char s8[8]; alignas(4) unsigned char u8[8]; alignas(4) short s16[4]; alignas(4) unsigned short u16[4];
int main() {
  int which, at, v;
  while (std::scanf("%%d %%d %%d", &which, &at, &v) == 3) {
    if (which == 0) atomic_add_narrow_int(&s8[at], static_cast<signed char>(v));
    if (which == 1) atomic_add_narrow_int(&u8[at], static_cast<unsigned char>(v));
    if (which == 2) atomic_add_narrow_int(&s16[at], static_cast<short>(v));
    if (which == 3) atomic_add_narrow_int(&u16[at], static_cast<unsigned short>(v));
  }
  for (int i = 0; i < 8; ++i) std::printf("%%d %%d\n", s8[i], u8[i]);
  for (int i = 0; i < 4; ++i) std::printf("%%d %%d\n", s16[i], u16[i]);
}
"""


def test_atomic_add_of_8_and_16_bit_ints_wraps_in_place(tmp_path):
    """The common header's atomic add of 8/16-bit ints (neither CUDA's nor HIP's atomicAdd has them: nvcc and hipcc
    rejected such a T.atomic_add) adds into its byte(s) of the 32-bit word by compare-and-swap, wrapping as numpy
    (the interpreters) does and leaving the word's other bytes alone."""
    fn = re.search(r"template <class T> __device__ __forceinline__ void atomic_add_narrow_int\(.*?\n}\n", COMMON, re.S)
    assert fn, "no atomic_add_narrow_int in the common header"
    src, exe = tmp_path / "atomic.cpp", tmp_path / "atomic"
    src.write_text(_ATOMIC_DRIVER % fn.group(0))
    subprocess.run([CXX, "-O2", "-o", str(exe), str(src)], check=True, capture_output=True)
    rng = np.random.default_rng()
    arrays = [np.zeros(8, np.int8), np.zeros(8, np.uint8), np.zeros(4, np.int16), np.zeros(4, np.uint16)]
    ops = [(w, int(rng.integers(0, arrays[w].size)), int(rng.integers(-40000, 40000))) for w in rng.integers(0, 4, 600)]
    for w, at, v in ops:
        arrays[w][at] += np.array(v).astype(arrays[w].dtype)  # numpy's wrapping add
    out = subprocess.run([str(exe)], input="".join(f"{w} {at} {v}\n" for w, at, v in ops), capture_output=True,
                         text=True, check=True).stdout.split("\n")
    got = np.array([[int(x) for x in line.split()] for line in out if line])
    np.testing.assert_array_equal(got[:8, 0], arrays[0])
    np.testing.assert_array_equal(got[:8, 1], arrays[1])
    np.testing.assert_array_equal(got[8:, 0], arrays[2])
    np.testing.assert_array_equal(got[8:, 1], arrays[3])


_SHIFT_DRIVER = r"""
#include <cstdio>
#define __device__
#define __forceinline__ inline
%s
template <class T> void run(long long a, long long n) {
  std::printf("%%lld %%lld\n", (long long)shl(static_cast<T>(a), static_cast<T>(n)),
              (long long)shr(static_cast<T>(a), static_cast<T>(n)));
}
int main() {
  int which;
  long long a, n;
  while (std::scanf("%%d %%lld %%lld", &which, &a, &n) == 3) {
    switch (which) {
      case 0: run<signed char>(a, n); break;
      case 1: run<unsigned char>(a, n); break;
      case 2: run<short>(a, n); break;
      case 3: run<unsigned short>(a, n); break;
      case 4: run<int>(a, n); break;
      case 5: run<unsigned>(a, n); break;
      case 6: run<long long>(a, n); break;
      default: run<unsigned long long>(a, n); break;
    }
  }
}
"""


def test_shifts_by_any_count_match_numpy(tmp_path):
    """``tl::shl`` / ``tl::shr`` (``<<`` and ``>>`` whose count is not a constant in range) give numpy's results for
    every count: a count outside [0, bits) shifts every bit out (0; -1 for a negative value shifted right), where C
    leaves it undefined (NVIDIA's shifts clamp the count, AMD's mask it: 1 << 33 gave 0 on one and 2 on the other).
    The 64-bit unsigned results are compared as their bits."""
    found = re.findall(r"template <class T, class S> __device__ __forceinline__ T sh[lr]\(.*?\n}\n", COMMON, re.S)
    assert len(found) == 2, found
    src, exe = tmp_path / "shift.cpp", tmp_path / "shift"
    src.write_text(_SHIFT_DRIVER % "".join(found))
    subprocess.run([CXX, "-O2", "-o", str(exe), str(src)], check=True, capture_output=True)
    types = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]
    rng = np.random.default_rng()
    cases = []
    for which, t in enumerate(types):
        info = np.iinfo(t)
        values = np.concatenate([np.array([info.min, info.max, 0, 1, -1 if info.min else 2], t),
                                 rng.integers(info.min, info.max, 20, dtype=t, endpoint=True)])
        counts = [c for c in (-70, -1, 0, 1, 7, 8, 15, 16, 31, 32, 33, 63, 64, 65, 200) if info.min <= c <= info.max]
        cases += [(which, t, a, t(c)) for a in values for c in counts]
    text = "".join(f"{w} {int(np.int64(a) if t != np.uint64 else np.uint64(a).view(np.int64))} {int(c)}\n"
                   for w, t, a, c in cases)
    out = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True).stdout.split("\n")
    bad = []
    for (_, t, a, c), line in zip(cases, out):
        want = [np.left_shift(np.array([a], t), np.array([c], t))[0], np.right_shift(np.array([a], t),
                                                                                      np.array([c], t))[0]]
        want = [int(np.array([v], t).astype(np.uint64).view(np.int64)[0]) if t == np.uint64 else int(v) for v in want]
        got = [int(v) for v in line.split()]
        if got != want:
            bad.append((t.__name__, int(a), int(c), got, want))
    assert not bad, f"{len(bad)} differ (type, value, count, got, want): {bad[:5]}"


_F2I_DRIVER = r"""
#include <cstdio>
#define __device__
#define __forceinline__ inline
%s
template <class F> void row(F x) {
  std::printf("%%lld %%lld %%lld %%lld %%lld %%lld %%lld %%llu\n", (long long)f2i<signed char>(x),
              (long long)f2i<unsigned char>(x), (long long)f2i<short>(x), (long long)f2i<unsigned short>(x),
              (long long)f2i<int>(x), (long long)f2i<unsigned>(x), f2i<long long>(x), f2i<unsigned long long>(x));
}
int main() {
  double d;
  while (std::scanf("%%la", &d) == 1) {
    row(static_cast<float>(d));
    row(d);
  }
}
"""
_F2I_TYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def test_hip_float_to_int_matches_the_interpreters(tmp_path):
    """The HIP header's tl::f2i (the emitter's float / double to int conversion on HIP) converts as the interpreters
    do (tilec.interp.tile.typed): truncated, saturated to 32 bits (64 for 64-bit types), NaN to 0, the low bits for
    narrower types. hipcc
    compiled C's casts, undefined out of range, to what the instruction it chose gave: half to int8 through
    v_cvt_i16_f16 (40000 gave -1, not 64), float to uint8 through v_cvt_i32_f32 (-1 gave 255, not 0)."""
    from tilec.backends.hip.header import HEADER
    from tilec.dtypes import dtype, typed

    found = re.findall(r"template <class W, class F> __device__ __forceinline__ W f2i_sat\(.*?\n}\n"
                       r"|template <class T, class F> __device__ __forceinline__ T f2i\(.*?\n}\n", HEADER, re.S)
    assert len(found) == 2, "no tl::f2i_sat / tl::f2i in the HIP header"
    src, exe = tmp_path / "f2i.cpp", tmp_path / "f2i"
    src.write_text(_F2I_DRIVER % "".join(found))
    subprocess.run([CXX, "-O2", "-o", str(exe), str(src)], check=True, capture_output=True)
    rng = np.random.default_rng()
    edge = [0.0, -0.0, 0.5, -0.5, -1.0, 1.0, 127.75, -128.5, 255.5, 256.0, 300.0, -300.0, 40000.0, 65504.0, 65536.0,
            -40000.0, 2.0**31, -(2.0**31), 2.0**31 - 1, 2.0**31 + 1, 3e9, -3e9, 2.0**32, 2.0**32 - 0.5, 5e9, 2.0**63,
            -(2.0**63), 2.0**64, 1e30, -1e30, np.inf, -np.inf, np.nan]
    values = np.concatenate([edge, rng.standard_normal(200) * 10.0 ** rng.integers(0, 12, 200)])
    out = subprocess.run([str(exe)], input="".join(f"{float(v).hex()}\n" for v in values), capture_output=True,
                         text=True, check=True).stdout.split("\n")
    bad = []
    for i, v in enumerate(values):
        for src_type, line in (("float32", out[2 * i]), ("float64", out[2 * i + 1])):
            x = np.array([v], src_type)
            for t, got in zip(_F2I_TYPES, line.split()):
                with np.errstate(all="ignore"):
                    want = int(typed(x, dtype(t))[0])
                if int(got) != want:
                    bad.append((src_type, float(v), t, int(got), want))
    assert not bad, f"{len(bad)} differ (source, value, type, got, want): {bad[:6]}"


_INT_EXPR_DRIVER = r"""
#include <cmath>
#include <cstdio>
using std::copysign; using std::floor; using std::fmod; using std::fmin; using std::fmax;
#define __device__
#define __forceinline__ inline
namespace tl {
%s
}
int main() {
  for (int i = 0; i < %d; ++i) {
%s
    std::printf("\n");
  }
}
"""


def _emitted_int_exprs(exprs: list, i, n: int, tmp_path) -> np.ndarray:
    """The values of integer expressions of ``i`` (a thread or loop index: the emitter knows it is not negative) for
    ``i`` in ``range(n)``, as the CUDA emitter prints them, compiled for the host (C++'s integer semantics are CUDA's):
    an array of shape (n, len(exprs))."""
    from tilec.backends.cemit import CEmitter
    from tilec.backends.cuda.table import CUDA

    em = CEmitter(CUDA, nonneg={id(i)})
    assert em.names(i) == "i"
    helpers = COMMON[: COMMON.index("__device__ __forceinline__ float sigmoid")]  # min/max, divisions, shifts
    prints = "\n".join(f'    std::printf("%lld ", (long long)({em.e(e)}));' for e in exprs)
    src, exe = tmp_path / "ints.cpp", tmp_path / "ints"
    src.write_text(_INT_EXPR_DRIVER % (helpers, n, prints))
    built = subprocess.run([CXX, "-O2", "-o", str(exe), str(src)], capture_output=True, text=True)
    assert built.returncode == 0, f"the emitted expressions do not compile:\n{built.stderr[-3000:]}"
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")[:n]
    return np.array([[int(v) for v in line.split()] for line in out], np.int64)


def test_floor_division_of_narrow_ints_that_wrap_negative(tmp_path):
    """``//`` and ``%`` of operands the emitter takes for non-negative print as C's ``/`` and ``%`` (which truncate);
    an 8- or 16-bit sum or product of non-negative values, or a non-negative int narrowed by a cast, wraps negative
    in its type (as interpreted): ``T.cast(i, "int8") * 4 // 3`` for i = 38 (-104 // 3) gave -34 in CUDA, not -35,
    and its ``% 3`` -2, not 1. Such operands now go through tl::floordiv / tl::floormod."""
    from tilec import dtypes as dt
    from tilec.ir.expr import Var, binop, cast, const

    n = 256
    i = Var("i", dt.int32)
    i8, i16 = cast(dt.int8, i), cast(dt.int16, i)
    exprs = [
        binop("//", binop("*", i8, const(4, dt.int8)), const(3, dt.int8)),
        binop("%", binop("*", i8, const(4, dt.int8)), const(3, dt.int8)),
        binop("//", binop("+", i8, const(100, dt.int8)), const(7, dt.int8)),
        binop("%", cast(dt.int8, binop("*", i, 4)), const(3, dt.int8)),
        binop("//", binop("*", i16, const(300, dt.int16)), const(7, dt.int16)),
        binop("//", cast(dt.int32, cast(dt.uint8, i)), 3),  # in range: C's / stays
    ]
    got = _emitted_int_exprs(exprs, i, n, tmp_path)
    x = np.arange(n)
    wrap8 = lambda v: (v + 128) % 256 - 128  # noqa: E731
    wrap16 = lambda v: (v + 2**15) % 2**16 - 2**15  # noqa: E731
    want = np.stack([wrap8(wrap8(x) * 4) // 3, wrap8(wrap8(x) * 4) % 3, wrap8(wrap8(x) + 100) // 7, wrap8(x * 4) % 3,
                     wrap16(wrap16(x) * 300) // 7, x // 3], axis=1)
    bad = np.argwhere(got != want)
    assert not bad.size, [(int(r), int(c), int(got[r, c]), int(want[r, c])) for r, c in bad[:8]]


def test_max_and_min_of_narrow_and_unsigned_ints_compile_and_match(tmp_path):
    """``T.max`` / ``T.min`` of an 8/16-bit or unsigned int and a constant (``T.max(x, 0)``), or an expression C
    computes in int (``a & b``, ``a // b``), printed as tl::max(short, int): no instance of the template matched and
    the kernel did not compile (CUDA and HIP). The template's argument is now named."""
    from tilec import dtypes as dt
    from tilec.ir.expr import Var, binop, cast, const

    n = 256
    i = Var("i", dt.int32)
    exprs = []
    for d in (dt.int8, dt.uint8, dt.int16, dt.uint16, dt.uint32, dt.int64, dt.uint64):
        v = binop("-", cast(d, i), const(100, d))  # wraps below zero where signed, around where unsigned
        exprs += [binop("max", v, const(0, d)), binop("min", const(5, d), v),
                  binop("max", binop("&", v, const(-4 if d.kind == "int" else 252, d)), binop("//", v, const(3, d)))]
    got = _emitted_int_exprs(exprs, i, n, tmp_path)
    x = np.arange(n)
    want = []
    for d in (np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.int64, np.uint64):
        with np.errstate(over="ignore"):
            v = x.astype(d) - d(100)
            mask = d(-4) if np.iinfo(d).min else d(252)
            want += [np.maximum(v, d(0)), np.minimum(d(5), v), np.maximum(v & mask, v // d(3))]
    want = np.stack([w.astype(np.int64) for w in want], axis=1)  # uint64 as C's (long long) conversion: its bits
    bad = np.argwhere(got != want)
    assert not bad.size, [(int(r), int(c), int(got[r, c]), int(want[r, c])) for r, c in bad[:8]]


_DOUBLE_EXPR_DRIVER = r"""
#include <cmath>
#include <cstdio>
using std::copysign; using std::floor; using std::fmod; using std::fmin; using std::fmax;
#define __device__
#define __forceinline__ inline
namespace tl {
%s
}
int main() {
  double v;
  while (std::scanf("%%la", &v) == 1) {
    const double x = v;
%s
    std::printf("\n");
  }
}
"""


def test_double_infinity_and_nan_constants_are_doubles(tmp_path):
    """A float64 infinity or NaN constant printed as INFINITY / NAN, which C types float: T.max(x, -inf) of a double
    was tl::max(double, float), no instance of the template matched and the kernel did not compile (CUDA and HIP;
    the same for // and % by an infinity). They print as doubles; the host compiler checks the values too."""
    from tilec import dtypes as dt
    from tilec.backends.cemit import CEmitter
    from tilec.backends.cuda.table import CUDA
    from tilec.ir.expr import Var, binop, const

    x = Var("x", dt.float64)
    inf, nan = const(np.inf, dt.float64), const(np.nan, dt.float64)
    ninf = const(-np.inf, dt.float64)
    exprs = [binop("max", x, ninf), binop("min", inf, x), binop("max", nan, x), binop("//", x, inf),
             binop("%", x, ninf), binop("+", x, nan)]
    em = CEmitter(CUDA)
    helpers = COMMON[: COMMON.index("__device__ __forceinline__ float sigmoid")]
    prints = "\n".join(f'    std::printf("%a ", (double)({em.e(e)}));' for e in exprs)
    src, exe = tmp_path / "dbl.cpp", tmp_path / "dbl"
    src.write_text(_DOUBLE_EXPR_DRIVER % (helpers, prints))
    built = subprocess.run([CXX, "-O2", "-o", str(exe), str(src)], capture_output=True, text=True)
    assert built.returncode == 0, f"the emitted expressions do not compile:\n{built.stderr[-3000:]}"
    values = np.array([0.0, -0.0, 1.5, -2.5, 1e300, -1e-300, np.inf, -np.inf, np.nan])
    out = subprocess.run([str(exe)], input="".join(f"{float(v).hex()}\n" for v in values), capture_output=True,
                         text=True, check=True).stdout.split("\n")
    got = np.array([[float.fromhex(t) if "nan" not in t else np.nan for t in line.split()] for line in out[:9]])
    with np.errstate(all="ignore"):
        want = np.stack([np.fmax(values, -np.inf), np.fmin(np.inf, values), np.fmax(np.nan, values),
                         np.floor_divide(values, np.inf), np.remainder(values, -np.inf), values + np.nan], axis=1)
    np.testing.assert_array_equal(got, want)
