"""Deterministic text form of the Tile IR, in the kernel language's own syntax.

Two variables or buffers with one name print with suffixes (``k``, ``k_1``) in order of first appearance, so
the same kernel always prints the same text; frontend tests compare against it.
"""

from __future__ import annotations

import math
from typing import Any

from tilec.ir.buffer import Buffer, Region
from tilec.ir.expr import BinOp, Call, Cast, Const, Expr, Load, Select, Table, UnOp, Var
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import (
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    AtomicAdd,
    AtomicRMW,
    BarrierArrive,
    BarrierInit,
    BarrierWait,
    ClusterSync,
    Copy,
    CumSum,
    Fill,
    For,
    Gemm,
    IfThenElse,
    KernelLaunch,
    Parallel,
    PartialAdd,
    PartialSave,
    Print,
    Reduce,
    SeqStmt,
    StageHandoff,
    Stmt,
    Store,
    TmaCopy,
    TmaStore,
    TmaStoreWait,
    WarpgroupTurn,
    WarpRoles,
)  # fmt: skip

_PREC = {
    "or": 1, "and": 2, "not": 3, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4, "|": 5, "^": 6, "&": 7,
    "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "//": 10, "%": 10, "neg": 11,
}  # fmt: skip
LOOP_CTOR = {"serial": "T.serial", "unroll": "T.unroll", "pipelined": "T.Pipelined", "vectorized": "T.vectorized"}
_LOOP_KEYWORDS = {"pipelined": ("num_stages", "order", "stage"), "unroll": ("unroll_factor", "explicit")}


class Names:
    """Unique, stable names for variables and buffers."""

    def __init__(self) -> None:
        self._by_id: dict[int, str] = {}
        self._used: set[str] = set()

    def __call__(self, node: Var | Buffer) -> str:
        key = id(node)
        name = self._by_id.get(key)
        if name is None:
            name, k = node.name, 0
            while name in self._used:
                k += 1
                name = f"{node.name}_{k}"
            self._used.add(name)
            self._by_id[key] = name
        return name


def expr_str(e: Any, names: Names | None = None, prec: int = 0) -> str:
    """An expression in kernel syntax."""
    names = names or Names()
    if not isinstance(e, Expr):
        return str(e)
    if isinstance(e, Var):
        return names(e)
    if isinstance(e, Const):
        return _const_str(e)
    if isinstance(e, Load):
        return element_str(e.buffer, e.indices, names)
    if isinstance(e, BinOp):
        if e.op in ("min", "max"):
            return f"T.{e.op}({expr_str(e.a, names)}, {expr_str(e.b, names)})"
        p = _PREC[e.op]
        # comparisons chain in Python (`a < b == c` is `a < b and b == c`): a comparison operand of one is bracketed
        text = f"{expr_str(e.a, names, p + 1 if p == _PREC['<'] else p)} {e.op} {expr_str(e.b, names, p + 1)}"
        return f"({text})" if p < prec else text
    if isinstance(e, UnOp):
        if e.op == "not":
            text = f"not {expr_str(e.a, names, _PREC['not'])}"
            return f"({text})" if _PREC["not"] < prec else text
        return f"{e.op}{expr_str(e.a, names, _PREC['neg'])}"
    if isinstance(e, Call):
        return f"T.{e.name}({', '.join(expr_str(a, names) for a in e.args)})"
    if isinstance(e, Cast):
        return f'T.cast({expr_str(e.value, names)}, "{e.dtype}")'
    if isinstance(e, Select):
        parts = ", ".join(expr_str(x, names) for x in (e.cond, e.a, e.b))
        return f"T.if_then_else({parts})"
    if isinstance(e, Table):  # the entries are in the generated source; a dump names their number and range
        return f"table<{len(e.values)} x {min(e.values)}..{max(e.values)}>[{expr_str(e.index, names)}]"
    raise TypeError(f"cannot print {type(e).__name__}")


def element_str(buf: Buffer, indices: tuple, names: Names) -> str:
    """``A[i, j]``; a 0-d buffer (``T.alloc_var``) by its name alone, as the kernel reads and assigns it."""
    if not indices:
        return names(buf)
    return f"{names(buf)}[{', '.join(expr_str(i, names) for i in indices)}]"


def _const_str(c: Const) -> str:
    v = c.value
    if isinstance(v, float):
        if math.isinf(v):
            return f'{"-" if v < 0 else ""}T.infinity("{c.dtype}")'
        if math.isnan(v):
            return f'T.nan("{c.dtype}")'
        return repr(v)
    return repr(v)


def region_str(r: Region, names: Names | None = None) -> str:
    names = names or Names()
    if r.is_full():
        return names(r.buffer)
    parts = []
    for s, e in zip(r.starts, r.extents):
        if isinstance(e, int) and e == 1:
            parts.append(expr_str(s, names))
        else:
            start = expr_str(s, names)
            stop = expr_str(s + e if isinstance(s, Expr) else s + e, names) if not _is_zero(s) else expr_str(e, names)
            parts.append(f"{'' if _is_zero(s) else start}:{stop}")
    return f"{names(r.buffer)}[{', '.join(parts)}]"


def _is_zero(e: Any) -> bool:
    return isinstance(e, Const) and e.value == 0


def copy_options_str(c: Copy) -> str:
    """The copy's options that differ from their defaults, as keyword arguments (``, disable_tma=True``)."""
    return "".join(f", {k}={v!r}" for k, v in c.options().items() if v is not None and v is not False)


def _shape_str(shape: tuple, names: Names) -> str:
    inner = ", ".join(expr_str(d, names) for d in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def print_func(func: PrimFunc) -> str:
    """The whole kernel as text."""
    p = _Printer()
    return p.func(func)


def print_stmt(stmt: Stmt, names: Names | None = None) -> str:
    p = _Printer(names)
    p.stmt(stmt, 0)
    return "\n".join(p.lines)


class _Printer:
    def __init__(self, names: Names | None = None) -> None:
        self.names = names or Names()
        self.lines: list[str] = []

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def func(self, f: PrimFunc) -> str:
        params = []
        for i, p in enumerate(f.params):
            out = "  # output" if i in f.out_params else ""
            if isinstance(p, Buffer):
                shape = _shape_str(p.shape, self.names)
                spec = f'T.Tensor({shape}, "{p.dtype}")' if p.strides is None else \
                    f'T.StridedTensor({shape}, {_shape_str(p.strides, self.names)}, "{p.dtype}")'
                params.append((f"{self.names(p)}: {spec}", out))
            else:
                default = dict(f.defaults).get(i)
                params.append((f"{self.names(p)}: T.{p.dtype}" + ("" if default is None else f" = {default!r}"), out))
        self.emit(0, "@T.prim_func")
        if len(params) <= 2 and not f.out_params:
            self.emit(0, f"def {f.name}({', '.join(p for p, _ in params)}):")
        else:
            self.emit(0, f"def {f.name}(")
            for prm, comment in params:
                self.emit(1, prm + "," + comment)
            self.emit(0, "):")
        for v in f.dyn_vars:
            self.emit(1, f'# {self.names(v)} = T.dynamic("{v.name}")')
        self.stmt(f.body, 1)
        return "\n".join(self.lines) + "\n"

    def e(self, x: Any) -> str:
        return expr_str(x, self.names)

    def r(self, x: Region) -> str:
        return region_str(x, self.names)

    def stmt(self, s: Stmt, d: int) -> None:  # noqa: C901 - one branch per statement kind
        if isinstance(s, SeqStmt):
            for c in s.stmts:
                self.stmt(c, d)
        elif isinstance(s, KernelLaunch):
            self.launch(s, d)
        elif isinstance(s, For):
            def value(v: Any) -> str:  # an annotation's value (variables and buffers by name)
                return self.names(v) if isinstance(v, (Var, Buffer)) else repr(v)

            keywords = _LOOP_KEYWORDS.get(s.kind, ())  # what the constructor takes by keyword; the rest are
            other = [(k, v) for k, v in s.annotations if k != "lets" and k not in keywords]  # annotations={...}
            args = [self.e(s.extent)] + [f"{k}={value(v)}" for k, v in s.annotations if k in keywords]
            if other:
                args.append(f"annotations={{{', '.join(f'{k!r}: {value(v)}' for k, v in other)}}}")
            self.emit(d, f"for {self.names(s.var)} in {LOOP_CTOR[s.kind]}({', '.join(args)}):")
            for v, e in s.ann("lets", ()):  # bound at the start of each trip
                self.emit(d + 1, f"{self.names(v)} = {self.e(e)}  # each trip")
            self.body(s.body, d + 1)
        elif isinstance(s, Parallel):
            vs = ", ".join(self.names(v) for v in s.vars)
            width = f", coalesced_width={s.coalesced_width}" if s.coalesced_width else ""
            self.emit(d, f"for {vs} in T.Parallel({', '.join(self.e(x) for x in s.extents)}{width}):")
            self.body(s.body, d + 1)
        elif isinstance(s, WarpRoles):
            self.emit(d, f"with T.warp_role('producer', threads={s.producer_threads}):")
            self.body(s.then_body, d + 1)
            copies = f", copies={s.copies}, copy={self.names(s.copy)}" if s.copies > 1 else ""
            self.emit(d, f"with T.warp_role('consumer'{copies}):")
            self.body(s.else_body, d + 1)
        elif isinstance(s, IfThenElse):
            self.emit(d, f"if {self.e(s.cond)}:")
            self.body(s.then_body, d + 1)
            if s.else_body is not None:
                self.emit(d, "else:")
                self.body(s.else_body, d + 1)
        elif isinstance(s, Store):
            self.emit(d, f"{element_str(s.buffer, s.indices, self.names)} = {self.e(s.value)}")
        else:
            self.emit(d, self.tile_op(s))

    def body(self, s: Stmt, d: int) -> None:
        """A block of statements; ``pass`` when it is empty."""
        n = len(self.lines)
        self.stmt(s, d)
        if len(self.lines) == n:
            self.emit(d, "pass")

    def launch(self, s: KernelLaunch, d: int) -> None:
        threads = s.threads[0] if len(s.threads) == 1 else list(s.threads)
        grid = ", ".join(self.e(g) for g in s.grid)
        bvars = ", ".join(self.names(v) for v in s.block_vars)
        bvars = f"({bvars})" if len(s.block_vars) > 1 else bvars
        self.emit(d, f"with T.Kernel({grid}, threads={threads}) as {bvars}:")
        for b in s.allocs:
            shape = _shape_str(b.shape, self.names)
            if b.scope == "var":
                self.emit(d + 1, f'{self.names(b)} = T.alloc_var("{b.dtype}")')
            else:
                self.emit(d + 1, f'{self.names(b)} = T.alloc_{b.scope}({shape}, "{b.dtype}")')
        for buf, layout in s.layout_map:
            self.emit(d + 1, f"T.annotate_layout({{{self.names(buf)}: {layout}}})")
        if s.swizzle is not None:
            self.emit(d + 1, f'T.use_swizzle({s.swizzle[0]}, order="{s.swizzle[1]}")')
        if s.cluster is not None:
            self.emit(d + 1, f"# clusters of {s.cluster[1]} blocks along grid dimension {s.cluster[0]}")
        for buf, under in s.overlays:
            self.emit(d + 1, f"# {self.names(buf)} overlays {', '.join(self.names(u) for u in under)}")
        self.body(s.body, d + 1)

    def tile_op(self, s: Stmt) -> str:  # noqa: C901
        opts = copy_options_str(s) if isinstance(s, Copy) else ""
        if isinstance(s, TmaCopy):
            mc = ", multicast=True" if s.multicast else ""
            return f"T.tma_copy({self.r(s.src)}, {self.r(s.dst)}, barrier={self.r(s.barrier)}{mc}{opts})"
        by = f", by_warpgroup={s.by}" if isinstance(s, (TmaStore, TmaStoreWait)) and s.by is not None else ""
        if isinstance(s, TmaStore):
            return f"T.tma_store({self.r(s.src)}, {self.r(s.dst)}{'' if s.wait else ', wait=False'}{by}{opts})"
        if isinstance(s, TmaStoreWait):
            return f"T.tma_store_wait({self.r(s.tile)}{by}{f', pending={s.pending}' if s.pending else ''})"
        if isinstance(s, StageHandoff):
            return f"T.stage_handoff({self.r(s.tile)}, {s.step!r}, groups={s.groups})"
        if isinstance(s, ClusterSync):
            return "T.cluster_sync()"
        if isinstance(s, PartialSave):
            return f"T.partial_save({self.r(s.C)}, {self.names(s.workspace)}[{self.e(s.slot)}], " \
                   f"flag={self.names(s.flags)}[{self.e(s.slot)}])"
        if isinstance(s, PartialAdd):
            return f"T.partial_add({self.r(s.C)}, {self.names(s.workspace)}[{self.e(s.first)}:{self.e(s.last)}], " \
                   f"flags={self.names(s.flags)})"
        if isinstance(s, WarpgroupTurn):
            edge = "" if s.edge is False else f", edge={s.edge}"
            copy = "" if s.copy is None else f", copy={self.e(s.copy)}"
            return f"T.warpgroup_turn(give={s.give}, groups={s.groups}{edge}{copy})"
        if isinstance(s, BarrierInit):
            return f"T.barrier_init({self.r(s.barriers)}, count={s.count})"
        if isinstance(s, BarrierArrive):
            each = (", per_warp=True" if s.per_warp else "") + (", every_block=True" if s.every_block else "")
            return f"T.barrier_arrive({self.r(s.barrier)}, tx_bytes={s.tx_bytes}{each})"
        if isinstance(s, BarrierWait):
            return f"T.barrier_wait({self.r(s.barrier)}, parity={self.e(s.parity)})"
        if isinstance(s, AsyncCopy):
            bar = "" if s.barrier is None else f", barrier={self.r(s.barrier)}"
            return f"T.async_copy({self.r(s.src)}, {self.r(s.dst)}{bar}{opts})"
        if isinstance(s, AsyncCommit):
            return "T.ptx_commit_group()"
        if isinstance(s, AsyncWait):
            return f"T.ptx_wait_group({s.n})"
        if isinstance(s, Copy):
            return f"T.copy({self.r(s.src)}, {self.r(s.dst)}{opts})"
        if isinstance(s, Gemm):
            opts = [k for k in ("transpose_A", "transpose_B", "clear_accum", "allow_tf32") if getattr(s, k)]
            extra = [f"{k}=True" for k in opts]
            if s.policy != "Square":
                extra.append(f"policy=T.GemmWarpPolicy.{s.policy}")
            if s.k_pack != 1:
                extra.append(f"k_pack={s.k_pack}")
            if s.in_flight:
                extra.append(f"in_flight={s.in_flight}")
            return f"T.gemm({', '.join([self.r(s.A), self.r(s.B), self.r(s.C)] + extra)})"
        if isinstance(s, Reduce):
            return f"T.reduce_{s.red}({self.r(s.src)}, {self.r(s.dst)}, dim={s.dim}, clear={s.clear})"
        if isinstance(s, CumSum):
            return f"T.cumsum({self.r(s.src)}, {self.r(s.dst)}, dim={s.dim}, reverse={s.reverse})"
        if isinstance(s, Fill):
            return f"T.fill({self.r(s.dst)}, {self.e(s.value)})"
        if isinstance(s, AtomicAdd):
            return f"T.atomic_add({self.r(s.dst)}, {self.r(s.src)})"
        if isinstance(s, AtomicRMW):
            target = element_str(s.buffer, s.indices, self.names)
            return f"T.atomic_{s.op}({target}, {self.e(s.value)})"
        if isinstance(s, Print):
            val = self.r(s.value) if isinstance(s.value, Region) else self.e(s.value)
            return f"T.print({val}, msg={s.msg!r})"
        raise TypeError(f"cannot print {type(s).__name__}")
