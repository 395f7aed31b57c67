"""The static cost model (the tile recommendation's estimator). Pre: the compile state after
``layout_inference`` (the pipelined Tile IR, its FTG and layout plan). Post: a :class:`KernelCost`; nothing is
changed. Runs on the CPU; :func:`estimate_kernel` runs the pipeline up to layout inference first.

**Counts.** For every FTG node, its per-op rule (:mod:`tilec.passes.cost_rules`) gives what one execution
moves and computes, and :mod:`tilec.passes.trip_counts` how many times each block runs it (per block, so a causal
``T.min`` trip count is exact for every block). Summed over the blocks: bytes of global loads and stores per
tensor, shared-memory reads and writes (ldmatrix traffic from the gemm warp partition), register traffic,
tensor-core FLOPs per instruction and dtype, SIMT lane operations, SFU operations. Shared memory per block is
the sum of the shared buffers (pipelined ones hold their stages) and of the scratch tiles lowering adds
(cross-warp reductions, layout conversions), placed as lowering places them. Registers per
thread: the fragments' locals (two 16-bit values per register), plus the ldmatrix operands of the largest gemm
for up to three k-steps (one when that would pass the limit: then ptxas trades in-flight loads for registers),
plus :data:`REGISTER_OVERHEAD`; over the limit even with one k-step, the candidate is rejected. Barriers: one per
trip of each loop in which an op consumes or overwrites shared memory another op of the loop touches.

**Residency.** Blocks per SM = the least of the thread, block, shared-memory (with the per-block reservation)
and register limits (registers allocated per warp in units of ``reg_alloc_unit``); with fewer blocks than
that fills, ``B = min(blocks per SM, ceil(blocks / SMs))`` are resident per SM and ``slots = SMs * B``.

**Time.** With device rates ``R`` (the device model's peaks and bandwidths):

* memory: ``t_dram = (dram_loads / f_dram + dram_stores) / (hbm * hbm_efficiency)``, ``t_l2 = (l2_loads / f_l2
  + l2_stores) / l2_bandwidth`` (stores need no reply, so only loads are held to the bytes in flight) and
  ``t_port = l2 / (active_SMs * l2_port_bytes_per_clk * clock)``, where ``l2`` is every global byte loaded or
  stored and ``dram`` the unique bytes: per tensor ``min(bytes loaded, its size)`` plus the same for stores
  (every re-read is assumed to hit L2). ``f = min(1, bytes_in_flight / (bandwidth * latency))`` is Little's law:
  each resident block keeps its pipelined copies of ``stages - 1`` trips in flight (one copy when not
  pipelined). ``t_mem = max(t_dram, t_l2, t_port)``;
* compute, per block, on its share ``1 / slots`` of the device: tensor ``flops / (peak * f_tc)`` with
  ``f_tc = min(1, resident warps / subpartitions)``, shared ``bytes / smem_bandwidth``, SIMT
  ``ops / (fp32_lanes * SMs * clock)``, SFU likewise; the units overlap across warps:
  ``t = max + (1 - o) * (sum - max)`` with ``o = 1 - 1 / (resident warps per subpartition)`` (clamped at 0),
  stretched by ``1 + REGISTER_CROWDING * shortfall`` when the best schedule wants more registers than the cap,
  plus ``barriers * sync_ns`` (a block waiting at a barrier leaves the SM to the other resident blocks); the
  blocks then run on the slots in launch order (list scheduling; uniform blocks give
  ``ceil(waves) / waves``) and ``t_comp`` is when the last one ends (tail and imbalance included);
* ``time = max(t_mem, t_comp) + (1 - o_m) * min(t_mem, t_comp) + launch_us``, with ``o_m = 1`` when the loads
  are pipelined (cp.async into >= 2 buffers) and ``1 - 1 / B`` when only other resident blocks hide them.

With every factor at 1 this is the roofline ``max_i(traffic_i / bandwidth_i, max_j flops_j / peak_j)`` over
waves, plus the launch. ``roofline_s`` is the bound at the device's best rates (e.g. wgmma's peak), and
``utilization = roofline_s / time_s``. Not modeled: L2 re-fetch across waves (rasterization), bank conflicts,
instruction overhead of address arithmetic; register spills only through :data:`REGISTER_CROWDING`.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilec.arch import DeviceModel, device_model
from tilec.passes.cost_rules import OpCost, RuleContext, op_cost
from tilec.passes.trip_counts import Grid, buffer_bytes, launch_grid, trip_counts

# Registers per thread beyond the fragments and operands (addresses, indices, predicates). With it, the estimate
# of 60 GEMM and attention configs (CUDA 13.0 ptxas, sm_90a) is off by 15 registers on average (-31 to +46), and
# every config ptxas spills more than 64 bytes for is estimated above 255.
REGISTER_OVERHEAD = 14
# A kernel whose best schedule wants more registers than a thread has runs slower than the model's unit times:
# ptxas keeps fewer gemm operands in flight and may spill. Its compute time is stretched by this factor times the
# share of the shortfall, (wanted - cap) / (wanted - fewest). Calibrated on the H200 measurements of
# benchmarks/results/2026-12-02-h200-recommend-2.json (flash attention D=128 at the cap spills 32-108 bytes and runs
# 1.1-1.2x slower than predicted; D=64 at the cap does not spill): see docs/perf-notes.md, change K.
REGISTER_CROWDING = 0.3
SCHEDULE_LIMIT = 1 << 16  # blocks simulated one by one; beyond, the mean block stands for all


@dataclass
class OpRow:
    """One FTG node's share: executions per block (mean over the blocks) and its totals over the kernel."""

    node: str
    kind: str
    line: int
    label: str
    executions: float
    global_bytes: float
    shared_bytes: float
    flops: float
    where: str = ""  # the FTG node's "where": 'line 12', or 'helpers.py:7' for a node of a T.macro of another file


@dataclass
class KernelCost:
    """The cost model's estimate for one kernel (see the module docstring for the formula)."""

    name: str
    target: str
    device: DeviceModel
    grid: tuple[int, ...]
    blocks: int
    threads: int
    smem_per_block: int
    regs_per_thread: int
    blocks_per_sm: int
    occupancy: float
    occupancy_limit: str
    waves: float
    wave_efficiency: float
    bytes: dict[str, float]
    flops: dict[str, float]
    tensor_flops: dict[str, float]
    times: dict[str, float]
    factors: dict[str, float]
    time_s: float
    bound: str
    roofline_s: float
    ops: list[OpRow] = field(default_factory=list)
    loops: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    rejected: str | None = None

    @property
    def utilization(self) -> float:
        """Fraction of the device's roofline this kernel is estimated to reach."""
        return self.roofline_s / self.time_s if self.time_s > 0 else 0.0

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per unique DRAM byte."""
        return self.flops["total"] / self.bytes["dram"] if self.bytes["dram"] else math.inf

    @property
    def per_block(self) -> dict[str, float]:
        """Bytes per level and FLOPs of the mean block (the totals over the number of blocks)."""
        out = {k: v / self.blocks for k, v in self.bytes.items()}
        return out | {f"{k}_flops": v / self.blocks for k, v in self.flops.items()}

    @property
    def tflops(self) -> float:
        return self.flops["total"] / self.time_s / 1e12 if self.time_s > 0 else 0.0

    def ops_table(self) -> str:
        at = [r.where.removeprefix("line ") if r.where else str(r.line) for r in self.ops]
        w, wk = max([4, *map(len, at)]), max([11, *(len(r.kind) for r in self.ops)])
        lines = [f"{'node':<5} {'kind':<{wk}} {'line':>{w}} {'runs/block':>10} {'global MB':>10} {'shared MB':>10} "
                 f"{'GFLOP':>8}  label"]
        for r, a in zip(self.ops, at):
            lines.append(f"{r.node:<5} {r.kind:<{wk}} {a:>{w}} {r.executions:>10.2f} {r.global_bytes / 1e6:>10.2f} "
                         f"{r.shared_bytes / 1e6:>10.2f} {r.flops / 1e9:>8.2f}  {r.label[:70]}")
        return "\n".join(lines)

    def __str__(self) -> str:
        mb = {k: v / 1e6 for k, v in self.bytes.items()}
        head = f"cost of {self.name} on {self.device.name} ({self.target})"
        if self.rejected:
            head += f": REJECTED: {self.rejected}"
        terms = ", ".join(f"{k} {v * 1e6:.1f}" for k, v in self.times.items())
        return "\n".join([
            head,
            f"  grid {self.grid} = {self.blocks} blocks x {self.threads} threads; smem {self.smem_per_block} B/block, "
            f"~{self.regs_per_thread} regs/thread; {self.blocks_per_sm} blocks/SM ({self.occupancy_limit}), "
            f"occupancy {self.occupancy:.0%}; {self.waves:.2f} waves (efficiency {self.wave_efficiency:.0%})",
            f"  bytes (MB): dram {mb['dram']:.2f}, l2 {mb['l2']:.2f}, shared {mb['smem_read'] + mb['smem_write']:.2f}, "
            f"registers {mb['register']:.2f}; GFLOP: tensor {self.flops['tensor'] / 1e9:.2f}, "
            f"simt {self.flops['simt'] / 1e9:.2f}; AI {self.arithmetic_intensity:.1f} FLOP/B",
            f"  terms (us): {terms}",
            f"  estimate {self.time_s * 1e6:.1f} us ({self.tflops:.1f} TFLOP/s), {self.bound}-bound, "
            f"{self.utilization:.0%} of the roofline",
        ] + [f"  note: {n}" for n in self.notes])


# ------------------------------------------------------------------------------------------- resources


def shared_bytes(func: Any, scratch: list[int] = ()) -> int:
    """Shared memory of one block: its shared buffers and the ops' scratch buffers, placed as lowering places them
    (:func:`~tilec.lower.tir.arena`, overlays over the buffers they may take)."""
    from tilec.lower.tir import arena, overlay_indices

    shared = [b for b in func.launch.allocs if b.scope == "shared"]
    overlays = overlay_indices(shared, func.launch.overlays)
    sizes = [math.ceil(math.prod(int(d) for d in b.shape) * b.dtype.bits / 8) for b in shared]
    return arena(sizes + [s for s in scratch if s], overlays)[1]


def register_demand(plan: Any, scratch: list[tuple[int, int]]) -> tuple[int, int]:
    """(registers the best schedule wants, the fewest it can run with): fragments, the operands of the op that
    needs most, and :data:`REGISTER_OVERHEAD`."""
    regs = sum(math.ceil(f.num_locals * b.dtype.bits / 32) for b, f in plan.fragments.items()) + REGISTER_OVERHEAD
    return regs + max((s[0] for s in scratch), default=0), regs + max((s[1] for s in scratch), default=0)


def estimate_registers(want: int, least: int, limit: int = 255) -> tuple[int, bool]:
    """(registers per thread, whether ptxas can fit them in ``limit`` without spilling), from
    :func:`register_demand`: a gemm's ldmatrix results of up to three k-steps, as ptxas schedules them when
    registers allow, of one k-step when they do not. The estimate is capped at ``limit`` when one k-step's operands
    fit."""
    if least > limit:
        return least, False
    return min(want, limit), True


def occupancy(dev: DeviceModel, threads: int, smem: int, regs: int) -> tuple[int, str]:
    """(blocks per SM, the limit that decides it)."""
    warps = -(-threads // dev.warp_size)
    per_warp = -(-regs * dev.warp_size // dev.reg_alloc_unit) * dev.reg_alloc_unit
    limits = {
        "threads": dev.max_threads_per_sm // max(threads, 1),
        "blocks": dev.max_blocks_per_sm,
        "shared memory": dev.smem_per_sm // (smem + dev.smem_reserved_per_block) if smem else dev.max_blocks_per_sm,
        "registers": (dev.regs_per_sm // per_warp) // warps if per_warp else dev.max_blocks_per_sm,
    }
    limit = min(limits, key=lambda k: (limits[k], list(limits).index(k)))
    return limits[limit], limit


def _reject_reason(dev: DeviceModel, threads: int, smem: int, regs: int, blocks_per_sm: int, limit: str) -> str | None:
    """Why a kernel cannot run (``regs`` 0 when they fit), or None."""
    if threads > dev.max_threads_per_block:
        return f"{threads} threads per block > {dev.max_threads_per_block}"
    if smem > dev.smem_per_block:
        return f"{smem} bytes of shared memory per block > {dev.smem_per_block} ({dev.name})"
    if regs:
        return f"~{regs} registers per thread (estimate, fewest operands live) > {dev.regs_per_thread}"
    if blocks_per_sm < 1:
        return f"not one block fits on an SM ({limit})"
    return None


# ------------------------------------------------------------------------------------------------ estimate


@dataclass
class _Totals:
    """Per-block work (arrays over the grid) and per-tensor totals."""

    grid: Grid
    gload: dict[Any, float] = field(default_factory=dict)
    gstore: dict[Any, float] = field(default_factory=dict)
    block: OpCost = field(default_factory=OpCost)
    inflight_async: float = 0.0
    inflight_sync: float = 0.0
    scratch: list[tuple[int, int]] = field(default_factory=list)
    scratch_smem: list[int] = field(default_factory=list)
    rejects: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rows: list[OpRow] = field(default_factory=list)
    barriers: Any = 0.0  # block-wide barriers each block waits at

    def add(self, nid: str, data: dict, cost: OpCost, runs: Any) -> None:
        g = self.grid
        self.block.add(cost, runs)
        for side, mine in ((cost.gload, self.gload), (cost.gstore, self.gstore)):
            for buf, v in side.items():
                mine[buf] = mine.get(buf, 0.0) + float(g.full(v * runs).sum())
        mean_runs = float(g.full(runs).mean())
        if mean_runs > 0:
            inflight = float(np.mean(cost.inflight))
            if cost.asynchronous:
                self.inflight_async += inflight
            else:
                self.inflight_sync = max(self.inflight_sync, inflight)
            self.scratch.append((cost.scratch_regs, cost.scratch_regs_min))
            self.scratch_smem.append(cost.scratch_smem)
            if cost.reject:
                self.rejects.append(cost.reject)
        if cost.note and cost.note not in self.notes:
            self.notes.append(cost.note)
        gbytes = sum(float(g.full(v * runs).sum()) for v in [*cost.gload.values(), *cost.gstore.values()])
        sbytes = float(g.full((cost.smem_read + cost.smem_write) * runs).sum())
        flops = float(g.full((cost.flops + sum(cost.tensor.values(), 0.0)) * runs).sum())
        self.rows.append(OpRow(nid, data["kind"], data["line"], data["label"], mean_runs, gbytes, sbytes, flops,
                                data["where"]))


def estimate(state: Any, device: Any = None, sizes: dict[str, int] | None = None) -> KernelCost:
    """The :class:`KernelCost` of a kernel from its compile state after ``layout_inference``.

    Parameters
    ----------
    state : CompileState
        From ``run_pipeline(func, target, until="layout_inference")`` (or later).
    device : str or DeviceModel, optional
        The device model (default: :func:`tilec.arch.device_model` of the state's target).
    sizes : dict, optional
        Values of the kernel's ``T.dynamic`` sizes, by name.
    """
    dev = device_model(state.target, device)
    func, plan, ftg = state.func, state.artifacts["layout_inference"], state.ftg
    grid = launch_grid(func, sizes)
    counts = trip_counts(func, grid)
    ctx = RuleContext(plan, state.target, grid.env, func.launch.num_threads)
    tot = _Totals(grid)
    for nid in ftg.nodes:
        data = ftg.node(nid)
        tot.add(nid, data, op_cost(ctx, data["op"]), counts.of(data["op"]))
    tot.notes += counts.notes
    tot.barriers = barrier_count(ftg, counts)
    threads = func.launch.num_threads
    smem = shared_bytes(func, tot.scratch_smem)
    want, least = register_demand(plan, tot.scratch)
    regs, fits = estimate_registers(want, least, dev.regs_per_thread)
    per_sm, limit = occupancy(dev, threads, smem, regs)
    reason = "; ".join(tot.rejects) or _reject_reason(dev, threads, smem, 0 if fits else regs, per_sm, limit)
    if fits and regs == dev.regs_per_thread:
        tot.notes.append(f"~{regs} registers: at the limit, ptxas keeps fewer gemm operands in flight or spills")
    loops = {}
    for loop, trips in counts.loops.values():
        full = grid.full(trips)
        loops[ftg.names(loop.var)] = (float(full.min()), float(full.mean()), float(full.max()))
    crowded = (want - regs) / max(1, want - least) if fits and want > regs else 0.0
    cost = _time(dev, func, tot, threads, smem, regs, max(per_sm, 1), limit, crowded)
    cost.factors.update(regs_wanted=want, regs_least=least)
    cost.ops, cost.loops, cost.rejected = tot.rows, loops, reason
    return cost


def barrier_count(ftg: Any, counts: Any) -> Any:
    """Block-wide barriers per block: one per trip of every loop in which one op consumes (RAW) or overwrites
    (WAR) shared memory another op of the loop touches -- the innermost loop around the consumer."""
    loops: dict[int, Any] = {}
    for u, v, dep in ftg.edges():
        ctx = ftg.node(v)["loops"]
        if u != v and dep.buffer.scope == "shared" and dep.kind in ("RAW", "WAR") and ctx:
            loops[id(ctx[-1].node)] = ctx[-1].node
    return sum((counts.loops[k][1] for k in loops if k in counts.loops), 0.0)


def estimate_kernel(func: Any, target: Any, device: Any = None, sizes: dict[str, int] | None = None,
                    options: dict | None = None) -> KernelCost:
    """Run the pipeline up to ``layout_inference`` for ``target`` (on the CPU) with pass configs ``options`` (default:
    those a kernel gets without its own, e.g. the Hopper path on sm_90a) and :func:`estimate` the kernel."""
    from tilec.passes.pipeline import run_pipeline
    from tilec.runtime.jit import default_pass_configs
    from tilec.target import Target, parse_target

    t = parse_target(target)
    if t.kind == "cpu" or not t.arch:
        from tilec.arch import target_arch

        t = Target("hip" if target_arch(t).startswith("gfx") else "cuda", target_arch(t))
    opts = default_pass_configs() if options is None else options
    return estimate(run_pipeline(func, t, until="layout_inference", options=opts), device, sizes)


# ---------------------------------------------------------------------------------------------------- time


def _littles(inflight: float, bandwidth: float, latency_ns: float) -> float:
    """Fraction of ``bandwidth`` that ``inflight`` bytes of outstanding loads sustain (Little's law)."""
    need = bandwidth * latency_ns * 1e-9
    return 1.0 if inflight <= 0 or need <= 0 else min(1.0, inflight / need)


def _schedule(work: np.ndarray, slots: int) -> float:
    """When the last block ends, the blocks (in launch order) taking the first free of ``slots``."""
    n = work.size
    if n == 0:
        return 0.0
    if slots >= n:
        return float(work.max())
    if np.ptp(work) == 0:
        return float(work.flat[0]) * math.ceil(n / slots)
    if n > SCHEDULE_LIMIT:
        return float(work.mean()) * math.ceil(n / slots)
    free = [0.0] * slots
    for w in work.tolist():
        heapq.heapreplace(free, free[0] + w)
    return max(free)


def _compute_units(dev: DeviceModel, b: OpCost, f_tc: float, slots: int, notes: list[str]) -> dict[str, Any]:
    """Per block, seconds of each compute unit on the block's 1 / slots share of the device."""
    tc: Any = 0.0
    for key, flops in b.tensor.items():
        instr, dtype = key.split(":")
        peak = dev.tensor_peak(instr, dtype)
        if peak is None:
            notes.append(f"{dev.name} has no {instr} rate for {dtype}; counted at the FP32 SIMT rate")
            peak = dev.fp32_peak
        tc = tc + flops / (peak * f_tc / slots)
    return {
        "tensor": tc,
        "smem": (b.smem_read + b.smem_write) / (dev.smem_bandwidth / slots),
        "simt": b.simt / (dev.fp32_lanes * dev.sms * dev.clock_hz / slots),
        "sfu": b.sfu / (dev.sfu_lanes * dev.sms * dev.clock_hz / slots),
    }


def _roofline(dev: DeviceModel, dram: float, tensor: dict[str, float], simt_flops: float) -> float:
    t_flops = simt_flops / dev.fp32_peak
    for key, flops in tensor.items():
        peak = dev.best_tensor_peak(key.split(":")[1]) or dev.fp32_peak
        t_flops += flops / peak
    return max(dram / (dev.hbm_bandwidth * dev.hbm_efficiency), t_flops)


def _time(dev: DeviceModel, func: Any, tot: _Totals, threads: int, smem: int, regs: int, per_sm: int,
          limit: str, crowded: float = 0.0) -> KernelCost:
    """The kernel's time from its per-block totals; ``crowded`` is the register shortfall share (0 to 1)."""
    g = tot.grid
    n, warps = g.blocks, -(-threads // dev.warp_size)
    resident = max(1, min(per_sm, -(-n // dev.sms)))
    slots, active = dev.sms * resident, min(dev.sms, n)
    dram_ld, dram_st = (sum(min(v, buffer_bytes(b, g.env)) for b, v in side.items())
                        for side in (tot.gload, tot.gstore))
    dram = dram_ld + dram_st
    l2_ld, l2_st = sum(tot.gload.values()), sum(tot.gstore.values())
    l2 = l2_ld + l2_st
    pipelined = tot.inflight_async > 0
    inflight = (tot.inflight_async if pipelined else tot.inflight_sync) * min(n, slots)
    f_dram = _littles(inflight, dev.hbm_bandwidth * dev.hbm_efficiency, dev.dram_latency_ns)
    f_l2 = _littles(inflight, dev.l2_bandwidth, dev.l2_latency_ns)
    # Little's law limits the loads (a thread waits for them); stores leave without a reply to wait for
    mem = {"dram": (dram_ld / f_dram + dram_st) / (dev.hbm_bandwidth * dev.hbm_efficiency),
           "l2": (l2_ld / f_l2 + l2_st) / dev.l2_bandwidth,
           "l2_port": l2 / (active * dev.l2_port_bytes_per_clk * dev.clock_hz)}
    per_sub = resident * warps / dev.subpartitions
    f_tc, o_c = min(1.0, per_sub), max(0.0, 1.0 - 1.0 / per_sub)
    units = {k: g.full(v) for k, v in _compute_units(dev, tot.block, f_tc, slots, tot.notes).items()}
    stacked = np.stack(list(units.values()))
    top = stacked.max(axis=0)
    sync = g.full(tot.barriers) * dev.sync_ns * 1e-9
    work = (top + (1.0 - o_c) * (stacked.sum(axis=0) - top)) * (1.0 + REGISTER_CROWDING * crowded) + sync
    t_comp = _schedule(np.ascontiguousarray(work.transpose(2, 1, 0)).ravel(), slots)
    ideal = float(work.sum()) / slots
    eff = ideal / t_comp if t_comp > 0 else 1.0
    t_mem = max(mem.values())
    o_m = 1.0 if pipelined else 1.0 - 1.0 / resident
    launch = dev.launch_us * 1e-6
    total = max(t_mem, t_comp) + (1.0 - o_m) * min(t_mem, t_comp) + launch
    times = {**mem, **{k: float(v.sum()) / slots / eff for k, v in units.items()},
             "sync": float(sync.sum()) / slots / eff, "memory": t_mem, "compute": t_comp, "launch": launch}
    named = {k: times[k] for k in ("dram", "l2", "l2_port", "tensor", "smem", "simt", "sfu", "sync", "launch")}
    bound = max(named, key=lambda k: named[k])
    b = tot.block
    tensor = {k: float(g.full(v).sum()) for k, v in b.tensor.items()}
    simt_flops = float(g.full(b.flops).sum())
    full = lambda x: float(g.full(x).sum())  # noqa: E731
    return KernelCost(
        name=func.name, target=dev.arch, device=dev, grid=tuple(s for s in g.shape), blocks=n, threads=threads,
        smem_per_block=smem, regs_per_thread=regs, blocks_per_sm=per_sm,
        occupancy=per_sm * warps * dev.warp_size / dev.max_threads_per_sm, occupancy_limit=limit,
        waves=n / (dev.sms * per_sm), wave_efficiency=eff,
        bytes={"dram": dram, "l2": l2, "global_load": sum(tot.gload.values()), "global_store": sum(tot.gstore.values()),
               "smem_read": full(b.smem_read), "smem_write": full(b.smem_write), "register": full(b.reg)},
        flops={"tensor": sum(tensor.values()), "simt": simt_flops, "total": sum(tensor.values()) + simt_flops},
        tensor_flops=tensor, times=times,
        factors={"f_dram": f_dram, "f_l2": f_l2, "f_tc": f_tc, "overlap_units": o_c, "overlap_memory": o_m,
                 "resident_blocks": resident, "inflight_bytes": inflight,
                 "barriers_per_block": float(g.full(tot.barriers).mean())},
        time_s=total, bound=bound, roofline_s=_roofline(dev, dram, tensor, simt_flops), notes=tot.notes)
