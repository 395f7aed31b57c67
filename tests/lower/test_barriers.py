"""Barrier placement (after lowering): the barriers a kernel gets, and that each one is needed: taking any one
out of a lowered example makes the thread interpreter's race checker fire, naming the buffer and the line.

The GEMM example's K loop is ``T.Pipelined(..., num_stages=3)``: the pipelining pass turns its copies into
cp.async into 3 versions of ``A_s`` / ``B_s`` (see :mod:`tilec.passes.pipelining`), and that loop needs one
barrier per trip. ``num_stages=1`` keeps the plain loop, which needs two."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import load_example, randn

import tilec.language as T
from tilec import dtypes as dt
from tilec.backends.simt import SimtExecutable
from tilec.errors import RaceError
from tilec.ir.expr import Var, binop, const
from tilec.ir.visit import transform, walk
from tilec.lower.tir import CpAsyncWait, Group, If, Loop, Mem, MemRef, Seq, Sync, ThreadKernel, Write, seq
from tilec.passes.barriers import count_syncs, place_barriers
from tilec.runtime.args import allocate_like, bind

from .helpers import simt, tile_in_two_copies


def syncs(k: ThreadKernel) -> list[Sync]:
    return [n for n in walk(k.body) if isinstance(n, Sync)]


def without(k: ThreadKernel, target: Sync) -> ThreadKernel:
    """``k`` with the barrier ``target`` (one node, by identity) taken out."""

    def drop(n):
        if isinstance(n, Seq) and any(c is target for c in n.stmts):
            return seq([c for c in n.stmts if c is not target])
        return None

    out = dataclasses.replace(k, body=transform(k.body, drop))
    assert count_syncs(out.body) == count_syncs(k.body) - 1
    return out


def moved_before(k: ThreadKernel, target: Sync, cls: type) -> ThreadKernel:
    """``k`` with the barrier ``target`` moved, within its statement list, to just before the first ``cls``
    statement after it."""

    def move(n):
        if isinstance(n, Seq) and any(c is target for c in n.stmts):
            pos = next(i for i, c in enumerate(n.stmts) if c is target)
            rest = [c for c in n.stmts if c is not target]
            at = next(i for i, c in enumerate(rest) if i >= pos and isinstance(c, cls))
            return seq(rest[:at] + [target] + rest[at:])
        return None

    out = dataclasses.replace(k, body=transform(k.body, move))
    assert count_syncs(out.body) == count_syncs(k.body)
    return out


def run_thread_ir(kernel, tk: ThreadKernel, *arrays) -> None:
    """Run thread IR ``tk`` in the place of ``kernel``'s on the inputs (outputs are allocated as the kernel does)."""
    SimtExecutable(tk, kernel.prim_func)(bind(kernel.prim_func, arrays, "cpu", allocate_like))


def gemm(k_tiles: int = 3, num_stages: int = 3):
    return simt(load_example("01_gemm").matmul(100, 72, 32 * k_tiles, block_M=64, block_N=64,
                                               num_stages=num_stages))


def thread_ir(kernel) -> ThreadKernel:  # noqa: ANN001
    """The barrier pass's output."""
    return kernel.state.artifacts["barriers"]


def k_loop(tk: ThreadKernel) -> Loop:
    (loop,) = [n for n in walk(tk.body) if isinstance(n, Loop) and n.var.name == "k"]
    return loop


def flash(causal: bool = False):
    return simt(load_example("03_flash_attention").flash_attention(1, 1, 100, 32, causal))


def labels_in(s) -> list[str]:
    """Sync / group labels, in order, of a statement list (one level)."""
    items = s.stmts if isinstance(s, Seq) else (s,)
    return ["sync" if isinstance(x, Sync) else x.label.split(":")[1].strip().split("(")[0] for x in items
            if isinstance(x, (Sync, Group))]


def trip(s) -> list:
    """The statements of a loop body (one level): ``"sync"``, a tile op's name (``T.ptx_wait_group(n)`` with its
    count), and ``(condition, [...])`` for an ``if``."""
    out: list = []
    for x in s.stmts if isinstance(s, Seq) else (s,):
        if isinstance(x, Sync):
            out.append("sync")
        elif isinstance(x, Group):
            wait = x.body if isinstance(x.body, CpAsyncWait) else None
            name = x.label.split(":")[1].strip().split("(")[0]
            out.append(f"{name}({wait.n})" if wait is not None else name)
        elif isinstance(x, If):
            assert x.else_body is None
            out.append((str(x.cond), trip(x.then_body)))
        else:
            out.append(type(x).__name__)
    return out


# ---------------------------------------------------------------------------------------------- the barrier pass


def test_gemm_loop_body_has_exactly_the_two_needed_barriers():
    """The plain loop (``num_stages=1``, no pipelining)."""
    k = gemm(num_stages=1)
    loop = k_loop(thread_ir(k))
    assert str(loop.extent) == "3"
    # before the copies (last iteration's gemm has read A_s/B_s) and before the gemm (it reads the copies)
    assert labels_in(loop.body) == ["sync", "T.copy", "T.copy", "sync", "T.gemm"]
    assert count_syncs(thread_ir(k).body) == 2


@pytest.mark.parametrize("stages", [2, 3])
def test_pipelined_gemm_loop_has_one_barrier_per_trip(stages):
    """Each trip waits for the group its gemm needs (``stages - 2`` groups may stay in flight), then one barrier:
    it makes the landed copies visible to every thread (RAW of this trip's gemm) and orders last trip's reads
    of the version the cp.async copies now overwrite (WAR); the gemm runs from trip ``stages - 1`` on."""
    k = gemm(k_tiles=3, num_stages=stages)
    tk = thread_ir(k)
    loop = k_loop(tk)
    assert str(loop.extent) == str(3 + stages - 1)
    assert trip(loop.body) == [f"T.ptx_wait_group({stages - 2})", "sync", "T.async_copy", "T.async_copy",
                               "T.ptx_commit_group", (f"k >= {stages - 1}", ["T.gemm"])]
    assert count_syncs(loop) == 1
    # after the loop, the copies still in flight (reloads nobody reads) are waited for; the accumulators go out
    # through a shared tile over A_s (tilec.passes.epilogue), between the barriers test_the_staged_epilogue_... checks
    assert trip(tk.body) == ["Decl", "Decl", "T.fill", "Loop", "T.ptx_wait_group(0)", "sync", "T.copy", "sync",
                             "T.copy"]
    # the shared buffers hold `stages` versions of the tile; the staging tile takes A_s's memory
    shared = {m.name: (int(m.size), off) for m, off in tk.shared}
    assert shared == {"A_s": (stages * 64 * 32, 0), "B_s": (stages * 32 * 64, stages * 64 * 32 * 2),
                      "C_f_stage": (64 * 64, 0)}


@pytest.mark.parametrize("stages", [1, 3])
def test_a_one_step_k_loop_needs_no_loop_carried_barrier(stages):
    k = gemm(k_tiles=1, num_stages=stages)
    loop = k_loop(thread_ir(k))
    if stages == 1:  # one trip: the gemm waits for the copies, nothing waits for the gemm
        assert str(loop.extent) == "1"
        assert labels_in(loop.body) == ["T.copy", "T.copy", "sync", "T.gemm"]
    else:  # pipelined, 1 + 2 trips: still the one barrier per trip
        assert str(loop.extent) == "3"
        assert trip(loop.body) == ["T.ptx_wait_group(1)", "sync", "T.async_copy", "T.async_copy",
                                   "T.ptx_commit_group", ("k >= 2", ["T.gemm"])]
    assert count_syncs(loop) == 1


def test_flash_attention_barriers():
    """Before each gemm (its shared operand was just copied); no more: the copy of K (V) in the next iteration
    is already ordered after this iteration's reads by the barrier before the other gemm, and S -> P is a
    register copy (the accumulator and the A operand layouts agree)."""
    k = flash()
    (loop,) = [n for n in walk(thread_ir(k).body) if isinstance(n, Loop) and n.var.name == "k"]
    got = labels_in(loop.body)
    assert got.count("sync") == 2
    assert got[got.index("T.gemm") - 1] == "sync"
    assert got[len(got) - 1 - got[::-1].index("T.gemm") - 1] == "sync"
    # after the loop: the output through a shared tile over V_s, a barrier before it is written and before it is read
    assert labels_in(thread_ir(k).body)[-5:] == ["T.Parallel", "sync", "T.copy", "sync", "T.copy"]


def test_no_barrier_between_register_only_ops():
    @T.prim_func
    def main(X: T.Tensor((32, 64), "float32"), Y: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((32, 64), "float32")
            r = T.alloc_fragment((32,), "float32")
            T.fill(x, 1.0)
            for i, j in T.Parallel(32, 64):
                x[i, j] = x[i, j] * 2.0 + i
            T.reduce_sum(x, r, dim=1)  # 128 threads, rows of 64 over 16 lanes of one warp: shuffles only
            for i in T.Parallel(32):
                r[i] = r[i] * 0.5
            T.copy(r, Y)

    k = simt(main)
    assert count_syncs(thread_ir(k).body) == 0
    assert k.state.artifacts["barriers"] is k.state.artifacts["lower"]  # nothing to place: the pass returns its input
    y = np.full(32, np.nan, np.float32)
    k(np.zeros((32, 64), np.float32), y)
    np.testing.assert_allclose(y, (2.0 + np.arange(32)) * 64 * 0.5)


def test_shared_buffer_written_by_one_op_and_read_by_two():
    @T.prim_func
    def main(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32"), Z: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            s = T.alloc_shared((64,), "float32")
            T.copy(X, s)
            for i in T.Parallel(64):
                Y[i] = s[63 - i]
            for i in T.Parallel(64):
                Z[i] = s[(i + 1) % 64] * 2.0  # a second reader: no barrier between two reads

    k = simt(main)
    assert labels_in(thread_ir(k).body)[-4:] == ["T.copy", "sync", "T.Parallel", "T.Parallel"]
    x = np.arange(64, dtype=np.float32)
    y, z = np.zeros(64, np.float32), np.zeros(64, np.float32)
    k(x, y, z)
    np.testing.assert_array_equal(y, x[::-1])
    np.testing.assert_array_equal(z, np.roll(x, -1) * 2)


def _hand_kernel(body, shared: list[Mem], tx: Var, threads: int = 64) -> ThreadKernel:
    return ThreadKernel("k", (), (), (const(1),), (Var("block_x"),), threads, tx,
                        tuple((m, 1024 * i) for i, m in enumerate(shared)), (), body, 1024 * len(shared))


def test_place_barriers_on_hand_built_thread_ir():
    tx = Var("tx")
    s = Mem("s", dt.float32, "shared", 64)
    u = Mem("u", dt.float32, "shared", 64)
    w_s = Group(Write(s, tx, const(1.0)), "line 1: write s")
    w_u = Group(Write(u, tx, const(2.0)), "line 2: write u")  # another buffer: independent of s
    r_s = Group(Write(u, tx, MemRef(s, binop("^", tx, 1))), "line 3: read s, write u")
    body = place_barriers(_hand_kernel(Seq((w_s, w_u, r_s)), [s, u], tx)).body
    assert labels_in(body) == ["write s", "write u", "sync", "read s, write u"]
    # in a loop, the write of s in the next iteration must wait for this iteration's reads of s
    i = Var("i")
    loop = Loop(i, const(4), Seq((w_s, Group(Write(u, tx, MemRef(s, binop("^", tx, 1))), "line 3: read"))))
    placed = place_barriers(_hand_kernel(loop, [s, u], tx)).body
    assert labels_in(placed.body) == ["sync", "write s", "sync", "read"]


# -------------------------------------------------------------------------- take one barrier out: the race checker


def gemm_lines() -> tuple[int, int]:
    src = open(load_example("01_gemm").__file__).read().splitlines()
    copy_line = next(i + 1 for i, t in enumerate(src) if "T.copy(A[" in t)
    gemm_line = next(i + 1 for i, t in enumerate(src) if "T.gemm(" in t)
    return copy_line, gemm_line


def assert_war(e, copy_line: int) -> None:
    """The copy overwrites A_s while other threads' ldmatrix (last iteration's gemm) may still read it."""
    msg = str(e.value)
    assert "race on shared A_s[" in msg and "writes what several threads read" in msg, msg
    assert e.value.loc.line == copy_line and e.value.loc.file.endswith("01_gemm.py")


def assert_raw(e, gemm_line: int) -> None:
    """The gemm reads A_s before the other threads' copies of it are ordered before it."""
    msg = str(e.value)
    assert "race on shared A_s[" in msg and "reads what thread" in msg, msg
    assert e.value.loc.line == gemm_line and e.value.loc.file.endswith("01_gemm.py")


@pytest.mark.parametrize("which", [0, 1])
def test_removing_a_gemm_barrier_is_a_race_naming_buffer_and_line(rng, which):
    """The plain loop (``num_stages=1``): each of its two barriers is needed."""
    k = gemm(num_stages=1)
    tk = thread_ir(k)
    assert len(syncs(tk)) == 2
    a, b = randn(rng, (100, 96), "float16"), randn(rng, (96, 72), "float16")
    run_thread_ir(k, tk, a, b)  # as placed: no race
    copy_line, gemm_line = gemm_lines()
    with pytest.raises(RaceError) as e:
        run_thread_ir(k, without(tk, syncs(tk)[which]), a, b)
    if which == 0:
        assert_war(e, copy_line)
    else:
        assert_raw(e, gemm_line)


@pytest.mark.parametrize("stages", [2, 3])
def test_the_pipelined_gemm_barrier_serves_both_the_raw_and_the_war(rng, stages):
    """Removing the one barrier of the pipelined loop is a race (the gemm reads the landed copies of other
    threads); keeping it but moving it after the cp.async copies (just before the guarded gemm) still orders
    the RAW, but then the copies overwrite the version last trip's gemm read: a WAR race at the copy."""
    k = gemm(k_tiles=3, num_stages=stages)
    tk = thread_ir(k)
    (sync,) = [n for n in walk(k_loop(tk)) if isinstance(n, Sync)]
    a, b = randn(rng, (100, 96), "float16"), randn(rng, (96, 72), "float16")
    run_thread_ir(k, tk, a, b)  # as placed: no race
    copy_line, gemm_line = gemm_lines()
    with pytest.raises(RaceError) as e:
        run_thread_ir(k, without(tk, sync), a, b)
    assert_raw(e, gemm_line)
    late = moved_before(tk, sync, If)
    assert trip(k_loop(late).body) == [f"T.ptx_wait_group({stages - 2})", "T.async_copy", "T.async_copy",
                                       "T.ptx_commit_group", "sync", (f"k >= {stages - 1}", ["T.gemm"])]
    with pytest.raises(RaceError) as e:
        run_thread_ir(k, late, a, b)
    assert_war(e, copy_line)


def test_the_staged_epilogue_needs_its_two_barriers(rng):
    """The accumulators go out through a shared tile placed over A_s (tilec.passes.epilogue): one barrier orders its
    writes after the last trips' ldmatrix reads of A_s and the reloads landing in it (the memory it takes), the other
    its 16-byte reads after the other threads' writes. Without either, the interpreter names the race (A_s through
    the overlay, then the tile)."""
    k = gemm(k_tiles=3, num_stages=3)
    tk = thread_ir(k)
    loop_syncs = {id(n) for n in walk(k_loop(tk)) if isinstance(n, Sync)}
    first, second = [s for s in syncs(tk) if id(s) not in loop_syncs]
    a, b = randn(rng, (100, 96), "float16"), randn(rng, (96, 72), "float16")
    run_thread_ir(k, tk, a, b)
    with pytest.raises(RaceError, match=r"race on shared A_s\[\d+\]: thread \d+ writes what "
                                        r"(thread \d+ wrote|several threads read)"):
        run_thread_ir(k, without(tk, first), a, b)
    with pytest.raises(RaceError, match=r"race on shared C_f_stage\[\d+\]: thread \d+ reads what thread \d+ wrote"):
        run_thread_ir(k, without(tk, second), a, b)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("which", [0, 1])
def test_removing_a_flash_attention_barrier_is_a_race(rng, which, causal):
    k = flash(causal)
    tk = thread_ir(k)
    q, kk, v = (randn(rng, (1, 1, 100, 32), "float16") for _ in range(3))
    run_thread_ir(k, tk, q, kk, v)
    with pytest.raises(RaceError, match=r"race on shared (Q_s|K_s|V_s)\[\d+\]") as e:
        run_thread_ir(k, without(tk, syncs(tk)[which]), q, kk, v)
    assert e.value.loc.file.endswith("03_flash_attention.py")
    src = open(load_example("03_flash_attention").__file__).read().splitlines()
    assert "T.gemm(" in src[e.value.loc.line - 1]


# ------------------------------------------------------------------- copies the pipeline's waits do not cover


@T.prim_func
def _stages_by_hand(A: T.Tensor((200, 160), "float16"), B: T.Tensor((160, 136), "float16"),
                    C: T.Tensor((200, 136), "float32")):
    with T.Kernel(3, 4, threads=128) as (bx, by):
        A_s = T.alloc_shared((64, 32), "float16")
        B_s = T.alloc_shared((32, 64), "float16")
        C_f = T.alloc_fragment((64, 64), "float32")
        T.clear(C_f)
        for k in T.Pipelined(5, num_stages=3, stage=[0, 1, 2]):  # B's copy one trip after A's
            T.copy(A[by * 64, k * 32], A_s)
            T.copy(B[k * 32, bx * 64], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[by * 64, bx * 64])


@pytest.mark.parametrize("target", ["simt:sm_80", "simt:sm_90a"])
@pytest.mark.parametrize("func", [tile_in_two_copies, _stages_by_hand], ids=["two copies", "by hand"])
def test_only_copies_the_trips_wait_covers_are_asynchronous(rng, func, target):
    """A pipelined copy is a cp.async only where the trip's wait covers it: read in a later stage only and
    committed in the trip that issues it. A tile written in parts stays in the consumers' stage and its copies stay
    synchronous; a copy in stage 1 of 3 joins the trip's group (both once left the gemm reading before the copy
    landed: a race the interpreter names)."""
    import tilec

    cfg = {"wgmma": True, "tma": False, "wgmma_overlap": False} if target.endswith("90a") else None
    kernel = tilec.JITKernel(func, target, [-1], pass_configs=cfg)
    text = tilec.dump(kernel, after="pipelining")
    if func is tile_in_two_copies:
        assert "T.async_copy(A" not in text and "T.async_copy(B" in text
    else:
        assert text.index("T.async_copy(B") < text.index("T.ptx_commit_group()")
    a, b = randn(rng, (200, 160), "float16"), randn(rng, (160, 136), "float16")
    c = kernel(a, b).astype(np.float64)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(c - ref).max() <= 1e-5 * np.abs(ref).max()
