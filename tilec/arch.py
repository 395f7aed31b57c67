"""Device models: what the cost model (:mod:`tilec.passes.cost_model`) knows about a GPU.

A :class:`DeviceModel` holds the counts (SMs, shared memory, registers, threads), the instruction shapes and
peak rates, and the bandwidths and latencies of one GPU. They come from a table of public, datasheet-level
figures (H100 SXM, H200 SXM, A100 SXM, MI300X, MI250X); when CuPy sees a GPU of the target's architecture,
the counts the driver reports (``cupy.cuda.runtime.getDeviceProperties``) replace the table's (CuPy is
imported only then). Figures that no datasheet gives (L2 bandwidth, latencies, the mma.sync rate on Hopper,
launch overhead) are *leads*: estimates to be calibrated on the machine; :attr:`DeviceModel.leads` names them.

Which table entry a target gets (:func:`device_model`):

=================  =======================================================================================
target arch        model
=================  =======================================================================================
``sm_90a/sm_90``   ``H200`` (the project's reference GPU, see ``ANCHORS.md``), ``H100`` when the GPU says so
``sm_80/86/89``    ``A100`` (the counts of an sm_86/89 GPU come from its properties when it is present)
``gfx942``         ``MI300X``
``gfx90a``         ``MI250X`` -- one GCD, which is what one HIP device is
=================  =======================================================================================

>>> from tilec.arch import device_model
>>> device_model("cuda:sm_90a").name
'H200 SXM'
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

from tilec.errors import TilecTypeError, TilecValueError

KB = 1024


@dataclass(frozen=True)
class TensorInstr:
    """A tensor-core (matrix) instruction: its name, shape (m, n, k) and dense peak FLOP/s per operand dtype
    for the whole device."""

    name: str
    shape: tuple[int, int, int]
    peaks: tuple[tuple[str, float], ...]

    def peak(self, dtype: str) -> float | None:
        return dict(self.peaks).get(dtype)


@dataclass(frozen=True)
class DeviceModel:
    """One GPU, as the cost model sees it. Rates are per second for the whole device unless they say per SM.

    Parameters
    ----------
    name, arch, vendor : str
        ``"H200 SXM"``, ``"sm_90a"``, ``"nvidia"``.
    sms : int
        Streaming multiprocessors (compute units on AMD).
    clock_ghz : float
        The boost clock the peak rates assume.
    smem_per_sm, smem_per_block : int
        Shared memory (LDS) bytes per SM, and the most one block may have (the opt-in maximum).
    regs_per_sm, regs_per_thread : int
        32-bit registers per SM, and the most one thread may have.
    tensor : tuple of TensorInstr
        Matrix instructions with their peaks (mma.sync and wgmma on Hopper, MFMA on AMD).
    fp32_lanes : int
        FP32 lane operations per clock per SM (an FMA is one operation, two FLOPs).
    sfu_lanes : int
        Transcendental operations (ex2, lg2, rcp, rsqrt, ...) per clock per SM.
    hbm_bandwidth, hbm_efficiency : float
        Datasheet DRAM bandwidth (bytes/s) and the achievable fraction of it (a device-to-device copy).
    l2_bytes, l2_bandwidth : int, float
        L2 capacity and bandwidth (bytes/s).
    smem_bytes_per_clk, l2_port_bytes_per_clk : int
        Per SM: shared-memory bandwidth and the rate at which one SM takes data from L2.
    dram_latency_ns, l2_latency_ns, launch_us : float
        Loaded latencies of a global load served by DRAM / by L2; the fixed cost of one kernel launch.
    sync_ns : float
        What one block-wide barrier costs the block that waits at it (barrier latency and warp skew).
    """

    name: str
    arch: str
    vendor: str
    sms: int
    clock_ghz: float
    warp_size: int
    smem_per_sm: int
    smem_per_block: int
    smem_reserved_per_block: int
    regs_per_sm: int
    regs_per_thread: int
    reg_alloc_unit: int
    max_threads_per_sm: int
    max_threads_per_block: int
    max_blocks_per_sm: int
    subpartitions: int
    tensor: tuple[TensorInstr, ...]
    fp32_lanes: int
    sfu_lanes: int
    hbm_bandwidth: float
    hbm_efficiency: float
    l2_bytes: int
    l2_bandwidth: float
    smem_bytes_per_clk: int
    l2_port_bytes_per_clk: int
    dram_latency_ns: float
    l2_latency_ns: float
    launch_us: float
    sync_ns: float = 50.0
    memory_bytes: int = 0
    leads: tuple[str, ...] = ()
    source: str = "table"
    notes: tuple[str, ...] = field(default=(), compare=False)

    # ------------------------------------------------------------------------------------------- derived

    def regs_at_launch(self, threads: int) -> int:
        """The registers a thread of a ``threads``-thread block alone on its SM may use: what ptxas compiles the whole
        kernel to under ``__launch_bounds__(threads, 1)``, except code after a ``setmaxnreg.inc``, which gets that count
        (flash attention's consumers use R219 under "Used 168 registers"; nvcc 13.0); each single instruction, a wgmma
        with its accumulator, must fit this count even there (ptxas C7602)."""
        return min(self.regs_per_thread, self.regs_per_sm // threads) // 8 * 8

    def thread_register_limit(self, threads: int) -> int:
        """The most 32-bit registers each thread of a ``threads``-thread block can have: the per-thread limit, or the
        SM's register file shared out over the block's threads in allocation units (``reg_alloc_unit`` a warp),
        whichever is fewer (255 on NVIDIA up to 256 threads, 168 at 384, 64 at 1024; 512 VGPRs on CDNA up to 256)."""
        unit = self.reg_alloc_unit // self.warp_size
        return min(self.regs_per_thread, self.regs_per_sm // threads // unit * unit)

    @property
    def clock_hz(self) -> float:
        return self.clock_ghz * 1e9

    @property
    def fp32_peak(self) -> float:
        """FP32 SIMT peak in FLOP/s (FMA counted as two)."""
        return 2.0 * self.fp32_lanes * self.sms * self.clock_hz

    @property
    def smem_bandwidth(self) -> float:
        """Shared-memory bandwidth of all SMs together (bytes/s)."""
        return self.smem_bytes_per_clk * self.sms * self.clock_hz

    def tensor_peak(self, instr: str, dtype: str) -> float | None:
        """Dense FLOP/s of ``instr`` (``"mma.sync"``, ``"wgmma"``, ``"mfma"``) on ``dtype`` operands, or None."""
        for t in self.tensor:
            if t.name == instr:
                return t.peak(dtype)
        return None

    def best_tensor_peak(self, dtype: str) -> float | None:
        """The highest dense FLOP/s any matrix instruction of the device reaches on ``dtype`` (the roofline)."""
        peaks = [p for t in self.tensor if (p := t.peak(dtype)) is not None]
        return max(peaks) if peaks else None

    def summary(self) -> str:
        tc = ", ".join(f"{t.name} {t.peak('float16') / 1e12:.0f}" for t in self.tensor if t.peak("float16"))
        return (f"{self.name} ({self.arch}): {self.sms} SMs at {self.clock_ghz:.2f} GHz, fp16 tensor {tc} TFLOP/s, "
                f"fp32 {self.fp32_peak / 1e12:.1f} TFLOP/s, HBM {self.hbm_bandwidth / 1e12:.2f} TB/s, "
                f"L2 {self.l2_bytes // (1024 * 1024)} MB, smem {self.smem_per_sm // KB} KB/SM [{self.source}]")


def _peaks(**kw: float) -> tuple[tuple[str, float], ...]:
    """Peaks by dtype name, in TFLOP/s (dense), as FLOP/s."""
    names = {"f16": ("float16", "bfloat16"), "tf32": ("float32",), "f8": ("float8_e4m3", "float8_e5m2"),
             "i8": ("int8",)}
    return tuple((n, v * 1e12) for key, v in kw.items() for n in names[key])


_NV_COMMON = dict(vendor="nvidia", warp_size=32, smem_reserved_per_block=1 * KB, regs_per_sm=65536,
                  regs_per_thread=255, reg_alloc_unit=256, max_threads_per_sm=2048, max_threads_per_block=1024,
                  max_blocks_per_sm=32, subpartitions=4, sfu_lanes=16, smem_bytes_per_clk=128,
                  l2_port_bytes_per_clk=64)
_NV_LEADS = ("l2_bandwidth", "l2_port_bytes_per_clk", "dram_latency_ns", "l2_latency_ns", "launch_us", "sync_ns")

# Hopper: NVIDIA H100 / H200 datasheets and the Hopper architecture whitepaper: 132 SMs at 1.98 GHz boost;
# dense FP16/BF16 989.4, TF32 494.7, FP8 and INT8 1978.9 TFLOP/s (these are wgmma's); FP32 66.9 TFLOP/s
# (128 FP32 lanes per SM); 228 KB shared memory per SM, 227 KB per block; 50 MB L2. HBM: H100 SXM 3.35 TB/s
# (80 GB HBM3), H200 4.8 TB/s (141 GB HBM3e). mma.sync (the sm_80 instruction) does not reach the wgmma rate
# on Hopper; about two thirds of it is the figure public kernels (FlashAttention-2, sm_80 cuBLAS kernels)
# report: a lead. H200 copy efficiency 4250 / 4800 GB/s measured (ANCHORS.md); H100's is a lead.
_HOPPER = dict(_NV_COMMON, arch="sm_90a", sms=132, clock_ghz=1.98, smem_per_sm=228 * KB, smem_per_block=227 * KB,
               fp32_lanes=128, l2_bytes=50 * 1024 * KB, l2_bandwidth=10.0e12, dram_latency_ns=550.0,
               l2_latency_ns=200.0, launch_us=4.0,
               tensor=(TensorInstr("mma.sync", (16, 8, 16), _peaks(f16=660.0, tf32=330.0, i8=1320.0)),
                       TensorInstr("wgmma", (64, 256, 16), _peaks(f16=989.4, tf32=494.7, f8=1978.9, i8=1978.9))))

# Ampere: NVIDIA A100 datasheet and whitepaper: 108 SMs at 1.41 GHz; FP16/BF16 312, TF32 156, INT8 624 TFLOP/s
# dense (mma.sync); FP32 19.5 TFLOP/s (64 FP32 lanes per SM); 164 KB shared memory per SM, 163 KB per block;
# 40 MB L2; 80 GB HBM2e at 2.039 TB/s.
_AMPERE = dict(_NV_COMMON, arch="sm_80", sms=108, clock_ghz=1.41, smem_per_sm=164 * KB, smem_per_block=163 * KB,
               fp32_lanes=64, l2_bytes=40 * 1024 * KB, l2_bandwidth=4.9e12, dram_latency_ns=500.0,
               l2_latency_ns=200.0, launch_us=4.0,
               tensor=(TensorInstr("mma.sync", (16, 8, 16), _peaks(f16=312.0, tf32=156.0, i8=624.0)),))

# CDNA: AMD Instinct MI300X / MI250X datasheets and the CDNA 2/3 whitepapers. MI300X: 304 CUs at 2.1 GHz,
# FP16/BF16 matrix 1307.4, FP8 and INT8 2614.9, TF32 653.7 TFLOP/s dense; FP32 vector 163.4; 64 KB LDS per CU;
# 256 MB Infinity Cache, 4 MB L2 per XCD; 5.3 TB/s HBM3 (192 GB). MI250X per GCD (one HIP device): 110 CUs at
# 1.7 GHz, FP16/BF16 matrix 191.5, FP32 vector 23.9 TFLOP/s, 8 MB L2, 1.64 TB/s HBM2e (64 GB).
_AMD_COMMON = dict(vendor="amd", warp_size=64, smem_reserved_per_block=0, regs_per_sm=4 * 512 * 64,
                   regs_per_thread=512, reg_alloc_unit=512, max_threads_per_sm=2048, max_threads_per_block=1024,
                   max_blocks_per_sm=32, subpartitions=4, sfu_lanes=16, smem_bytes_per_clk=128,
                   l2_port_bytes_per_clk=64, smem_per_sm=64 * KB, smem_per_block=64 * KB, launch_us=5.0)
_AMD_LEADS = ("l2_bandwidth", "l2_port_bytes_per_clk", "dram_latency_ns", "l2_latency_ns", "launch_us", "sync_ns",
              "hbm_efficiency", "sfu_lanes", "max_blocks_per_sm")

TABLE: dict[str, DeviceModel] = {
    "H100": DeviceModel(name="H100 SXM", hbm_bandwidth=3.35e12, hbm_efficiency=0.9, memory_bytes=80 * 2**30,
                        leads=_NV_LEADS + ("hbm_efficiency", "tensor mma.sync"), **_HOPPER),
    "H200": DeviceModel(name="H200 SXM", hbm_bandwidth=4.8e12, hbm_efficiency=0.885, memory_bytes=141 * 2**30,
                        leads=_NV_LEADS + ("tensor mma.sync",), **_HOPPER),
    "A100": DeviceModel(name="A100 SXM", hbm_bandwidth=2.039e12, hbm_efficiency=0.9, memory_bytes=80 * 2**30,
                        leads=_NV_LEADS + ("hbm_efficiency",), **_AMPERE),
    "MI300X": DeviceModel(name="MI300X", arch="gfx942", sms=304, clock_ghz=2.1, fp32_lanes=128,
                          hbm_bandwidth=5.3e12, hbm_efficiency=0.8, l2_bytes=32 * 1024 * KB, l2_bandwidth=17.0e12,
                          dram_latency_ns=700.0, l2_latency_ns=250.0, memory_bytes=192 * 2**30, leads=_AMD_LEADS,
                          tensor=(TensorInstr("mfma", (16, 16, 16),
                                              _peaks(f16=1307.4, tf32=653.7, f8=2614.9, i8=2614.9)),),
                          **_AMD_COMMON),
    "MI250X": DeviceModel(name="MI250X (one GCD)", arch="gfx90a", sms=110, clock_ghz=1.7, fp32_lanes=64,
                          hbm_bandwidth=1.6384e12, hbm_efficiency=0.8, l2_bytes=8 * 1024 * KB, l2_bandwidth=4.0e12,
                          dram_latency_ns=700.0, l2_latency_ns=250.0, memory_bytes=64 * 2**30, leads=_AMD_LEADS,
                          tensor=(TensorInstr("mfma", (16, 16, 16), _peaks(f16=191.5, i8=191.5)),),
                          **_AMD_COMMON),
}

_BY_ARCH = {"sm_90a": "H200", "sm_90": "H200", "sm_80": "A100", "sm_86": "A100", "sm_89": "A100",
            "gfx942": "MI300X", "gfx90a": "MI250X"}


def table_model(arch: str) -> DeviceModel:
    """The table's model of an architecture, whatever GPU is present (what code generation may depend on)."""
    return dataclasses.replace(TABLE[_BY_ARCH[arch]], arch=arch)


def _table_key(name: str) -> str | None:
    """The table entry a device name (``"NVIDIA H100 80GB HBM3"``, ``"h200"``) refers to."""
    text = name.upper().replace(" ", "")
    for key in ("H200", "H100", "A100", "MI300X", "MI250X"):
        if key in text:
            return key
    return None


def device_model(target: Any = None, device: str | DeviceModel | None = None) -> DeviceModel:
    """The device model for a target; works without a GPU.

    Parameters
    ----------
    target : str or Target, optional
        ``"cuda:sm_90a"``, ``"simt:sm_80"``, ``"hip:gfx942"``...; ``None`` reads ``TILEC_TARGET``. A target with no
        GPU architecture (``cpu``, or ``cuda`` with no GPU present) gets ``sm_90a``.
    device : str or DeviceModel, optional
        A table name (``"H100"``, ``"A100"``, ...) or a model, overriding the choice by architecture.

    Returns
    -------
    DeviceModel
        The table entry for the architecture (see the module docstring); when CuPy sees a GPU of that
        architecture, with its counts (SMs, shared memory, registers, threads, L2 size, clocks) from the driver.
    """
    if isinstance(device, DeviceModel):
        return device
    arch = target_arch(target)
    if device is not None:
        if not isinstance(device, str):
            raise TilecTypeError(f"device_model: device must be a table name ({', '.join(TABLE)}) or a DeviceModel, "
                                 f"got {type(device).__name__} {device!r}")
        key = _table_key(device)
        if key is None:
            raise TilecValueError(f"unknown device {device!r}; the table has {', '.join(TABLE)}")
        return TABLE[key]
    props = _visible_properties(arch)
    if props is not None:
        return _from_properties(arch, props)
    return table_model(arch)


def target_arch(target: Any) -> str:
    """The GPU architecture a target names (``sm_90a`` when it names none and no GPU says otherwise)."""
    from tilec.target import Target, gpu_available, parse_target

    t = target if isinstance(target, Target) else parse_target(target)
    if t.arch:
        return t.arch
    if t.kind == "cuda" and gpu_available():
        from tilec.backends.cuda.runtime import device_arch

        return device_arch()
    return "sm_90a"


@functools.lru_cache(maxsize=8)
def _visible_properties(arch: str) -> tuple[tuple[str, Any], ...] | None:
    """The driver's properties of device 0 when it is an NVIDIA GPU of ``arch``; None otherwise (no CuPy import
    without a GPU)."""
    from tilec.target import gpu_available

    if not arch.startswith("sm_") or not gpu_available():
        return None
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
    except Exception:  # noqa: BLE001 - a broken driver means: use the table
        return None
    cc = f"sm_{props.get('major', 0)}{props.get('minor', 0)}"
    if cc != arch.rstrip("a"):
        return None
    return tuple(sorted(props.items()))


def _from_properties(arch: str, items: tuple[tuple[str, Any], ...]) -> DeviceModel:
    """The table entry for the device's name (else for ``arch``) with the driver's counts in place of the table's."""
    p = dict(items)
    name = p.get("name", b"")
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    base = TABLE[_table_key(name) or _BY_ARCH[arch]]
    counts = {"sms": "multiProcessorCount", "smem_per_sm": "sharedMemPerMultiprocessor",
              "smem_per_block": "sharedMemPerBlockOptin", "regs_per_sm": "regsPerMultiprocessor",
              "max_threads_per_sm": "maxThreadsPerMultiProcessor", "max_threads_per_block": "maxThreadsPerBlock",
              "warp_size": "warpSize", "l2_bytes": "l2CacheSize", "max_blocks_per_sm": "maxBlocksPerMultiProcessor",
              "memory_bytes": "totalGlobalMem"}
    changes: dict[str, Any] = {f: int(p[k]) for f, k in counts.items() if p.get(k)}
    if p.get("clockRate"):  # kHz; CUDA 13 dropped it from cudaDeviceProp, hence .get
        changes["clock_ghz"] = p["clockRate"] / 1e6
    if p.get("memoryClockRate") and p.get("memoryBusWidth"):  # double data rate
        changes["hbm_bandwidth"] = 2.0 * p["memoryClockRate"] * 1e3 * p["memoryBusWidth"] / 8
    scale = changes.get("sms", base.sms) * changes.get("clock_ghz", base.clock_ghz) / (base.sms * base.clock_ghz)
    tensor = tuple(dataclasses.replace(t, peaks=tuple((d, v * scale) for d, v in t.peaks)) for t in base.tensor)
    return dataclasses.replace(base, arch=arch, name=name or base.name, tensor=tensor,
                               source=f"table {base.name} with the properties of {name!r}", **changes)
