"""tilec's benchmark suite: tilec against torch (cuBLAS, SDPA), Triton and TileLang, side by side in one run.

    python benchmarks/run.py [--quick] [--only gemm,attention,...] [--impls persistent,torch,...] [--rounds N]
        [--interleave] [--warmup MS] [--json PATH]

Timing: CUDA events through ``triton.testing.do_bench`` (L2 flushed before every repetition), median of the
repetitions after a warm-up of 200 ms of the same implementation (``WARMUP_MS``, ``--warmup``), fresh random inputs
rotated between calls (enough sets that they span twice the L2, at most 8); the implementations of a case take
turns over a warm-up round and three timed rounds (``--rounds``), and a row's time is the median of its rounds
(``_measure``), each round's time and SM clock (NVML) kept in the row's ``extra`` (``rounds_ms``, ``rounds_mhz``). Every
implementation's output is compared with a float64 reference on the first set. ``--impls`` keeps the
implementations whose label contains one of its strings (more rounds of fewer rows narrow a ratio's median where
a target is near). Each tilec kernel is built twice,
cold (an empty disk cache, nothing compiled in this process) and from the disk cache; both times go in its row.
Peers that are not installed are skipped with a note.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import itertools
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


ROUNDS = 3  # timed rounds per group of implementations (after one that warms the GPU up); --rounds
INTERLEAVE = False  # --interleave: the implementations of a group alternate call by call (_interleaved)
SELECT: tuple[str, ...] = ()  # --impls: an implementation runs when its label contains one of these (all when empty)
# each timing's warm-up (do_bench's), ms: long enough that the clock under the 700 W cap has settled for that
# implementation, whatever ran before it (perf notes AS: 10 ms left a round's spread at 2-9 % at 8192³, 200 ms 0.4-2 %)
WARMUP_MS = 200


def _bench(fn: Callable, quick: bool, warming: bool = False) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25 if quick else WARMUP_MS, rep=100 if quick else 40 if warming else 80,
                    return_mode="median")


class _Clocks:
    """NVML's SM clock, sampled every 5 ms on a thread while a timing runs: the mean in MHz over the last 30 % of
    one timing (``stop``), or None without pynvml or a GPU it can read. A round's rows then say at what clock each
    ran, so a ratio splits into work a cycle and clock (under the 700 W cap the clock moves with what a kernel
    moves through memory: perf notes, sixteenth session)."""

    def __init__(self) -> None:
        self.handle: Any = None
        try:
            import pynvml
            import torch

            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
            self.nvml = pynvml
        except Exception:  # noqa: BLE001 - no NVML here: timings carry no clock
            self.handle = None
        self.samples: list[int] = []
        self.thread: Any = None

    def start(self) -> None:
        import threading

        if self.handle is None:
            return
        self.samples, self.stopping = [], threading.Event()

        def sample() -> None:
            while not self.stopping.is_set():
                self.samples.append(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
                self.stopping.wait(0.005)

        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()

    def stop(self) -> float | None:
        if self.handle is None or self.thread is None:
            return None
        self.stopping.set()
        self.thread.join()
        self.thread = None
        tail = self.samples[len(self.samples) * 7 // 10:]  # ~ the timed repetitions (80 ms after 200 of warm-up)
        return round(sum(tail) / len(tail), 1) if tail else None


LABELS: set[str] = set()  # every implementation label the cases offered to wanted() (to check --impls against)


def wanted(label: str) -> bool:
    """Whether ``--impls`` selects the implementation of this label (the cases skip building the rest)."""
    LABELS.add(label)
    return not SELECT or any(s in label for s in SELECT)


def _rel(out: Any, ref: Any) -> float:
    import torch

    out, ref = out.double(), ref.double()
    if torch.isnan(out).any():
        return float("nan")
    return (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()


L2_BYTES = 50 * 2**20  # H100 / H200


def input_sets(make: Callable[[], tuple]) -> list[tuple]:
    """Fresh random input sets to rotate through: as many as make them span twice the L2 (at most 8)."""
    first = make()
    nbytes = sum(x.numel() * x.element_size() for x in first if hasattr(x, "element_size"))
    count = max(1, min(8, -(-2 * L2_BYTES // max(nbytes, 1))))
    return [first] + [make() for _ in range(count - 1)]


def _measure(rows: list[Row], kernel: str, shape: str, impls: dict[str, Callable], sets: list[tuple], ref: Any,
             flops: float, nbytes: float, quick: bool, compile_times: dict[str, dict] | None = None) -> None:
    """One row per implementation (a function of one input set): its error on the first set, its time, and the
    tilec kernels' compile times. The time is the median of ``ROUNDS`` rounds, each timing every implementation in
    turn (each round starting one implementation further on), after a first round that only brings the GPU to the
    clocks it holds under load: an H200 starting cool runs its first ~0.1 s at up to 1.98 GHz and then settles near
    1.6 GHz at its 700 W cap, so whichever implementation ran first on a cool GPU ran faster (perf notes AE). With
    ``INTERLEAVE`` (``--interleave``) the implementations alternate call by call instead (``_interleaved``)."""
    out_rows: dict[str, Row] = {}
    calls: dict[str, Callable] = {}
    for name, fn in ((n, f) for n, f in impls.items() if wanted(n)):
        row = out_rows[name] = Row(kernel, shape, name, extra=dict((compile_times or {}).get(name, {})))
        try:
            out = fn(*sets[0])
            row.error = _rel(out, ref) if ref is not None else None
            turn = itertools.count()
            calls[name] = lambda fn=fn, turn=turn: fn(*sets[next(turn) % len(sets)])
        except Exception as e:  # noqa: BLE001 - one failing implementation must not stop the suite
            row.note = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    names = list(calls)
    if INTERLEAVE and names:
        times, mhz = _interleaved(calls, 1 if quick else ROUNDS, quick, out_rows)
    else:
        times, mhz = _sequential(calls, quick, out_rows)
    for name in calls:
        row, ts = out_rows[name], sorted(times[name])
        row.ms = ts[len(ts) // 2]
        row.tflops = flops / row.ms / 1e9 if flops else None
        row.gbs = nbytes / row.ms / 1e6 if nbytes else None
        if len(ts) > 1:
            row.extra["rounds_ms"] = [round(t, 5) for t in times[name]]
        if any(c is not None for c in mhz[name]):
            row.extra["rounds_mhz"] = mhz[name]
    rows.extend(out_rows.values())
    if CHECKPOINT is not None:
        CHECKPOINT(rows)


def _sequential(calls: dict[str, Callable], quick: bool, out_rows: dict[str, Row]) -> tuple[dict, dict]:
    """Each implementation timed by do_bench in turn, a round at a time: (times, clocks) of each round by name
    (an implementation that raises loses its entry in ``calls`` and gets the error as its row's note)."""
    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}
    clocks = _Clocks()
    mhz: dict[str, list[float | None]] = {n: [] for n in names}
    rounds = 1 if quick else ROUNDS + 1
    for r in range(rounds):
        for name in names[r % max(1, len(names)):] + names[:r % max(1, len(names))]:
            if name not in calls:
                continue
            clocks.start()
            try:
                t = _bench(calls[name], quick, warming=not quick and r == 0)
            except Exception as e:  # noqa: BLE001
                out_rows[name].note = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                del calls[name]
                continue
            finally:
                clock = clocks.stop()
            if quick or r > 0:
                times[name].append(t)
                mhz[name].append(clock)
    return times, mhz


class _CudaTimer:
    """What ``_interleaved`` needs of the GPU: do_bench's L2 flush (Triton's 256 MB buffer, zeroed), CUDA events
    and a synchronization."""

    def __init__(self) -> None:
        import torch
        from triton import runtime

        self.torch, self.driver = torch, runtime.driver.active
        self.cache = self.driver.get_empty_cache_for_benchmark()

    def flush(self) -> None:
        self.driver.clear_cache(self.cache)

    def event(self) -> Any:
        e = self.torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def elapsed(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end)

    def sync(self) -> None:
        self.torch.cuda.synchronize()


def _interleaved(calls: dict[str, Callable], rounds: int, quick: bool, out_rows: dict[str, Row],
                 timer: Any = None) -> tuple[dict, dict]:
    """The implementations alternate call by call: a pass calls each once (L2 flushed before each call, events
    around it; the order rotating by one from pass to pass), passes go on for ``WARMUP_MS`` untimed and then for
    ``rounds`` rounds of ~80 ms of each implementation's calls, and a round's time of an implementation is the
    median of its calls in that round. All of a round's implementations then run at the clocks of the same
    moments: timed one after the other for ~0.3 s each, the SM clock under the 700 W cap differed by up to 25 %
    between the timings of one group (perf notes, twenty-fifth session), more than the differences timed."""
    timer = timer or _CudaTimer()
    clocks = _Clocks()
    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}
    mhz: dict[str, list[float | None]] = {n: [] for n in names}

    def passes(count: int, turn: int) -> dict[str, list[float]]:
        marks: dict[str, list[tuple[Any, Any]]] = {n: [] for n in names}
        for p in range(count):
            k = (turn + p) % len(names)
            for name in names[k:] + names[:k]:
                if name not in calls:
                    continue
                timer.flush()
                start = timer.event()
                try:
                    calls[name]()
                except Exception as e:  # noqa: BLE001 - one failing implementation must not stop the suite
                    out_rows[name].note = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                    del calls[name]
                    continue
                marks[name].append((start, timer.event()))
        timer.sync()
        return {n: [timer.elapsed(a, b) for a, b in m] for n, m in marks.items() if n in calls}

    first = passes(1, 0)  # one pass to size the rest by
    pass_ms = max(sum(t[0] for t in first.values()), 1e-3)
    warm, per_round = (25, 100) if quick else (WARMUP_MS, 80)
    passes(max(1, round(warm / pass_ms)), 1)
    count = max(5, round(per_round * max(1, len(first)) / pass_ms))
    for r in range(rounds):
        clocks.start()
        got = passes(count, r)
        clock = clocks.stop()
        for name, ts in got.items():
            ts = sorted(ts)
            times[name].append(ts[len(ts) // 2])
            mhz[name].append(clock)
    return times, mhz


CHECKPOINT: Callable[[list[Row]], None] | None = None  # called with the rows after every measured group (main's)


def tilec_kernel(make: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    """``make()``'s kernel, built cold (empty disk cache, this process's binaries forgotten) and then again from
    the disk cache: (the second kernel, both times in seconds)."""
    from tilec.backends.cuda import runtime

    with tempfile.TemporaryDirectory() as d:
        old = os.environ.get("TILEC_CACHE_DIR")
        os.environ["TILEC_CACHE_DIR"] = d
        try:
            runtime._BUILT.clear()
            t0 = time.perf_counter()
            make().compile()
            cold = time.perf_counter() - t0
            runtime._BUILT.clear()
            t0 = time.perf_counter()
            kernel = make()
            kernel.compile()
            cached = time.perf_counter() - t0
        finally:
            if old is None:
                os.environ.pop("TILEC_CACHE_DIR")
            else:
                os.environ["TILEC_CACHE_DIR"] = old
    return kernel, {"compile_cold_s": cold, "compile_cached_s": cached}


# ------------------------------------------------------------------------------------------------------- cases


def _tilec_config(cfg: dict) -> tuple[dict, dict, str]:
    """A benchmark configuration as (kernel arguments, pass configs, row label): ``wgmma`` turns the Hopper path
    on, ``overlap=False`` makes each wgmma group complete within its trip (to measure what the overlap brings),
    ``tma`` feeds the pipeline with TMA through mbarriers instead of cp.async, ``ws`` from a producer warpgroup
    (warp specialization), ``persistent`` makes that kernel loop over tiles on one block per SM, ``cluster`` runs its
    blocks in clusters sharing tiles by TMA multicast, ``stream_k`` shares the last round's tiles out by iterations;
    ``panel`` (a kernel argument) takes the tiles in panels of that many rows (``T.use_swizzle``)."""
    passes = ("wgmma", "overlap", "tma", "ws", "persistent", "cluster", "stream_k")
    args = {k: v for k, v in cfg.items() if k not in passes}
    wg, overlap, tma, ws, pers, cluster, sk = (cfg.get(k, d) for k, d in (
        ("wgmma", False), ("overlap", True), ("tma", False), ("ws", False), ("persistent", False), ("cluster", 0),
        ("stream_k", False)))
    tag = f"tilec {args['block_M']}x{args['block_N']}x{args['block_K']}"
    tag += (" wgmma" if overlap else " wgmma wait0") if wg else ""
    tag += (" tma ws" if ws else " tma") if tma else ""
    tag += " persistent" if pers else ""
    tag += f" cluster{cluster}" if cluster else ""
    tag += f" panel{args['panel']}" if args.get("panel") else ""
    tag += " stream-k" if sk else ""
    return args, {"wgmma": wg, "wgmma_overlap": overlap, "tma": tma, "warp_specialize": ws, "persistent": pers,
                  "cluster": cluster, "stream_k": sk}, tag


def tilec_configs(configs: list[dict], build: Callable[[dict, dict], Any]) -> tuple[dict, dict]:
    """The tilec rows of a case: for each configuration that ``--impls`` selects, ``build(kernel arguments, pass
    configs)``'s kernel (built by :func:`tilec_kernel`) by its label, and its compile times by the same label."""
    impls: dict[str, Any] = {}
    times: dict[str, dict] = {}
    for cfg in configs:
        args, passes, tag = _tilec_config(cfg)
        if wanted(tag):
            impls[tag], times[tag] = tilec_kernel(lambda args=args, passes=passes: build(args, passes))
    return impls, times


def case_gemm(rows: list[Row], quick: bool, peers: dict[str, Any]) -> None:
    import torch

    import tilec

    gemm = importlib.import_module("01_gemm")
    shapes = [(4096, 4096, 4096), (1000, 1000, 1000), (4096, 4096, 1000), (1, 4096, 4096)]
    if not quick:
        shapes.insert(1, (8192, 8192, 8192))
    configs = [dict(block_M=128, block_N=128, block_K=32, num_stages=3, threads=128),
               dict(block_M=256, block_N=128, block_K=64, num_stages=3, threads=256),
               dict(block_M=256, block_N=128, block_K=64, num_stages=3, threads=256, tma=True, ws=True),  # mma.sync
               dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, wgmma=True),
               dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, wgmma=True, overlap=False),
               dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, wgmma=True, tma=True),
               dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, wgmma=True, tma=True, ws=True),
               dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, wgmma=True, tma=True, ws=True,
                    persistent=True, panel=1),  # row-major tiles (with no panel given the compiler takes 16)
               dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, wgmma=True, tma=True, ws=True,
                    persistent=True, panel=16),  # panels of 16 rows: the fewest DRAM bytes a round (perf notes AS)
               dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, wgmma=True, tma=True, ws=True,
                    persistent=True, panel=16, stream_k=True),
               dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, wgmma=True, tma=True, ws=True,
                    cluster=2),
               dict(block_M=128, block_N=256, block_K=64, num_stages=3, threads=256, wgmma=True, tma=True, ws=True,
                    persistent=True, cluster=2)]
    for dtype in (["float16"] if quick else ["float16", "bfloat16"]):
        tdt = getattr(torch, dtype)
        for M, N, K in shapes:
            sets = input_sets(lambda M=M, N=N, K=K, tdt=tdt: (torch.randn(M, K, device="cuda").to(tdt),
                                                               torch.randn(K, N, device="cuda").to(tdt)))
            a, b = sets[0]
            ref = a.double() @ b.double()
            impls: dict[str, Callable] = {"torch": torch.matmul}
            tilec_impls, times = tilec_configs(configs, lambda cfg, passes, M=M, N=N, K=K, dt=dtype: tilec.JITKernel(
                gemm.matmul.fn(M, N, K, dtype=dt, **cfg), "cuda", [-1], pass_configs=passes))
            impls.update(tilec_impls)
            if "triton" in peers:
                impls["triton"] = peers["triton"].matmul
            if "tilelang" in peers:
                impls.update(peers["tilelang"].gemm_impls(M, N, K, dtype))
            _measure(rows, f"gemm {dtype}", f"{M}x{N}x{K}", impls, sets, ref, 2.0 * M * N * K, 0, quick, times)


def torch_tf32(a: Any, b: Any) -> Any:
    """``a @ b.T`` by torch with TF32 allowed (cuBLAS's TF32 GEMM), the flag restored after."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        return torch.matmul(a, b.t())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def tf32_gemm(M: int, N: int, K: int, cfg: dict, passes: dict, target: str = "cuda") -> Any:
    """The GEMM example on float32 with TF32 (``allow_tf32``), B stored N x K, C returned."""
    import tilec

    gemm = importlib.import_module("01_gemm")
    return tilec.JITKernel(gemm.matmul.fn(M, N, K, dtype="float32", allow_tf32=True, transpose_B=True, **cfg), target,
                           [-1], pass_configs=passes)


def case_gemm_tf32(rows: list[Row], quick: bool, peers: dict[str, Any]) -> None:
    """float32 GEMM on TF32 tensor cores, C = A @ B^T (B stored N x K: the orientation Hopper's TF32 wgmma reads),
    beside torch with TF32 allowed (cuBLAS) and Triton (tl.dot's default TF32)."""
    import torch

    shapes = [(4096, 4096, 4096)] + ([] if quick else [(8192, 8192, 8192)])
    configs = [dict(block_M=128, block_N=128, block_K=32, num_stages=3, threads=128),  # mma.sync m16n8k8
               dict(block_M=128, block_N=256, block_K=32, num_stages=3, threads=256, wgmma=True, tma=True, ws=True,
                    persistent=True, panel=16),
               dict(block_M=128, block_N=128, block_K=32, num_stages=5, threads=256, wgmma=True, tma=True, ws=True,
                    persistent=True, panel=16)]

    for M, N, K in shapes:
        sets = input_sets(lambda M=M, N=N, K=K: (torch.randn(M, K, device="cuda"), torch.randn(N, K, device="cuda")))
        a, b = sets[0]
        ref = a.double() @ b.double().T
        impls: dict[str, Callable] = {"torch tf32": torch_tf32}
        tilec_impls, times = tilec_configs(configs, lambda cfg, passes, M=M, N=N, K=K: tf32_gemm(M, N, K, cfg, passes))
        impls.update(tilec_impls)
        if "triton" in peers:
            impls["triton"] = lambda a, b: peers["triton"].matmul(a, b.t())
        _measure(rows, "gemm tf32", f"{M}x{N}x{K}", impls, sets, ref, 2.0 * M * N * K, 0, quick, times)


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
               dict(block_M=128, block_N=256, block_K=128, num_stages=3, threads=256, wgmma=True, tma=True, ws=True),
               dict(block_M=128, block_N=256, block_K=128, num_stages=3, threads=256, wgmma=True, tma=True, ws=True,
                    persistent=True, panel=16),
               dict(block_M=128, block_N=256, block_K=128, num_stages=3, threads=256, wgmma=True, tma=True, ws=True,
                    persistent=True, panel=16, stream_k=True)]
    for M, N, K in shapes:
        def make(M=M, N=N, K=K) -> tuple:
            return ((torch.randn(M, K, device="cuda") * 64).to(torch.float8_e4m3fn),
                    (torch.randn(N, K, device="cuda") * 64).to(torch.float8_e4m3fn),
                    torch.rand(M, device="cuda") / 64 + 1e-3, torch.rand(N, device="cuda") / 64 + 1e-3)

        sets = input_sets(make)
        a, b, sa, sb = sets[0]
        ref = (a.double() @ b.double().T) * sa.double()[:, None] * sb.double()[None, :]
        impls: dict[str, Callable] = {
            "torch _scaled_mm": lambda a, b, sa, sb: torch._scaled_mm(a, b.t(), scale_a=sa[:, None],
                                                                      scale_b=sb[None, :], out_dtype=torch.bfloat16)}
        tilec_impls, times = tilec_configs(configs, lambda cfg, passes, M=M, N=N, K=K: tilec.JITKernel(
            fp8.fp8_matmul.fn(M, N, K, **cfg), "cuda", [-1], pass_configs=passes))
        impls.update(tilec_impls)
        if "triton" in peers:
            impls["triton"] = peers["triton"].matmul_fp8
        if "tilelang" in peers and M % 256 == 0 and N % 256 == 0:  # its epilogue reads the scales unguarded
            impls.update(peers["tilelang"].fp8_gemm_impls(M, N, K))
        _measure(rows, "gemm fp8 e4m3", f"{M}x{N}x{K}", impls, sets, ref, 2.0 * M * N * K, 0, quick, times)


def case_attention(rows: list[Row], quick: bool, peers: dict[str, Any]) -> None:
    import torch
    import torch.nn.functional as F

    import tilec

    fa = importlib.import_module("03_flash_attention")
    configs = ((64, 64, 2, 128, False, False, False, False),
               (64, 64, 2, 128, False, True, False, False),
               (128, 64, 2, 128, False, True, False, False),
               (128, 64, 2, 256, True, False, False, False),
               (128, 64, 2, 256, True, True, False, False),
               (128, 128, 2, 256, True, True, False, False),
               (128, 128, 2, 256, True, True, True, False),  # ws: rotated, turns
               (128, 128, 2, 256, True, True, "persistent", False),
               (128, 128, 2, 256, True, True, "persistent", True),  # Q kept in shared memory (not in registers)
               # D=64 only (their register tiles fit the 128 registers a thread of 512 threads): three consumer
               # warpgroups of 64 query rows each
               (192, 128, 2, 384, True, True, True, False),
               (192, 128, 2, 384, True, True, "persistent", False))
    hopper = configs[5:6] + configs[-4:]  # the rest of the grid: the kernels that win somewhere
    grid = ((2, 8192, 128, "bfloat16"), (2, 8192, 64, "float16"), (2, 8192, 64, "bfloat16"), (8, 2048, 64, "bfloat16"))
    shapes = [(8, 16, 2048, 128, "float16", configs)] + ([] if quick else [
        (8, 16, 2048, 128, "bfloat16", configs), (2, 16, 8192, 128, "float16", configs),
        (8, 16, 2048, 64, "float16", configs)] +  # the rest of the Hopper issue's grid: its Hopper kernels
        [(b, 16, n, d, dtype, hopper) for b, n, d, dtype in grid])  # beside SDPA only (the run's 570 s)
    for b, h, n, d, dtype, kernels in shapes:
        tdt = getattr(torch, dtype)
        for causal in (False, True):
            sets = input_sets(lambda b=b, h=h, n=n, d=d, tdt=tdt: tuple(
                torch.randn(b, h, n, d, device="cuda", dtype=tdt) for _ in range(3)))
            q, k_, v = sets[0]
            ref = F.scaled_dot_product_attention(q.float(), k_.float(), v.float(), is_causal=causal)
            flops = 4.0 * b * h * n * n * d * (0.5 if causal else 1.0)
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def sdpa(backend: Any, causal: bool = causal) -> Callable:
                def run(*qkv: Any) -> Any:
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(*qkv, is_causal=causal)

                return run

            impls: dict[str, Callable] = {"sdpa flash": sdpa(SDPBackend.FLASH_ATTENTION),
                                          "sdpa cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
            times: dict[str, dict] = {}
            for bm, bn, st, th, wg, tma, ws, q_smem in kernels:
                if bm == 192 and d != 64:
                    continue
                tag = f"tilec {bm}x{bn}{' wgmma' if wg else ''}{' tma' if tma else ''}{' ws' if ws else ''}" \
                    + (" persistent" if ws == "persistent" else "") + (" q-smem" if q_smem else "")
                if not wanted(tag):
                    continue
                impls[tag], times[tag] = tilec_kernel(
                    lambda b=b, h=h, n=n, d=d, causal=causal, bm=bm, bn=bn, st=st, th=th, wg=wg, tma=tma, ws=ws,
                    dtype=dtype, q_smem=q_smem:
                    tilec.JITKernel(fa.flash_attention.fn(b, h, n, d, causal, block_M=bm, block_N=bn, num_stages=st,
                                                          threads=th, dtype=dtype), "cuda", [3],
                                    pass_configs={"wgmma": wg, "tma": tma, "warp_specialize": bool(ws),
                                                  "persistent": ws == "persistent", "operand_registers": not q_smem}))
            if "triton" in peers and kernels is configs:
                impls["triton"] = lambda q, k, v, c=causal: peers["triton"].attention(q, k, v, c)
            if "tilelang" in peers and dtype == "float16" and kernels is configs:
                impls.update(peers["tilelang"].attention_impls(b, h, n, d, causal))
            name = f"attention{' causal' if causal else ''}{' bf16' if dtype == 'bfloat16' else ''}"
            _measure(rows, name, f"{b}x{h}x{n}x{d}", impls, sets, ref, flops, 0,
                     quick, times)


def case_mla(rows: list[Row], quick: bool, peers: dict[str, Any]) -> None:
    """DeepSeek MLA decode: 128 query heads on one latent KV head, d = 512 + 64, the shapes of ANCHORS.md."""
    import torch

    import tilec

    mla = importlib.import_module("07_mla_decode")
    heads, kvh, s, dv, dpe = 128, 1, 8192, 512, 64
    for batch in (64,) if quick else (64, 132):
        sets = input_sets(lambda batch=batch: tuple(torch.randn(batch, heads, d, device="cuda").half()
                                                    for d in (dv, dpe))
                          + tuple(torch.randn(batch, s, kvh, d, device="cuda").half() for d in (dv, dpe)))

        def naive(q: Any, q_pe: Any, kv: Any, k_pe: Any, out: Any = torch.half) -> Any:  # a PyTorch prototype
            scores = torch.bmm(q, kv[:, :, 0].transpose(1, 2)) + torch.bmm(q_pe, k_pe[:, :, 0].transpose(1, 2))
            p = torch.softmax(scores.to(torch.float32 if out is torch.half else out) * (dv + dpe) ** -0.5, -1).to(out)
            return torch.bmm(p, kv[:, :, 0])

        ref = naive(*(x.double() for x in sets[0]), out=torch.double)
        impls: dict[str, Callable] = {"torch bmm": naive}
        times: dict[str, dict] = {}
        for st, wg, tma, ws in ((1, False, False, False), (2, False, False, False), (2, True, False, False),
                                (2, True, True, False), (2, True, True, True)):
            tag = f"tilec 64x64 {st} stage{'s' if st > 1 else ''}{' wgmma' if wg else ''}{' tma' if tma else ''}"
            tag += " ws" if ws else ""
            if not wanted(tag):
                continue
            impls[tag], times[tag] = tilec_kernel(lambda batch=batch, st=st, wg=wg, tma=tma, ws=ws: tilec.JITKernel(
                mla.mla_decode.fn(batch, heads, kvh, s, num_stages=st), "cuda", [4],
                pass_configs={"wgmma": wg, "tma": tma, "warp_specialize": ws}))
        if "tilelang" in peers:
            impls.update(peers["tilelang"].mla_decode_impls(batch, heads, kvh, s))
        flops = 2.0 * batch * heads * s * (dv + dpe + dv)
        nbytes = 2.0 * batch * s * kvh * (dv + dpe)  # the KV cache, read once per head group's block
        _measure(rows, "mla decode fp16", f"b{batch} h{heads} s{s}", impls, sets, ref, flops, nbytes, quick, times)


def case_softmax(rows: list[Row], quick: bool, peers: dict[str, Any]) -> None:
    import torch

    import tilec

    sm = importlib.import_module("02_softmax")
    for M, N in ((8192, 4096),) if quick else ((8192, 4096), (4096, 16384)):
        sets = input_sets(lambda M=M, N=N: (torch.randn(M, N, device="cuda").half(),))
        ref = torch.softmax(sets[0][0].double(), -1)
        kern, times = tilec_kernel(lambda M=M, N=N: tilec.JITKernel(sm.softmax.fn(M, N), "cuda", [-1]))
        impls = {"torch": lambda x: torch.softmax(x, -1), "tilec": kern}
        _measure(rows, "softmax fp16", f"{M}x{N}", impls, sets, ref, 0, 2.0 * M * N * 2, quick, {"tilec": times})


def case_norms(rows: list[Row], quick: bool, peers: dict[str, Any]) -> None:
    import torch
    import torch.nn.functional as F

    import tilec

    norms = importlib.import_module("05_norms")
    for M, N in ((8192, 4096),) if quick else ((8192, 4096), (16384, 1024)):
        sets = input_sets(lambda M=M, N=N: (torch.randn(M, N, device="cuda").half(),
                                            torch.randn(N, device="cuda").half(), torch.randn(N, device="cuda").half()))
        xd, wd, bd = (t.double() for t in sets[0])
        rms, t_rms = tilec_kernel(lambda M=M, N=N: tilec.JITKernel(norms.rms_norm.fn(M, N), "cuda", [-1]))
        ln, t_ln = tilec_kernel(lambda M=M, N=N: tilec.JITKernel(norms.layer_norm.fn(M, N), "cuda", [-1]))
        ref = xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + 1e-6) * wd
        impls = {"torch": lambda x, w, b, n=N: F.rms_norm(x, (n,), w, 1e-6), "tilec": lambda x, w, b, k=rms: k(x, w)}
        _measure(rows, "rms_norm fp16", f"{M}x{N}", impls, sets, ref, 0, 2.0 * M * N * 2, quick, {"tilec": t_rms})
        ref = F.layer_norm(xd, (N,), wd, bd, 1e-5)
        impls = {"torch": lambda x, w, b, n=N: F.layer_norm(x, (n,), w, b, 1e-5), "tilec": ln}
        _measure(rows, "layer_norm fp16", f"{M}x{N}", impls, sets, ref, 0, 2.0 * M * N * 2, quick, {"tilec": t_ln})


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
    for name, fn in ((n, f) for n, f in impls.items() if wanted(n)):
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
    if wanted("tilec"):
        rows.append(Row("startup", "import + gemm from disk cache", "tilec", extra=_startup()))
    # TileLang's host figures are not measured here (its launch path needs its own kernels): the H200 figures of
    # ../shared/ANCHORS.md, printed beside tilec's as the CUDA-backend issue asks
    anchor = "tilelang (ANCHORS.md, not this run)"
    if wanted(anchor):
        rows.append(Row("launch overhead", "1024 floats", anchor, extra={"us_per_launch": 12.1}))
        rows.append(Row("startup", "import + gemm from disk cache", anchor, extra={
            "import_s": "5.7-6.3", "kernel_from_cache_s": "0.047-0.054", "cold_compile_s": "3.3-4.2"}))


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


CASES = {"gemm": case_gemm, "gemm_tf32": case_gemm_tf32, "gemm_fp8": case_gemm_fp8, "attention": case_attention,
         "mla": case_mla, "softmax": case_softmax, "norms": case_norms, "host": case_host}


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
    """The GPU and the versions of what ran; exits with a message where there is no torch or no CUDA GPU."""
    need = "benchmarks/run.py times kernels on an NVIDIA GPU through torch (pip install -e \".[cuda,test]\" and torch)"
    try:
        import torch
    except ImportError as e:
        sys.exit(f"{need}, and torch is not installed ({e})")
    if not torch.cuda.is_available():
        sys.exit(f"{need}, and no CUDA GPU is visible to torch")
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
    global CHECKPOINT, ROUNDS, SELECT, INTERLEAVE, WARMUP_MS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer shapes and repetitions")
    ap.add_argument("--only", default="", help="comma-separated cases: " + ",".join(CASES))
    ap.add_argument("--json", default="", help="write the results here")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"timed rounds per case (default {ROUNDS})")
    ap.add_argument("--interleave", action="store_true",
                    help="the implementations of a case alternate call by call, each round's calls at the same "
                         "clocks (default: each timed by do_bench in turn)")
    ap.add_argument("--warmup", type=float, default=WARMUP_MS,
                    help=f"each timing's warm-up in ms (interleaved: the untimed passes'; default {WARMUP_MS})")
    ap.add_argument("--impls", default="", help="only the implementations whose label contains one of these "
                    "comma-separated strings (e.g. 'persistent,torch,triton,tilelang')")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds: expected a count of at least 1, got {args.rounds}")
    if not args.warmup >= 0:
        ap.error(f"--warmup: expected milliseconds, at least 0, got {args.warmup}")
    WARMUP_MS = args.warmup
    ROUNDS, SELECT, INTERLEAVE = args.rounds, tuple(s for s in args.impls.split(",") if s), args.interleave
    peers, notes = _peers()
    rows: list[Row] = []
    selected = [c for c in (args.only.split(",") if args.only else CASES) if c]
    unknown = [c for c in selected if c not in CASES]
    if unknown or not selected:
        ap.error(f"--only: unknown case(s) {', '.join(unknown) or repr(args.only)}; the cases are {', '.join(CASES)}")
    if args.impls and not SELECT:
        ap.error(f"--impls: no label strings in {args.impls!r}")
    start = time.perf_counter()
    notes.append("timing: " + ("interleaved (the implementations of a case alternate call by call)" if INTERLEAVE
                               else "sequential (each implementation timed by do_bench in turn)")
                 + f", {WARMUP_MS:g} ms warm-up")
    result = {"date": datetime.date.today().isoformat(), "environment": environment(), "notes": notes, "rows": []}

    def save(rows: list[Row]) -> None:
        result["rows"] = [asdict(r) for r in rows]
        if args.json:  # after every group of rows too, so that a run stopped by a time limit keeps what it measured
            Path(args.json).write_text(json.dumps(result, indent=1))

    CHECKPOINT = save
    for name in selected:
        t0 = time.perf_counter()
        try:
            CASES[name](rows, args.quick, peers)
        except Exception as e:  # noqa: BLE001
            notes.append(f"case {name} failed: {type(e).__name__}: {e}")
        print(f"# case {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    notes.append(f"wall time of the cases: {time.perf_counter() - start:.0f} s")
    save(rows)
    from report import render_table

    print(render_table(result))
    unmatched = [s for s in SELECT if not any(s in label for label in LABELS)]
    if unmatched:  # a misspelt --impls string would otherwise drop its rows without a word
        ap.error(f"--impls: {', '.join(map(repr, unmatched))} matched no implementation of the cases run; their "
                 f"labels are: {', '.join(sorted(LABELS))}")


if __name__ == "__main__":
    main()
