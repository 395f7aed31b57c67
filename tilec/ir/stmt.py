"""Statements of the Tile IR: control flow, element stores, the kernel launch, and the tile ops.

Every node is a frozen dataclass with identity equality and an optional ``loc`` (the user's source line).
Tile ops (:class:`TileOp` subclasses) say which regions they read and write; the FTG is built from that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tilec.errors import SourceLoc
from tilec.ir.buffer import Buffer, Dim, Region
from tilec.ir.expr import Expr, Load, Var

LOOP_KINDS = ("serial", "unroll", "pipelined", "vectorized")
# loop annotation keys that loop constructors take as keywords or passes put on loops: not a user's annotations={...}
LOOP_ANNOTATIONS = ("num_stages", "order", "stage", "unroll_factor", "explicit", "lets", "tiles", "rotated")
GEMM_POLICIES = ("Square", "FullRow", "FullCol")
REDUCE_KINDS = ("sum", "max", "min", "abssum", "absmax")
EVICTION_POLICIES = ("evict_normal", "evict_first", "evict_last")  # T.copy's (TileLang's) eviction_policy values


@dataclass(frozen=True, eq=False)
class Stmt:
    loc: SourceLoc | None = field(default=None, kw_only=True, repr=False)

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False)
class SeqStmt(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False)
class For(Stmt):
    """``for var in range(extent)`` (loops are normalized to start 0, step 1 by the frontend).

    ``kind`` is one of :data:`LOOP_KINDS`. ``annotations`` holds ``num_stages``, ``order``, ``stage`` for
    pipelined loops and ``unroll_factor`` for unrolled ones.
    """

    var: Var
    extent: Expr
    kind: str
    body: Stmt
    annotations: tuple[tuple[str, Any], ...] = ()

    def ann(self, key: str, default: Any = None) -> Any:
        return dict(self.annotations).get(key, default)


@dataclass(frozen=True, eq=False)
class IfThenElse(Stmt):
    cond: Expr
    then_body: Stmt
    else_body: Stmt | None = None


@dataclass(frozen=True, eq=False)
class WarpRoles(IfThenElse):
    """Warp specialization (made by software pipelining): ``then_body`` runs on ``producer_threads`` extra threads
    (one warpgroup after the block's own threads), ``else_body`` on the block's threads, at the same time; they
    meet only through mbarriers. ``cond`` is ``True`` (the split is by thread, not by a value): tile-level
    interpreters run the producer first, then the consumer. With ``copies`` > 1 the block's threads are launched that
    many times over, copy ``c`` running ``else_body`` with ``copy`` = c (a persistent kernel's tiles dealt out
    among them: pass config ``consumers``)."""

    producer_threads: int = 128
    copies: int = 1
    copy: Var | None = None


@dataclass(frozen=True, eq=False)
class Store(Stmt):
    """``buffer[indices] = value``."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, eq=False)
class AtomicRMW(Stmt):
    """``T.atomic_add(buffer[indices], value)`` on one element (``op`` in add, max, min)."""

    op: str
    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, eq=False)
class KernelLaunch(Stmt):
    """``with T.Kernel(*grid, threads=...) as block_vars``: the body runs once per block of the grid.

    ``allocs`` are the shared/fragment/local/var buffers declared anywhere in the body (hoisted to the kernel).
    ``layout_map`` holds ``T.annotate_layout`` entries (``layout_locs``: where each was made, for errors);
    ``swizzle`` is ``(panel_size, order)`` of ``T.use_swizzle`` or None. ``overlays`` pairs a shared buffer with
    the shared buffers whose memory it may take: none of those is used again once it is (the compiler's staging
    tile of an epilogue over the stages of the loop before it). ``cluster`` is ``(dim, n)``: the blocks run in
    thread-block clusters of ``n`` consecutive blocks along grid dimension ``dim`` (made by software pipelining).
    """

    grid: tuple[Expr, ...]
    block_vars: tuple[Var, ...]
    threads: tuple[int, ...]
    body: Stmt
    allocs: tuple[Buffer, ...] = ()
    layout_map: tuple[tuple[Buffer, Any], ...] = ()
    swizzle: tuple[int, str] | None = None
    layout_locs: tuple[SourceLoc | None, ...] = ()
    overlays: tuple[tuple[Buffer, tuple[Buffer, ...]], ...] = ()
    cluster: tuple[int, int] | None = None

    @property
    def num_threads(self) -> int:
        n = 1
        for t in self.threads:
            n *= t
        return n


class TileOp(Stmt):
    """A tile-level operation: a node of the FTG."""

    kind: str = "op"

    def reads(self) -> tuple[Region, ...]:
        return ()

    def writes(self) -> tuple[Region, ...]:
        return ()


@dataclass(frozen=True, eq=False)
class Copy(TileOp):
    """``T.copy(src, dst)``: dst = src (with a cast when dtypes differ).

    Regions of global tensors are clipped to the tensor: elements outside are read as zero and not written.
    ``disable_tma``: no pass turns the copy into a TMA copy or store (:class:`TmaCopy`, :class:`TmaStore`); the
    threads move it. ``eviction_policy`` (one of :data:`EVICTION_POLICIES`, or None): the L2 eviction priority of
    the copy's global accesses, a hint of the CUDA backend. ``coalesced_width`` (None: the compiler's choice): the
    run of consecutive innermost elements each thread moves where the threads share the copy out in chunks.
    """

    src: Region
    dst: Region
    disable_tma: bool = field(default=False, kw_only=True)
    eviction_policy: str | None = field(default=None, kw_only=True)
    coalesced_width: int | None = field(default=None, kw_only=True)
    kind = "copy"

    def options(self) -> dict[str, Any]:
        """The user's options of the copy, for a pass that makes another copy of them (an :class:`AsyncCopy`, a
        :class:`TmaCopy`, the global side of a staged store)."""
        return {"coalesced_width": self.coalesced_width, "disable_tma": self.disable_tma,
                "eviction_policy": self.eviction_policy}

    def reads(self) -> tuple[Region, ...]:
        return (self.src,)

    def writes(self) -> tuple[Region, ...]:
        return (self.dst,)


@dataclass(frozen=True, eq=False)
class Gemm(TileOp):
    """``T.gemm(A, B, C)``: C += op(A) @ op(B) (C = ... with ``clear_accum``). ``allow_tf32``: float32 operands may
    be read as TF32 by tensor cores (``mma.sync`` m16n8k8 on NVIDIA sm_80+, ``wgmma`` m64nNk8 on sm_90a),
    accumulating in float32.

    ``in_flight`` is set by software pipelining, never by the user: the number of the op's asynchronous
    tensor-core groups (wgmma) that may still run when it ends, for a gemm whose accumulator nothing else in the
    loop touches and whose operands got one more version for it (the next use of C waits for them)."""

    A: Region
    B: Region
    C: Region
    transpose_A: bool = False
    transpose_B: bool = False
    policy: str = "Square"
    clear_accum: bool = False
    k_pack: int = 1
    in_flight: int = 0
    allow_tf32: bool = False
    kind = "gemm"

    def reads(self) -> tuple[Region, ...]:
        return (self.A, self.B) if self.clear_accum else (self.A, self.B, self.C)

    def writes(self) -> tuple[Region, ...]:
        return (self.C,)

    @property
    def mnk(self) -> tuple[Dim, Dim, Dim]:
        a = self.A.squeezed_extents()
        b = self.B.squeezed_extents()
        m, k = (a[1], a[0]) if self.transpose_A else (a[0], a[1])
        n = b[0] if self.transpose_B else b[1]
        return m, n, k


@dataclass(frozen=True, eq=False)
class Reduce(TileOp):
    """``T.reduce_<kind>(src, dst, dim, clear)``: dst = reduce(src, dim) (combined with dst unless clear)."""

    red: str
    src: Region
    dst: Region
    dim: int
    clear: bool = True
    kind = "reduce"

    def reads(self) -> tuple[Region, ...]:
        return (self.src,) if self.clear else (self.src, self.dst)

    def writes(self) -> tuple[Region, ...]:
        return (self.dst,)


@dataclass(frozen=True, eq=False)
class CumSum(TileOp):
    """``T.cumsum(src, dst, dim, reverse)``: inclusive prefix sum along ``dim``."""

    src: Region
    dst: Region
    dim: int = 0
    reverse: bool = False
    kind = "cumsum"

    def reads(self) -> tuple[Region, ...]:
        return (self.src,)

    def writes(self) -> tuple[Region, ...]:
        return (self.dst,)


@dataclass(frozen=True, eq=False)
class Fill(TileOp):
    """``T.fill(dst, value)`` / ``T.clear(dst)``."""

    dst: Region
    value: Expr
    kind = "fill"

    def writes(self) -> tuple[Region, ...]:
        return (self.dst,)


@dataclass(frozen=True, eq=False)
class AtomicAdd(TileOp):
    """``T.atomic_add(dst_region, src_region)``: dst += src elementwise, atomically per element."""

    dst: Region
    src: Region
    kind = "atomic_add"

    def reads(self) -> tuple[Region, ...]:
        return (self.src, self.dst)

    def writes(self) -> tuple[Region, ...]:
        return (self.dst,)


@dataclass(frozen=True, eq=False)
class Parallel(TileOp):
    """``for i, j in T.Parallel(M, N): body``: every iteration independent; element accesses to global
    tensors are predicated on the tensor bounds (out-of-bounds loads read zero, stores are dropped).
    ``coalesced_width`` (0: the compiler's choice) is the run of consecutive innermost elements a thread takes where
    layout inference spreads the loop freely."""

    vars: tuple[Var, ...]
    extents: tuple[Dim, ...]
    body: Stmt
    coalesced_width: int = 0
    kind = "parallel"

    def reads(self) -> tuple[Region, ...]:
        from tilec.ir.visit import accessed_buffers

        return tuple(b.full_region() for b in accessed_buffers(self.body, loads=True, stores=False))

    def writes(self) -> tuple[Region, ...]:
        from tilec.ir.visit import accessed_buffers

        return tuple(b.full_region() for b in accessed_buffers(self.body, loads=False, stores=True))


@dataclass(frozen=True, eq=False)
class Print(TileOp):
    """``T.print(value, msg)``: prints a buffer (once per block) or a scalar."""

    value: Region | Expr
    msg: str = ""
    kind = "print"

    def reads(self) -> tuple[Region, ...]:
        if isinstance(self.value, Region):
            return (self.value,)
        from tilec.ir.visit import loads_in

        return tuple(ld.buffer.full_region() for ld in loads_in(self.value))


def region_of_load(ld: Load) -> Region:
    return Region(ld.buffer, ld.indices, tuple(1 for _ in ld.indices))


@dataclass(frozen=True, eq=False)
class AsyncCopy(Copy):
    """A global→shared copy issued asynchronously (cp.async); made by software pipelining. Its data may be
    read only after a :class:`AsyncWait` that covers its commit group, and a barrier. With ``barrier`` (a copy TMA
    cannot do in a TMA pipeline's stage) it completes on that mbarrier instead: each thread, after issuing its
    copies, arrives there once they complete (``cp.async.mbarrier.arrive.noinc``; the barrier's count includes the
    block's threads); its data may be read after a :class:`BarrierWait` on that barrier's phase, and a barrier."""

    barrier: Region | None = field(default=None, kw_only=True)
    kind = "async_copy"


@dataclass(frozen=True, eq=False)
class AsyncCommit(TileOp):
    """Close the group of asynchronous copies issued since the last commit."""

    kind = "async_commit"


@dataclass(frozen=True, eq=False)
class AsyncWait(TileOp):
    """Wait until at most ``n`` commit groups are still in flight."""

    n: int = 0
    kind = "async_wait"


@dataclass(frozen=True, eq=False)
class TmaCopy(Copy):
    """A global→shared tile copy by the tensor-memory accelerator (sm_90a; made by software pipelining): issued by
    one thread, it completes on the mbarrier ``barrier`` (one element of a barrier buffer); elements outside the
    tensor arrive as zero. Its data may be read after a :class:`BarrierWait` on that barrier's phase. With
    ``multicast`` the tile is the same for every block of a cluster (``KernelLaunch.cluster``): each block issues
    its share of the boxes, which the copy engine writes into all of the cluster's blocks."""

    barrier: Region
    multicast: bool = False
    kind = "tma_copy"


@dataclass(frozen=True, eq=False)
class TmaStore(Copy):
    """A shared→global tile copy by the tensor-memory accelerator (sm_90a; made by the epilogue pass): after the
    threads that wrote the shared tile fence it to the async proxy and synchronize, one thread issues it; elements
    outside the tensor are not written. With ``wait`` that thread then waits until the copy has read the tile;
    without, a later :class:`TmaStoreWait` does, before the tile is written again."""

    wait: bool = True
    by: int | None = None  # the warpgroup whose first thread issues it (None: the block's issuing thread)
    kind = "tma_store"


@dataclass(frozen=True, eq=False)
class TmaStoreWait(TileOp):
    """The thread that issued TMA stores from ``tile`` waits until they have read it (``cp.async.bulk.wait_group.read
    n``: all but its ``pending`` latest stores, which read other tiles); the block's barrier before the tile's next
    writes orders the others after it."""

    tile: Region
    by: int | None = None  # as TmaStore.by
    pending: int = 0
    kind = "tma_store_wait"

    def reads(self) -> tuple[Region, ...]:
        return (self.tile,)


@dataclass(frozen=True, eq=False)
class StageHandoff(TileOp):
    """The consumer warpgroups of a loop whose warpgroups take turns hand a staged epilogue ``tile`` to each other
    without a barrier of them all, which would line them up again at every tile (made by the epilogue pass): the
    last of the ``groups`` issues the tile's TMA stores (:attr:`TmaStore.by`). ``step`` "freed": the last, once its
    own wait saw the previous store read the tile, tells the others (early in the tile, where that wait costs
    nothing); "wait_free": the others wait for that before writing their rows; "written": the others tell the last
    their rows are written, which it waits for before the store."""

    tile: Region
    step: str
    groups: int
    kind = "stage_handoff"

    def reads(self) -> tuple[Region, ...]:
        return (self.tile,)


@dataclass(frozen=True, eq=False)
class BarrierInit(TileOp):
    """Initialise every mbarrier of ``barriers`` (a shared uint64 buffer) to expect ``count`` arrivals a phase."""

    barriers: Region
    count: int = 1
    kind = "barrier_init"

    def writes(self) -> tuple[Region, ...]:
        return (self.barriers,)


@dataclass(frozen=True, eq=False)
class BarrierArrive(TileOp):
    """One thread arrives on the mbarrier ``barrier`` and adds ``tx_bytes`` to the bytes its phase waits for (the
    TMA copies completing on it); with ``per_warp``, the first thread of every warp arrives, once its warp's
    threads are synchronized (consumers releasing a pipeline stage: each warp's reads of it are done)."""

    barrier: Region
    tx_bytes: int
    per_warp: bool = False
    every_block: bool = False  # per warp, to the barrier at the same place in every block of the cluster
    after: tuple[Buffer, ...] = ()  # a stage's tiles: the wgmma groups still reading them complete first
    kind = "barrier_arrive"


@dataclass(frozen=True, eq=False)
class WarpgroupTurn(TileOp):
    """The consumer warpgroups of a warp-specialized loop take turns (made by software pipelining, FA3's ping-pong):
    ``give=False`` waits for this warpgroup's turn, ``give=True`` hands it to the next of the ``groups`` (the last to
    the first). With ``edge`` (True, or a condition: a persistent block's first or last tile), the first warpgroup's
    first wait (``give=False``) or the last warpgroup's last handing on (``give=True``) is left out, so waits and
    hand-ons pair up. With ``copy`` (the index of a copy of the consumer threads, :class:`WarpRoles`) the copies take
    turns at their main loops instead, and ``edge`` leaves out the wait or the handing on of whichever copy it holds
    for."""

    give: bool
    groups: int
    edge: Any = False
    copy: Any = None
    kind = "warpgroup_turn"


@dataclass(frozen=True, eq=False)
class ClusterSync(TileOp):
    """Every thread of every block of the launch's cluster meets here (``barrier.cluster``): mbarriers initialised
    before it may be used by the other blocks, and no block leaves while another may still write into it."""

    kind = "cluster_sync"


@dataclass(frozen=True, eq=False)
class BarrierWait(TileOp):
    """Every thread waits until the phase of parity ``parity`` of the mbarrier ``barrier`` has completed."""

    barrier: Region
    parity: Expr
    kind = "barrier_wait"

    def reads(self) -> tuple[Region, ...]:
        return (self.barrier,)


@dataclass(frozen=True, eq=False)
class PartialSave(TileOp):
    """Stream-K (made by software pipelining): the block's threads save their part of the accumulator fragment ``C``
    (partial sums over some of a tile's loop iterations) to slot ``slot`` of ``workspace``, a float32 buffer in global
    memory that the kernel's module owns (one slot per persistent block), and once all of them have written, one
    thread sets ``flags[slot]``."""

    C: Region
    workspace: Buffer
    flags: Buffer
    slot: Expr
    kind = "partial_save"

    def reads(self) -> tuple[Region, ...]:
        return (self.C,)


@dataclass(frozen=True, eq=False)
class PartialAdd(TileOp):
    """Stream-K: one thread waits until ``flags[q]`` is set for each slot ``q`` in ``[first, last)`` and clears it; then
    the block's threads add those slots of ``workspace`` (:class:`PartialSave`, by the same threads' layout) into
    ``C``."""

    C: Region
    workspace: Buffer
    flags: Buffer
    first: Expr
    last: Expr
    kind = "partial_add"

    def reads(self) -> tuple[Region, ...]:
        return (self.C,)

    def writes(self) -> tuple[Region, ...]:
        return (self.C,)
