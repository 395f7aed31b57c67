"""tilec's benchmark suite: tilec against torch (cuBLAS, SDPA), Triton and TileLang, side by side in one run.

    python benchmarks/run.py [--quick] [--only gemm,attention,...] [--json PATH]

Timing: CUDA events through ``triton.testing.do_bench`` (L2 flushed before every repetition), median of the
repetitions after warm-up, fresh random inputs. Every implementation's output is compared with a float64
reference. Peers that are not installed are skipped with a note.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))


@dataclass
class Row:
    kernel: str
    shape: str
    impl: str
    ms: float | None = None
    tflops: float | None = None
    gbs: float | None = None
    error: float | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)


def _bench(fn: Callable, quick: bool) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25 if quick else 50, rep=100 if quick else 300, return_mode="median")


def _rel(out: Any, ref: Any) -> float:
    import torch

    out, ref = out.double(), ref.double()
    if torch.isnan(out).any():
        return float("nan")
    return (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()


def _measure(rows: list[Row], kernel: str, shape: str, impls: dict[str, Callable], ref: Any, flops: float,
             nbytes: float, quick: bool) -> None:
    for name, fn in impls.items():
        row = Row(kernel, shape, name)
        try:
            out = fn()
            row.error = _rel(out, ref) if ref is not None else None
            row.ms = _bench(fn, quick)
            row.tflops = flops / row.ms / 1e9 if flops else None
            row.gbs = nbytes / row.ms / 1e6 if nbytes else None
        except Exception as e:  # noqa: BLE001 - one failing implementation must not stop the suite
            row.note = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        rows.append(row)


def _compile_times(make: Callable[[], Any]) -> dict[str, float]:
    """Cold compile (empty disk cache, this process's binaries forgotten) and rebuild from the disk cache."""
    from tilec.backends.cuda import runtime

    runtime._BUILT.clear()

    with tempfile.TemporaryDirectory() as d:
        old = os.environ.get("TILEC_CACHE_DIR")
        os.environ["TILEC_CACHE_DIR"] = d
        try:
            t0 = time.perf_counter()
            make().compile()
            cold = time.perf_counter() - t0
            runtime._BUILT.clear()
            t0 = time.perf_counter()
            make().compile()
            warm = time.perf_counter() - t0
        finally:
            if old is None:
                os.environ.pop("TILEC_CACHE_DIR")
            else:
                os.environ["TILEC_CACHE_DIR"] = old
    return {"compile_cold_s": cold, "compile_cached_s": warm}


# ------------------------------------------------------------------------------------------------------- cases


def _tilec_config(cfg: dict) -> tuple[dict, dict, str]:
    """A benchmark configuration as (kernel arguments, pass configs, row label): ``wgmma`` turns the Hopper path
    on, ``overlap=False`` makes each wgmma group complete within its trip (to measure what the overlap brings),
    ``tma`` feeds the pipeline with TMA through mbarriers instead of cp.async, ``ws`` from a producer warpgroup
    (warp specialization)."""
    args = {k: v for k, v in cfg.items() if k not in ("wgmma", "overlap", "tma", "ws")}
    wg, overlap, tma, ws = (cfg.get(k, d) for k, d in (("wgmma", False), ("overlap", True), ("tma", False),
                                                       ("ws", False)))
    tag = f"tilec {args['block_M']}x{args['block_N']}x{args['block_K']}"
    tag += (" wgmma" if overlap else " wgmma wait0") if wg else ""
    tag += (" tma ws" if ws else " tma") if tma else ""
    return args, {"wgmma": wg, "wgmma_overlap": overlap, "tma": tma, "warp_specialize": ws}, tag


def case_gemm(rows: list[Row], quick: bool, peers: dict[str, Any]) -> None:
    import torch

    import tilec

    gemm = importlib.import_module("01_gemm")
    shapes = [(4096, 4096, 4096), (1000, 1000, 1000), (4096, 4096, 1000), (1, 4096, 4096)]
    if not quick:
        shapes.insert(1, (8192, 8192, 8192))
    configs = [dict(block_M=128, block_N=128, block_K=32, num_stages=3, threads=128),
               dict(block_M=256, block_N=128, block_K=64, num_stages=3, threads=256),
               dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, wgmma=True),
               dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, wgmma=True, overlap=False),
               dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, wgmma=True, tma=True),
               dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, wgmma=True, tma=True, ws=True)]
    for dtype in (["float16"] if quick else ["float16", "bfloat16"]):
        tdt = getattr(torch, dtype)
        for M, N, K in shapes:
            a = torch.randn(M, K, device="cuda").to(tdt)
            b = torch.randn(K, N, device="cuda").to(tdt)
            ref = a.double() @ b.double()
            impls: dict[str, Callable] = {"torch": lambda a=a, b=b: torch.matmul(a, b)}
            for cfg in configs:
                cfg, passes, tag = _tilec_config(cfg)
                k = tilec.JITKernel(gemm.matmul.fn(M, N, K, dtype=dtype, **cfg), "cuda", [-1], pass_configs=passes)
                impls[tag] = lambda k=k, a=a, b=b: k(a, b)
            if "triton" in peers:
                impls["triton"] = lambda a=a, b=b: peers["triton"].matmul(a, b)
            if "tilelang" in peers:
                for tag, fn in peers["tilelang"].gemm_impls(M, N, K, dtype).items():
                    impls[tag] = lambda fn=fn, a=a, b=b: fn(a, b)
            _measure(rows, f"gemm {dtype}", f"{M}x{N}x{K}", impls, ref, 2.0 * M * N * K, 0, quick)
    cfg = configs[0]
    times = _compile_times(lambda: tilec.JITKernel(gemm.matmul.fn(4096, 4096, 4096, **cfg), "cuda", [-1]))
    rows.append(Row("compile", "gemm 4096^3", "tilec", extra=times))


def case_gemm_fp8(rows: list[Row], quick: bool, peers: dict[str, Any]) -> None:
    """Row-wise scaled fp8 (e4m3) GEMM with a bfloat16 result: C = (A @ B^T) * sa[:, None] * sb[None, :]."""
    import torch

    import tilec

    fp8 = importlib.import_module("06_fp8_gemm")
    shapes = [(4096, 4096, 4096), (1000, 1000, 1024)] + ([] if quick else [(8192, 8192, 8192)])
    configs = [dict(block_M=128, block_N=128, block_K=64, num_stages=3, threads=256),
               dict(block_M=128, block_N=256, block_K=128, num_stages=3, threads=256, wgmma=True),
               dict(block_M=128, block_N=256, block_K=128, num_stages=3, threads=256, wgmma=True, overlap=False),
               dict(block_M=128, block_N=128, block_K=128, num_stages=4, threads=128, wgmma=True),
               dict(block_M=128, block_N=256, block_K=128, num_stages=3, threads=256, wgmma=True, tma=True),
               dict(block_M=128, block_N=256, block_K=128, num_stages=3, threads=256, wgmma=True, tma=True, ws=True)]
    for M, N, K in shapes:
        a = (torch.randn(M, K, device="cuda") * 64).to(torch.float8_e4m3fn)
        b = (torch.randn(N, K, device="cuda") * 64).to(torch.float8_e4m3fn)
        sa, sb = torch.rand(M, device="cuda") / 64 + 1e-3, torch.rand(N, device="cuda") / 64 + 1e-3
        ref = (a.double() @ b.double().T) * sa.double()[:, None] * sb.double()[None, :]
        impls: dict[str, Callable] = {
            "torch _scaled_mm": lambda a=a, b=b, sa=sa, sb=sb: torch._scaled_mm(
                a, b.t(), scale_a=sa[:, None], scale_b=sb[None, :], out_dtype=torch.bfloat16)}
        for cfg in configs:
            cfg, passes, tag = _tilec_config(cfg)
            k = tilec.JITKernel(fp8.fp8_matmul.fn(M, N, K, **cfg), "cuda", [-1], pass_configs=passes)
            impls[tag] = lambda k=k, a=a, b=b, sa=sa, sb=sb: k(a, b, sa, sb)
        if "triton" in peers:
            impls["triton"] = lambda a=a, b=b, sa=sa, sb=sb: peers["triton"].matmul_fp8(a, b, sa, sb)
        if "tilelang" in peers and M % 256 == 0 and N % 256 == 0:  # its epilogue reads the scales unguarded
            for tag, fn in peers["tilelang"].fp8_gemm_impls(M, N, K).items():
                impls[tag] = lambda fn=fn, a=a, b=b, sa=sa, sb=sb: fn(a, b, sa, sb)
        _measure(rows, "gemm fp8 e4m3", f"{M}x{N}x{K}", impls, ref, 2.0 * M * N * K, 0, quick)


def case_attention(rows: list[Row], quick: bool, peers: dict[str, Any]) -> None:
    import torch
    import torch.nn.functional as F

    import tilec

    fa = importlib.import_module("03_flash_attention")
    shapes = [(8, 16, 2048, 128)] + ([] if quick else [(2, 16, 8192, 128), (8, 16, 2048, 64)])
    for b, h, n, d in shapes:
        for causal in (False, True):
            q, k_, v = (torch.randn(b, h, n, d, device="cuda").half() for _ in range(3))
            ref = F.scaled_dot_product_attention(q.float(), k_.float(), v.float(), is_causal=causal)
            flops = 4.0 * b * h * n * n * d * (0.5 if causal else 1.0)
            impls: dict[str, Callable] = {}
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def sdpa(backend: Any, q=q, k_=k_, v=v, causal=causal) -> Any:
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k_, v, is_causal=causal)

            impls["sdpa flash"] = lambda: sdpa(SDPBackend.FLASH_ATTENTION)
            impls["sdpa cudnn"] = lambda: sdpa(SDPBackend.CUDNN_ATTENTION)
            for bm, bn, st, th, wg, tma, ws in ((64, 64, 2, 128, False, False, False),
                                                (128, 64, 2, 256, True, False, False),
                                                (128, 64, 2, 256, True, True, False),
                                                (128, 64, 2, 256, True, True, True)):
                kern = tilec.JITKernel(fa.flash_attention.fn(b, h, n, d, causal, block_M=bm, block_N=bn,
                                                             num_stages=st, threads=th), "cuda", [3],
                                       pass_configs={"wgmma": wg, "tma": tma, "warp_specialize": ws})
                tag = f"tilec {bm}x{bn}{' wgmma' if wg else ''}{' tma' if tma else ''}{' ws' if ws else ''}"
                impls[tag] = lambda kern=kern, q=q, k_=k_, v=v: kern(q, k_, v)
            if "triton" in peers:
                impls["triton"] = lambda q=q, k_=k_, v=v, c=causal: peers["triton"].attention(q, k_, v, c)
            if "tilelang" in peers:
                for tag, fn in peers["tilelang"].attention_impls(b, h, n, d, causal).items():
                    impls[tag] = lambda fn=fn, q=q, k_=k_, v=v: fn(q, k_, v)
            _measure(rows, f"attention{' causal' if causal else ''}", f"{b}x{h}x{n}x{d}", impls, ref, flops, 0, quick)


def case_mla(rows: list[Row], quick: bool, peers: dict[str, Any]) -> None:
    """DeepSeek MLA decode: 128 query heads on one latent KV head, d = 512 + 64, the shapes of ANCHORS.md."""
    import torch

    import tilec

    mla = importlib.import_module("07_mla_decode")
    heads, kvh, s, dv, dpe = 128, 1, 8192, 512, 64
    for batch in (64,) if quick else (64, 132):
        q, q_pe = (torch.randn(batch, heads, d, device="cuda").half() for d in (dv, dpe))
        kv, k_pe = (torch.randn(batch, s, kvh, d, device="cuda").half() for d in (dv, dpe))

        def naive(q=q, q_pe=q_pe, kv=kv, k_pe=k_pe, out=torch.half) -> Any:  # a PyTorch prototype: bmm, softmax
            scores = torch.bmm(q, kv[:, :, 0].transpose(1, 2)) + torch.bmm(q_pe, k_pe[:, :, 0].transpose(1, 2))
            p = torch.softmax(scores.to(torch.float32 if out is torch.half else out) * (dv + dpe) ** -0.5, -1).to(out)
            return torch.bmm(p, kv[:, :, 0])

        ref = naive(*(x.double() for x in (q, q_pe, kv, k_pe)), out=torch.double)
        impls: dict[str, Callable] = {"torch bmm": naive}
        for st, wg, tma, ws in ((1, False, False, False), (2, False, False, False), (2, True, False, False),
                                (2, True, True, False), (2, True, True, True)):
            kern = tilec.JITKernel(mla.mla_decode.fn(batch, heads, kvh, s, num_stages=st), "cuda", [4],
                                   pass_configs={"wgmma": wg, "tma": tma, "warp_specialize": ws})
            tag = f"tilec 64x64 {st} stage{'s' if st > 1 else ''}{' wgmma' if wg else ''}{' tma' if tma else ''}"
            tag += " ws" if ws else ""
            impls[tag] = lambda k=kern, x=(q, q_pe, kv, k_pe): k(*x)
        if "tilelang" in peers:
            for tag, fn in peers["tilelang"].mla_decode_impls(batch, heads, kvh, s).items():
                impls[tag] = lambda fn=fn, x=(q, q_pe, kv, k_pe): fn(*x)
        flops = 2.0 * batch * heads * s * (dv + dpe + dv)
        nbytes = 2.0 * batch * s * kvh * (dv + dpe)  # the KV cache, read once per head group's block
        _measure(rows, "mla decode fp16", f"b{batch} h{heads} s{s}", impls, ref, flops, nbytes, quick)


def case_softmax(rows: list[Row], quick: bool, peers: dict[str, Any]) -> None:
    import torch

    sm = importlib.import_module("02_softmax")
    for M, N in ((8192, 4096),) if quick else ((8192, 4096), (4096, 16384)):
        x = torch.randn(M, N, device="cuda").half()
        ref = torch.softmax(x.double(), -1)
        kern = sm.softmax(M, N)
        impls = {"torch": lambda x=x: torch.softmax(x, -1), "tilec": lambda kern=kern, x=x: kern(x)}
        _measure(rows, "softmax fp16", f"{M}x{N}", impls, ref, 0, 2.0 * M * N * 2, quick)


def case_norms(rows: list[Row], quick: bool, peers: dict[str, Any]) -> None:
    import torch
    import torch.nn.functional as F

    norms = importlib.import_module("05_norms")
    for M, N in ((8192, 4096),) if quick else ((8192, 4096), (16384, 1024)):
        x = torch.randn(M, N, device="cuda").half()
        w, b = torch.randn(N, device="cuda").half(), torch.randn(N, device="cuda").half()
        rms, ln = norms.rms_norm(M, N), norms.layer_norm(M, N)
        xd = x.double()
        ref = xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + 1e-6) * w.double()
        impls = {"torch": lambda x=x, w=w, n=N: F.rms_norm(x, (n,), w, 1e-6),
                 "tilec": lambda x=x, w=w, k=rms: k(x, w)}
        _measure(rows, "rms_norm fp16", f"{M}x{N}", impls, ref, 0, 2.0 * M * N * 2, quick)
        ref = F.layer_norm(xd, (N,), w.double(), b.double(), 1e-5)
        impls = {"torch": lambda x=x, w=w, b=b, n=N: F.layer_norm(x, (n,), w, b, 1e-5),
                 "tilec": lambda x=x, w=w, b=b, k=ln: k(x, w, b)}
        _measure(rows, "layer_norm fp16", f"{M}x{N}", impls, ref, 0, 2.0 * M * N * 2, quick)


def case_host(rows: list[Row], quick: bool, peers: dict[str, Any]) -> None:
    """Host overhead of one launch (1024 floats, back to back), and a new process's start-up from the cache."""
    import torch

    import tilec
    import tilec.language as T

    @tilec.jit(target="cuda")
    def add(n: int):
        @T.prim_func
        def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32"), Z: T.Tensor((n,), "float32")):
            with T.Kernel(T.ceildiv(n, 1024), threads=256) as bx:
                for i in T.Parallel(1024):
                    Z[bx * 1024 + i] = X[bx * 1024 + i] + Y[bx * 1024 + i]

        return main

    x, y, z = (torch.randn(1024, device="cuda") for _ in range(3))
    k = add(1024)
    impls: dict[str, Callable] = {"tilec": lambda: k(x, y, z), "torch.add": lambda: torch.add(x, y, out=z)}
    if "triton" in peers:
        impls["triton"] = lambda: peers["triton"].add(x, y, z)
    for name, fn in impls.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(1000):
                fn()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - t0) / 1000)
        rows.append(Row("launch overhead", "1024 floats", name, extra={"us_per_launch": best * 1e6}))
    rows.append(Row("startup", "import + gemm from disk cache", "tilec", extra=_startup()))


_STARTUP = r"""
import time, sys
t0 = time.perf_counter()
import tilec
sys.path.insert(0, {examples!r})
import importlib
t1 = time.perf_counter()
g = importlib.import_module("01_gemm")
import torch
a = torch.randn(1024, 1024, device="cuda").half(); b = torch.randn(1024, 1024, device="cuda").half()
torch.cuda.synchronize()
t2 = time.perf_counter()
c = g.matmul(1024, 1024, 1024)(a, b); torch.cuda.synchronize()
t3 = time.perf_counter()
print(t1 - t0, t3 - t2)
"""


def _startup() -> dict[str, float]:
    """A new process, twice: first with an empty disk cache (a cold compile), then from that cache."""
    code = _STARTUP.format(examples=str(ROOT / "examples"))
    with tempfile.TemporaryDirectory() as cache_dir:
        env = dict(os.environ, PYTHONPATH=str(ROOT), TILEC_CACHE_DIR=cache_dir)
        runs = [subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
                for _ in range(2)]
    (_, cold), (imp, kern) = ((float(x) for x in r.stdout.split()) for r in runs)
    return {"cold_compile_new_process_s": cold, "import_tilec_s": imp, "kernel_from_cache_s": kern,
            "total_s": imp + kern}


CASES = {"gemm": case_gemm, "gemm_fp8": case_gemm_fp8, "attention": case_attention, "mla": case_mla,
         "softmax": case_softmax, "norms": case_norms, "host": case_host}


def _peers() -> tuple[dict[str, Any], list[str]]:
    peers, notes = {}, []
    try:
        from peers import triton_kernels

        peers["triton"] = triton_kernels
    except Exception as e:  # noqa: BLE001
        notes.append(f"Triton skipped: {e}")
    try:
        from peers import tilelang_kernels

        peers["tilelang"] = tilelang_kernels
    except Exception as e:  # noqa: BLE001
        notes.append(f"TileLang skipped: {type(e).__name__}: {str(e)[:100]}")
    return peers, notes


def environment() -> dict[str, str]:
    import torch

    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version()}
    for mod in ("triton", "cupy", "tilelang"):
        try:
            env[mod] = importlib.import_module(mod).__version__
        except Exception:  # noqa: BLE001
            pass
    try:
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    return env


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer shapes and repetitions")
    ap.add_argument("--only", default="", help="comma-separated cases: " + ",".join(CASES))
    ap.add_argument("--json", default="", help="write the results here")
    args = ap.parse_args(argv)
    peers, notes = _peers()
    rows: list[Row] = []
    selected = [c for c in (args.only.split(",") if args.only else CASES) if c]
    unknown = [c for c in selected if c not in CASES]
    if unknown:
        ap.error(f"--only: unknown case(s) {', '.join(unknown)}; the cases are {', '.join(CASES)}")
    start = time.perf_counter()
    for name in selected:
        t0 = time.perf_counter()
        try:
            CASES[name](rows, args.quick, peers)
        except Exception as e:  # noqa: BLE001
            notes.append(f"case {name} failed: {type(e).__name__}: {e}")
        print(f"# case {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    notes.append(f"wall time of the cases: {time.perf_counter() - start:.0f} s")
    result = {"date": datetime.date.today().isoformat(), "environment": environment(), "notes": notes,
              "rows": [asdict(r) for r in rows]}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    from report import render_table

    print(render_table(result))


if __name__ == "__main__":
    main()
