"""Variants of tilec's Hopper GEMM (and flash attention) timed side by side with cuBLAS and Triton.

    python benchmarks/hopper_variants.py [--sizes 4096,8192] [--attention [--attention-shapes BxHxSxD,...]]
        [--sustain S] [--profile] [--json PATH]

An exploration tool for docs/perf-notes.md: pass-config variants of the same example kernels, checked against a
float64 reference and timed in one process beside cuBLAS and Triton; ``--sustain`` also runs each back to back and
reads the SM clock and power (NVML), ``--profile`` runs each twice untimed for ``ncu``, ``--warmup`` sets each
timing's warm-up. A variant may patch its generated CUDA first (``no epilogue``: what the epilogue costs; the
``probe`` variants: what moving each operand into shared memory, the tensor cores' reads of A, or the epilogue's
fences, barriers and stores cost, computed on stale or constant data or racing, so wrong by design; ``deferred``,
``staggered`` and ``stmatrix``: epilogue schedules measured before the compiler would build them, perf notes of the
twenty-sixth session; ``held-stage``: chunks staged in the ring stage the main loop read last, thirty-third session,
which the compiler now builds as ``stage_in_ring``; these patch the chunked epilogue, so their variants ask for it
with ``stage_in_ring: False``); the patches of perf notes L, M and AT are in the git history. A persistent GEMM variant
that names no panel takes the compiler's (tilec.passes.panels: 16 rows for 128x256 tiles) since the thirty-second
session; before, such a row ran its tiles in row-major order (``panel=1`` asks for that).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def tilec_variant(M: int, N: int, K: int, dtype: str, kw: dict, configs: dict,
                  patch: Callable[[str, int], str] | None = None) -> object:
    """The example GEMM with these kernel arguments and pass configs, compiled; ``patch(source, N)`` edits its
    generated CUDA first (a measurement of what a change would bring before the compiler makes it)."""
    import tilec

    gemm = __import__("01_gemm")
    jk = tilec.JITKernel(gemm.matmul.fn(M, N, K, dtype=dtype, **kw), "cuda", out_idx=[-1], pass_configs=configs)
    return compiled(jk, None if patch is None else lambda src: patch(src, N))


def compiled(jk: object, patch: Callable[[str], str] | None = None) -> object:
    """``jk`` compiled, from its generated CUDA edited by ``patch`` first if given (built outside the disk cache)."""
    import os
    import tempfile

    from tilec.backends.cuda.runtime import CudaExecutable, load

    if patch is None:
        return jk.compile()
    state, old = jk.state, os.environ.get("TILEC_CACHE_DIR")
    with tempfile.TemporaryDirectory() as d:
        os.environ["TILEC_CACHE_DIR"] = d
        try:
            func, kernel, source = state.artifacts["input_func"], state.artifacts["thread_ir"], patch(
                state.artifacts["source"])
            if isinstance(source, tuple):  # (source, an edit of the thread kernel: its tensor maps' boxes)
                source, edit = source
                kernel = edit(kernel)
            jk._exe = CudaExecutable(load(kernel, source, state.target, func, jk.pass_configs), func)
        finally:
            if old is None:
                os.environ.pop("TILEC_CACHE_DIR")
            else:
                os.environ["TILEC_CACHE_DIR"] = old
    return jk


@contextlib.contextmanager
def compiler_settings(chains: int | None = None, fence_ties: bool | None = None) -> Iterator[None]:
    """Kernels built in this block fold their reductions in ``chains`` chains a thread and tie the registers of
    their wgmma fences or not (``None``: the compiler's)."""
    from tilec.lower import reduce, wgmma

    old = reduce.CHAINS, wgmma.FENCE_TIES
    reduce.CHAINS = old[0] if chains is None else chains
    wgmma.FENCE_TIES = old[1] if fence_ties is None else fence_ties
    try:
        yield
    finally:
        reduce.CHAINS, wgmma.FENCE_TIES = old


def no_epilogue(source: str, n: int) -> str:
    """The persistent GEMM's consumers skip their epilogue (under a condition on two accumulators that random
    inputs never meet, so the accumulators stay live): its time against the kernel's own is what the epilogue
    costs. The output is left unwritten."""
    i = source.index("wgmma.wait_group.sync.aligned 0;")
    j = source.index('asm volatile("bar.sync 1, 256;"', i)
    k = source.index("    }\n    // T.tma_store_wait(C_f_stage)", j)
    return source[:j] + "if (C_f[0] == 1.5e-38f && C_f[127] == 2.5e-38f) {\n" + source[j:k] + "}\n" + source[k:]


def _tile_loop(source: str) -> tuple[list[str], int, str]:
    """The persistent GEMM's lines, the line of its consumers' loop over tiles, and that loop's trip count."""
    lines = source.split("\n")
    loop = next(i for i, line in enumerate(lines) if "setmaxnreg.inc" in line) + 1
    m = re.match(r"    for \(int tile = 0; tile < (.*); \+\+tile\) \{$", lines[loop])
    assert m, lines[loop]
    return lines, loop, m.group(1)


def staggered_epilogue(source: str, n: int) -> tuple[str, Callable]:
    """Hand patch: the persistent GEMM's two consumer warpgroups store their own 64 rows of each chunk (their own
    named barrier, their own TMA store of a 64-row box) and take turns at their epilogues (named barriers 4 and 5:
    the second waits for the first's, the first for the second's previous one), releasing the tile's last stage
    before the epilogue. The second then runs its last k-steps alone while the first stores, and the first its next
    tile's first k-steps while the second stores: the tensor cores are never left idle by both at once."""
    lines, loop, trips = _tile_loop(source)
    tend = next(i for i in range(loop, len(lines)) if lines[i] == "    }")
    body = lines[loop + 1:tend]
    kl = next(i for i, line in enumerate(body) if line.startswith("      for (int k = 0; k < "))
    ksteps = int(re.match(r"      for \(int k = 0; k < (\d+); \+\+k\)", body[kl]).group(1))
    rel = next(i for i, line in enumerate(body) if f"if (tile * {ksteps} + k >= 1) {{" in line)
    body[rel] = body[rel].replace(f"tile * {ksteps} + k >= 1", "k >= 1")
    ring = int(re.search(r"k_empty \+ tl::floormod\(tile \* \d+ \+ \(k - 1\), (\d+)\)", source).group(1))
    drained = max(i for i, line in enumerate(body) if line.lstrip().startswith('asm volatile("" : "+f"(C_f['))
    assert "wgmma.wait_group.sync.aligned 0" in "\n".join(body[drained - 6:drained])
    turn = ["      __syncwarp();",
            "      if (tx % 32 == 0) {",
            f"        tl::mbar_arrive_tx(k_empty + (tile * {ksteps} + {ksteps - 1}) % {ring}, 0);",
            "      }",
            "      if (tx >= 128) {",
            '        asm volatile("bar.sync 4, 256;" ::: "memory");',
            "      } else if (tile > 0) {",
            '        asm volatile("bar.sync 5, 256;" ::: "memory");',
            "      }"]
    done = ["      if (tx < 128) {",
            '        asm volatile("bar.arrive 4, 256;" ::: "memory");',
            f"      }} else if (tile + 1 < {trips}) {{",
            '        asm volatile("bar.arrive 5, 256;" ::: "memory");',
            "      }"]
    body = body[:drained + 1] + turn + body[drained + 1:] + done
    text = "\n".join(body)
    text = text.replace('asm volatile("bar.sync 1, 256;" ::: "memory");',
                        'asm volatile("bar.sync %0, 128;" :: "r"(2 + tx / 128) : "memory");')
    text = text.replace("if (tx == 0) {\n        asm volatile(\"cp.async.bulk.wait_group.read",
                        "if (tx % 128 == 0) {\n        asm volatile(\"cp.async.bulk.wait_group.read")
    text, stores = re.subn(r"if \(tx == 0\) \{\n(\s*)tl::tma_store_2d\(&(C_tmap\d+), C_f_stage \+ (\d+), ",
                           r"if (tx % 128 == 0) {\n\1tma_store_2d_half(&\2, C_f_stage + \3 + tx / 128 * "
                           + str(64 * 64) + ", ", text)
    assert stores == 4 and "if (tx == 0)" not in text, stores
    tail = "\n".join(lines[tend:])
    tail = tail.replace("if (tx == 0) {\n      asm volatile(\"cp.async.bulk.wait_group.read 0",
                        "if (tx % 128 == 0) {\n      asm volatile(\"cp.async.bulk.wait_group.read 0")
    helper = ("__device__ __forceinline__ void tma_store_2d_half(const void* map, const void* src, int c0, int c1) "
              "{ tl::tma_store_2d(map, src, c0, c1 + (threadIdx.x / 128) * 64); }")
    head = "\n".join(lines[:loop + 1])
    k = head.index("extern \"C\" __global__")
    out = head[:k] + helper + "\n" + head[k:] + "\n" + text + "\n" + tail

    def edit(kernel: object) -> object:
        import dataclasses

        maps = tuple(dataclasses.replace(t, box=(t.box[0], 64)) if t.name.startswith("C_tmap") else t
                     for t in kernel.tensor_maps)
        assert maps != kernel.tensor_maps
        return dataclasses.replace(kernel, tensor_maps=maps)
    return out, edit


def deferred_epilogue(source: str, n: int) -> str:
    """Hand patch: the persistent GEMM's consumers pack a finished tile's accumulators into 64 32-bit registers (two
    outputs each) and write them to the staging tile and issue its TMA stores during the next tile's second k-step,
    with that tile's first two wgmma groups in flight; the last tile's after the loop. What hiding the epilogue
    behind the tensor cores' work would bring (perf notes AT measured an older form, timed in turn)."""
    lines, loop, trips = _tile_loop(source)
    kl = next(i for i in range(loop, len(lines)) if lines[i].startswith("      for (int k = 0; k < "))
    kend = next(i for i in range(kl, len(lines)) if lines[i] == "      }")
    commit = next(i for i in range(kl, kend) if "wgmma.commit_group" in lines[i])
    tend = next(i for i in range(kend, len(lines)) if lines[i] == "    }")
    epi = lines[kend + 1:tend]
    drain = [line for line in epi
             if "wgmma.wait_group.sync.aligned 0" in line or line.lstrip().startswith('asm volatile("" : "+f"')]
    text = "\n".join(line for line in epi if line not in drain)
    pair = re.compile(r"(vec_\d+)\[0\] = static_cast<(\w+)>\(C_f\[(\d+)\]\);\n\s*"
                      r"\1\[1\] = static_cast<\2>\(C_f\[(\d+)\]\);")
    dtype = pair.search(text).group(2)

    def sub(mm: re.Match) -> str:
        a, b = int(mm.group(3)), int(mm.group(4))
        assert b == a + 1 and a % 2 == 0
        return f"*reinterpret_cast<unsigned*>(&{mm.group(1)}[0]) = C_p[{a // 2}];"
    text, count = pair.subn(sub, text)
    assert count == 64, count
    assert not any("C_f[" in line and "//" not in line for line in text.split("\n"))
    inner = re.sub(r"\btile\b", "(tile - 1)", text)
    last = re.sub(r"\btile\b", "tile_last", text)
    during = ["        if (k == 1 && tile > 0) {", inner, "        }"]
    pack = []
    for i in range(64):
        pair = f"static_cast<{dtype}>(C_f[{2 * i}]), static_cast<{dtype}>(C_f[{2 * i + 1}])"
        pack += [f"      {{ __align__(4) {dtype} p[2] = {{{pair}}};",
                 f"        C_p[{i}] = *reinterpret_cast<const unsigned*>(&p[0]); }}"]
    out = (lines[:loop] + ["    unsigned C_p[64];"] + lines[loop:commit + 1] + during
           + lines[commit + 1:kend + 1] + drain + pack + lines[tend:tend + 1]
           + [f"    if ({trips} > 0) {{", f"      const int tile_last = {trips} - 1;", last, "    }"]
           + lines[tend + 1:])
    return "\n".join(out)


def _consumer_epilogue(source: str) -> tuple[int, int]:
    """(first line, end) of the persistent GEMM consumers' epilogue in the tile loop: from the k-loop's end to the
    tile loop's."""
    lines, loop, _ = _tile_loop(source)
    kl = next(i for i in range(loop, len(lines)) if lines[i].startswith("      for (int k = 0; k < "))
    kend = next(i for i in range(kl, len(lines)) if lines[i] == "      }")
    return kend + 1, next(i for i in range(kend, len(lines)) if lines[i] == "    }")


def _in_epilogue(source: str, edit: Callable[[str], str]) -> str:
    lines = source.split("\n")
    a, b = _consumer_epilogue(source)
    return "\n".join(lines[:a] + edit("\n".join(lines[a:b])).split("\n") + lines[b:])


def epilogue_no_fences(source: str, n: int) -> str:
    """Probe: the epilogue without its proxy fences (a TMA store may read stale staging: wrong by design)."""
    return _in_epilogue(source, lambda t: t.replace('asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");',
                                                    ""))


def epilogue_no_barriers(source: str, n: int) -> str:
    """Probe: the epilogue without its consumer barriers (races by design)."""
    return _in_epilogue(source, lambda t: t.replace('asm volatile("bar.sync 1, 256;" ::: "memory");', ""))


def epilogue_no_stores(source: str, n: int) -> str:
    """Probe: the staging tile written, fenced and synchronized as always, never stored (output left unwritten)."""
    return _in_epilogue(source, lambda t: re.sub(r"tl::tma_store_2d\(.*?\);\n", "", t))


def epilogue_stmatrix(source: str, n: int) -> str:
    """The staging writes as ``stmatrix.x4`` (four 8x8 matrices a warp, 16-byte rows) instead of 4-byte stores:
    4 instructions a chunk of 64 columns a thread instead of 16. The wgmma accumulator layout is stmatrix's
    fragment layout: thread l of warp w holds, for 8 columns j, rows 16w + l/4 (+8) at columns 2(l%4) and +1."""
    head = re.compile(r"      // line \d+: T\.copy\(C_f\[:128, (\d*):(\d+)\], C_f_stage\[(\d), :128, :64\]\)\n")

    def chunk(t: str) -> str:
        out, pos = [], 0
        for m in head.finditer(t):
            end = t.index('asm volatile("fence.proxy.async', m.end())
            out.append(t[pos:m.end()])
            c0, buf = int(m.group(1) or 0), int(m.group(3))
            dtype = re.search(r"static_cast<(\w+)>", t[m.end():end]).group(1)
            body = []
            for j in range(c0 // 8, c0 // 8 + 8, 2):  # two 8-column blocks, two row halves: one stmatrix.x4
                regs = [f"C_f[{4 * jj + 2 * h}]" for jj in (j, j + 1) for h in (0, 1)]
                col = f"({j - c0 // 8} * 8 + lane / 16 * 8)"
                row = "(tx / 32 * 16 + lane / 8 % 2 * 8 + lane % 8)"
                body += ["      {",
                         f"        __align__(16) {dtype} p[8] = {{"
                         + ", ".join(f"static_cast<{dtype}>({r[:-1]} + {k}])" for r in regs for k in (0, 1))
                         + "};",
                         "        const unsigned* q = reinterpret_cast<const unsigned*>(&p[0]);",
                         f"        const unsigned a = tl::smem_addr(&C_f_stage[{buf * 8192} + {row} * 64 + ({col} ^ "
                         f"{row} % 8 * 8)]);",
                         '        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" '
                         ':: "r"(a), "r"(q[0]), "r"(q[1]), "r"(q[2]), "r"(q[3]) : "memory");',
                         "      }"]
            out.append("\n".join(["      {", "      const int lane = tx % 32;"] + body + ["      }"]) + "\n      ")
            pos = end
        out.append(t[pos:])
        return "".join(out)
    return _in_epilogue(source, chunk)


def held_stage_epilogue(source: str, n: int, late: bool = False, split: bool = False) -> str:
    """Hand patch: the epilogue stages its four 128x64 chunks without waiting for a TMA store's reads, some of them
    in the ring stage of the tile's last k-step (its A and B tiles, 48 KB, which the consumers release only at the
    next tile's first k-step), the rest in the staging buffers. The stage's release first waits for the reads of
    the stores out of it (``cp.async.bulk.wait_group.read``, by thread 0, which issued them).

    By default three chunks go to the stage and one to buffer 0, all written before the stores are issued (two
    barriers a tile instead of nine), and the stage is released at the next tile's first k-step. ``late``: released
    at its second k-step instead (its reads have had a k-step to finish; the producer a k-step less to reload it).
    ``split``: chunks 0 and 1 go to the stage's B tile and are stored first, chunks 2 and 3 to the two buffers
    (three barriers), and the release waits only for the first two stores."""
    lines, loop, _ = _tile_loop(source)
    kl = next(i for i in range(loop, len(lines)) if lines[i].startswith("      for (int k = 0; k < "))
    ksteps = int(re.match(r"      for \(int k = 0; k < (\d+); \+\+k\)", lines[kl]).group(1))
    ring = int(re.search(r"k_empty \+ tl::floormod\(tile \* \d+ \+ \(k - 1\), (\d+)\)", source).group(1))
    a, b = _consumer_epilogue(source)
    epi = lines[a:b]
    drain = [line for line in epi
             if "wgmma.wait_group.sync.aligned 0" in line or line.lstrip().startswith('asm volatile("" : "+f"')]
    stores = [m.groups() for m in re.finditer(r"tl::tma_store_2d\(&(C_tmap\d+), C_f_stage \+ \d+, (.*?)\);\n",
                                              "\n".join(epi) + "\n")]
    assert len(stores) == 4 and len(drain) == 5, (len(stores), len(drain))
    dtype = re.search(r"static_cast<(\w+)>\(C_f\[0\]\)", "\n".join(epi)).group(1)
    held = f"(tile * {ksteps} + {ksteps - 1}) % {ring}"
    a_stage, b_stage = 128 * 64, 64 * 256  # elements of a ring stage's A and B tiles
    if split:
        bufs = [f"B_s + {held} * {b_stage}", f"B_s + {held} * {b_stage} + 8192", "C_f_stage", "C_f_stage + 8192"]
        groups = [(0, 1), (2, 3)]
    else:
        bufs = [f"A_s + {held} * {a_stage}", f"B_s + {held} * {b_stage}", f"B_s + {held} * {b_stage} + 8192",
                "C_f_stage"]
        groups = [(0, 1, 2, 3)]
    out = drain + ["      if (tx == 0) {", '        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");',
                   "      }", '      asm volatile("bar.sync 1, 256;" ::: "memory");', "      {",
                   "        const int row = tx / 32 * 16 + tx / 4 % 8;"]
    out += [f"        {dtype}* buf{c} = {buf};" for c, buf in enumerate(bufs)]
    for group in groups:
        for c in group:
            for j in range(8):
                for h in (0, 1):
                    i = 4 * (8 * c + j) + 2 * h
                    r = f"(row + {8 * h})"
                    at = f"{r} * 64 + ({j * 8} + tx % 4 * 2 ^ {r} % 8 * 8)"  # the staging tile's 128-byte swizzle
                    out += [f"        {{ __align__(4) {dtype} p[2] = {{static_cast<{dtype}>(C_f[{i}]), "
                            f"static_cast<{dtype}>(C_f[{i + 1}])}};",
                            f"          *reinterpret_cast<unsigned*>(&buf{c}[{at}]) = "
                            "*reinterpret_cast<const unsigned*>(&p[0]); }"]
        out += ['        asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");',
                '        asm volatile("bar.sync 1, 256;" ::: "memory");', "        if (tx == 0) {"]
        for c in group:
            tmap, coords = stores[c]
            out += [f"          tl::tma_store_2d(&{tmap}, buf{c}, {coords});",
                    '          asm volatile("cp.async.bulk.commit_group;" ::: "memory");']
        out.append("        }")
    out.append("      }")
    lines = lines[:a] + out + lines[b:]
    rel = next(i for i in range(kl, a) if f"if (tile * {ksteps} + k >= 1) {{" in lines[i])
    arrive = next(i for i in range(rel, rel + 6) if "tl::mbar_arrive_tx(k_empty" in lines[i])
    first, pending = ("k == 1 && tile > 0", 0) if late else ("k == 0", 2 if split else 0)
    lines.insert(rel + 1, f"          if ({first} && tx == 0) "
                          f'asm volatile("cp.async.bulk.wait_group.read {pending};" ::: "memory");')
    if late:  # the held stage goes back with the first k-step's, at the second
        lines[rel] = lines[rel].replace(f"tile * {ksteps} + k >= 1", "k >= 1")
        lines.insert(arrive + 1, f"            if (k == 1 && tile > 0) "
                                 f"tl::mbar_arrive_tx(k_empty + (tile * {ksteps} + {ring - 1}) % {ring}, 0);")
    return "\n".join(lines)


def _top_args(call: str) -> list[str]:
    """The arguments of the call whose text ``call`` starts at its opening parenthesis, split at top-level commas."""
    depth, out, cur = 0, [], ""
    for ch in call[1:]:
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()]


def l2_prefetch(source: str, n: int, ahead: int = 4, one: bool = False) -> str:
    """Hand patch: the persistent GEMM's producer thread, after a k-step's TMA loads, asks for the k-tiles ``ahead``
    k-steps further on (the next tile's when past the last k-step) to be brought into L2
    (``cp.async.bulk.prefetch.tensor``: no shared memory, no barrier), so that the load of each, issued when the
    ring frees its stage three k-steps before the consumers need it, finds it in L2 rather than in DRAM.

    ``one``: only one block of those that share a k-tile in a round asks for it (in panels of 16 rows on 128
    blocks a round is 16 tile rows by 8 tile columns, block ``pid`` at row ``pid % 16`` and column ``pid / 16``):
    A's by the blocks of the first column, B's by those of the first row. Every block asking (the default) puts
    each prefetch through L2 8 (A) or 16 (B) times."""
    lines = source.split("\n")
    tloop = next(i for i, line in enumerate(lines) if line.startswith("      for (int tile = 0; tile < "))
    trips = re.match(r"      for \(int tile = 0; tile < (.*); \+\+tile\) \{$", lines[tloop]).group(1)
    ksteps = int(re.match(r"        for \(int k = 0; k < (\d+); \+\+k\)", lines[tloop + 1]).group(1))
    loads = [i for i in range(tloop, len(lines)) if "tl::tma_load_2d(&" in lines[i]]
    assert loads and all(i < next(j for j in range(tloop, len(lines)) if "setmaxnreg.inc" in lines[j]) for i in loads)
    assert not one or re.search(r"\bpid \+ tile \* 128\b", source), "one: panels of 16 on 128 blocks only"
    pre = []
    for i in loads:
        line = lines[i]
        at = line.index("tl::tma_load_2d(") + len("tl::tma_load_2d")
        args = _top_args(line[at:])
        assert len(args) == 5, args
        coords = [re.sub(r"\bk\b", "kq", re.sub(r"\btile\b", "tq", c)) for c in args[3:]]
        only = ("if (pid < 16) " if "A_tmap" in args[0] else "if (pid % 16 == 0) ") if one else ""
        pre.append(f"              {only}tl::tma_prefetch_2d({args[0]}, {coords[0]}, {coords[1]});")
    end = max(loads) + 1
    assert lines[end].strip() == "}", lines[end]
    block = [f"          if (tx == 256) {{  // L2 prefetch, {ahead} k-steps on",
             f"            const int kk = k + {ahead}, tq = tile + kk / {ksteps}, kq = kk % {ksteps};",
             f"            if (tq < {trips}) {{"] + pre + ["            }", "          }"]
    lines = lines[:end + 1] + block + lines[end + 1:]
    out = "\n".join(lines)
    helper = ("__device__ __forceinline__ void tma_prefetch_2d(const void* map, int c0, int c1) {\n"
              '  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];" :: "l"(map), '
              '"r"(c0), "r"(c1) : "memory");\n}\n}  // namespace tl\n')
    k = out.index('extern "C" __global__')
    return out[:k] + "namespace tl {\n" + helper + "\n" + out[k:]


def first_stage_first(source: str, n: int, lead: int = 1) -> str:
    """Hand patch: at the kernel's start the producer issues the first ``lead`` k-steps' loads, waits until the
    first has landed, and only then fills the rest of the ring. Filling every block's whole ring at once asks the
    fabric for 128 x 192 KB together, and the first stage lands with the rest (the consumers' first wait is ~4 k
    cycles by ``wait_profile``); asked for alone, it should land sooner."""
    lines = source.split("\n")
    tloop = next(i for i, line in enumerate(lines) if line.startswith("      for (int tile = 0; tile < "))
    assert lines[tloop + 1].startswith("        for (int k = 0; k < ") and "tl::mbar_wait(k_empty" in lines[tloop + 3]
    lines.insert(tloop + 2, f"          if (tile == 0 && k == {lead}) tl::mbar_wait(k_full + 0, 0);  // first's first")
    return "\n".join(lines)


def wait_profile(source: str, n: int) -> str:
    """Instrumentation (``--profile`` runs only): each consumer warpgroup's first thread times, with ``clock64``,
    its waits for full stages at a tile's first k-step, its second to fourth, and the rest, the tile from its
    first wait to its epilogue's end, and the tile's start on the global timer (ns), keeps them for its first 16
    tiles in local memory and prints them after its last (``waits pid tile wg k0 k1-3 rest total start``), so that
    printing does not stall the tiles timed. Where in a persistent kernel's rounds the consumers wait for data."""
    lines, loop, trips = _tile_loop(source)
    kl = next(i for i in range(loop, len(lines)) if lines[i].startswith("      for (int k = 0; k < "))
    wait = next(i for i in range(kl, len(lines)) if "tl::mbar_wait(k_full" in lines[i])
    tend = next(i for i in range(kl, len(lines)) if lines[i] == "    }")
    lines[wait] = ("        const long long w0 = clock64();\n" + lines[wait] + "\n"
                   "        const long long w1 = clock64() - w0;\n"
                   "        if (k == 0) { wk0 += w1; t_start = w0;\n"
                   '          asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g_start));\n'
                   "        } else if (k < 4) { wk1 += w1; } else { wkr += w1; }")
    lines[tend] = ("      if (tile < 16) { prof[tile][0] = wk0; prof[tile][1] = wk1; prof[tile][2] = wkr;\n"
                   "        prof[tile][3] = clock64() - t_start; prof[tile][4] = (long long)g_start; }\n    }\n"
                   f"    for (int t = 0; t < 16 && t < {trips}; ++t) {{\n"
                   '      if (tx % 128 == 0) printf("waits %d %d %d %lld %lld %lld %lld %lld\\n", pid, t, tx / 128, '
                   "prof[t][0], prof[t][1], prof[t][2], prof[t][3], prof[t][4]);\n    }")
    lines.insert(loop + 1, "      long long wk0 = 0, wk1 = 0, wkr = 0, t_start = 0; unsigned long long g_start = 0;")
    lines.insert(loop, "    long long prof[16][5];")
    return "#ifndef __CUDACC_RTC__\n#include <cstdio>\n#endif\n" + "\n".join(lines)


def inline_trap(source: str, n: int) -> str:
    """The stream-K flag helpers' trap inlined again (as before ``tl::flag_fail``): what the consumers' registers
    capped at the launch count cost."""
    assert "flag_fail();" in source
    return source.replace("flag_fail();", "__trap();")


def sk_no_fence(source: str, n: int) -> str:
    """Stream-K's flag set without the release fence before it (a race: its results may be wrong): what the fence,
    which stalls the first consumer warp until the block's 128 KB of partial sums have reached L2, costs."""
    fence = '  asm volatile("fence.acq_rel.gpu;" ::: "memory");\n'
    assert source.count(fence) == 1, "no fence in stream-K's flag_signal"
    return source.replace(fence, "")


def sk_no_partials(source: str, n: int) -> str:
    """Stream-K without its partial sums' bytes (wrong results): no block saves its sums or loads another's; the
    flags, the fence and the waits stay. What the fix-up's 128 KB out and in a split tile cost."""
    lines = source.splitlines(keepends=True)
    kept = [ln for ln in lines if "&sk_partials[" not in ln and "+ partial_" not in ln]
    assert len(lines) - len(kept) >= 2 * 32 + 128, "the stream-K save and add lines changed"
    return "".join(kept)


def prefetch_tensor_maps(source: str, n: int) -> str:
    """The producer's TMA thread prefetches every tensor map at the kernel's start (``prefetch.tensormap`` on the
    kernel parameter's generic address), before the barriers' initialization: the first TMA load of each block no
    longer waits for its descriptor to be fetched. What that first fetch costs a short kernel."""
    import re

    maps = re.findall(r"const __grid_constant__ tl::TmaDesc (\w+)", source)
    producer = re.search(r"if \(tx >= (\d+)\) \{  // the producer warpgroup", source)
    assert maps and producer, "no tensor maps or no producer warpgroup"
    fetch = "".join(f'asm volatile("prefetch.tensormap [%0];" :: "l"(&{m}) : "memory"); ' for m in maps)
    out, count = re.subn(r"(\n  const int tx = threadIdx\.x;\n)",
                         rf"\1  if (tx == {producer.group(1)}) {{ {fetch}}}\n", source, count=1)
    assert count == 1, "the kernel's thread index changed"
    return out


def _first_ring_only(source: str, tmaps: tuple[str, ...], kept_bytes: int) -> str:
    """The producer loads the operands of ``tmaps`` in the first ring of stages only (expecting ``kept_bytes`` a
    stage after it): later k-steps compute on stale data. What the operands' TMA writes to shared memory (and
    their reads from L2) cost the k-loop, as a wrong-results probe."""
    lines, first = source.splitlines(keepends=True), "(tile * 64 + k < 4)"
    for i, line in enumerate(lines):
        if any(f"tl::tma_load_2d(&{tmap}," in line for tmap in tmaps):
            lines[i] = line.replace("tl::tma_load_2d(", f"if {first} tl::tma_load_2d(", 1)
        elif "tl::mbar_arrive_tx(k_full" in line and ", 49152);" in line:
            lines[i] = line.replace(", 49152);", f", {first} ? 49152 : {kept_bytes});")
    return "".join(lines)


def no_a_loads(source: str, n: int) -> str:
    """A loaded in the first ring only (16 KB of the 48 KB a k-step no longer written to shared memory)."""
    return _first_ring_only(source, ("A_tmap0",), 32768)


def no_b_loads(source: str, n: int) -> str:
    """B loaded in the first ring only (32 KB of the 48 KB a k-step no longer written to shared memory)."""
    return _first_ring_only(source, ("B_tmap1",), 16384)


def no_loads(source: str, n: int) -> str:
    """A and B loaded in the first ring only: the producer still takes each stage back and arrives on its full
    barrier (expecting no bytes), so the ring's synchronization stays and only the data stops moving. The k-loop's
    rate with nothing to wait for but the tensor cores and the ring's barriers."""
    return _first_ring_only(source, ("A_tmap0", "B_tmap1"), 0)


def a_from_registers(source: str, n: int) -> str:
    """Each wgmma takes A from four constant registers (the RS form) instead of shared memory: A's TMA loads stay,
    only the tensor cores' reads of A (2 KB of the 10 KB a m64n256k16 reads) go. Wrong results; what shared
    memory's read bandwidth costs the k-loop."""
    import re

    name = re.search(r"wgmma_m64n256k16_ss_\w+_t1", source).group(0)  # f16 or bf16
    i = source.index(f"__device__ __forceinline__ void {name}(")
    j = source.index("}\n", source.index('"l"(da), "l"(db));', i)) + 2
    rs = source[i:j].replace(name, "wgmma_m64n256k16_rs").replace(
        "unsigned long long da,", "const unsigned* a,").replace('"l"(da), "l"(db)',
                                                               '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)')
    rs = rs.replace("%128, %129, p, 1, 1, 0, 1;", "{%128, %129, %130, %131}, %132, p, 1, 1, 1;")
    assert "%132" in rs, "the SS wgmma's operand list changed"
    out, count = re.subn(rf"tl::{name}\(C_f \+ 0, tl::wgmma_desc\(A_s, .*?, 16, 1024, 1\), ",
                         "tl::wgmma_m64n256k16_rs(C_f + 0, ra, ", _constant_a(source[:j] + rs + source[j:]))
    assert count == 4, (count, "the consumer's wgmma calls changed")
    return out


def _constant_a(source: str) -> str:
    """``ra``: four registers of constant halves (1.0 in fp16) in every thread, an RS wgmma's A operand for a probe."""
    import re

    out, count = re.subn(r"(\n  const int tx = threadIdx\.x;)", r"\1\n  const unsigned ra[4] = {0x3c003c00u ^ "
                         r"(unsigned)tx, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};", source, count=1)
    assert count == 1, "the kernel's thread index changed"
    return out


def q_from_registers(source: str) -> str:
    """Flash attention's QK^T wgmmas take Q from four constant registers (the RS form) instead of shared memory: Q's
    loads stay, only the tensor cores' reads of Q (a third of QK^T's operand bytes at D=128) go. Wrong results; the
    most keeping Q in registers could bring (perf notes, sixteenth session)."""
    import re

    rs = re.search(r"__device__ __forceinline__ void (wgmma_m64n\d+k16_rs_\w+_t1)\(.*?\n}\n", source, re.S)
    assert rs is not None, "no RS wgmma (PV's) to copy"
    qk = rs.group(0).replace(rs.group(1), "wgmma_qk_probe").replace("p, 1, 1, 1;", "p, 1, 1, 0;")
    assert qk != rs.group(0) and "p, 1, 1, 0;" in qk, "the RS wgmma's immediates changed"
    out, count = re.subn(r"tl::wgmma_m64n\d+k16_ss_\w+_t0\(S \+ 0, tl::wgmma_desc\(Q_s, .*?\), (?=tl::wgmma_desc\(K_s)",
                         "tl::wgmma_qk_probe(S + 0, ra, ", _constant_a(source[:rs.end()] + qk + source[rs.end():]))
    assert count > 0, "the QK^T calls changed"
    return out


def sustained(fn: Callable, sets: list, flops: float, seconds: float) -> tuple[float, float, float]:
    """(TFLOP/s, mean SM clock in MHz, mean power in W) of ``fn`` called back to back on rotating inputs for
    ``seconds`` (the clock and power sampled by NVML over the second half)."""
    import threading
    import time

    import pynvml
    import torch

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    samples: list[tuple[int, int]] = []
    stop = threading.Event()

    def sample() -> None:
        time.sleep(seconds / 2)
        while not stop.is_set():
            samples.append((pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetPowerUsage(h)))
            time.sleep(0.01)

    fn(*sets[0])
    torch.cuda.synchronize()
    t = threading.Thread(target=sample)
    t.start()
    calls, t0 = 0, time.perf_counter()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            fn(*sets[calls % len(sets)])
            calls += 1
        torch.cuda.synchronize()
    end.record()
    end.synchronize()
    stop.set()
    t.join()
    ms = start.elapsed_time(end) / calls
    n = max(1, len(samples))
    return flops / ms / 1e9, sum(c for c, _ in samples) / n, sum(p for _, p in samples) / n / 1000


def attention(rows: list, shapes: list[tuple[int, ...]], dtype: str, only: str = "",
              causal: tuple[bool, ...] = (False, True), sustain: float = 0.0, steady: list | None = None) -> None:
    """Flash attention of these (batch, heads, seq, D) shapes, causal or not: the wgmma kernel fed by TMA without a
    producer warpgroup, the warp-specialized one, persistent, with V on a ring of its own (``split_rings``, the
    default) or K and V in one ring, and with 160-, 176- and 192-key tiles (non-causal), with the producer's
    registers cut to 24 (``producer_regs``), with Q in shared memory (``operand_registers`` off; the
    warp-specialized kernels take it into registers by default), a probe with Q's reads by the tensor cores taken
    away (``probe Q from registers``, wrong by design), without programmatic dependent launches (``pdl``), beside
    SDPA's cuDNN backend; ``sustain`` as for the GEMMs.
    (The variants of earlier perf notes, the rotated loop and the warpgroups' turns on and off, Q loaded by the
    producer or not, the PV wait anchored, clusters: see the git history.)"""
    fa = __import__("03_flash_attention")
    variants = attention_variants()
    if only:
        variants = {k: v for k, v in variants.items() if k in only.split(",")}
    for b, h, n, d in shapes:
        attention_shape(rows, fa, b, h, n, d, dtype, variants, causal, sustain, steady)


def attention_variants() -> dict:
    """The flash-attention variants by label (``--attention-only`` picks among them)."""
    ws = {"wgmma": True, "tma": True, "warp_specialize": True}
    return {  # label -> (block_M, block_N, threads, pass configs, "stages" when not 2 and the example's
        # "q_registers"[, a source patch])
        "128x128 tma": (128, 128, 256, {"wgmma": True, "tma": True}),
        "128x128 ws persistent": (128, 128, 256, {**ws, "persistent": True}),
        "128x128 ws persistent one ring": (128, 128, 256, {**ws, "persistent": True, "split_rings": False}),
        # as many rounds of tiles as on 132 blocks, no partial one (2048 tiles: 16 rounds of 128)
        "128x128 ws persistent 128 blocks": (128, 128, 256, {**ws, "persistent": 128}),
        "128x160 ws persistent": (128, 160, 256, {**ws, "persistent": True}),
        "128x176 ws persistent": (128, 176, 256, {**ws, "persistent": True}),
        "128x192 ws persistent": (128, 192, 256, {**ws, "persistent": True}),  # O stored directly (no room)
        # the producer's 24 registers a thread, the consumers' 240 (192 keys spill 48 bytes at the default 232)
        "128x128 ws persistent regs24": (128, 128, 256, {**ws, "persistent": True, "producer_regs": 24}),
        "128x176 ws persistent regs24": (128, 176, 256, {**ws, "persistent": True, "producer_regs": 24}),
        "128x192 ws persistent regs24": (128, 192, 256, {**ws, "persistent": True, "producer_regs": 24}),
        "128x128 ws": (128, 128, 256, ws),
        # Q in registers is the warp-specialized kernels' default (pass config operand_registers): these keep it in
        # shared memory, the probe's patch reading it from four constant registers instead
        "128x128 ws persistent probe Q from registers": (128, 128, 256, {**ws, "persistent": True,
                                                                         "operand_registers": False}, q_from_registers),
        "128x128 ws persistent Q in shared memory": (128, 128, 256, {**ws, "persistent": True,
                                                                     "operand_registers": False}),
        "128x128 ws persistent no pdl": (128, 128, 256, {**ws, "persistent": True, "pdl": False}),
        "128x128 tma probe Q from registers": (128, 128, 256, {"wgmma": True, "tma": True}, q_from_registers),
        # D=64 only: three consumer warpgroups of 64 query rows; 512 threads leave ptxas 128 registers a thread,
        # which holds the kernel without spills with Q in shared memory and the producer at 24 (the defaults there)
        "192x128 ws persistent": (192, 128, 384, {**ws, "persistent": True}),
        "192x128 ws persistent 128 blocks": (192, 128, 384, {**ws, "persistent": 128}),
        "192x128 ws": (192, 128, 384, ws),
        # D=128 in 192-row tiles: 64-key tiles keep S, P and O within 128 registers (no spills; prepared, not timed)
        "192x64 ws persistent": (192, 64, 384, {**ws, "persistent": True}),
        "192x64 ws persistent 3 stages": (192, 64, 384, {**ws, "persistent": True, "stages": 3}),
        # the row max and sum folded in four interleaved chains a thread (perf notes BA; the compiler's is one)
        "128x128 ws persistent four chains": (128, 128, 256, {**ws, "persistent": True, "chains": 4}),
        "192x128 ws persistent four chains": (192, 128, 384, {**ws, "persistent": True, "chains": 4}),
        # the wgmma fences tie the accumulators, so O's rescale stays above them (tilec.lower.wgmma.FENCE_TIES)
        "128x128 ws persistent fence ties": (128, 128, 256, {**ws, "persistent": True, "fence_ties": True}),
        "128x128 ws persistent no fence ties": (128, 128, 256, {**ws, "persistent": True, "fence_ties": False}),
        # 128 query rows on one consumer warpgroup, both gemms on wgmma (register A over two 64-row steps; the fence
        # ties keep ptxas from injecting waits, C7517): D=64 with 64 keys a tile holds 168 registers without a
        # producer; three blocks share an SM
        "128x64 one warpgroup": (128, 64, 128, {"wgmma": True, "tma": True, "fence_ties": True}),
        "128x64 one warpgroup ws": (128, 64, 128, {**ws, "fence_ties": True}),
        "128x64 one warpgroup ws persistent": (128, 64, 128, {**ws, "persistent": True, "fence_ties": True}),
    }


def attention_shape(rows: list, fa: object, b: int, h: int, n: int, d: int, dtype: str, variants: dict,
                    causals: tuple[bool, ...], sustain: float = 0.0, steady: list | None = None) -> None:
    import torch
    import torch.nn.functional as F
    from run import _measure, input_sets
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import tilec

    tdt = getattr(torch, dtype)
    for causal in causals:
        sets = input_sets(lambda: tuple(torch.randn(b, h, n, d, device="cuda", dtype=tdt) for _ in range(3)))
        q, k, v = sets[0]
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)

        def sdpa(backend, causal=causal):  # noqa: ANN001, ANN202
            def run(*qkv):  # noqa: ANN002, ANN202
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(*qkv, is_causal=causal)
            return run

        impls = {"sdpa cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
        for label, (bm, bn, th, cfg, *patch) in variants.items():
            if causal and bn > bm:  # wide key tiles: more of the causal diagonal's blocks masked
                continue
            cfg = dict(cfg)
            stages, q_registers = cfg.pop("stages", 2), cfg.pop("q_registers", False)
            chains, ties = cfg.pop("chains", None), cfg.pop("fence_ties", None)
            if (chains or ties is not None) and not patch:  # past the disk cache, whose key sees neither setting
                patch = [lambda src: src]
            try:
                with compiler_settings(chains, ties):
                    impls[label] = compiled(tilec.JITKernel(fa.flash_attention.fn(b, h, n, d, causal, block_M=bm,
                                                                                  block_N=bn, num_stages=stages,
                                                                                  threads=th, dtype=dtype,
                                                                                  q_registers=q_registers),
                                                            "cuda", [3], pass_configs=cfg), *patch)
            except Exception as e:  # noqa: BLE001
                print(f"{label}: build failed: {type(e).__name__}: {str(e)[:400]}")
        start = len(rows)
        flops = 4.0 * b * h * n * n * d * (0.5 if causal else 1.0)
        _measure(rows, f"attention{' causal' if causal else ''} {dtype}", f"{b}x{h}x{n}x{d}", impls, sets, ref,
                 flops, 0, False)
        for r in rows[start:]:
            print(f"{r.kernel:<25} {r.shape:<14} {r.impl:<30} "
                  + (f"{r.ms:.4f} ms {r.tflops:7.1f} TFLOP/s err {r.error:.1e}" if r.ms else r.note), flush=True)
        for label, fn in impls.items() if sustain else ():
            tf, mhz, watts = sustained(fn, sets, flops, sustain)
            print(f"{b}x{h}x{n}x{d}{' causal' if causal else ''} {label:<24} sustained {tf:7.1f} TFLOP/s at "
                  f"{mhz:5.0f} MHz, {watts:4.0f} W", flush=True)
            if steady is not None:
                steady.append({"shape": f"{b}x{h}x{n}x{d}", "causal": causal, "impl": label,
                               "sustained_tflops": tf, "mhz": mhz, "watts": watts})


def gemm_variants() -> dict:
    """The GEMM variants by label (``--only`` picks among them)."""
    big = {"block_M": 128, "block_N": 256, "block_K": 64, "threads": 256}
    ws = {"wgmma": True, "tma": True, "warp_specialize": True}
    wide = {"block_M": 256, "block_N": 128, "block_K": 64, "threads": 256}  # cuBLAS's tile (perf notes, 5th session)
    pp = {"block_M": 128, "block_N": 128, "block_K": 64, "threads": 128}  # a warpgroup's tile (copies: ping-pong)
    flat = {"block_M": 64, "block_N": 256, "block_K": 64, "threads": 128}  # ... one wgmma m64n256k16 a k-step
    deep = {"block_K": 32, "panel": 16}  # half the k-step: twice the ring's stages in the same bytes
    old = {"stage_in_ring": False}  # the epilogue the hand patches edit: chunks in two buffers of its own (to 33rd)
    wso = {**ws, "persistent": True, **old}
    return {  # label -> (kernel arguments, pass configs[, a patch of the generated source])
        "tma": (big, {"wgmma": True, "tma": True}),
        "tma ws persistent": (big, {**ws, "persistent": True}),
        "tma ws persistent panel8": ({**big, "panel": 8}, {**ws, "persistent": True}),
        "tma ws persistent panel8 no epilogue": ({**big, "panel": 8}, wso, no_epilogue),
        "tma ws persistent panel8 direct stores": ({**big, "panel": 8}, {**ws, "persistent": True,
                                                                         "stage_epilogue": False}),
        "tma ws persistent panel16 direct stores": ({**big, "panel": 16}, {**ws, "persistent": True,
                                                                           "stage_epilogue": False}),
        "tma ws persistent panel16 stream-k": ({**big, "panel": 16}, {**ws, "persistent": True, "stream_k": True}),
        "tma ws persistent panel16 stream-k own buffers": ({**big, "panel": 16}, {**wso, "stream_k": True}),
        "panel16 stream-k probe no fence": ({**big, "panel": 16}, {**ws, "persistent": True, "stream_k": True},
                                            sk_no_fence),
        "panel16 stream-k probe no partials": ({**big, "panel": 16}, {**ws, "persistent": True, "stream_k": True},
                                               sk_no_partials),
        "tma ws persistent panel16 stream-k inline trap": ({**big, "panel": 16},
                                                           {**ws, "persistent": True, "stream_k": True}, inline_trap),
        "panel16 probe no A loads": ({**big, "panel": 16}, {**ws, "persistent": True}, no_a_loads),
        "panel16 probe no B loads": ({**big, "panel": 16}, {**ws, "persistent": True}, no_b_loads),
        "panel16 probe no loads": ({**big, "panel": 16}, {**ws, "persistent": True}, no_loads),
        "panel16 probe A from registers": ({**big, "panel": 16}, {**ws, "persistent": True}, a_from_registers),
        "tma ws persistent cluster2": (big, {**ws, "persistent": True, "cluster": 2}),
        "tma ws persistent stream-k": (big, {**ws, "persistent": True, "stream_k": True}),
        "tma ws 128 blocks panel8": ({**big, "panel": 8}, {**ws, "persistent": 128}),  # whole rounds at 4096³, 8192³
        "tma ws 128 blocks panel16": ({**big, "panel": 16}, {**ws, "persistent": 128}),
        "tma ws persistent panel8 one buffer": ({**big, "panel": 8}, {**ws, "persistent": True, "store_buffers": 1}),
        "tma ws persistent panel8 stream-k one buffer": ({**big, "panel": 8}, {**ws, "persistent": True,
                                                                              "stream_k": True, "store_buffers": 1}),
        "tma ws persistent panel8 stream-k": ({**big, "panel": 8}, {**ws, "persistent": True, "stream_k": True}),
        "tma ws persistent panel4": ({**big, "panel": 4}, {**ws, "persistent": True}),
        "tma ws persistent panel16": ({**big, "panel": 16}, {**ws, "persistent": True}),
        "tma ws persistent panel16 own buffers": ({**big, "panel": 16}, wso),
        "tma ws persistent panel16 l2 prefetch 2": ({**big, "panel": 16}, {**ws, "persistent": True},
                                                    lambda s, n: l2_prefetch(s, n, 2)),
        "tma ws persistent panel16 l2 prefetch 4": ({**big, "panel": 16}, {**ws, "persistent": True}, l2_prefetch),
        "tma ws persistent panel16 l2 prefetch 8": ({**big, "panel": 16}, {**ws, "persistent": True},
                                                    lambda s, n: l2_prefetch(s, n, 8)),
        "tma ws persistent panel16 l2 prefetch 4 one": ({**big, "panel": 16}, {**ws, "persistent": True},
                                                        lambda s, n: l2_prefetch(s, n, 4, one=True)),
        "tma ws persistent panel16 l2 prefetch 8 one": ({**big, "panel": 16}, {**ws, "persistent": True},
                                                        lambda s, n: l2_prefetch(s, n, 8, one=True)),
        "tma ws persistent panel16 first stage first": ({**big, "panel": 16}, {**ws, "persistent": True},
                                                        first_stage_first),
        "tma ws persistent panel16 first 2 stages first": ({**big, "panel": 16}, {**ws, "persistent": True},
                                                           lambda s, n: first_stage_first(s, n, 2)),
        "tma ws persistent panel16 wait profile": ({**big, "panel": 16}, {**ws, "persistent": True}, wait_profile),
        "tma ws persistent panel16 prefetch maps": ({**big, "panel": 16}, {**ws, "persistent": True},
                                                    prefetch_tensor_maps),
        "tma ws persistent panel16 no epilogue": ({**big, "panel": 16}, wso, no_epilogue),
        "tma ws persistent panel16 deferred epilogue": ({**big, "panel": 16}, wso,
                                                        deferred_epilogue),
        "panel16 probe epilogue no fences": ({**big, "panel": 16}, wso, epilogue_no_fences),
        "panel16 probe epilogue no barriers": ({**big, "panel": 16}, wso, epilogue_no_barriers),
        "panel16 probe epilogue no stores": ({**big, "panel": 16}, wso, epilogue_no_stores),
        "tma ws persistent panel16 stmatrix": ({**big, "panel": 16}, wso, epilogue_stmatrix),
        "tma ws persistent panel16 held-stage epilogue": ({**big, "panel": 16}, wso,
                                                          held_stage_epilogue),
        "tma ws persistent panel16 held-stage epilogue late": (
            {**big, "panel": 16}, wso, lambda s, n: held_stage_epilogue(s, n, late=True)),
        "tma ws persistent panel16 held-stage epilogue split": (
            {**big, "panel": 16}, wso, lambda s, n: held_stage_epilogue(s, n, split=True)),
        "tma ws persistent panel16 staggered epilogue": ({**big, "panel": 16}, wso,
                                                         staggered_epilogue),
        "tma ws persistent panel16 no pdl": ({**big, "panel": 16}, {**ws, "persistent": True, "pdl": False}),
        "tma ws persistent panel16 regs24": ({**big, "panel": 16}, {**ws, "persistent": True, "producer_regs": 24}),
        "tma ws persistent panel16 stream-k regs24": ({**big, "panel": 16}, {**ws, "persistent": True,
                                                                             "stream_k": True, "producer_regs": 24}),
        "tma ws persistent panel32": ({**big, "panel": 32}, {**ws, "persistent": True}),
        # 32-deep k-steps: the same bytes a FLOP, a ring of 7 or 8 stages of 24 KB (thirty-sixth session)
        "tma ws persistent panel16 bk32 s6": ({**big, **deep, "num_stages": 6}, {**ws, "persistent": True}),
        "tma ws persistent panel16 bk32 s7": ({**big, **deep, "num_stages": 7}, {**ws, "persistent": True}),
        "tma ws persistent panel16 stream-k bk32 s6": ({**big, **deep, "num_stages": 6},
                                                       {**ws, "persistent": True, "stream_k": True}),
        "tma ws persistent panel16 k serpentine": ({**big, "panel": 16}, {**ws, "persistent": True,
                                                                          "k_serpentine": True}),
        "tma ws persistent panel32 k serpentine": ({**big, "panel": 32}, {**ws, "persistent": True,
                                                                          "k_serpentine": True}),
        "tma ws persistent cluster2 panel8": ({**big, "panel": 8}, {**ws, "persistent": True, "cluster": 2}),
        "tma ws persistent cluster2 panel16": ({**big, "panel": 16}, {**ws, "persistent": True, "cluster": 2}),
        "tma ws persistent cluster2 panel4": ({**big, "panel": 4}, {**ws, "persistent": True, "cluster": 2}),
        "256x128 tma ws persistent": (wide, {**ws, "persistent": True}),
        "256x128 tma ws persistent cluster2": (wide, {**ws, "persistent": True, "cluster": 2}),
        "256x128 tma ws persistent cluster2 panel8": ({**wide, "panel": 8}, {**ws, "persistent": True, "cluster": 2}),
        "128x128 persistent 2 consumers": (pp, {**ws, "persistent": True, "consumers": 2}),
        "128x128 persistent 2 consumers 5 stages": ({**pp, "num_stages": 4},
                                                    {**ws, "persistent": True, "consumers": 2}),
        "128x128 persistent 2 consumers cluster2": (pp, {**ws, "persistent": True, "consumers": 2, "cluster": 2}),
        "128x128 persistent 2 consumers panel8": ({**pp, "panel": 8}, {**ws, "persistent": True, "consumers": 2}),
        "64x256 persistent 2 consumers": (flat, {**ws, "persistent": True, "consumers": 2}),
        "64x256 persistent 2 consumers cluster2": (flat, {**ws, "persistent": True, "consumers": 2, "cluster": 2}),
        "64x256 persistent 2 consumers panel8": ({**flat, "panel": 8}, {**ws, "persistent": True, "consumers": 2}),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--shapes", default="", help="GEMM shapes MxNxK (comma-separated), timed after --sizes")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--json", default=None)
    ap.add_argument("--dump", default=None, help="folder to write the patched sources to")
    ap.add_argument("--profile", action="store_true",
                    help="run each implementation twice, untimed, L2 flushed before each (for ncu or a probe's "
                         "prints)")
    ap.add_argument("--attention", action="store_true", help="also time the flash-attention variants")
    ap.add_argument("--attention-shapes", default="8x16x2048x128,8x16x2048x64",
                    help="the flash-attention shapes BxHxSxD (comma-separated); --dtype sets their dtype")
    ap.add_argument("--attention-only", default="", help="only the flash-attention variants of these labels")
    ap.add_argument("--non-causal", action="store_true", help="flash attention without its causal cases")
    ap.add_argument("--only", default="", help="only the GEMM variants of these labels (comma-separated)")
    ap.add_argument("--warmup", type=float, default=None, help="each timing's warm-up in ms (run.py's WARMUP_MS)")
    ap.add_argument("--sustain", type=float, default=0.0,
                    help="also run each implementation back to back for this many seconds: TFLOP/s, SM clock, power")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds (run.py's --rounds)")
    ap.add_argument("--interleave", action="store_true", help="run.py's --interleave")
    ap.add_argument("--no-flush", action="store_true",
                    help="a probe of the timing method: do_bench without its L2 flush between repetitions (the "
                         "rotated input sets still span twice the L2); not how run.py times")
    args = ap.parse_args(argv)
    variants = gemm_variants()
    # a label that names no variant would otherwise drop it without a word: checked before anything runs
    for opt, given, known in (("--only", args.only, variants), ("--attention-only", args.attention_only,
                                                                 attention_variants())):
        unknown = [x for x in given.split(",") if x and x not in known]
        if unknown or (given and not given.strip(",")):
            ap.error(f"{opt}: unknown variant(s) {', '.join(map(repr, unknown)) or repr(given)}; the variants are: "
                     + ", ".join(known))
    if args.attention_only and not args.attention:
        ap.error("--attention-only picks among the flash-attention variants, which run with --attention")
    if args.dtype not in ("float16", "bfloat16"):
        ap.error(f"--dtype: expected float16 or bfloat16, got {args.dtype!r}")
    if args.rounds is not None and args.rounds < 1:
        ap.error(f"--rounds: expected at least 1, got {args.rounds}")
    if args.only:
        variants = {k: v for k, v in variants.items() if k in args.only.split(",")}

    import run
    import torch
    from peers import triton_kernels
    from run import _measure, input_sets

    if args.warmup is not None:
        run.WARMUP_MS = args.warmup
    if args.rounds is not None:
        run.ROUNDS = args.rounds
    run.INTERLEAVE = args.interleave
    if args.no_flush:
        import triton

        driver = triton.runtime.driver.active.get_empty_cache_for_benchmark.__self__  # the proxy's real driver
        driver.get_empty_cache_for_benchmark = lambda: torch.empty(0, dtype=torch.int, device="cuda")
    tdt = getattr(torch, args.dtype)
    rows: list = []
    steady: list[dict] = []
    shapes = [(int(s),) * 3 for s in args.sizes.split(",") if s]
    shapes += [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s]
    for M, N, K in shapes:
        n = M if M == N == K else f"{M}x{N}x{K}"
        sets = input_sets(lambda M=M, N=N, K=K: (torch.randn(M, K, device="cuda", dtype=tdt),
                                   torch.randn(K, N, device="cuda", dtype=tdt)))
        impls: dict[str, Callable] = {"torch": torch.matmul}
        if not args.profile:  # Triton's autotuning would launch hundreds of kernels under the profiler
            impls["triton"] = triton_kernels.matmul
        for label, (kw, cfg, *patch) in variants.items():
            try:
                k = tilec_variant(M, N, K, args.dtype, kw, cfg, *patch)
                if args.dump:
                    Path(args.dump).mkdir(parents=True, exist_ok=True)
                    Path(args.dump, f"{label.replace(' ', '_')}_{n}.cu").write_text(k.get_kernel_source())
                impls[label] = k
            except Exception as e:  # noqa: BLE001
                print(f"{label}: build failed: {type(e).__name__}: {str(e)[:400]}")
        if args.profile:
            from run import _CudaTimer

            timer = _CudaTimer()
            for label, fn in impls.items():  # one call to warm up, one to profile, L2 flushed before each
                for i in (0, 1):
                    timer.flush()
                    fn(*sets[i % len(sets)])
                    torch.cuda.synchronize()
                    print(f"# profiled {label} {n} call {i}", flush=True)
            continue
        start = len(rows)
        ref = sets[0][0].double() @ sets[0][1].double()
        shape = f"{n}^3" if M == N == K else n
        _measure(rows, f"gemm {args.dtype}", shape, impls, sets, ref, 2.0 * M * N * K, 0, False)
        for r in rows[start:]:
            print(f"{n!s:>6} {r.impl:<42} " + (f"{r.ms:.4f} ms {r.tflops:7.1f} TFLOP/s err {r.error:.1e}"
                                             if r.ms else r.note), flush=True)
        if args.sustain:
            for label, fn in impls.items():
                tf, mhz, watts = sustained(fn, sets, 2.0 * M * N * K, args.sustain)
                print(f"{n!s:>6} {label:<24} sustained {tf:7.1f} TFLOP/s at {mhz:5.0f} MHz, {watts:4.0f} W", flush=True)
                steady.append({"shape": n, "impl": label, "sustained_tflops": tf, "mhz": mhz, "watts": watts})
    if args.attention:
        attention(rows, [tuple(int(x) for x in s.split("x")) for s in args.attention_shapes.split(",")], args.dtype,
                  args.attention_only, (False,) if args.non_causal else (False, True), args.sustain, steady)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": [asdict(r) for r in rows], "sustained": steady}, indent=1))


if __name__ == "__main__":
    main()
