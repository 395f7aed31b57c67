"""Text form of the thread IR (``str(thread_kernel)``, ``tilec.dump(kernel, after="lower")``): C-like statements
with the kernel's dtype names, one comment per tile op naming its line, and no device header."""

from __future__ import annotations

from tilec.backends.cemit import CEmitter, CTable
from tilec.backends.cexpr import MATH32, MATH64
from tilec.dtypes import DType
from tilec.ir.printer import expr_str
from tilec.lower.tir import Mem, ThreadKernel

_NAMES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2", "int64", "int32", "int16",
          "int8", "int4", "uint8", "uint16", "uint32", "uint64", "bool")

TIR = CTable(
    name="tir",
    types={n: n for n in _NAMES},
    vector_types={2: "vec2B", 4: "vec4B", 8: "vec8B", 16: "vec16B"},
    thread_idx="thread_idx",
    block_idx=("block_idx.x", "block_idx.y", "block_idx.z"),
    sync="sync_threads();",
    named_sync="sync_threads(first {n});",
    copy_sync="sync_threads({n} of copy {copy});",
    intrinsics={"shfl_xor": "shfl_xor({v}, {a}, {w})", "shfl_idx": "shfl_idx({v}, {a}, {w})",
                "shfl_down": "shfl_down({v}, {a}, {w})"},
    header="",
    kernel_prefix="",
    math32=MATH32,
    math64=MATH64,
)


class _Printer(CEmitter):
    def ctype(self, d: DType) -> str:
        return self.t.types.get(d.name, d.name)

    def kernel(self, k: ThreadKernel) -> str:
        self.tx = k.tx
        for v in (k.tx, *k.block_idx, *k.dyn_vars):
            self.nonneg.add(id(v))
        params = [f"{self.names(p)}: {self.ctype(p.dtype)}[{expr_str(p.size)}]" if isinstance(p, Mem)
                  else f"{self.names(p)}: {self.ctype(p.dtype)}" for p in k.params]
        params += [f"{self.names(v)}: int" for v in k.dyn_vars]
        params += [f"{self.names(t)}: tensor map of {k.params[t.param]} box {t.box} swizzle {t.swizzle}"
                   for t in k.tensor_maps]
        grid = ", ".join(expr_str(g) for g in k.grid)
        out = [f"thread kernel {k.name}({', '.join(params)})",
               f"  grid ({grid}), {k.threads} threads, {k.smem_bytes} bytes of shared memory"]
        out += [f"  shared {self.names(m)}: {self.ctype(m.dtype)}[{m.size}] at byte {off}" for m, off in k.shared]
        out += [f"  reg {self.names(m)}: {self.ctype(m.dtype)}[{m.size}]" for m in k.regs]
        out += [f"  note: {n}" for n in k.notes]
        out.append(f"  {self.names(k.tx)} = {self.t.thread_idx}")
        out += [f"  {self.names(v)} = {b}" for v, b in zip(k.block_idx, self.t.block_idx)]
        self.lines = out
        self.stmt(k.body, 1)
        return "\n".join(self.lines)


def print_kernel(k: ThreadKernel) -> str:
    """The thread IR of ``k`` as text."""
    return _Printer(TIR).kernel(k)
