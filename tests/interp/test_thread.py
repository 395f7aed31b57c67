"""The thread interpreter on hand-built thread IR: tensor-core and data-movement instructions against numpy, with
register layouts written here from the PTX ISA text (independently of tilec.layout and of the interpreter's own
tables), and the checks it makes: races, cp.async completion, divergent barriers and shuffles, bounds."""

from __future__ import annotations

import numpy as np
import pytest

from tilec import dtypes as dt
from tilec.errors import RaceError, SourceLoc, TilecBoundsError
from tilec.interp.thread import ThreadInterpreter
from tilec.ir.expr import Expr, Var, binop, const
from tilec.lower.tir import (
    CpAsync,
    CpAsyncCommit,
    CpAsyncWait,
    If,
    LdMatrix,
    Loop,
    Mem,
    MemRef,
    Mma,
    Seq,
    Sync,
    TCall,
    ThreadKernel,
    Write,
)  # fmt: skip

TX = Var("tx")
BX = Var("block_x")


def B(op: str, a, b) -> Expr:  # noqa: N802
    return binop(op, a, b)


LANE = B("%", TX, 32)
WARP = B("//", TX, 32)
GROUP = B("//", LANE, 4)  # PTX "groupID"
TIG = B("%", LANE, 4)  # PTX "threadID_in_group"


def at(line: int) -> SourceLoc:
    return SourceLoc("kernel.py", line, 1)


def kernel(body, threads: int, shared=(), regs=(), grid: int = 1) -> ThreadKernel:
    placed, off = [], 0
    for m in shared:
        placed.append((m, off))
        off += -(-int(m.size) * m.dtype.bits // 8 // 1024) * 1024
    return ThreadKernel("k", (), (), (const(grid),), (BX,), threads, TX, tuple(placed), tuple(regs),
                        Seq(tuple(body)) if isinstance(body, list) else body, off)


def run(body, threads: int, shared=(), regs=(), globals_=None, check_races: bool = True) -> None:
    ThreadInterpreter(kernel(body, threads, shared, regs), check_races).run(globals_ or {}, {})


def gmem(name: str, arr: np.ndarray) -> tuple[Mem, np.ndarray]:
    a = np.ascontiguousarray(arr).reshape(-1)
    return Mem(name, dt.dtype(a.dtype.name), "global", a.size), a


# ------------------------------------------------------------------------------------------ register layouts (PTX)
# PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type": groupID = laneid >> 2,
# threadID_in_group = laneid % 4.
#   A (.f16x2 registers a0..a3, two halves each = a0..a7):
#     row = groupID           for a0, a1, a4, a5;   groupID + 8 for a2, a3, a6, a7
#     col = threadID_in_group * 2 + (i & 1)  for a0..a3;   + 8 for a4..a7
#   B (b0..b3):  row (k) = threadID_in_group * 2 + (i & 1) for b0, b1;  + 8 for b2, b3;   col (n) = groupID
#   C/D (.f32 c0..c3):  row = groupID for c0, c1;  groupID + 8 for c2, c3;   col = threadID_in_group * 2 + (i & 1)


def ptx_a(i: int) -> tuple[Expr, Expr]:
    row = B("+", GROUP, 8) if i in (2, 3, 6, 7) else GROUP
    col = B("+", B("*", TIG, 2), (i & 1) + (8 if i >= 4 else 0))
    return row, col


def ptx_b(i: int) -> tuple[Expr, Expr]:
    return B("+", B("*", TIG, 2), (i & 1) + (8 if i >= 2 else 0)), GROUP


def ptx_c(i: int) -> tuple[Expr, Expr]:
    return (B("+", GROUP, 8) if i >= 2 else GROUP), B("+", B("*", TIG, 2), i & 1)


def element(mem: Mem, base: Expr, rc: tuple[Expr, Expr], ld: int) -> MemRef:
    return MemRef(mem, B("+", base, B("+", B("*", rc[0], ld), rc[1])))


@pytest.mark.parametrize("ab", ["float16", "bfloat16"])
def test_mma_m16n8k16_against_numpy(rng, ab):
    warps = 2  # each warp multiplies its own matrices
    a = rng.standard_normal((warps, 16, 16)).astype(dt.dtype(ab).np)
    b = rng.standard_normal((warps, 16, 8)).astype(dt.dtype(ab).np)
    c = rng.standard_normal((warps, 16, 8)).astype(np.float32)
    (ga, av), (gb, bv), (gc, cv) = gmem("A", a), gmem("B", b), gmem("C", c)
    gd, d = gmem("D", np.full((warps, 16, 8), np.nan, np.float32))
    ra, rb, rc = (Mem(n, t, "reg", s) for n, t, s in (("ra", dt.dtype(ab), 8), ("rb", dt.dtype(ab), 4),
                                                        ("rc", dt.float32, 4)))
    body = []
    for i in range(8):
        body.append(Write(ra, const(i), element(ga, B("*", WARP, 256), ptx_a(i), 16)))
    for i in range(4):
        body.append(Write(rb, const(i), element(gb, B("*", WARP, 128), ptx_b(i), 8)))
        body.append(Write(rc, const(i), element(gc, B("*", WARP, 128), ptx_c(i), 8)))
    body.append(Mma(ra, const(0), rb, const(0), rc, const(0)))
    for i in range(4):
        r, col = ptx_c(i)
        body.append(Write(gd, B("+", B("*", WARP, 128), B("+", B("*", r, 8), col)), MemRef(rc, const(i))))
    run(body, 32 * warps, regs=(ra, rb, rc), globals_={ga: av, gb: bv, gc: cv, gd: d})
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(d.reshape(warps, 16, 8), want, rtol=1e-5, atol=1e-5)


def test_mma_register_offsets_select_the_atoms():
    """``Mma(a, a_off, b, b_off, c, c_off)`` reads A from a[a_off : a_off + 8] etc.: two atoms in one array."""
    ra, rb, rc = Mem("ra", dt.float16, "reg", 16), Mem("rb", dt.float16, "reg", 8), Mem("rc", dt.float32, "reg", 8)
    gd, d = gmem("D", np.zeros((32, 8), np.float32))
    body = [Write(ra, const(i), const(1.0 if i < 8 else 2.0, "float16")) for i in range(16)]
    body += [Write(rb, const(i), const(1.0 if i < 4 else 3.0, "float16")) for i in range(8)]
    body += [Write(rc, const(i), const(0.0)) for i in range(8)]
    body += [Mma(ra, const(8), rb, const(4), rc, const(4)), Mma(ra, const(0), rb, const(0), rc, const(0))]
    body += [Write(gd, B("+", B("*", TX, 8), i), MemRef(rc, const(i))) for i in range(8)]
    run(body, 32, regs=(ra, rb, rc), globals_={gd: d})
    d = d.reshape(32, 8)
    np.testing.assert_array_equal(d[:, :4], 16.0)  # all-ones 16x16 @ 16x8: K = 16
    np.testing.assert_array_equal(d[:, 4:], 16 * 2.0 * 3.0)


def test_mma_needs_a_whole_warp():
    ra, rb, rc = Mem("ra", dt.float16, "reg", 8), Mem("rb", dt.float16, "reg", 4), Mem("rc", dt.float32, "reg", 4)
    body = [If(B("<", TX, 16), Mma(ra, const(0), rb, const(0), rc, const(0)), loc=at(7))]
    with pytest.raises(RaceError, match="mma.sync reached by only part of a warp"):
        run(body, 32, regs=(ra, rb, rc))


# ---------------------------------------------------------------------------------------------------- ldmatrix
# PTX ISA, ldmatrix: "each of the 8 rows of a matrix is addressed by one thread: threads 0-7 for matrix 0, 8-15
# for matrix 1, ..." (x1 uses threads 0-7, x2 0-15); "each thread receives two consecutive elements of a row:
# thread t holds row t / 4, columns 2 * (t % 4) and +1", in destination register m for matrix m. With .trans
# the matrix is delivered transposed: thread t holds elements (2 * (t % 4) + e, t / 4).


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix(rng, num, trans):
    ld = 24  # a row stride that is not the matrix width (rows stay 16-byte aligned): addresses come from the lanes
    mats = rng.standard_normal((num, 8, 8)).astype(np.float16)
    store = np.zeros((num * 8, ld), np.float16)
    for m in range(num):
        store[8 * m : 8 * m + 8, 8:16] = mats[m]  # matrix m: rows 8m.., columns 8..15
    g, gv = gmem("G", store)
    out_g, out = gmem("OUT", np.full((32, 2 * num), np.nan, np.float16))
    s = Mem("s", dt.float16, "shared", store.size)
    r = Mem("r", dt.float16, "reg", 2 * num)
    n, q = store.size, Var("q")
    flat = B("+", B("*", q, 32), TX)
    copy = Loop(q, const(-(-n // 32)), If(B("<", flat, n), Write(s, flat, MemRef(g, flat))))
    # lane l < 8 * num gives the address of row l (matrix l // 8, row l % 8); lanes beyond give an address outside
    # the buffer, which the hardware ignores
    addr = B("+", B("*", LANE, ld), 8)
    if num < 4:
        addr = _select(B("<", LANE, 8 * num), addr, const(10**6))
    body = [copy, Sync(), LdMatrix(num, trans, r, const(0), s, addr)]
    body += [Write(out_g, B("+", B("*", TX, 2 * num), i), MemRef(r, const(i))) for i in range(2 * num)]
    run(body, 32, shared=(s,), regs=(r,), globals_={g: gv, out_g: out})
    got = out.reshape(32, num, 2)
    for t in range(32):
        for m in range(num):
            for e in range(2):
                row, col = t // 4, 2 * (t % 4) + e
                want = mats[m, col, row] if trans else mats[m, row, col]
                assert got[t, m, e] == want, (t, m, e)


def _select(cond, a, b):
    from tilec.ir.expr import select

    return select(cond, a, b)


def test_ldmatrix_reads_are_race_checked():
    s = Mem("s", dt.float16, "shared", 64)
    r = Mem("r", dt.float16, "reg", 2)
    body = [Write(s, B("*", TX, 2), const(1.0, "float16")), Write(s, B("+", B("*", TX, 2), 1), const(1.0, "float16")),
            LdMatrix(1, False, r, const(0), s, B("*", B("%", LANE, 8), 8), loc=at(12))]
    with pytest.raises(RaceError, match=r"race on shared s\[\d+\]: thread \d+ reads what thread \d+ wrote") as e:
        run(body, 32, shared=(s,), regs=(r,))
    assert e.value.loc.line == 12


# ---------------------------------------------------------------------------------------------------- cp.async


def _cp_setup(n: int = 64):
    src = np.arange(n, dtype=np.float32) + 1
    g, gv = gmem("G", src)
    out_g, out = gmem("OUT", np.full(n, np.nan, np.float32))
    s = Mem("s", dt.float32, "shared", n)
    return src, g, gv, out_g, out, s


def test_cp_async_commit_wait_barrier_then_read(rng):
    src, g, gv, out_g, out, s = _cp_setup()
    # 16 threads, 16 bytes (4 floats) each; then every thread reads an element another thread copied
    body = [CpAsync(s, B("*", TX, 4), g, B("*", TX, 4), 16), CpAsyncCommit(), CpAsyncWait(0), Sync()]
    body += [Write(out_g, B("+", B("*", TX, 4), i), MemRef(s, B("%", B("+", B("*", TX, 4), i + 4), 64)))
             for i in range(4)]
    run(body, 16, shared=(s,), globals_={g: gv, out_g: out})
    np.testing.assert_array_equal(out, np.roll(src, -4))


def test_cp_async_read_before_wait_is_an_error():
    src, g, gv, out_g, out, s = _cp_setup()
    body = [CpAsync(s, B("*", TX, 4), g, B("*", TX, 4), 16), CpAsyncCommit(), Sync(),
            Write(out_g, TX, MemRef(s, TX), loc=at(21))]
    with pytest.raises(RaceError, match=r"read of shared s\[0\] before the asynchronous copy writing it has") as e:
        run(body, 16, shared=(s,), globals_={g: gv, out_g: out})
    assert e.value.loc.line == 21


def test_cp_async_wait_without_barrier_races_across_threads():
    src, g, gv, out_g, out, s = _cp_setup()
    body = [CpAsync(s, B("*", TX, 4), g, B("*", TX, 4), 16), CpAsyncCommit(), CpAsyncWait(0),
            Write(out_g, TX, MemRef(s, B("%", B("+", TX, 4), 64)))]
    with pytest.raises(RaceError, match="reads what thread"):
        run(body, 16, shared=(s,), globals_={g: gv, out_g: out})
    # its own data is visible to the issuing thread after the wait, with no barrier
    own = [CpAsync(s, B("*", TX, 4), g, B("*", TX, 4), 16), CpAsyncCommit(), CpAsyncWait(0),
           Write(out_g, TX, MemRef(s, B("*", TX, 4)))]
    run(own, 16, shared=(s,), globals_={g: gv, out_g: out})
    np.testing.assert_array_equal(out[:16], src[::4])


def test_cp_async_predicate_false_zero_fills_without_reading():
    src, g, gv, out_g, out, s = _cp_setup()
    # odd threads: predicate false, and a source offset far outside G (not read)
    odd = B("==", B("%", TX, 2), 1)
    body = [CpAsync(s, B("*", TX, 4), g, _select(odd, const(10**6), B("*", TX, 4)), 16, pred=B("==", B("%", TX, 2), 0)),
            CpAsyncCommit(), CpAsyncWait(0), Sync()]
    body += [Write(out_g, B("+", B("*", TX, 4), i), MemRef(s, B("+", B("*", TX, 4), i))) for i in range(4)]
    run(body, 16, shared=(s,), globals_={g: gv, out_g: out})
    want = src.reshape(16, 4).copy()
    want[1::2] = 0
    np.testing.assert_array_equal(out, want.reshape(-1))


def test_cp_async_wait_group_n_leaves_the_newest_groups_in_flight():
    src, g, gv, out_g, out, s = _cp_setup()
    first = CpAsync(s, B("*", TX, 4), g, B("*", TX, 4), 16, pred=B("<", TX, 8))  # s[0:32] (rest of 16 thr: zeros)
    second = CpAsync(s, B("+", B("*", TX, 2), 32), g, B("*", TX, 2), 8, pred=B("<", TX, 16))  # s[32:64]
    ok = [If(B("<", TX, 8), first), CpAsyncCommit(), If(B("<", TX, 16), second), CpAsyncCommit(), CpAsyncWait(1),
          Sync(), Write(out_g, TX, MemRef(s, B("%", B("+", TX, 5), 32)))]
    run(ok, 16, shared=(s,), globals_={g: gv, out_g: out})
    np.testing.assert_array_equal(out[:16], src[5:21])
    bad = ok[:-1] + [Write(out_g, TX, MemRef(s, B("+", TX, 32)), loc=at(30))]  # the second group is still in flight
    with pytest.raises(RaceError, match=r"read of shared s\[32\] before the asynchronous copy"):
        run(bad, 16, shared=(s,), globals_={g: gv, out_g: out})


def test_write_over_a_cp_async_in_flight_is_an_error():
    src, g, gv, out_g, out, s = _cp_setup()
    body = [CpAsync(s, B("*", TX, 4), g, B("*", TX, 4), 16), CpAsyncCommit(), Write(s, B("*", TX, 4), const(0.0))]
    with pytest.raises(RaceError, match="while an asynchronous copy .cp.async or TMA. to it is in flight"):
        run(body, 16, shared=(s,), globals_={g: gv, out_g: out})


# ---------------------------------------------------------------------------------------------------- shuffles


def test_shfl_xor_butterfly_sum():
    r = Mem("r", dt.float32, "reg", 1)
    out_g, out = gmem("OUT", np.zeros(64, np.float32))
    body = [Write(r, const(0), binop("+", TX, const(0.0)))]
    for m in (16, 8, 4, 2, 1):
        mine = MemRef(r, const(0))
        body.append(Write(r, const(0), B("+", mine, TCall("shfl_xor", (mine, const(m)), dt.float32))))
    body.append(Write(out_g, TX, MemRef(r, const(0))))
    run(body, 64, regs=(r,), globals_={out_g: out})
    np.testing.assert_array_equal(out[:32], sum(range(32)))  # warps are separate
    np.testing.assert_array_equal(out[32:], sum(range(32, 64)))


def test_shfl_xor_with_a_width_stays_in_its_segment():
    out_g, out = gmem("OUT", np.zeros(32, np.int32))
    body = [Write(out_g, TX, TCall("shfl_xor", (TX, const(5), const(8)), dt.int32))]
    run(body, 32, globals_={out_g: out})
    lane = np.arange(32)
    np.testing.assert_array_equal(out, (lane // 8) * 8 + ((lane % 8) ^ 5))


def test_shuffle_in_divergent_code_is_an_error():
    out_g, out = gmem("OUT", np.zeros(32, np.int32))
    body = [If(B("<", TX, 8), Write(out_g, TX, TCall("shfl_xor", (TX, const(1)), dt.int32)), loc=at(40))]
    with pytest.raises(RaceError, match="shfl_xor reached by only part of a warp") as e:
        run(body, 32, globals_={out_g: out})
    assert e.value.loc.line == 40


# ------------------------------------------------------------------------------------------------------ barriers


def test_barrier_in_divergent_code_is_an_error():
    body = [If(B("<", TX, 16), Sync(), loc=at(50))]
    with pytest.raises(RaceError, match=r"__syncthreads reached by 16 of 64 threads") as e:
        run(body, 64)
    assert e.value.loc.line == 50


def test_barrier_in_uniform_branch_is_fine():
    s = Mem("s", dt.float32, "shared", 64)
    out_g, out = gmem("OUT", np.zeros(64, np.float32))
    flag = Var("flag")
    from tilec.lower.tir import Decl

    body = [Decl(flag, const(1)), Write(s, TX, binop("+", TX, const(0.0))),
            If(B("==", flag, 1), Sync()), Write(out_g, TX, MemRef(s, B("^", TX, 1)))]
    run(body, 64, shared=(s,), globals_={out_g: out})
    np.testing.assert_array_equal(out, np.arange(64) ^ 1)


# ---------------------------------------------------------------------------------------------------- bounds


def test_out_of_bounds_shared_read_and_write():
    s = Mem("s", dt.float32, "shared", 32)
    out_g, out = gmem("OUT", np.zeros(64, np.float32))
    with pytest.raises(TilecBoundsError, match=r"write of shared s\[32\] outside its 32 elements") as e:
        run([Write(s, TX, const(1.0), loc=at(60))], 64, shared=(s,))
    assert e.value.loc.line == 60
    with pytest.raises(TilecBoundsError, match=r"read of shared s\[40\] outside its 32 elements"):
        run([Write(out_g, TX, MemRef(s, B("+", TX, 40)))], 8, shared=(s,), globals_={out_g: out})


def test_out_of_bounds_global_read_and_write():
    g, gv = gmem("G", np.zeros(16, np.float32))
    with pytest.raises(TilecBoundsError, match=r"write of global G\[16\] outside its 16 elements"):
        run([Write(g, TX, const(1.0))], 32, globals_={g: gv})
    out_g, out = gmem("OUT", np.zeros(32, np.float32))
    with pytest.raises(TilecBoundsError, match=r"read of global G\[-1\] outside its 16 elements"):
        run([Write(out_g, TX, MemRef(g, B("-", TX, 1)))], 4, globals_={g: gv, out_g: out})
    # a masked-off lane's address is never checked (a predicated access)
    run([If(B("<", TX, 16), Write(g, TX, const(1.0)))], 32, globals_={g: gv})
    np.testing.assert_array_equal(gv, 1.0)


def test_out_of_bounds_register_access():
    r = Mem("r", dt.float32, "reg", 4)
    out_g, out = gmem("OUT", np.zeros(32, np.float32))
    with pytest.raises(TilecBoundsError, match="register array r written out of bounds"):
        run([Write(r, const(4), const(1.0))], 32, regs=(r,))
    with pytest.raises(TilecBoundsError, match="register array r indexed out of bounds"):
        run([Write(out_g, TX, MemRef(r, const(-1)))], 32, regs=(r,), globals_={out_g: out})
    with pytest.raises(TilecBoundsError, match="register array r indexed out of bounds"):
        run([Write(out_g, B("*", TX, 4), MemRef(r, const(4), 4), lanes=4)], 8, regs=(r,), globals_={out_g: out})


def test_misaligned_vector_accesses():
    """A vector of n elements must start at a multiple of n elements (CUDA's uint4 / uint2 accesses, ldmatrix rows,
    cp.async chunks fault otherwise); mems themselves start aligned."""
    s = Mem("s", dt.float16, "shared", 256)
    g, gv = gmem("G", np.zeros(256, np.float16))
    r = Mem("r", dt.float16, "reg", 8)
    with pytest.raises(TilecBoundsError, match=r"vector write of 8 elements at shared s\[4\] is not aligned"):
        run([Write(s, B("+", B("*", TX, 8), 4), MemRef(g, B("*", TX, 8), 8), lanes=8, loc=at(90))], 16, shared=(s,),
            globals_={g: gv})
    with pytest.raises(TilecBoundsError, match=r"vector read of 2 elements at global G\[1\] is not aligned to its 4 b"):
        run([Write(s, B("*", TX, 2), MemRef(g, B("+", B("*", TX, 2), 1), 2), lanes=2)], 16, shared=(s,),
            globals_={g: gv})
    with pytest.raises(TilecBoundsError, match=r"ldmatrix row of 8 elements at shared s\[4\] is not aligned"):
        run([Sync(), LdMatrix(1, False, r, const(0), s, B("+", B("*", LANE, 16), 4))], 32, shared=(s,), regs=(r,))
    with pytest.raises(TilecBoundsError, match=r"cp.async of 8 elements at shared s\[12\] is not aligned"):
        run([CpAsync(s, B("+", B("*", TX, 16), 12), g, B("*", TX, 8), 16)], 8, shared=(s,), globals_={g: gv})
    # aligned vectors of every width are fine
    for w in (2, 4, 8):
        run([Write(s, B("*", TX, w), MemRef(g, B("*", TX, w), w), lanes=w)], 32, shared=(s,), globals_={g: gv})


# -------------------------------------------------------------------------------------------------- the race checker


def test_raw_race():
    s = Mem("s", dt.float32, "shared", 64)
    out_g, out = gmem("OUT", np.zeros(64, np.float32))
    body = [Write(s, TX, const(1.0)), Write(out_g, TX, MemRef(s, B("%", B("+", TX, 1), 64)), loc=at(70))]
    with pytest.raises(RaceError, match=r"race on shared s\[1\]: thread 0 reads what thread 1 wrote") as e:
        run(body, 64, shared=(s,), globals_={out_g: out})
    assert e.value.loc.line == 70


def test_war_race():
    s = Mem("s", dt.float32, "shared", 64)
    out_g, out = gmem("OUT", np.zeros(64, np.float32))
    body = [Write(out_g, TX, MemRef(s, TX)), Write(s, B("%", B("+", TX, 1), 64), const(2.0), loc=at(80))]
    with pytest.raises(RaceError, match=r"race on shared s\[1\]: thread 0 writes what thread 1 read"):
        run(body, 64, shared=(s,), globals_={out_g: out})
    # read by several threads, then written by one of them
    many = [Write(out_g, TX, MemRef(s, const(5))), If(B("==", TX, 0), Write(s, const(5), const(1.0)))]
    with pytest.raises(RaceError, match=r"race on shared s\[5\]: thread 0 writes what several threads read"):
        run(many, 64, shared=(s,), globals_={out_g: out})


def test_waw_race():
    s = Mem("s", dt.float32, "shared", 64)
    with pytest.raises(RaceError, match=r"race on shared s\[\d+\]: two threads write it at once"):
        run([Write(s, B("//", TX, 2), const(1.0))], 8, shared=(s,))
    body = [Write(s, TX, const(1.0)), Write(s, B("%", B("+", TX, 3), 64), const(2.0))]
    with pytest.raises(RaceError, match=r"race on shared s\[3\]: thread 0 writes what thread 3 wrote"):
        run(body, 64, shared=(s,))


def test_no_race_when_a_thread_rewrites_and_rereads_its_own_element():
    s = Mem("s", dt.float32, "shared", 64)
    out_g, out = gmem("OUT", np.zeros(64, np.float32))
    mine = MemRef(s, TX)
    body = [Write(s, TX, binop("+", TX, const(0.0))), Write(s, TX, B("*", mine, 2.0)),
            Write(s, TX, B("+", mine, 1.0)), Write(out_g, TX, mine)]
    run(body, 64, shared=(s,), globals_={out_g: out})
    np.testing.assert_array_equal(out, np.arange(64) * 2 + 1)


def test_no_race_across_a_barrier_and_many_readers_of_one_address():
    s = Mem("s", dt.float32, "shared", 64)
    out_g, out = gmem("OUT", np.zeros(64, np.float32))
    body = [Write(s, TX, binop("+", TX, const(0.0))), Sync(), Write(out_g, TX, B("+", MemRef(s, B("^", TX, 7)),
            MemRef(s, const(0)))), Sync(), Write(s, B("^", TX, 7), const(0.0))]
    run(body, 64, shared=(s,), globals_={out_g: out})
    np.testing.assert_array_equal(out, np.arange(64) ^ 7)


def test_race_checking_can_be_turned_off():
    s = Mem("s", dt.float32, "shared", 64)
    out_g, out = gmem("OUT", np.zeros(64, np.float32))
    body = [Write(s, TX, const(1.0)), Write(out_g, TX, MemRef(s, B("%", B("+", TX, 1), 64)))]
    run(body, 64, shared=(s,), globals_={out_g: out}, check_races=False)
    np.testing.assert_array_equal(out, 1.0)


def test_shared_memory_is_fresh_per_block_and_races_do_not_cross_blocks():
    s = Mem("s", dt.float32, "shared", 32)
    out_g, out = gmem("OUT", np.zeros(64, np.float32))
    bx = BX
    body = [Write(s, TX, binop("+", B("*", bx, 100), const(0.0))), Sync(),
            Write(out_g, B("+", B("*", bx, 32), TX), MemRef(s, B("^", TX, 1)))]
    ThreadInterpreter(kernel(body, 32, (s,), grid=2)).run({out_g: out}, {})
    np.testing.assert_array_equal(out, np.repeat([0.0, 100.0], 32))



def run_overlaid(body, threads: int, narrow: Mem, wide: Mem) -> None:
    """Runs ``body`` with shared mems ``narrow`` and ``wide`` starting at the same byte (an overlay)."""
    ThreadInterpreter(ThreadKernel("k", (), (), (const(1),), (BX,), threads, TX, ((narrow, 0), (wide, 0)), (),
                                   Seq(tuple(body)), 1024)).run({}, {})

def test_threads_writing_halves_of_an_overlays_wider_element_do_not_race():
    """A 16-bit tile under a float32 overlay (an operand stage under a staged epilogue): two threads writing the two
    halves of one float32 do not race; a float32 write over a half another thread wrote, with no barrier, does."""
    h = Mem("h", dt.float16, "shared", 128)
    f = Mem("f", dt.float32, "shared", 64)
    run_overlaid([Write(h, TX, const(1.0)), Write(h, B("+", TX, 64), const(2.0))], 64, h, f)
    with pytest.raises(RaceError, match=r"race on shared h\[2\]: thread 0 writes what thread 2 wrote") as e:
        run_overlaid([Write(h, TX, const(1.0)), Write(f, B("%", B("+", TX, 1), 64), const(2.0), loc=at(9))], 64, h,
                     f)
    assert e.value.loc.line == 9
    with pytest.raises(RaceError, match=r"race on shared h\[1\]: thread 1 writes what thread 0 wrote"):
        run_overlaid([Write(f, TX, const(1.0)), Write(h, TX, const(2.0), loc=at(9))], 64, h, f)
    run_overlaid([Write(f, TX, const(1.0)), Sync(), Write(h, TX, const(2.0))], 64, h, f)
