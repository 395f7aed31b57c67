"""Emit C-like GPU source (CUDA or HIP) from the thread IR (pipeline stage 8).

One emitter; the two languages differ by a :class:`CTable` (type names, intrinsic spellings, barrier, the
device header, the shared-memory and alignment declarations), not by control flow. Each tile op's code starts with
a comment naming its kernel line. Intrinsic nodes owned by one instruction family register their printing in
:data:`EMIT_RULES` (``@emit_rule(Node)``), next to their lowering.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tilec import dtypes as dt
from tilec.backends.cexpr import CExprEmitter, ident
from tilec.dtypes import DType
from tilec.errors import TilecError
from tilec.ir.expr import Const, Expr, binop
from tilec.lower.tir import (
    AtomicAddOp,
    Comment,
    CpAsync,
    CpAsyncCommit,
    CpAsyncWait,
    Decl,
    Group,
    If,
    LdMatrix,
    Loop,
    Mem,
    MemRef,
    Mma,
    PrintOp,
    Seq,
    Sync,
    SyncWarp,
    ThreadKernel,
    TStmt,
    VecPack,
    Write,
)  # fmt: skip


@dataclass(frozen=True)
class CTable:
    """What differs between CUDA and HIP source."""

    name: str
    types: dict[str, str]
    vector_types: dict[int, str]  # bytes -> the type moving that many bytes
    thread_idx: str
    block_idx: tuple[str, str, str]
    sync: str
    intrinsics: dict[str, str]  # TCall name -> format with {v} (and {a}, {w}: shuffles)
    header: str
    kernel_prefix: str
    math32: dict[str, str] = field(default_factory=dict)  # intrinsic -> float32 function
    math64: dict[str, str] = field(default_factory=dict)
    launch_bounds: str = "__launch_bounds__({threads})"
    named_sync: str = ""  # named barrier {id} of the first {n} threads (warp-specialized kernels)
    copy_sync: str = ""  # named barrier {id} of the {n} threads of a copy of the consumers (warp-specialized kernels)
    sync_warp: str = "__syncwarp();"  # the threads of a warp synchronize
    cluster_dims: str = ""  # the kernel attribute of thread-block clusters of {x} x {y} x {z} blocks
    smem_decl: str = "extern __shared__ __align__(1024) unsigned char smem[];"
    align: str = "__align__({n})"  # the alignment attribute of a declaration
    warp_size: int = 32  # a shuffle's width when the IR gives none
    vector_of: str = ""  # when set, vector moves use this type of {t} x {n} elements instead of vector_types
    atomic_add: str = "atomicAdd"
    constant: str = "__constant__"  # the qualifier of a read-only array at file scope (a Table's entries)
    # a statement telling the compiler {cond} holds (the thread index's range); none for HIP, where hipcc then
    # hoisted more and spilled (MLA decode 399 -> 512 VGPRs and 68 bytes of scratch, gfx90a)
    assume: str = ""
    # TCall name -> (device function, its definition in namespace tl), printed once where a kernel uses it
    intrinsic_helpers: dict[str, tuple[str, str]] = field(default_factory=dict)
    # a programmatic dependent launch's (wait for the previous kernel, let the next one launch); none on HIP
    grid_dependency: tuple[str, str] = ()
    # a float (float or double) to int type {t}, when C's cast of a value out of range (undefined) differs: {v}
    float_to_int: str = ""


EMIT_RULES: dict[type, Callable[[CEmitter, Any, int], None]] = {}


def emit_rule(cls: type) -> Callable:
    """Register how a thread-IR statement class is printed: ``fn(emitter, stmt, depth)`` (``emitter.emit``)."""

    def deco(fn: Callable) -> Callable:
        EMIT_RULES[cls] = fn
        return fn

    return deco


def asm_rule(cls: type, ptx: str) -> None:
    """Register a thread-IR statement that prints as one fixed ``asm volatile`` statement (``ptx``: its C string
    literal's text, escapes included) with a memory clobber."""
    EMIT_RULES[cls] = lambda e, s, d: e.emit(d, f'asm volatile("{ptx}" ::: "memory");')








def kernel_name(k: ThreadKernel) -> str:
    """The kernel's symbol in the emitted source (a suffix keeps it clear of ``main`` and C keywords)."""
    return f"{ident(k.name)}_kernel"


_PTX_FP8 = {"float8_e4m3": "e4m3", "float8_e5m2": "e5m2"}
# mma.sync m16n8k8 on TF32 operands (float32 registers that cvt.rna.tf32.f32 rounded), fp32 accumulators; A: 4
# floats, B: 2, C: 4 per thread (PTX order)
MMA_TF32 = (
    "__device__ __forceinline__ void mma_m16n8k8_tf32(float* c, const float* a, const float* b) {\n"
    "  const unsigned* A = reinterpret_cast<const unsigned*>(a);\n"
    "  const unsigned* B = reinterpret_cast<const unsigned*>(b);\n"
    '  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "\n'
    '               "{%0,%1,%2,%3};\\n"\n'
    '               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])\n'
    '               : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]));\n'
    "}\n")




class CEmitter(CExprEmitter):
    """Prints one :class:`ThreadKernel` with a :class:`CTable` (its expressions: :class:`~.cexpr.CExprEmitter`)."""

    def __init__(self, table: CTable, nonneg: set[int] | None = None) -> None:
        super().__init__(table, nonneg)
        self.lines: list[str] = []

    # ---------------------------------------------------------------------------------------------- kernel

    def kernel(self, k: ThreadKernel) -> str:
        self.tx = k.tx
        for v in (k.tx, *k.block_idx, *k.dyn_vars):
            self.nonneg.add(id(v))
        params = []
        for p in k.params:
            if isinstance(p, Mem):
                params.append(f"{self.ctype(p.dtype, f'parameter {p.name!r}')}* __restrict__ {self.names(p)}")
            else:
                params.append(f"{self.ctype(p.dtype, f'parameter {p.name!r}')} {self.names(p)}")
        params += [f"int {self.names(v)}" for v in k.dyn_vars]
        if k.tensor_maps:
            from tilec.lower.tma import tma_desc_struct

            desc = tma_desc_struct(self)
            params += [f"const __grid_constant__ {desc} {self.names(t)}" for t in k.tensor_maps]
        out = [self.t.header, ""]
        for m in k.statics:  # the module's own global memory (zero at load)
            out.append(f"__device__ {self.t.align.format(n=16)} {self.ctype(m.dtype)} {self.names(m)}[{m.size}];")
        bounds = self.t.launch_bounds.format(threads=k.threads)
        if k.min_blocks:
            bounds = bounds[:-1] + f", {k.min_blocks})"
        attrs = f"{bounds} void"
        if k.cluster != (1, 1, 1):
            if not self.t.cluster_dims:
                raise TilecError(f"the {self.t.name} backend has no thread-block clusters")
            attrs = f"void {self.t.cluster_dims.format(x=k.cluster[0], y=k.cluster[1], z=k.cluster[2])} {bounds}"
        out.append(f'extern "C" {self.t.kernel_prefix} {attrs} {kernel_name(k)}(' + ", ".join(params) + ") {")
        if k.smem_bytes:
            out.append(f"  {self.t.smem_decl}")
        for m, off in k.shared:
            ct = self.ctype(m.dtype, f"shared buffer {m.name!r}")
            out.append(f"  {ct}* {self.names(m)} = reinterpret_cast<{ct}*>(smem + {off});")
        for m in k.regs:
            out.append(f"  {self.t.align.format(n=16)} {self.ctype(m.dtype)} {self.names(m)}[{m.size}];")
        out.append(f"  const int {self.names(k.tx)} = {self.t.thread_idx};")
        if self.t.assume:  # a signed index the compiler knows is in [0, threads) divides and wraps as an unsigned one
            tx = self.names(k.tx)
            out.append("  " + self.t.assume.format(cond=f"{tx} >= 0 && {tx} < {k.threads}"))
        for v, b in zip(k.block_idx, self.t.block_idx):
            out.append(f"  const int {self.names(v)} = {b};")
        if k.dependent_launch:
            if not self.t.grid_dependency:
                raise TilecError(f"the {self.t.name} backend has no programmatic dependent launches")
            out += [f"  {line}" for line in self.t.grid_dependency]
        self.lines = out
        self.stmt(k.body, 1)
        self.lines.append("}")
        if self.helpers:  # device functions the body's instructions asked for (one per instruction shape)
            self.lines[1:1] = list(self.helpers.values())
        return "\n".join(self.lines) + "\n"

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    # ------------------------------------------------------------------------------------------- statements

    def stmt(self, s: TStmt, d: int) -> None:  # noqa: C901 - one branch per statement kind
        if isinstance(s, Seq):
            for c in s.stmts:
                self.stmt(c, d)
        elif isinstance(s, Comment):
            self.emit(d, f"// {s.text}")
        elif isinstance(s, Group):
            self.emit(d, f"// {s.label}")
            self.stmt(s.body, d)
        elif isinstance(s, Decl):
            self.emit(d, f"const {self.ctype(s.var.dtype)} {self.names(s.var)} = {self.e(s.value)};")
        elif isinstance(s, Loop):
            self.nonneg.add(id(s.var))
            v = self.names(s.var)
            if s.unroll:
                self.emit(d, f"#pragma unroll {s.unroll_factor}" if s.unroll_factor else "#pragma unroll")
            self.emit(d, f"for (int {v} = 0; {v} < {self.e(s.extent)}; ++{v}) {{")
            self.stmt(s.body, d + 1)
            self.emit(d, "}")
        elif isinstance(s, If):
            self.emit(d, f"if ({self.e(s.cond)}) {{")
            self.stmt(s.then_body, d + 1)
            if s.else_body is not None:
                self.emit(d, "} else {")
                self.stmt(s.else_body, d + 1)
            self.emit(d, "}")
        elif isinstance(s, Write):
            self.write(s, d)
        elif type(s) is Sync and s.threads is not None:
            form = self.t.named_sync if s.copy is None else self.t.copy_sync
            if not form:
                raise TilecError(f"the {self.t.name} backend has no barriers of part of a block")
            from tilec.lower.tma import CONSUMER_BARRIER

            ident = CONSUMER_BARRIER if s.copy is None else self.e(binop("+", s.copy, CONSUMER_BARRIER))
            self.emit(d, form.format(n=s.threads, id=ident, copy=self.e(s.copy) if s.copy is not None else ""))
        elif type(s) is Sync:
            self.emit(d, self.t.sync)
        elif isinstance(s, SyncWarp):
            self.emit(d, self.t.sync_warp)
        else:
            self.intrinsic(s, d)

    def write(self, s: Write, d: int) -> None:
        if s.hint is not None:
            self.hinted_write(s, d)
            return
        if s.lanes == 1:
            self.emit(d, f"{self.names(s.mem)}[{self.e(s.offset)}] = {self.e(s.value)};")
            return
        vt = self.vector_type(s)
        if isinstance(s.value, Const):  # a vector of zeros (T{} is no C++ where T is words: unsigned short)
            zero = f"static_cast<{vt}>(0)" if " " in vt and "<" not in vt else f"{vt}{{}}"
            self.emit(d, f"*reinterpret_cast<{vt}*>(&{self.names(s.mem)}[{self.e(s.offset)}]) = {zero};")
            return
        if isinstance(s.value, VecPack):  # values computed in registers, stored by one access (or words of them)
            vec = f"tl::Vec<{self.ctype(s.value.dtype)}, {len(s.value.values)}>"
            vals = ", ".join(self.e(v) for v in s.value.values)
            self.emit(d, f"*reinterpret_cast<{vec}*>(&{self.names(s.mem)}[{self.e(s.offset)}]) = {vec}{{{{{vals}}}}};")
            return
        assert isinstance(s.value, MemRef) and s.value.lanes == s.lanes
        src = s.value
        self.emit(d, f"*reinterpret_cast<{vt}*>(&{self.names(s.mem)}[{self.e(s.offset)}]) = "
                     f"{self.vector_load(vt, src)};")

    def vector_type(self, s: Write) -> str:
        """The C type that moves the ``lanes`` elements of a vector write in one access."""
        if self.t.vector_of:
            return self.t.vector_of.format(t=self.ctype(s.mem.dtype), n=s.lanes)
        return self.t.vector_types[s.lanes * s.mem.dtype.bits // 8]

    def vector_load(self, vt: str, src: MemRef) -> str:
        """The value of the vector ``src`` as one ``vt`` (with its cache hint, if any)."""
        addr = f"reinterpret_cast<const {vt}*>(&{self.names(src.mem)}[{self.e(src.offset)}])"
        if src.hint is not None:
            from tilec.backends.cuda import cache_hints

            return cache_hints.load(self, vt, addr, src.hint)
        return f"*{addr}"

    def hinted_write(self, s: Write, d: int) -> None:
        """A store to global memory with an L2 cache hint (:mod:`tilec.backends.cuda.cache_hints`)."""
        from tilec.backends.cuda import cache_hints

        at = f"&{self.names(s.mem)}[{self.e(s.offset)}]"
        if s.lanes == 1:
            ct = self.ctype(s.mem.dtype)
            self.emit(d, cache_hints.store(self, ct, at, self.e(s.value), s.hint))
            return
        vt = self.vector_type(s)
        if isinstance(s.value, Const):
            value = f"static_cast<{vt}>(0)" if " " in vt and "<" not in vt else f"{vt}{{}}"
        elif isinstance(s.value, VecPack):
            vt = f"tl::Vec<{self.ctype(s.value.dtype)}, {len(s.value.values)}>"
            value = f"{vt}{{{{{', '.join(self.e(v) for v in s.value.values)}}}}}"
        else:
            assert isinstance(s.value, MemRef) and s.value.lanes == s.lanes
            value = self.vector_load(vt, s.value)
        self.emit(d, cache_hints.store(self, vt, f"reinterpret_cast<{vt}*>({at})", value, s.hint))

    def intrinsic(self, s: TStmt, d: int) -> None:
        rule = EMIT_RULES.get(type(s))
        if rule is not None:
            rule(self, s, d)
            return
        n = self.names
        if isinstance(s, Mma):
            if s.a.dtype.bits == 8:
                fn = self.mma_fp8_helper(s.a.dtype, s.b.dtype)
            elif s.a.dtype is dt.float32:
                fn = self.helper("mma_m16n8k8_tf32", MMA_TF32)
            else:
                fn = "tl::mma_m16n8k16_bf16" if s.a.dtype is dt.bfloat16 else "tl::mma_m16n8k16_f16"
            self.emit(d, f"{fn}({n(s.c)} + {s.c_off}, {n(s.a)} + {s.a_off}, {n(s.b)} + {s.b_off});")
        elif isinstance(s, LdMatrix):
            fn = f"tl::ldmatrix_x{s.num}{'_trans' if s.trans else ''}"
            self.emit(d, f"{fn}({n(s.dst)} + {s.dst_off}, &{n(s.src)}[{self.e(s.src_off)}]);")
        elif isinstance(s, CpAsync):
            pred = self.e(s.pred) if s.pred is not None else "true"
            self.emit(d, f"tl::cp_async<{s.nbytes}>(&{n(s.dst)}[{self.e(s.dst_off)}], "
                         f"&{n(s.src)}[{self.e(s.src_off)}], {pred});")
        elif isinstance(s, CpAsyncCommit):
            self.emit(d, "tl::cp_async_commit();")
        elif isinstance(s, CpAsyncWait):
            self.emit(d, f"tl::cp_async_wait<{s.n}>();")
        elif isinstance(s, AtomicAddOp):
            if s.mem.dtype is dt.int64:  # no long long overload: the same two's complement add on the unsigned word
                self.emit(d, f"{self.t.atomic_add}(reinterpret_cast<unsigned long long*>(&{n(s.mem)}"
                             f"[{self.e(s.offset)}]), static_cast<unsigned long long>({self.e(s.value)}));")
                return
            self.emit(d, f"{self.t.atomic_add}(&{n(s.mem)}[{self.e(s.offset)}], {self.e(s.value)});")
        elif isinstance(s, PrintOp):
            args = "".join(f", {self._printf_arg(a)}" for a in s.args)
            fmt = s.fmt.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")  # a C string literal
            self.emit(d, f'printf("{fmt}\\n"{args});')
        else:
            raise TypeError(f"cannot emit {type(s).__name__}")

    def mma_fp8_helper(self, a: DType, b: DType) -> str:
        """The device function of ``mma.sync.m16n8k32`` with fp8 operands (sm_89+), generated on first use so
        that kernels for older GPUs never see it."""
        ta, tb = (_PTX_FP8[x.name] for x in (a, b))
        name = f"mma_m16n8k32_{ta}_{tb}"
        if name not in self.helpers:
            self.helpers[name] = (
                f"namespace tl {{\n__device__ __forceinline__ void {name}(float* c, const void* a, const void* b) {{\n"
                "  const unsigned* A = reinterpret_cast<const unsigned*>(a);\n"
                "  const unsigned* B = reinterpret_cast<const unsigned*>(b);\n"
                f'  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.{ta}.{tb}.f32 {{%0,%1,%2,%3}}, '
                '{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\\n"\n'
                '               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])\n'
                '               : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]));\n'
                "}\n}  // namespace tl\n")
        return f"tl::{name}"

    def _printf_arg(self, a: Expr) -> str:
        """A printf argument as ``%g`` / ``%lld`` / ``%llu`` read it (lower_print's conversions)."""
        if a.dtype is dt.float64:
            return f"(double)({self.e(a)})"
        if a.dtype.is_float:  # 16-bit floats convert to double through float
            return f"(double)(float)({self.e(a)})"
        if a.dtype.kind == "uint" and a.dtype.bits == 64:
            return f"(unsigned long long)({self.e(a)})"
        return f"(long long)({self.e(a)})"

