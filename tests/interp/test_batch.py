"""Loops whose trips the thread interpreter runs at once (tilec.interp.batch): a gemm whose accumulator every
thread holds whole runs in seconds with the same numerics, trips that depend on each other still run one by one,
and the checks (races, bounds) still fire inside a batched loop."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, load_example, randn

import tilec
from tilec import dtypes as dt
from tilec.errors import RaceError, TilecBoundsError
from tilec.interp import thread
from tilec.ir.expr import Var, binop, const
from tilec.lower.tir import If, Loop, Mem, MemRef, Sync, Write

from .test_thread import TX, at, gmem, run


def count_writes(monkeypatch) -> list[int]:
    """How many Write statements the interpreter executes (a batched loop's body counts once per chunk)."""
    calls = [0]
    rule = thread.STMT_RULES[Write]

    def counting(it, s, env, mask):
        calls[0] += 1
        rule(it, s, env, mask)

    monkeypatch.setitem(thread.STMT_RULES, Write, counting)
    return calls


@pytest.mark.parametrize("target", ["simt:gfx90a", "simt:sm_80"])
def test_gemm_at_96_threads_runs_its_scalar_loops_at_once(rng, monkeypatch, target):
    """96 threads tile no mma/MFMA partition: the scalar-FMA gemm has every thread compute the whole 64 x 64
    accumulator, 4096 x 32 register updates a k-step. Run trip by trip that took 50 s; now the loops over the
    accumulator run at once, with the same result."""
    func = load_example("01_gemm").matmul(64, 64, 64, block_M=64, block_N=64, threads=96).prim_func
    kernel = tilec.JITKernel(func, target)
    assert "scalar FMA path" in kernel.report()
    writes = count_writes(monkeypatch)
    a, b = randn(rng, (64, 64), "float16"), randn(rng, (64, 64), "float16")
    c = kernel(a, b)  # allocated NaN-filled by tilec
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), "float16")
    assert writes[0] < 20_000, writes[0]  # trip by trip: 270,000


def registers_to_global(body, threads: int, n: int, out: np.ndarray, shared=(), globals_=None) -> None:
    """Runs ``body`` (over register array R of ``n`` float32 per thread), then stores R to global OUT."""
    r = Mem("R", dt.float32, "reg", n)
    out_g = Mem("OUT", dt.float32, "global", out.size)
    i = Var("i")
    store = Loop(i, const(n), Write(out_g, binop("+", binop("*", TX, n), i), MemRef(r, i)))
    run([*body(r), store], threads, shared=shared, regs=(r,), globals_={out_g: out, **(globals_ or {})})


def test_trips_reading_what_another_trip_wrote_run_one_by_one():
    """R[i] = R[i - 1] + i: each trip reads the previous one's element (a prefix sum)."""
    i, out = Var("i"), np.full(4 * 8, np.nan, np.float32)
    registers_to_global(lambda r: [
        Write(r, const(0), binop("+", TX, const(0.0))),
        Loop(i, const(7), Write(r, binop("+", i, 1), binop("+", MemRef(r, i), binop("+", i, const(1.0))))),
    ], 4, 8, out)
    ref = np.arange(4)[:, None] + np.cumsum(np.arange(8))[None, :]
    np.testing.assert_array_equal(out.reshape(4, 8), ref)


def test_trips_updating_one_element_run_one_by_one():
    """R[i % 2] += i over 8 trips: one offset expression, but two trips of a thread meet at each element."""
    i, out = Var("i"), np.full(3 * 2, np.nan, np.float32)
    registers_to_global(lambda r: [
        Write(r, const(0), const(0.0)), Write(r, const(1), const(0.0)),
        Loop(i, const(8), Write(r, binop("%", i, 2), binop("+", MemRef(r, binop("%", i, 2)),
                                                        binop("*", TX, binop("+", i, const(0.0)))))),
    ], 3, 2, out)
    ref = np.arange(3)[:, None] * np.array([0 + 2 + 4 + 6, 1 + 3 + 5 + 7])[None, :]
    np.testing.assert_array_equal(out.reshape(3, 2), ref)


def test_independent_trips_reading_shared_memory(rng, monkeypatch):
    """R[i] = S[i] * tx + R[i] after a barrier: one batch, the same values as trip by trip."""
    i, n, s = Var("i"), 40, Mem("S", dt.float32, "shared", 40)
    g, gv = gmem("G", randn(rng, n, "float32"))
    out = np.full(8 * n, np.nan, np.float32)
    writes = count_writes(monkeypatch)
    registers_to_global(lambda r: [
        Loop(i, const(n), Write(r, i, const(1.0))),
        _fill_shared(s, g, n),
        Sync(),
        Loop(i, const(n), Write(r, i, binop("+", binop("*", MemRef(s, i), binop("+", TX, const(0.0))),
                                             MemRef(r, i)))),
    ], 8, n, out, shared=(s,), globals_={g: gv})
    ref = gv[None, :] * np.arange(8, dtype=np.float32)[:, None] + np.float32(1)  # float32 as the kernel computes
    np.testing.assert_array_equal(out.reshape(8, n), ref)
    assert writes[0] == 2 + 5 + n, writes[0]  # 2 batched loops, then trip by trip the shared fills and global stores


def _fill_shared(s: Mem, g: Mem, n: int) -> Loop:
    j = Var("j")
    off = binop("+", binop("*", j, 8), TX)
    return Loop(j, const(n // 8), Write(s, off, MemRef(g, off)))


def test_a_race_inside_a_batched_loop_is_reported():
    """Thread 0 writes S with no barrier before the others read it in a loop whose trips run at once."""
    i, k, s = Var("i"), Var("k"), Mem("S", dt.float32, "shared", 16)
    with pytest.raises(RaceError, match=r"race on shared S\[\d+\]: thread [1-7] reads what thread 0 wrote"):
        registers_to_global(lambda r: [
            If(binop("==", TX, 0), Loop(k, const(16), Write(s, k, const(2.0)))),
            Loop(i, const(16), Write(r, i, MemRef(s, i), loc=at(12))),
        ], 8, 16, np.zeros(8 * 16, np.float32), shared=(s,))


def test_out_of_bounds_inside_a_batched_loop_is_reported():
    i, s = Var("i"), Mem("S", dt.float32, "shared", 16)
    with pytest.raises(TilecBoundsError, match=r"read of shared S\[16\] outside its 16 elements"):
        registers_to_global(lambda r: [Loop(i, const(16), Write(r, i, MemRef(s, binop("+", i, TX))))], 2, 16,
                            np.zeros(2 * 16, np.float32), shared=(s,))
    with pytest.raises(TilecBoundsError, match=r"register array R written out of bounds \(size 16\)"):
        registers_to_global(lambda r: [Loop(i, const(17), Write(r, i, const(0.0)))], 2, 16,
                            np.zeros(2 * 16, np.float32))
