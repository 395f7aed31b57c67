"""The thread IR: what one thread of a block does, in the order it does it.

Tile ops are lowered to this (stage 7); the CUDA/HIP emitters print it and the thread interpreter runs it.
Scalar expressions are the Tile IR's (:mod:`tilec.ir.expr`) plus :class:`MemRef` (an element, or a vector of
``lanes`` elements, of a :class:`Mem`), :class:`TCall` (warp shuffles and other value intrinsics), :class:`VecPack`
(values stored by one vector access) and :class:`Bits` (narrow values packed into one word).

Memory: ``global`` mems are the kernel's tensors (flat, element offsets); ``shared`` mems live in one
dynamic shared-memory arena at byte offsets; ``reg`` mems are per-thread register arrays (every fragment is
one, holding the thread's locals). Registers must be indexed by constants: lowering unrolls what touches them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tilec.dtypes import DType
from tilec.errors import SourceLoc
from tilec.ir.buffer import Buffer
from tilec.ir.expr import Expr, Var

SPACES = ("global", "shared", "reg")
L2_HINTS = ("evict_first", "evict_last")  # T.copy eviction policies that become an L2 cache hint (evict_normal: none)


@dataclass(frozen=True, eq=False)
class Mem:
    """A storage object of the thread IR.

    ``size`` counts elements; for a ``global`` mem it may be symbolic. ``buffer`` is the Tile IR buffer the
    mem holds (None for scratch space made by lowering).
    """

    name: str
    dtype: DType
    space: str
    size: int | Expr
    buffer: Buffer | None = None

    __hash__ = object.__hash__

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False, repr=False)
class MemRef(Expr):
    """``mem[offset]`` (``lanes`` consecutive elements when > 1: a vector access). ``hint``: an L2 eviction
    priority of a global load (``evict_first`` / ``evict_last``, :data:`L2_HINTS`; CUDA only), or None."""

    mem: Mem
    offset: Expr
    lanes: int = 1
    hint: str | None = None

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.mem.dtype


@dataclass(frozen=True, eq=False, repr=False)
class TCall(Expr):
    """A value intrinsic: ``shfl_xor(value, lane_mask, width)``, ``shfl_idx(value, lane, width)``,
    ``shfl_down(value, delta, width)``; ``cvt_tf32(value)``: a float32 rounded to TF32 (``cvt.rna.tf32.f32``)."""

    name: str
    args: tuple[Expr, ...]
    dtype: DType


@dataclass(frozen=True, eq=False, repr=False)
class VecPack(Expr):
    """``len(values)`` values of one dtype as one vector, the value of a vector :class:`Write` (emitted as a
    brace-initialized ``tl::Vec``: no array in registers whose address is taken). When ``dtype`` is not the
    written mem's, the values are words holding its elements' bits (:class:`Bits`), the first element lowest."""

    values: tuple[Expr, ...]
    dtype: DType


@dataclass(frozen=True, eq=False, repr=False)
class Bits(Expr):
    """The bits of ``len(values)`` values of a narrow dtype as one word of ``dtype`` (the first value in the low
    bits, as they lie in memory): a pair of float16 as a uint32 that one shuffle moves."""

    values: tuple[Expr, ...]
    dtype: DType


# ---------------------------------------------------------------------------------------------------- statements


@dataclass(frozen=True, eq=False)
class TStmt:
    loc: SourceLoc | None = field(default=None, kw_only=True, repr=False)

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False)
class Seq(TStmt):
    stmts: tuple[TStmt, ...]


@dataclass(frozen=True, eq=False)
class Loop(TStmt):
    """``for (var = 0; var < extent; ++var)``; ``unroll`` asks the compiler to unroll it. ``tiles`` marks a
    persistent block's loop over its tiles: its trips stand for blocks of the original grid, so what they do in
    global memory is not ordered from one trip to the next."""

    var: Var
    extent: Expr
    body: TStmt
    unroll: bool = False
    tiles: bool = False
    unroll_factor: int = 0  # with unroll: by this many trips (``#pragma unroll N``); 0 for fully


@dataclass(frozen=True, eq=False)
class If(TStmt):
    cond: Expr
    then_body: TStmt
    else_body: TStmt | None = None


@dataclass(frozen=True, eq=False)
class Decl(TStmt):
    """``const T var = value;`` visible to the rest of the enclosing block."""

    var: Var
    value: Expr


@dataclass(frozen=True, eq=False)
class Write(TStmt):
    """``mem[offset] = value`` (a vector of ``lanes`` elements when > 1; ``value`` is then a MemRef). ``hint``: as
    :attr:`MemRef.hint`, for a store to global memory."""

    mem: Mem
    offset: Expr
    value: Expr
    lanes: int = 1
    hint: str | None = None


@dataclass(frozen=True, eq=False)
class Group(TStmt):
    """The code of one tile op (``label`` names it and its line); barriers are placed between groups."""

    body: TStmt
    label: str


@dataclass(frozen=True, eq=False)
class Sync(TStmt):
    """A barrier of all threads of the block (``__syncthreads``), or with ``threads`` of the first ``threads``
    threads only (the consumer warpgroups of a warp-specialized kernel: named barrier
    :data:`tilec.lower.tma.CONSUMER_BARRIER`), or of the ``threads`` threads of one copy of the consumers (that
    barrier plus ``copy``: :class:`Roles`)."""

    threads: int | None = None
    copy: Expr | None = None


@dataclass(frozen=True, eq=False)
class HandoffBarrier(Sync):
    """Named barrier ``id`` of ``threads`` where each thread, by ``mode``, waits (1: ``bar.sync``), arrives without
    waiting (2: ``bar.arrive``) or takes no part (0): a :class:`~tilec.ir.stmt.StageHandoff`. The barrier pass takes
    it for a barrier of the block, which the handoff's protocol makes it for the staged tile (the only shared memory
    the statements around it touch)."""

    id: int = 0
    mode: Expr | None = None


@dataclass(frozen=True, eq=False)
class SyncWarp(TStmt):
    """The threads of each warp synchronize (``__syncwarp``): their shared-memory accesses before it are ordered
    before what any of them does after it (one lane may then act for its warp)."""


@dataclass(frozen=True, eq=False)
class Roles(TStmt):
    """Warp specialization: threads ``[threads, threads + producer_threads)`` run ``producer`` (its first thread
    only) with ``producer_regs`` registers each, the others ``consumer`` with ``consumer_regs`` (``setmaxnreg``;
    0: unchanged). With ``copies`` > 1 the consumer threads are that many copies of ``threads // copies``, thread
    ``t`` running ``consumer`` with ``copy`` = t // (threads // copies) and ``tx`` = t % (threads // copies) as
    its thread index."""

    producer: TStmt
    consumer: TStmt
    threads: int
    producer_threads: int
    producer_regs: int = 0
    consumer_regs: int = 0
    copies: int = 1
    copy: Var | None = None
    tx: Var | None = None


@dataclass(frozen=True, eq=False)
class Comment(TStmt):
    text: str


@dataclass(frozen=True, eq=False)
class AtomicAddOp(TStmt):
    """``atomicAdd(&mem[offset], value)``."""

    mem: Mem
    offset: Expr
    value: Expr


@dataclass(frozen=True, eq=False)
class PrintOp(TStmt):
    """``printf`` of values from one thread (``thread`` is the printing thread, usually 0)."""

    fmt: str
    args: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class Mma(TStmt):
    """``mma.sync.aligned`` of one warp: C[c:c+4] += A[a:a+8e] x B[b:b+4e] (register offsets, in elements).

    fp16/bf16 operands (e = 1) make it ``m16n8k16``, fp8 ones (e4m3 or e5m2, e = 2) ``m16n8k32``; float32 ones
    ``m16n8k8`` on TF32 values (A[a:a+4] x B[b:b+2], rounded by ``cvt_tf32`` before). The accumulator is float32.
    Register order is the PTX ISA's.
    """

    a: Mem
    a_off: Expr
    b: Mem
    b_off: Expr
    c: Mem
    c_off: Expr


@dataclass(frozen=True, eq=False)
class Mfma(TStmt):
    """``v_mfma_f32_16x16x16{f16,bf16_1k}`` of one 64-lane wavefront: C[c:c+4] += A[a:a+4] x B[b:b+4] (register
    offsets). ``a.dtype`` is float16 or bfloat16, the accumulator float32. Lane ``l`` holds A[l % 16, 4 (l // 16) + v],
    B[4 (l // 16) + v, l % 16] and C[4 (l // 16) + v, l % 16] in its register ``v`` (AMD CDNA ISA)."""

    a: Mem
    a_off: Expr
    b: Mem
    b_off: Expr
    c: Mem
    c_off: Expr


@dataclass(frozen=True, eq=False)
class WgmmaOperand:
    """A wgmma operand tile in shared memory, as its matrix descriptor describes it: ``byte_off`` (from the
    mem's start) of the tile's first element in the canonical layout, leading and stride byte offsets, the
    swizzle width in bytes (128, 64, 32) and whether K or M/N is the contiguous dimension."""

    mem: Mem
    byte_off: Expr
    lbo: int
    sbo: int
    swizzle: int
    k_major: bool

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False)
class Wgmma(TStmt):
    """``wgmma.mma_async.sync.aligned.m64n{n}k{16|32}.f32`` of one warpgroup: C[c_off : c_off + n/2] (+)= A x B,
    K 16 for fp16/bf16 and 32 for fp8 (``dtype`` is A's; B's is its mem's).

    A is a :class:`WgmmaOperand` (shared memory) or, for 16-bit types, registers ``a_regs[a_off : a_off + 8]``
    (the m16n8k16 A layout in each warp, warp w of the group holding rows 16w..16w+15); B is a
    :class:`WgmmaOperand`.
    Asynchronous: its results are defined after :class:`WgmmaWait`."""

    n: int
    a: WgmmaOperand | None
    a_regs: Mem | None
    a_off: Expr
    b: WgmmaOperand
    c: Mem
    c_off: Expr
    dtype: DType


@dataclass(frozen=True, eq=False)
class WgmmaFence(TStmt):
    """``wgmma.fence.sync.aligned``: orders earlier register accesses before the next wgmma. ``regs`` (the
    accumulators and register operands of the wgmmas that follow) are marked as read and written just before it,
    so the compiler moves no write of them below the fence (ptxas would then wait for it: C7519)."""

    regs: tuple[Mem, ...] = ()


@dataclass(frozen=True, eq=False)
class WgmmaCommit(TStmt):
    """``wgmma.commit_group.sync.aligned``."""


@dataclass(frozen=True, eq=False)
class WgmmaWait(TStmt):
    """``wgmma.wait_group.sync.aligned n``; ``regs`` (the accumulators) are marked as written here, so the
    compiler moves no read of them above the wait. With ``after`` (a float register the statements before the wait
    computed last) the wait stays below those statements: it is preceded by a store to the shared word ``anchor``
    under the condition ``after != after`` (a NaN; the store is harmless when it runs: nothing reads the word).
    ptxas keeps a wgmma wait below a store but otherwise schedules it as early as it can, which would end the
    overlap of those statements with the wgmma group (perf notes AF)."""

    n: int = 0
    regs: Mem | None = None
    after: Expr | None = None
    anchor: Mem | None = None


@dataclass(frozen=True, eq=False)
class FenceProxyAsync(TStmt):
    """``fence.proxy.async.shared::cta``: this thread's shared-memory writes become visible to the async proxy
    (wgmma reads shared memory through it)."""


@dataclass(frozen=True, eq=False)
class LdMatrix(TStmt):
    """``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16``: this lane's row address is
    ``src[src_off]``; lane results go to ``dst[dst_off : dst_off + 2 * num]``."""

    num: int
    trans: bool
    dst: Mem
    dst_off: Expr
    src: Mem
    src_off: Expr


@dataclass(frozen=True, eq=False)
class CpAsync(TStmt):
    """``cp.async`` of ``nbytes`` (4, 8 or 16) from ``src[src_off]`` (global) to ``dst[dst_off]`` (shared);
    with ``pred`` false the destination is zero-filled and the source not read."""

    dst: Mem
    dst_off: Expr
    src: Mem
    src_off: Expr
    nbytes: int
    pred: Expr | None = None


@dataclass(frozen=True, eq=False)
class CpAsyncCommit(TStmt):
    """``cp.async.commit_group``."""


@dataclass(frozen=True, eq=False)
class CpAsyncWait(TStmt):
    """``cp.async.wait_group n``: at most ``n`` of this thread's groups still in flight."""

    n: int


@dataclass(frozen=True, eq=False)
class TensorMap:
    """A TMA tensor map of the global tensor of kernel parameter ``param`` (encoded by the host, passed as a
    ``__grid_constant__`` parameter after the sizes): the tensor's ``dims`` and byte ``strides`` (innermost
    first, strides from the second dimension on), boxes of ``box`` elements, the swizzle in bytes (0: none)."""

    name: str
    param: int
    dtype: DType
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False)
class TmaLoad(TStmt):
    """``cp.async.bulk.tensor`` (one thread): the box of ``tmap`` at element ``coords`` (innermost first; outside the
    tensor: zeros) to ``dst[dst_off...]``, completing ``tmap``'s box bytes on the mbarrier ``bar[bar_off]``. With a
    ``multicast`` mask, into the same place, and completing on the same barrier, of every block of the cluster
    whose rank has its bit set."""

    tmap: TensorMap
    coords: tuple[Expr, ...]
    dst: Mem
    dst_off: Expr
    bar: Mem
    bar_off: Expr
    multicast: int = 0
    hint: str | None = None  # as MemRef.hint, on the global read


@dataclass(frozen=True, eq=False)
class TmaStoreBox(TStmt):
    """``cp.async.bulk.tensor`` shared→global (one thread, in its bulk group): ``src[src_off...]``, laid out with
    ``tmap``'s swizzle, to the box of ``tmap`` at element ``coords`` (innermost first) of the tensor ``dst``; the
    elements outside the tensor are not written."""

    tmap: TensorMap
    coords: tuple[Expr, ...]
    src: Mem
    src_off: Expr
    dst: Mem
    hint: str | None = None  # as MemRef.hint, on the global write


@dataclass(frozen=True, eq=False)
class BulkCommit(TStmt):
    """``cp.async.bulk.commit_group``: the thread's TMA stores issued since the last commit form a group."""


@dataclass(frozen=True, eq=False)
class BulkWait(TStmt):
    """``cp.async.bulk.wait_group.read pending``: the thread's committed TMA stores but the ``pending`` latest have read
    their shared memory (which may then be written again, or released by the block's exit)."""

    pending: int = 0


@dataclass(frozen=True, eq=False)
class MbarInit(TStmt):
    """``mbarrier.init``: ``bar[off]`` expects ``count`` arrivals a phase, starting in phase 0."""

    bar: Mem
    off: Expr
    count: int


@dataclass(frozen=True, eq=False)
class FenceMbarInit(TStmt):
    """``fence.mbarrier_init``: initialised mbarriers become visible to the async proxy (TMA completions)."""


@dataclass(frozen=True, eq=False)
class MbarArriveTx(TStmt):
    """``mbarrier.arrive.expect_tx``: this thread arrives on ``bar[off]`` and adds ``tx`` bytes to its phase; with
    ``cta``, on the barrier at that place in the block of that rank in the cluster (no transaction bytes)."""

    bar: Mem
    off: Expr
    tx: int
    cta: Expr | None = None


@dataclass(frozen=True, eq=False)
class CpAsyncMbarArrive(TStmt):
    """``cp.async.mbarrier.arrive.noinc``: this thread arrives on ``bar[off]`` once all its earlier cp.async copies
    have completed (an arrival the barrier's count includes: no increment of the phase's pending count)."""

    bar: Mem
    off: Expr


@dataclass(frozen=True, eq=False)
class NamedBarrier(TStmt):
    """``bar.sync id, threads`` (with ``arrive``: ``bar.arrive``, which does not wait): hardware barrier ``id``
    completes when ``threads`` threads reached it (warp-specialized consumer warpgroups taking turns)."""

    id: Expr
    threads: int
    arrive: bool = False


@dataclass(frozen=True, eq=False)
class ClusterBarrier(TStmt):
    """``barrier.cluster.arrive`` + ``wait``: every thread of every block of the cluster meets here (release /
    acquire at cluster scope: mbarrier inits before it are visible to the peers after it)."""


@dataclass(frozen=True, eq=False)
class MbarWait(TStmt):
    """``mbarrier.try_wait.parity`` in a loop: until the phase of parity ``parity`` of ``bar[off]`` completes."""

    bar: Mem
    off: Expr
    parity: Expr


@dataclass(frozen=True, eq=False)
class FlagSignal(TStmt):
    """One thread publishes its block's global writes before the barrier ahead of it (a fence at GPU scope) and then
    sets the flag ``mem[off]`` to 1 (stream-K: a block's partial sums are saved). The flag must be clear."""

    mem: Mem
    off: Expr


@dataclass(frozen=True, eq=False)
class FlagWait(TStmt):
    """One thread waits until the flag ``mem[off]`` is 1 (acquiring what was published with it) and clears it for
    the next launch; the barrier after it orders its block's reads of the published data."""

    mem: Mem
    off: Expr


# ------------------------------------------------------------------------------------------------------ kernel


@dataclass(frozen=True, eq=False)
class ThreadKernel:
    """A lowered kernel.

    ``params`` are the global mems and scalar variables in the Tile IR's parameter order; ``dyn_vars`` the
    symbolic sizes, passed after them. ``grid`` is in terms of ``dyn_vars``. ``block_idx`` are the hardware
    block indices (blockIdx.x, .y, .z) and ``tx`` the thread index (``warp_size`` lanes to a warp or wavefront,
    which shuffles and warp-wide instructions work over); the body starts by declaring the kernel's
    own block variables from them (after rasterization, with ``T.use_swizzle``). ``shared`` lists shared mems
    with their byte offsets in the arena of ``smem_bytes``.
    """

    name: str
    params: tuple[Mem | Var, ...]
    dyn_vars: tuple[Var, ...]
    grid: tuple[Expr, ...]
    block_idx: tuple[Var, ...]
    threads: int
    tx: Var
    shared: tuple[tuple[Mem, int], ...]
    regs: tuple[Mem, ...]
    body: TStmt
    smem_bytes: int
    notes: tuple[str, ...] = ()
    align: tuple[tuple[int, int], ...] = ()  # (parameter index, bytes): alignment the tensor's data needs
    warp_size: int = 32
    tensor_maps: tuple[TensorMap, ...] = ()  # TMA descriptors, passed after the sizes
    min_blocks: int = 0  # blocks per SM the register allocation must allow (launch bounds); 0: unspecified
    cluster: tuple[int, int, int] = (1, 1, 1)  # blocks per thread-block cluster along x, y, z
    # global mems the module owns (zero at load; stream-K's partial sums and flags), kept from launch to launch
    statics: tuple[Mem, ...] = ()
    # launched as a programmatic dependent of the stream's previous kernel (PDL, sm_90): the body waits for that
    # kernel to complete before its first statement and lets the next kernel start launching right away
    dependent_launch: bool = False

    __hash__ = object.__hash__

    def __str__(self) -> str:
        from tilec.lower.printer import print_kernel

        return print_kernel(self)


def arena(sizes: list[int], overlays: dict[int, list[int]] | None = None) -> tuple[list[int], int]:
    """(byte offset of each mem, total bytes) in the shared arena: mems of 1 KB or more first, in order, each at
    1024-byte alignment (what the swizzles and TMA assume), then the smaller ones (mbarriers, reduction scratch)
    at 16-byte alignment. ``overlays`` maps a mem to mems whose memory it may take (dead by its first use): it goes
    at the first of their offsets where it overlaps no other mem, else after everything."""
    overlays = overlays or {}
    offsets = [0] * len(sizes)
    off = 0
    for i in sorted((i for i in range(len(sizes)) if i not in overlays), key=lambda i: sizes[i] < 1024):
        align = 1024 if sizes[i] >= 1024 else 16
        off = -(-off // align) * align
        offsets[i] = off
        off += sizes[i]
    placed = [i for i in range(len(sizes)) if i not in overlays]
    for i, under in overlays.items():
        others = [j for j in placed if j not in under]
        start = next((offsets[u] for u in sorted(under, key=lambda u: offsets[u])
                      if all(offsets[u] + sizes[i] <= offsets[j] or offsets[j] + sizes[j] <= offsets[u]
                             for j in others)), None)
        if start is None:
            start = -(-off // 1024) * 1024
        offsets[i] = start
        off = max(off, start + sizes[i])
        placed.append(i)
    return offsets, off


def overlay_indices(buffers: list[Any], overlays: tuple) -> dict[int, list[int]]:
    """``KernelLaunch.overlays`` as :func:`arena` takes them: indices into ``buffers`` (the arena's order)."""
    index = {b: i for i, b in enumerate(buffers) if b is not None}
    return {index[b]: [index[u] for u in under if u in index] for b, under in overlays if b in index}


def overlapping(shared: tuple[tuple[Mem, int], ...]) -> dict[Mem, list[tuple[Mem, int]]]:
    """For each shared mem whose bytes overlap others' (an overlay and what it is placed over): each such other mem
    with this mem's byte offset minus the other's."""
    spans = [(m, off, off + int(m.size) * m.dtype.bits // 8) for m, off in shared]
    out: dict[Mem, list[tuple[Mem, int]]] = {}
    for m, a, b in spans:
        others = [(x, a - c) for x, c, d in spans if x is not m and c < b and a < d]
        if others:
            out[m] = others
    return out


def seq(stmts: list[TStmt]) -> TStmt:
    flat: list[TStmt] = []
    for s in stmts:
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def ref(mem: Mem, offset: Any, lanes: int = 1) -> MemRef:
    from tilec.ir.expr import as_expr

    return MemRef(mem, as_expr(offset), lanes)


def _register() -> None:
    from tilec.ir.visit import register_leaf_type, register_node_type

    register_node_type(TStmt)
    register_node_type(WgmmaOperand)
    register_leaf_type(Mem)
    register_leaf_type(TensorMap)


_register()
