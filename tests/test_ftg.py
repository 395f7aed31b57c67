"""The FTG: nodes and dependency edges of the GEMM and flash-attention examples, derived by hand from the kernel
text and the rules in ``tilec/ftg/build.py``; and the dumps (text, dot, JSON, SVG) and ``tilec.dump``."""

from __future__ import annotations

import json
import re

import pytest
from conftest import example_line, load_example

import tilec
import tilec.language as T


def edges(ftg) -> set[tuple]:
    return {(u, v, d.kind, d.buffer.name, d.carried_by) for u, v, d in ftg.edges()}


@pytest.fixture(scope="module")
def gemm():
    return load_example("01_gemm").matmul(128, 128, 64, block_M=64, block_N=64)


# --------------------------------------------------------------------------------------------------- GEMM


def test_gemm_nodes(gemm):
    ftg = gemm.ftg
    assert ftg.nodes == ["n0", "n1", "n2", "n3", "n4"]
    assert [ftg.node(n)["kind"] for n in ftg.nodes] == ["fill", "copy", "copy", "gemm", "copy"]
    assert ftg.ops("copy") == ["n1", "n2", "n4"]
    assert [ftg.node(n)["line"] for n in ftg.nodes] == [
        example_line("01_gemm", s) for s in ("T.clear(C_f)", "T.copy(A[", "T.copy(B[", "T.gemm(", "T.copy(C_f")
    ]
    assert [str(lp) for lp in ftg.node("n2")["loops"]] == ["k: pipelined(2, num_stages=3)"]
    assert ftg.node("n0")["loops"] == () and ftg.node("n4")["loops"] == ()
    assert ftg.node("n3")["label"] == "A_s, B_s -> C_f  (64x64x32)"


def test_gemm_edges(gemm):
    # n0 fill C_f | loop k: n1 copy A->A_s, n2 copy B->B_s, n3 gemm (reads A_s, B_s, C_f; writes C_f) | n4 copy C_f->C
    assert edges(gemm.ftg) == {
        ("n0", "n3", "RAW", "C_f", None),  # the gemm accumulates onto the cleared fragment
        ("n0", "n4", "RAW", "C_f", None),  # the loop may run zero times: the copy may read the fill's zeros
        ("n1", "n3", "RAW", "A_s", None),
        ("n2", "n3", "RAW", "B_s", None),
        ("n3", "n4", "RAW", "C_f", None),
        ("n3", "n1", "WAR", "A_s", "k"),  # the next iteration's copy overwrites what this gemm read
        ("n3", "n2", "WAR", "B_s", "k"),
        ("n3", "n3", "RAW", "C_f", "k"),  # the accumulator
    }
    assert gemm.ftg.deps("n0", "n3")[0].kind == "RAW" and gemm.ftg.deps("n4", "n0") == []


def test_gemm_text_dump(gemm):
    text = str(gemm.ftg)
    lines = text.splitlines()
    assert lines[0] == "FTG main: 5 tile ops (1 fill, 3 copy, 1 gemm), 8 dependencies"
    assert lines[1].split() == ["n0", "fill", "C_f", "<-", "0.0", "line", str(example_line("01_gemm", "T.clear"))]
    assert "in k: pipelined(2, num_stages=3)" in lines[2]
    deps = lines[lines.index("dependencies:") + 1 : lines.index("buffers:")]
    assert deps == [
        "  n0 -> n3  RAW C_f", "  n0 -> n4  RAW C_f", "  n1 -> n3  RAW A_s", "  n2 -> n3  RAW B_s",
        "  n3 -> n4  RAW C_f", "  n3 -> n1  WAR A_s (carried by k)", "  n3 -> n2  WAR B_s (carried by k)",
        "  n3 -> n3  RAW C_f (carried by k)",
    ]  # fmt: skip
    bufs = [ln.split() for ln in lines[lines.index("buffers:") + 1 :]]
    assert bufs[3] == ["A_s", "shared", "float16", "(64,", "32)"] and bufs[5][:2] == ["C_f", "fragment"]
    assert repr(gemm.ftg) == "<FTG main: 5 tile ops (1 fill, 3 copy, 1 gemm), 8 dependencies>"


def test_gemm_dot_json_svg(gemm, monkeypatch):
    dot = gemm.ftg.to_dot()
    assert dot.startswith('digraph "main" {\n') and dot.endswith("\n}")
    assert dot.count("{") == dot.count("}")
    for n in gemm.ftg.nodes:
        assert f"  {n} [label=" in dot
    assert 'subgraph cluster_0 { label="k: pipelined(2, num_stages=3)";' in dot
    assert 'n3 -> n1 [label="WAR A_s (carried by k)", style=dashed' in dot
    assert 'n0 -> n3 [label="RAW C_f", style=solid' in dot
    assert len(re.findall(r"^  n\d+ -> n\d+ \[", dot, re.M)) == gemm.ftg.graph.number_of_edges() == 8

    data = json.loads(gemm.ftg.to_json())
    assert data["name"] == "main"
    assert [n["id"] for n in data["nodes"]] == gemm.ftg.nodes
    assert data["nodes"][3]["reads"] == ["A_s", "B_s", "C_f"] and data["nodes"][3]["writes"] == ["C_f"]
    got = {(e["src"], e["dst"], d["kind"], d["buffer"], d["carried_by"]) for e in data["edges"] for d in e["deps"]}
    assert got == edges(gemm.ftg)
    assert {b["name"]: b["scope"] for b in data["buffers"]}["A_s"] == "shared"

    monkeypatch.setattr("tilec.ftg.graph.shutil.which", lambda name: None)
    assert gemm.ftg._repr_svg_() is None and gemm.ftg.to_svg() is None


# ---------------------------------------------------------------------------------------------- flash attention

# n0 copy Q->Q_s, n1 fill O_f, n2 fill l, n3 fill m | loop k: n4 copy K->K_s; if the block is the last, partial one:
# n5 parallel S = mask (writes all of S, reads nothing), else: n6 fill S (the clear; writes all of S); then n7 gemm
# Q_s K_s^T -> S (accumulates), n8 copy m->m_prev, n9 reduce_max S -> m (clear=False), n10 parallel rescale =
# f(m_prev, m), n11 parallel S = f(S, m) (rewrites all of S), n12 reduce_sum S -> l_tile, n13 parallel l = l*rescale
# + l_tile, n14 copy S->P, n15 parallel O_f *= rescale (rewrites all of O_f), n16 copy V->V_s, n17 gemm P V_s -> O_f
# | n18 parallel O_f /= l (rewrites all of O_f), n19 copy O_f->O.
# n5 and n6 exclude each other: no edge between them within a trip (and across trips n11 rewrites S in between).
# Together they rewrite all of S on every path, so they kill for S like a single full overwrite would.
FLASH_EDGES = {
    ("n0", "n7", "RAW", "Q_s", None),
    ("n1", "n15", "RAW", "O_f", None),
    ("n1", "n18", "RAW", "O_f", None),  # the loop may run zero times; n15 in the loop does not kill for n18
    ("n2", "n13", "RAW", "l", None),
    ("n2", "n18", "RAW", "l", None),
    ("n3", "n8", "RAW", "m", None),
    ("n3", "n9", "RAW", "m", None),
    ("n3", "n10", "RAW", "m", None),
    ("n3", "n11", "RAW", "m", None),  # n9 between writes m only partially (clear=False), so no kill
    ("n4", "n7", "RAW", "K_s", None),
    ("n5", "n7", "RAW", "S", None),  # the gemm accumulates onto the mask, or onto the clear's zeros
    ("n5", "n9", "RAW", "S", None),
    ("n5", "n11", "RAW", "S", None),  # n5, n6 -> n12, n14 are killed by n11's full rewrite of S
    ("n6", "n7", "RAW", "S", None),
    ("n6", "n9", "RAW", "S", None),
    ("n6", "n11", "RAW", "S", None),
    ("n7", "n9", "RAW", "S", None),
    ("n7", "n11", "RAW", "S", None),
    ("n8", "n9", "WAR", "m", None),
    ("n8", "n10", "RAW", "m_prev", None),
    ("n9", "n10", "RAW", "m", None),
    ("n9", "n11", "RAW", "m", None),
    ("n9", "n11", "WAR", "S", None),
    ("n10", "n13", "RAW", "rescale", None),
    ("n10", "n15", "RAW", "rescale", None),
    ("n11", "n12", "RAW", "S", None),
    ("n11", "n14", "RAW", "S", None),
    ("n12", "n13", "RAW", "l_tile", None),
    ("n13", "n18", "RAW", "l", None),
    ("n14", "n17", "RAW", "P", None),
    ("n15", "n17", "RAW", "O_f", None),
    ("n15", "n18", "RAW", "O_f", None),  # n17 between accumulates (partial write)
    ("n16", "n17", "RAW", "V_s", None),
    ("n17", "n18", "RAW", "O_f", None),
    ("n18", "n19", "RAW", "O_f", None),  # n1, n15, n17 -> n19 are killed by n18's full rewrite
    # carried by k: from an iteration to the next, v at or before u in the body
    ("n7", "n4", "WAR", "K_s", "k"),
    ("n9", "n8", "RAW", "m", "k"),
    ("n9", "n9", "RAW", "m", "k"),
    ("n10", "n8", "WAR", "m_prev", "k"),
    ("n10", "n9", "WAR", "m", "k"),
    ("n11", "n5", "WAR", "S", "k"),  # reads of S before n11 are covered by n11 -> n5, n6 through n11's rewrite
    ("n11", "n6", "WAR", "S", "k"),  # and n11 -> n7, n9, n11 (RAW S) are killed by the mask or clear before them
    ("n11", "n9", "WAR", "m", "k"),
    ("n12", "n5", "WAR", "S", "k"),  # n12, n14 -> n7, n11 (WAR S) are killed by the mask or clear before them
    ("n12", "n6", "WAR", "S", "k"),
    ("n13", "n10", "WAR", "rescale", "k"),
    ("n13", "n12", "WAR", "l_tile", "k"),
    ("n13", "n13", "RAW", "l", "k"),
    ("n14", "n5", "WAR", "S", "k"),
    ("n14", "n6", "WAR", "S", "k"),
    ("n15", "n10", "WAR", "rescale", "k"),
    ("n15", "n15", "RAW", "O_f", "k"),
    ("n17", "n14", "WAR", "P", "k"),
    ("n17", "n15", "RAW", "O_f", "k"),
    ("n17", "n16", "WAR", "V_s", "k"),
}


def causal_numbering(deps: set[tuple]) -> set[tuple]:
    """The edges of the causal kernel: its loop masks the blocks the diagonal crosses (n5), else the last partial
    block (n6, in the else-branch), else clears S (n7). n5 of the kernel above is n5 or n6 here (exclusive, and
    with the clear they rewrite all of S on every path: an if/else nested in an if/else); later nodes move by one."""

    def ids(n: str) -> list[str]:
        k = int(n[1:])
        return [n] if k < 5 else ["n5", "n6"] if k == 5 else [f"n{k + 1}"]

    return {(a, b, *rest) for u, v, *rest in deps for a in ids(u) for b in ids(v)}


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_ftg(causal):
    kernel = load_example("03_flash_attention").flash_attention(1, 2, 100, 64, causal)
    ftg = kernel.ftg
    kinds = [ftg.node(n)["kind"] for n in ftg.nodes]
    masks = ["parallel"] * (1 + causal)
    assert kinds == ["copy", "fill", "fill", "fill", "copy", *masks, "fill", "gemm", "copy", "reduce", "parallel",
                     "parallel", "reduce", "parallel", "copy", "parallel", "copy", "gemm", "parallel", "copy"]
    in_loop = [bool(ftg.node(n)["loops"]) for n in ftg.nodes]
    assert in_loop == [False] * 4 + [True] * (14 + causal) + [False] * 2
    assert edges(ftg) == (causal_numbering(FLASH_EDGES) if causal else FLASH_EDGES)
    assert ftg.summary() == (
        "FTG main: 21 tile ops (6 copy, 4 fill, 7 parallel, 2 gemm, 2 reduce), 61 dependencies" if causal else
        "FTG main: 20 tile ops (6 copy, 4 fill, 6 parallel, 2 gemm, 2 reduce), 55 dependencies"
    )
    assert ftg.node(f"n{7 + causal}")["label"].endswith("(64x64x64 B^T)")
    assert ftg.node(f"n{9 + causal}")["label"] == "max(S, dim=1, clear=False) -> m"


# --------------------------------------------------------------------------------------- kill rules in detail


def test_conditional_overwrite_does_not_kill_and_element_stores_are_nodes():
    @T.prim_func
    def main(Y: T.Tensor((8,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            x = T.alloc_fragment((8,), "float32")
            y = T.alloc_fragment((8,), "float32")
            c = T.alloc_var("int32")
            T.fill(x, 0.0)
            for _k in T.serial(4):
                if bx > 0:
                    T.fill(x, 1.0)
                T.copy(x, y)
            c = 3
            T.copy(y, Y)
            Y[c] = 2.0

    ftg = tilec.compile(main, target="cpu").ftg
    assert [ftg.node(n)["kind"] for n in ftg.nodes] == ["fill", "fill", "copy", "store", "copy", "store"]
    assert ftg.node("n3")["label"] == "c = 3"
    assert edges(ftg) == {
        ("n0", "n1", "WAW", "x", None),
        ("n0", "n2", "RAW", "x", None),  # n1 writes x only when bx > 0: no kill
        ("n1", "n2", "RAW", "x", None),
        ("n2", "n1", "WAR", "x", "_k"),
        ("n2", "n4", "RAW", "y", None),
        ("n3", "n5", "RAW", "c", None),
        ("n4", "n5", "WAW", "Y", None),
    }


def test_dependencies_name_buffers_as_the_dump_does():
    """Two buffers of one name (a parameter and a shared tile the kernel binds to its name) print as A and A_1; the
    dependencies said `RAW A` for A_1 in the text, Graphviz and JSON forms, pointing at the global tensor."""

    @T.prim_func
    def main(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            A_in = A
            A = T.alloc_shared((16,), "float32")
            T.copy(A_in, A)
            for i in T.Parallel(16):
                A[i] = A[i] * 2
            T.copy(A, B)

    ftg = tilec.compile(main, target="cpu").ftg
    text = str(ftg)
    assert "n0 -> n1  RAW A_1\n" in text and "n1 -> n2  RAW A_1\n" in text, text
    assert 'label="RAW A_1"' in ftg.to_dot()
    data = json.loads(ftg.to_json())
    assert [d["buffer"] for e in data["edges"] for d in e["deps"]] == ["A_1", "A_1"]


def test_opposite_branches_depend_only_across_trips():
    @T.prim_func
    def main(Y: T.Tensor((8,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            x = T.alloc_fragment((8,), "float32")
            T.fill(x, 0.0)  # n0
            for k in T.serial(4):
                if k > bx:
                    T.fill(x, 1.0)  # n1
                else:
                    T.copy(x, Y)  # n2: never in the same trip as n1

    assert edges(tilec.compile(main, target="cpu").ftg) == {
        ("n0", "n1", "WAW", "x", None),
        ("n0", "n2", "RAW", "x", None),  # n1 is not on the path to n2 within a trip: no kill
        ("n1", "n2", "RAW", "x", "k"),  # n2 reads what n1 wrote in an earlier trip, not in its own
        ("n2", "n1", "WAR", "x", "k"),
    }  # and no n1 -> n2 within a trip


def test_warp_roles_branches_both_run():
    kernel = load_example("01_gemm").matmul(256, 256, 256, block_N=128, block_K=64, threads=128)
    configs = {"wgmma": True, "tma": True, "warp_specialize": True}
    ftg = tilec.JITKernel(kernel.prim_func, "cuda:sm_90a", pass_configs=configs).ftg
    assert [ftg.node(n)["kind"] for n in ("n4", "n5", "n8")] == ["tma_copy", "tma_copy", "gemm"]
    assert {("n4", "n8", "RAW", "A_s", None), ("n5", "n8", "RAW", "B_s", None)} <= edges(ftg)
    # the producer's loads (then-branch of the WarpRoles) feed the consumer's gemm (else-branch): not exclusive


def if_else_kernel(else_writes: str):
    """x is rewritten in the then-branch, and in the else-branch: all of it (``fill``), one element (``store``), or
    all of it in both branches of a nested if/else (``nested``); then read (n3) and rewritten reading it (n4)."""

    @T.prim_func
    def main(Y: T.Tensor((8,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            x = T.alloc_fragment((8,), "float32")
            T.fill(x, 0.0)  # n0
            for k in T.serial(4):
                if bx > 0:
                    for i in T.Parallel(8):  # n1: all of x
                        x[i] = 1.0
                elif else_writes == "fill":
                    T.fill(x, 2.0)  # n2
                elif else_writes == "store":
                    x[0] = 2.0  # n2: one element
                elif k > 1:
                    T.fill(x, 2.0)  # n2 (nested)
                else:
                    T.fill(x, 3.0)  # n3 (nested)
                T.copy(x, Y)
                for i in T.Parallel(8):  # rewrites all of x, reading it
                    x[i] = x[i] * 2.0

    return tilec.compile(main, target="cpu").ftg


IF_ELSE_EDGES = {
    ("n0", "n1", "WAW", "x", None),
    ("n0", "n2", "WAW", "x", None),  # n1 and n2 are exclusive: no n1 -> n2, and n1 does not kill for n2
    ("n1", "n3", "RAW", "x", None),
    ("n1", "n4", "RAW", "x", None),
    ("n2", "n3", "RAW", "x", None),
    ("n2", "n4", "RAW", "x", None),
    ("n3", "n4", "WAR", "x", None),
    ("n4", "n1", "WAR", "x", "k"),
    ("n4", "n2", "WAR", "x", "k"),  # n1 <-> n2 across trips are killed by n4
}  # no n0 -> n3, n4 nor n4 -> n3, n4 (carried): n1 or n2 rewrites all of x in between on every path


def test_if_else_overwriting_in_both_branches_kills():
    ftg = if_else_kernel("fill")
    assert [ftg.node(n)["kind"] for n in ftg.nodes] == ["fill", "parallel", "fill", "copy", "parallel"]
    assert edges(ftg) == IF_ELSE_EDGES


def test_if_else_overwriting_in_one_branch_does_not_kill():
    ftg = if_else_kernel("store")
    assert [ftg.node(n)["kind"] for n in ftg.nodes] == ["fill", "parallel", "store", "copy", "parallel"]
    assert edges(ftg) == IF_ELSE_EDGES | {
        ("n0", "n3", "RAW", "x", None),  # when bx == 0, x[1:] still holds n0's zeros in the first trip
        ("n0", "n4", "RAW", "x", None),
        ("n4", "n3", "RAW", "x", "k"),  # and n4's values from the trip before, in later ones
        ("n4", "n4", "RAW", "x", "k"),
    }


def test_nested_if_else_overwriting_on_every_path_kills():
    ftg = if_else_kernel("nested")
    assert [ftg.node(n)["kind"] for n in ftg.nodes] == ["fill", "parallel", "fill", "fill", "copy", "parallel"]
    ids = {"n0": ["n0"], "n1": ["n1"], "n2": ["n2", "n3"], "n3": ["n4"], "n4": ["n5"]}  # n2 is n2 or n3 here
    assert edges(ftg) == {(a, b, *rest) for u, v, *rest in IF_ELSE_EDGES for a in ids[u] for b in ids[v]}


def test_full_overwrite_earlier_in_the_loop_kills_for_later_nodes():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            x = T.alloc_fragment((8,), "float32")
            T.fill(x, 0.0)  # n0
            for _k in T.serial(3):
                for i in T.Parallel(8):  # n1: rewrites all of x, reading it
                    x[i] = x[i] * 2.0
                T.copy(x, A)  # n2 reads n1's values, never n0's

    assert edges(tilec.compile(main, target="cpu").ftg) == {
        ("n0", "n1", "RAW", "x", None),
        ("n1", "n2", "RAW", "x", None),
        ("n1", "n1", "RAW", "x", "_k"),
        ("n2", "n1", "WAR", "x", "_k"),
    }  # and no n0 -> n2


# ------------------------------------------------------------------------------------------------- tilec.dump


def test_dump_after_each_stage(gemm, tmp_path, monkeypatch):
    from tilec.passes.pipeline import stage_names

    assert stage_names(gemm.target) == ["parse", "verify", "build_ftg", "hand_schedules"]
    assert tilec.dump(gemm) == tilec.dump(gemm, after="parse") == str(gemm.prim_func)
    assert tilec.dump(gemm, after="verify") == str(gemm.prim_func)
    assert tilec.dump(gemm, after="build_ftg") == str(gemm.ftg)
    assert tilec.dump(gemm, after="hand_schedules") == str(gemm.prim_func)  # checks only
    assert tilec.dump(gemm.prim_func, after="build_ftg").startswith("FTG main: 5 tile ops")
    assert gemm.get_kernel_source() == str(gemm.prim_func)  # the cpu target runs the Tile IR itself
    report = gemm.report()
    assert report.splitlines()[0] == "kernel main for target cpu" and "stage build_ftg:" in report

    monkeypatch.setenv("TILEC_DUMP_DIR", str(tmp_path))
    tilec.dump(gemm, after="build_ftg")
    names = sorted(p.name for p in tmp_path.iterdir())
    stem = names[0].removesuffix(".00.parse.txt")
    assert re.fullmatch(r"main\.cpu\.[0-9a-f]{8}", stem), names
    assert names == [f"{stem}.00.parse.txt", f"{stem}.01.verify.txt", f"{stem}.02.build_ftg.txt"]
    assert (tmp_path / f"{stem}.02.build_ftg.txt").read_text() == str(gemm.ftg) + "\n"
    other = tilec.JITKernel(gemm.prim_func, "simt:sm_80", [-1])  # another kernel named main: files of its own
    tilec.dump(other, after="verify")
    assert len(list(tmp_path.iterdir())) == 5 and (tmp_path / f"{stem}.01.verify.txt").exists()


def test_dump_of_a_cuda_kernel_shows_the_devices_architecture(gemm, monkeypatch):
    """A kernel for target "cuda" (what "auto" gives on a GPU) is built for the device's architecture; tilec.dump of
    it before its first call ran the stages with no architecture (no wgmma, no staged epilogue), so it showed other
    code than the kernel runs."""
    from tilec.backends.cuda import runtime

    monkeypatch.setattr(runtime, "device_arch", lambda device=0: "sm_90a")
    for stage in ("lower", "emit"):
        kernel = tilec.JITKernel(gemm.prim_func, "cuda", [-1])
        shown = tilec.dump(kernel, after=stage)
        assert str(kernel.target) == "cuda:sm_90a"
        assert shown == str(kernel.state.artifacts[stage]) == str(tilec.dump(kernel, after=stage)), stage
    assert "wgmma" in shown


def test_an_element_atomic_add_reads_as_an_add_in_the_ftg_and_the_report():
    """`T.atomic_add(H[0], A[0] * 2)` was the node `atomic  H[0] = A[0] * 2.0` in print(kernel.ftg) and
    kernel.report(): a plain store, where the kernel adds to H[0]. It reads `H[0] += A[0] * 2.0`."""
    import numpy as np

    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), H: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            T.atomic_add(H[0], A[0] * 2)

    kernel = tilec.compile(main, target="cpu")
    (node,) = kernel.ftg.nodes
    assert kernel.ftg.node(node)["label"] == "H[0] += A[0] * 2.0"
    assert "H[0] += A[0] * 2.0" in str(kernel.ftg)
    assert re.search(r"n0 atomic\s+line \d+: H\[0\] \+= A\[0\] \* 2\.0", kernel.report()), kernel.report()
    a = np.random.default_rng().standard_normal(8).astype(np.float32)
    h = np.array([1.5, 0.0], np.float32)
    kernel(a, h)  # what the label says: an add to what H[0] held
    np.testing.assert_allclose(h, [1.5 + 2.0 * float(a[0]), 0.0], rtol=1e-6)


def test_ftg_labels_name_the_options_that_change_what_an_op_computes():
    """print(kernel.ftg) and kernel.report() left out what makes an op compute something else: a reduce with
    clear=False (combined with what dst held) read as a plain reduce, a reverse cumsum as a forward one, a gemm with
    clear_accum as one accumulating into C, and a T.print said its message but not what it prints."""
    import numpy as np

    @T.prim_func
    def main(A: T.Tensor((8, 16), "float16"), B: T.Tensor((16, 8), "float16"), C: T.Tensor((8, 8), "float32"),
             R: T.Tensor((8,), "float32"), S: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((8, 16), "float16")
            B_s = T.alloc_shared((16, 8), "float16")
            C_f = T.alloc_fragment((8, 8), "float32")
            r = T.alloc_fragment((8,), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f, clear_accum=True)
            T.fill(r, 1.0)
            T.reduce_sum(C_f, r, dim=1, clear=False)
            T.print(r, msg="row sums")
            T.print(bx + 1)
            T.copy(r, R)
            T.cumsum(C_f, dim=1, reverse=True)
            T.copy(C_f, S)
            T.copy(C_f, C)

    kernel = tilec.compile(main, target="cpu")
    labels = [kernel.ftg.node(n)["label"] for n in kernel.ftg.nodes]
    assert labels[2] == "A_s, B_s -> C_f  (8x8x16 clear_accum)"
    assert labels[4] == "sum(C_f, dim=1, clear=False) -> r"
    assert labels[5] == "r, msg='row sums'" and labels[6] == "bx + 1, msg=''"
    assert labels[8] == "C_f -> C_f (dim=1, reverse)"
    report = kernel.report()
    assert "sum(C_f, dim=1, clear=False) -> r" in report and "C_f -> C_f (dim=1, reverse)" in report
    rng = np.random.default_rng()
    a, b = (rng.standard_normal(s).astype(np.float16) for s in ((8, 16), (16, 8)))
    c, r, s = np.full((8, 8), np.nan, np.float32), np.full(8, np.nan, np.float32), np.full((8, 8), np.nan, np.float32)
    kernel(a, b, c, r, s)  # what the labels say: r = 1 + row sums, S the reversed inclusive prefix sums
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(r, 1.0 + want.sum(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(s, np.cumsum(want[:, ::-1], 1)[:, ::-1], rtol=1e-4, atol=1e-4)


def test_the_report_of_a_cuda_kernel_names_the_architecture_it_describes(gemm, monkeypatch):
    """kernel.report() for target "cuda" (what "auto" gives on a GPU), before anything else built the kernel, said
    'for target cuda' above the wgmma notes of sm_90a: the header was written before the stages resolved the
    device's architecture. It names the architecture the notes are about."""
    from tilec.backends.cuda import runtime

    monkeypatch.setattr(runtime, "device_arch", lambda device=0: "sm_90a")
    report = tilec.JITKernel(gemm.prim_func, "cuda", [-1]).report()
    assert report.splitlines()[0] == "kernel main for target cuda:sm_90a", report
    assert "wgmma" in report


def test_a_node_from_a_macro_of_another_file_names_that_file(tmp_path, monkeypatch):
    """A T.macro defined in another module made a node shown as `line 7` in print(kernel.ftg), kernel.report() and
    the dot graph: line 7 of the macro's file, read as line 7 of the kernel's. Such a node now shows
    `helpers_ftg.py:7`; the kernel's own nodes keep `line N`."""
    import importlib
    import textwrap

    import numpy as np

    (tmp_path / "helpers_ftg.py").write_text(textwrap.dedent("""
        import tilec.language as T


        @T.macro
        def double_into(dst, src):
            for i in T.Parallel(64):
                dst[i] = src[i] * 2.0
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    helpers = importlib.import_module("helpers_ftg")

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            F = T.alloc_fragment((64,), "float32")
            T.copy(A, F)
            helpers.double_into(B, F)

    kernel = tilec.compile(main, target="simt:sm_80")
    copy_line = kernel.ftg.node("n0")["line"]
    assert [kernel.ftg.node(n)["where"] for n in kernel.ftg.nodes] == [f"line {copy_line}", "helpers_ftg.py:7"]
    assert kernel.ftg.node("n1")["line"] == 7
    text = str(kernel.ftg)
    assert re.search(r"n1\s+parallel\s+for i in \(64\): B\[i\]\s+helpers_ftg\.py:7$", text, re.M), text
    assert re.search(r"n1 parallel\s+helpers_ftg\.py:7: for i in \(64\): B\[i\]", kernel.report()), kernel.report()
    assert "helpers_ftg.py:7" in kernel.ftg.to_dot() and '"where": "helpers_ftg.py:7"' in kernel.ftg.to_json()
    a = np.random.default_rng().standard_normal(64).astype(np.float32)
    b = np.full(64, np.nan, np.float32)
    kernel(a, b)
    np.testing.assert_allclose(b, a.astype(np.float64) * 2.0, rtol=1e-6)


_MACROS = '''import tilec.language as T


@T.macro
def staged_sum(A, S, acc, bx):
    for k in T.Pipelined(4, num_stages=2):
        T.copy(A[bx * 64, k * 32], S)
        for i, j in T.Parallel(64, 32):
            acc[i, j] += S[i, j]


@T.macro
def reversed_stages(A, S, acc, bx):
    for k in T.Pipelined(4, num_stages=2, stage=[1, 0], order=[0, 1]):
        T.copy(A[bx * 64, k * 32], S)
        for i, j in T.Parallel(64, 32):
            acc[i, j] += S[i, j]
'''


def test_notes_comments_and_errors_of_a_macro_of_another_file_name_that_file(tmp_path, monkeypatch):
    """The report's notes ('T.Pipelined at line 6'), the `// line 8:` comments of the generated CUDA and the
    messages of pass errors gave a bare line number for a statement of a T.macro defined in another file: a line of
    the macro's file, read as one of the kernel's. They now name the file ('helpers_where.py:6'), as the FTG does;
    the kernel's own statements keep 'line N'."""
    import importlib

    import numpy as np

    from tilec.passes.cost_model import estimate_kernel

    (tmp_path / "helpers_where.py").write_text(_MACROS)
    monkeypatch.syspath_prepend(str(tmp_path))
    helpers = importlib.import_module("helpers_where")

    def kernel(macro):
        @T.prim_func
        def main(A: T.Tensor((128, 128), "float32"), B: T.Tensor((128, 32), "float32")):
            with T.Kernel(2, threads=128) as bx:
                S = T.alloc_shared((64, 32), "float32")
                acc = T.alloc_fragment((64, 32), "float32")
                T.clear(acc)
                macro(A, S, acc, bx)
                T.copy(acc, B[bx * 64, 0])

        return main

    main = kernel(helpers.staged_sum)
    jk = tilec.JITKernel(main, "cuda:sm_80")
    source, report = jk.get_kernel_source(), jk.report()
    own = jk.ftg.node("n0")["line"]  # T.clear(acc), a line of this file
    assert f"// line {own}: T.fill(acc, 0.0)" in source
    assert "// helpers_where.py:8: T.Parallel" in source and "// line 8: T.Parallel" not in source, source
    assert "// helpers_where.py:7: T.async_copy(" in source and "// line 7: T.async_copy(" not in source
    assert "note: T.Pipelined at helpers_where.py:6: 2 stages" in report, report
    assert "at line 6" not in report, report
    table = estimate_kernel(main, "cuda:sm_80").ops_table()
    assert re.search(r"^n\d+\s+parallel\s+helpers_where\.py:8 ", table, re.M), table
    assert re.search(rf"^n0\s+fill\s+{own} ", table, re.M), table

    with pytest.raises(tilec.TilecError) as e:
        tilec.compile(kernel(helpers.reversed_stages), target="simt:sm_80").compile()
    assert e.value.loc.file == str(tmp_path / "helpers_where.py") and e.value.loc.line == 16, e.value
    assert e.value.message.startswith("T.Pipelined at helpers_where.py:14: the statement at helpers_where.py:16 "
                                      "(stage 0) reads what the one at helpers_where.py:15 (stage 1) writes"), e.value

    a = np.random.default_rng().standard_normal((128, 128)).astype(np.float32)
    b = np.full((128, 32), np.nan, np.float32)
    tilec.compile(main, target="simt:sm_80")(a, b)
    np.testing.assert_allclose(b, a.astype(np.float64).reshape(128, 4, 32).sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ["simt:sm_80", "cuda:sm_90a"])
def test_the_node_tables_of_report_and_ftg_are_aligned(gemm, target):
    """kernel.report() and print(kernel.ftg) gave the kind 10 columns: `async_commit`, `barrier_init` and
    `barrier_arrive` pushed the rest of their line out of line, and the report's `async_commit line 24: ` ended in
    an empty label. The columns are now as wide as their longest entry and a node without a label ends at its line."""
    kernel = tilec.JITKernel(gemm.prim_func, target)
    ftg, report = kernel.ftg, kernel.report()
    kinds = {ftg.node(n)["kind"] for n in ftg.nodes}
    assert {"async_commit"} <= kinds if target.startswith("simt") else {"barrier_init", "barrier_arrive"} <= kinds
    rows = [ln for ln in report.splitlines() if re.match(r"  n\d+ ", ln)]
    assert len(rows) == len(ftg.nodes)
    for n, row in zip(ftg.nodes, rows):
        d = ftg.node(n)
        assert row == row.rstrip() and not row.endswith(":"), row
        assert row.split()[:3] == [n, d["kind"], *d["where"].split()[:1]], row
        assert row.endswith(f"{d['where']}: {d['label']}" if d["label"] else d["where"]), row
    for col in (lambda n: ftg.node(n)["kind"], lambda n: ftg.node(n)["where"]):
        assert len({row.index(f" {col(n)}") for n, row in zip(ftg.nodes, rows)}) == 1, report
    labelled = [(n, row) for n, row in zip(ftg.nodes, rows) if ftg.node(n)["label"]]
    assert len({row.index(ftg.node(n)["label"]) for n, row in labelled}) == 1, report
    text = [ln for ln in str(ftg).splitlines() if re.match(r"  n\d+ ", ln)]
    for col in (lambda n: ftg.node(n)["kind"], lambda n: ftg.node(n)["label"] or ftg.node(n)["where"]):
        starts = {row.index(f" {col(n)}") + 1 for n, row in zip(ftg.nodes, text) if ftg.node(n)["label"]}
        assert len(starts) == 1, str(ftg)
    assert len({row.index(f"  {ftg.node(n)['where']}") for n, row in zip(ftg.nodes, text)}) == 1, str(ftg)
    from tilec.passes.cost_model import estimate_kernel

    table = estimate_kernel(gemm.prim_func, target).ops_table().splitlines()  # the cost model's rows too
    ends = {re.match(r"\S+\s+\S+\s+\S+\s+\S+", ln).end() for ln in table}  # up to the runs/block column
    assert ends == {table[0].index("runs/block") + len("runs/block")}, "\n".join(table)


def test_the_report_of_a_compiled_kernel_gives_its_spills_and_ptxas_warnings(gemm):
    """A compiled kernel whose registers spilled (a 192-row flash attention at D=128 on 384 threads: 292 bytes) said
    nothing about it in kernel.report(); only kernel.n_spills told. The report now gives the registers and spill bytes
    next to ptxas's performance warnings, and no line where nothing spilled."""
    from types import SimpleNamespace

    kernel = tilec.JITKernel(gemm.prim_func, "cuda:sm_90a", [-1])
    warning = "(C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized"
    kernel._exe = SimpleNamespace(ck=SimpleNamespace(n_regs=168, n_spills=292, warnings=(warning,)))
    lines = kernel.report().splitlines()
    assert "  registers: 168 a thread, 292 bytes of spill stores (local memory)" in lines
    assert f"  ptxas: {warning}" in lines
    kernel._exe = SimpleNamespace(ck=SimpleNamespace(n_regs=168, n_spills=0, warnings=()))
    assert not any(line.startswith(("  registers:", "  ptxas:")) for line in kernel.report().splitlines())
