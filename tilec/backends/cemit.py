"""Emit C-like GPU source (CUDA or HIP) from the thread IR (pipeline stage 8).

One emitter; the two languages differ by a :class:`CTable` (type names, intrinsic spellings, barrier, the
device header, the shared-memory and alignment declarations), not by control flow. Each tile op's code starts with
a comment naming its kernel line. Intrinsic nodes owned by one instruction family register their printing in
:data:`EMIT_RULES` (``@emit_rule(Node)``), next to their lowering.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilec import dtypes as dt
from tilec.dtypes import DType
from tilec.errors import TilecError
from tilec.ir.expr import BinOp, Call, Cast, Const, Expr, Select, Table, UnOp, Var, binop
from tilec.ir.printer import Names
from tilec.lower.tir import (
    AtomicAddOp,
    Bits,
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
    TCall,
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


_MATH32 = {
    "exp": "expf", "exp2": "exp2f", "log": "logf", "log2": "log2f", "sqrt": "sqrtf", "rsqrt": "rsqrtf",
    "abs": "fabsf", "tanh": "tanhf", "sin": "sinf", "cos": "cosf", "floor": "floorf", "ceil": "ceilf",
    "round": "roundf", "pow": "powf", "fma": "fmaf", "isnan": "isnan", "isinf": "isinf",
    "sigmoid": "tl::sigmoid",
}  # fmt: skip
_MATH64 = {k: v.rstrip("f") if v.endswith("f") and k not in ("isnan", "isinf") else v for k, v in _MATH32.items()}
_MATH64.update({"rsqrt": "rsqrt", "abs": "fabs", "sigmoid": "tl::sigmoid"})

# |a| of a signed int as the interpreters compute it: the type's minimum is its own magnitude (it wraps), where C's
# abs of it is undefined (a compiler may take abs(x) >= 0 for granted)
_IABS = ("template <class T> __device__ __forceinline__ T iabs(T a) {\n"
         "  return a < T(0) ? static_cast<T>(0ull - static_cast<unsigned long long>(a)) : a;\n}\n")

_C_OPS = {"+": "+", "-": "-", "*": "*", "/": "/", "&": "&", "|": "|", "^": "^", "<<": "<<", ">>": ">>",
          "<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "==", "!=": "!=", "and": "&&", "or": "||"}
# integer ops whose result C's promotion to int can take outside an 8- or 16-bit operand type (the IR's result
# type is the operands'): the interpreters wrap it, so the C wraps it too before anything else reads it
_WIDENING = ("+", "-", "*", "<<")
_PREC = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, "<=": 7, ">": 7, ">=": 7,
         "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}


def _ident(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else "v_" + out


class _CNames(Names):
    """Unique C identifiers (Python names, with C keywords and clashes renamed)."""

    RESERVED = {"int", "float", "double", "char", "short", "long", "half", "bool", "if", "else", "for", "while",
                "do", "return", "const", "static", "void", "signed", "unsigned", "auto", "default", "case",
                "switch", "break", "continue", "goto", "struct", "union", "enum", "register", "volatile", "new",
                "delete", "this", "class", "template", "typename", "namespace", "tl", "smem", "threadIdx",
                "blockIdx", "blockDim", "gridDim", "min", "max", "abs", "printf"}

    def __init__(self) -> None:
        super().__init__()
        self._used |= self.RESERVED

    def __call__(self, node: Any) -> str:
        key = id(node)
        if key not in self._by_id:
            saved = node.name
            base = _ident(saved)
            name, k = base, 0
            while name in self._used:
                k += 1
                name = f"{base}_{k}"
            self._used.add(name)
            self._by_id[key] = name
        return self._by_id[key]


def kernel_name(k: ThreadKernel) -> str:
    """The kernel's symbol in the emitted source (a suffix keeps it clear of ``main`` and C keywords)."""
    return f"{_ident(k.name)}_kernel"


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


def _literal_value(v: float, d: DType) -> float:
    """The value printed for a float constant ``v`` of type ``d`` (``float``, or a 16-bit type's constructor from
    ``float``): ``v``, unless the compiler would round it differently from the interpreters (numpy's one rounding
    to ``d``): ``v`` halfway between two floats (the literal's shortest decimal lies to one side: 1 + 2**-24 parsed
    as 1 + 2**-23, not 1) or a 16-bit value whose rounding through float differs. Then ``v`` rounded to ``d``."""
    if d is dt.float64:
        return v
    if d.bits == 8:  # the constructor takes a float: print the value already rounded (and saturated) from v
        import ml_dtypes

        top = float(ml_dtypes.finfo(d.np).max)
        return float(np.asarray(min(max(v, -top), top)).astype(d.np))
    with np.errstate(over="ignore"):  # beyond the type's range: inf, as interpreted (numpy warned of it)
        f = np.float32(v)
        other = np.nextafter(f, np.float32(np.inf if v > float(f) else -np.inf))
        x = np.asarray(v)
        rounded = float((dt.float32_to_odd(x) if d is dt.bfloat16 else x).astype(d.np))  # as the interpreters round
        tie = float(f) != v and (float(f) + float(other)) / 2 == v
        return rounded if tie or rounded != float(np.asarray(f).astype(d.np)) else v


class CEmitter:
    """Prints one :class:`ThreadKernel` with a :class:`CTable`."""

    def __init__(self, table: CTable, nonneg: set[int] | None = None) -> None:
        self.t = table
        self.names = _CNames()
        self.lines: list[str] = []
        self.nonneg: set[int] = set(nonneg or ())
        self.helpers: dict[str, str] = {}  # name -> device function text, printed after the header

    # ------------------------------------------------------------------------------------------------ types

    def ctype(self, d: DType, of: str = "") -> str:
        name = self.t.types.get(d.name)
        if name is None:
            where = f" (of {of})" if of else ""
            raise TilecError(f"dtype {d}{where} is not supported by the {self.t.name} backend; supported: "
                             + ", ".join(self.t.types))
        return name

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

    def helper(self, name: str, text: str) -> str:
        """The name of device function ``tl::name`` (``text``: its definition), printed once after the header."""
        if name not in self.helpers:
            self.helpers[name] = f"namespace tl {{\n{text}}}  // namespace tl\n"
        return f"tl::{name}"

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

    # ------------------------------------------------------------------------------------------ expressions

    def is_nonneg(self, e: Any) -> bool:
        if getattr(e, "dtype", None) is not None and e.dtype.kind == "uint":  # C's / and % are floor's on them
            return True
        if isinstance(e, Const):
            return e.value >= 0
        if isinstance(e, Var):
            return id(e) in self.nonneg
        if isinstance(e, BinOp) and e.op in ("+", "*") and e.dtype.bits < 32:
            return False  # an 8- or 16-bit sum or product wraps in its type (as interpreted): 100 + 100 is -56
        if isinstance(e, BinOp) and e.op in ("+", "*", "//", "%", "min", "max", "&", ">>"):
            return self.is_nonneg(e.a) and self.is_nonneg(e.b)
        if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
            if e.dtype.bits < e.value.dtype.bits or e.value.dtype.kind == "uint" and e.dtype.bits == e.value.dtype.bits:
                return False  # narrowed, or an unsigned value of the top bit set: it may wrap negative
            return self.is_nonneg(e.value)
        if isinstance(e, Table):
            return min(e.values) >= 0
        return False

    def table(self, x: Table) -> str:
        """The name of a constant-memory array holding ``x``'s entries (declared once, among the helpers)."""
        name = f"tl_table{len(x.values)}_{zlib.crc32(str(x.values).encode()):08x}"
        if name not in self.helpers:
            rows = [", ".join(str(v) for v in x.values[i:i + 24]) for i in range(0, len(x.values), 24)]
            self.helpers[name] = (f"{self.t.constant} {self.ctype(x.dtype)} {name}[{len(x.values)}] = {{\n  "
                                  + ",\n  ".join(rows) + "};")
        return name

    def e(self, x: Any, prec: int = 0) -> str:  # noqa: C901
        if isinstance(x, Const):
            return self.const(x)
        if isinstance(x, Var):
            return self.names(x)
        if isinstance(x, MemRef) and x.hint is not None:
            from tilec.backends.cuda import cache_hints

            return cache_hints.load(self, self.ctype(x.mem.dtype), f"&{self.names(x.mem)}[{self.e(x.offset)}]", x.hint)
        if isinstance(x, MemRef):
            return f"{self.names(x.mem)}[{self.e(x.offset)}]"
        if isinstance(x, BinOp):
            return self.binop(x, prec)
        if isinstance(x, UnOp):
            op = {"-": "-", "~": "~", "not": "!"}[x.op]
            if op == "~" and x.a.dtype.is_bool:
                op = "!"  # C's ~ promotes a bool to int (~true is -2, nonzero); the interpreters' ~ of a bool is not
            if op != "!" and x.dtype.is_int and x.dtype.bits < 32:  # -(-128) and ~(uint8)0 leave the type in C
                return f"static_cast<{self.ctype(x.dtype)}>({op}{self.e(x.a, 11)})"
            if x.dtype.is_float and x.dtype.bits == 8:  # no unary minus on fp8 types: in float
                return f"{self.ctype(x.dtype)}(-static_cast<float>({self.e(x.a)}))"
            return f"({op}{self.e(x.a, 11)})"
        if isinstance(x, Cast):
            return self.cast(x.dtype, x.value)
        if isinstance(x, Select):
            return f"({self.e(x.cond, 1)} ? {self.e(x.a, 1)} : {self.e(x.b, 1)})"
        if isinstance(x, Table):
            return f"{self.table(x)}[{self.e(x.index)}]"
        if isinstance(x, Call):
            return self.call(x)
        if isinstance(x, Bits):
            narrow = self.ctype(x.values[0].dtype)
            vals = ", ".join(self.e(v) for v in x.values)
            return f"tl::bits<{self.ctype(x.dtype)}>(tl::Vec<{narrow}, {len(x.values)}>{{{{{vals}}}}})"
        if isinstance(x, TCall):
            if x.name in self.t.intrinsic_helpers:
                self.helper(*self.t.intrinsic_helpers[x.name])
            fmt = self.t.intrinsics[x.name]
            if len(x.args) == 1:
                return fmt.format(v=self.e(x.args[0]))
            w = self.e(x.args[2]) if len(x.args) > 2 else str(self.t.warp_size)
            text = fmt.format(v=self.e(x.args[0]), a=self.e(x.args[1]), w=w)
            if (x.dtype.is_int or x.dtype.is_bool) and x.dtype.bits < 32:  # shuffled as an int: back to the type
                return f"static_cast<{self.ctype(x.dtype)}>({text})"  # (tl::max(signed char, int) has no match)
            return text
        raise TypeError(f"cannot emit {type(x).__name__}")

    def const(self, c: Const) -> str:
        v = c.value
        if c.dtype.is_bool:
            return "true" if v else "false"
        if c.dtype.is_int:
            v = int(v)
            if c.dtype.kind == "uint":  # unsigned literals (a signed one >= 2**63, or long for >= 2**31, is not; an
                # int 1 beside an unsigned matched no template: tl::atomic_add(unsigned*, int))
                return f"{v}ull" if c.dtype.bits == 64 else (f"{v}u" if c.dtype.bits == 32 else str(v))
            bits = 64 if c.dtype.bits == 64 else 32
            suffix = "LL" if bits == 64 else ""
            if v == -(1 << (bits - 1)):  # -2**63 as a literal is -(2**63), whose 2**63 C takes as unsigned (and
                return f"({v + 1}{suffix} - 1)"  # -2**31's 2**31 as a long): the type's minimum by arithmetic
            return f"{v}{suffix}" if v >= 0 or bits == 64 else f"({v})"
        if math.isinf(v):
            text = "INFINITY" if v > 0 else "(-INFINITY)"
        elif math.isnan(v):
            text = "NAN"
        else:
            text = repr(_literal_value(float(v), c.dtype)) + ("" if c.dtype is dt.float64 else "f")
        if c.dtype is dt.float64 and not math.isfinite(v):  # INFINITY and NAN are floats: tl::max(double, float)
            return f"static_cast<double>({text})"  # matched no template
        if c.dtype in (dt.float32, dt.float64):
            return text
        return f"{self.ctype(c.dtype)}({text})"

    def binop(self, x: BinOp, prec: int) -> str:
        if x.op in ("min", "max"):
            fn = {"min": "tl::min", "max": "tl::max"}[x.op]
            if x.dtype.is_float and x.dtype.bits < 32:  # fminf / fmaxf, NaN skipped (the template's a < b ? b : a
                return f"{self.ctype(x.dtype)}({fn}(static_cast<float>({self.e(x.a)}), " \
                       f"static_cast<float>({self.e(x.b)})))"  # kept a NaN first operand only)
            if not x.dtype.is_float and (x.dtype.bits < 32 or x.dtype.kind == "uint"):  # C types an int literal, and a
                fn += f"<{self.ctype(x.dtype)}>"  # narrow int's sum or quotient, int: the template's type is named
            return f"{fn}({self.e(x.a)}, {self.e(x.b)})"
        if x.op in ("//", "%"):
            if x.a.dtype.is_int:
                if self.is_nonneg(x.a) and self.is_nonneg(x.b):
                    op = "/" if x.op == "//" else "%"
                    text = f"{self.e(x.a, 10)} {op} {self.e(x.b, 11)}"
                    return f"({text})" if prec > 10 else text
                fn = "tl::floordiv" if x.op == "//" else "tl::floormod"
                text = f"{fn}({self.e(x.a)}, {self.e(x.b)})"  # in int: int8 -128 // -1 wraps, as interpreted
                return f"static_cast<{self.ctype(x.dtype)}>({text})" if x.dtype.bits < 32 else text
            fn = "tl::ffloordiv" if x.op == "//" else "tl::ffloormod"  # float and double overloads
            if x.a.dtype.bits < 32:  # computed in float, the result rounded to the operands' type
                return f"{self.ctype(x.dtype)}({fn}(static_cast<float>({self.e(x.a)}), " \
                       f"static_cast<float>({self.e(x.b)})))"
            return f"{fn}({self.e(x.a)}, {self.e(x.b)})"
        if x.op == "/" and x.dtype is dt.float32 and not (isinstance(x.a, Const) and x.a.value == 1):
            # times the correctly rounded reciprocal (within 1.5 ulp of the quotient): the reciprocal of a divisor
            # that an unrolled loop repeats (a row's sum in a softmax, flash attention's epilogue) is computed once
            text = f"{self.e(x.a, 10)} * (1.0f / {self.e(x.b, 11)})"
            return f"({text})" if prec > 10 else text
        if x.op in ("<<", ">>") and not (isinstance(x.b, Const) and 0 <= x.b.value < x.dtype.bits):
            fn = "tl::shl" if x.op == "<<" else "tl::shr"  # a count out of range shifts every bit out, as interpreted
            return f"{fn}<{self.ctype(x.dtype)}>({self.e(x.a)}, {self.e(x.b)})"
        op = _C_OPS[x.op]
        p = _PREC[op]
        if x.a.dtype.is_float and x.a.dtype.bits == 8:  # fp8 types have no arithmetic or comparison operators:
            text = f"static_cast<float>({self.e(x.a)}) {op} static_cast<float>({self.e(x.b)})"  # in float, as
            return f"{self.ctype(x.dtype)}({text})" if x.dtype.is_float else f"({text})"  # interpreted
        text = f"{self.e(x.a, p)} {op} {self.e(x.b, p + 1)}"
        if x.op in _WIDENING and x.dtype.is_int and x.dtype.bits < 32:  # C computes it in int: wrap to the type
            if x.op in ("*", "<<"):  # in unsigned: 65535 * 65535 or a shift past int's top would overflow int (UB)
                text = f"static_cast<unsigned>({self.e(x.a, 0)}) {op} {self.e(x.b, p + 1)}"
            return f"static_cast<{self.ctype(x.dtype)}>({text})"
        return f"({text})" if p < prec else text

    def cast(self, to: DType, value: Expr) -> str:
        src = value.dtype
        inner = self.e(value)
        low = lambda d: d.is_float and d.bits < 32  # noqa: E731
        if src.is_float and to.is_int and self.t.float_to_int:
            return self.t.float_to_int.format(t=self.ctype(to), v=f"static_cast<float>({inner})" if low(src) else inner)
        if low(src) and (to.is_int or to.is_bool):
            return f"static_cast<{self.ctype(to)}>(static_cast<float>({inner}))"
        if to is dt.bfloat16 and (src is dt.float64 or not src.is_float):  # the header's, rounded once (through
            # float, an int over 2^24 or a double would round twice; float16's and float8's ranges end below 2^24)
            return f"tl::bf16_rn(static_cast<double>({inner}))"
        if low(to) and not src.is_float:
            return f"{self.ctype(to)}(static_cast<float>({inner}))"
        if low(src) and low(to):
            return f"{self.ctype(to)}(static_cast<float>({inner}))"
        return f"static_cast<{self.ctype(to)}>({inner})"

    def call(self, x: Call) -> str:
        d = x.args[0].dtype
        if d is dt.float64:
            fn = self.t.math64[x.name]
        elif d.is_int and x.name == "abs":
            if d.kind == "uint":  # no abs overload takes an unsigned value (ambiguous): it is its own magnitude
                return self.e(x.args[0])
            text = f"abs({self.e(x.args[0])})"  # an int: abs(-128) of an int8 wraps to -128, as interpreted
            if d.bits >= 32:  # C's abs of INT_MIN is undefined: tl::iabs wraps it as interpreted
                return f"{self.helper('iabs', _IABS)}({self.e(x.args[0])})"
            return f"static_cast<{self.ctype(d)}>({text})"
        else:
            fn = self.t.math32[x.name]
        args = ", ".join(self.e(a) if d in (dt.float32, dt.float64) else f"static_cast<float>({self.e(a)})"
                         for a in x.args)
        text = f"{fn}({args})"
        if x.dtype.is_float and x.dtype.bits < 32:
            return f"{self.ctype(x.dtype)}({text})"
        return text
