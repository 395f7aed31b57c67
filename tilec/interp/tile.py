"""The tile interpreter: runs Tile IR with numpy, block by block (the ``cpu`` target and the semantic reference).

Values carry their IR dtype: stores round to the buffer's type (fp16, bf16 and fp8 through ml_dtypes), math
on 8- and 16-bit floats is computed in float32 and rounded, as GPUs do. A ``T.Parallel`` nest runs vectorized:
its loop variables are broadcast index arrays, ``if`` becomes a lane mask. On-chip buffers start poisoned (NaN)
in every block, so a read of an element nothing wrote shows in the result.

Global accesses inside tile ops and parallel loops are predicated on the tensor bounds (reads outside are 0,
writes outside dropped); any other out-of-bounds access raises :class:`~tilec.errors.TilecBoundsError` naming
the buffer, the index and the kernel line. A parallel loop that writes one element from two iterations raises
too (a race on the GPU).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from tilec import dtypes as dt
from tilec.dtypes import typed
from tilec.errors import SourceLoc, TilecBoundsError, TilecError
from tilec.interp.atomics import add_at
from tilec.ir.buffer import Buffer
from tilec.ir.evaluate import check_grid_sign
from tilec.ir.expr import BinOp, Call, Cast, Const, Expr, Load, Select, Table, UnOp, Var
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import AtomicRMW, For, IfThenElse, KernelLaunch, Parallel, SeqStmt, Stmt, Store, TileOp, WarpRoles

TILE_RULES: dict[type, Callable[[TileInterpreter, Any, dict], None]] = {}


def tile_rule(cls: type) -> Callable:
    """Register the interpreter rule of a tile op class."""

    def deco(fn: Callable) -> Callable:
        TILE_RULES[cls] = fn
        return fn

    return deco


_BIN = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide, "//": np.floor_divide, "%": np.mod,
    "min": np.fmin, "max": np.fmax, "&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor,
    "<<": np.left_shift, ">>": np.right_shift, "<": np.less, "<=": np.less_equal, ">": np.greater,
    ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal, "and": np.logical_and, "or": np.logical_or,
}  # fmt: skip
# min / max: fminf / fmaxf on the GPU (the header's tl::min / tl::max), which take the other operand over a NaN


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """roundf / round: to the nearest whole number, halfway cases away from zero. From the truncation (x - trunc(x) is
    exact): floor(|x| + 0.5) rounded the sum first, so 0.49999997 gave 1 and 2**23 + 1 gave 2**23 + 2."""
    t = np.trunc(x)
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t).astype(np.asarray(x).dtype, copy=False)


def _fma(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` rounded once, as fmaf / fma compute it on the GPU. float32: the product is exact in float64, the
    sum's error is recovered exactly (TwoSum) and the float64 sum rounded to odd, so that rounding it to float32 is
    the one rounding of the exact value. float64: exactly, in rationals (finite values; the rest as a * b + c)."""
    a, b, c = np.broadcast_arrays(*(np.asarray(x) for x in (a, b, c)))
    if a.dtype == np.float32 and b.dtype == np.float32 and c.dtype == np.float32:
        with np.errstate(all="ignore"):
            p, c64 = a.astype(np.float64) * b.astype(np.float64), c.astype(np.float64)
            s = p + c64
            bp = s - p
            e = (p - (s - bp)) + (c64 - bp)  # the exact sum is s + e
        even = (np.atleast_1d(s).view(np.int64) & 1).reshape(s.shape) == 0
        s = np.where(np.isfinite(e) & (e != 0) & even, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
        return s.astype(np.float32)
    with np.errstate(all="ignore"):
        out = np.asarray(a * b + c)
    if out.dtype != np.float64:
        return out
    out = np.where(np.isfinite(a) & np.isfinite(b) & np.isinf(c), c, out)  # a finite product overflowing is not inf
    shape = out.shape
    out, a, b, c = (x.reshape(-1).copy() for x in (out, a, b, c))
    for i in np.flatnonzero(np.isfinite(a) & np.isfinite(b) & np.isfinite(c) & (a != 0) & (b != 0)):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        try:
            out[i] = float(exact) if exact else 0.0  # an exact zero of nonzero terms is +0 (round to nearest)
        except OverflowError:
            out[i] = np.inf if exact > 0 else -np.inf
    return out.reshape(shape)


_CALL = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "abs": np.abs, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
    "floor": np.floor, "ceil": np.ceil, "round": _round_half_away, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "pow": np.power, "fma": _fma, "isnan": np.isnan, "isinf": np.isinf,
}  # fmt: skip


def _compute_dtype(d: dt.DType) -> np.dtype:
    return np.dtype(np.float32) if d.is_float and d.bits < 32 else d.np


class TileInterpreter:
    """Runs one :class:`PrimFunc` on numpy arrays."""

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.launch: KernelLaunch = func.launch
        self.mem: dict[Buffer, np.ndarray] = {}
        self.loc: SourceLoc | None = None
        self.block: tuple[int, ...] = ()
        self.mask: np.ndarray | None = None  # the active lanes of the parallel loop being run; None at block level
        self.partials: dict[int, np.ndarray] = {}  # stream-K: saved partial sums by slot, until added

    # ------------------------------------------------------------------------------------------------- driver

    def run(self, globals_: dict[Buffer, np.ndarray], scalars: dict[Var, Any]) -> None:
        """Execute the kernel. ``globals_`` maps each tensor parameter to its (logical, unpacked) array;
        ``scalars`` binds the scalar parameters and the symbolic dimensions."""
        env: dict[Any, Any] = {v: typed(x, v.dtype) for v, x in scalars.items()}
        self.mem = dict(globals_)
        grid = [int(self.eval(g, env)) for g in self.launch.grid]
        check_grid_sign(grid, self.func.name)
        with np.errstate(all="ignore"):
            for idx in itertools.product(*(range(g) for g in reversed(grid))):
                self.block = tuple(reversed(idx))
                benv = dict(env)
                for v, i in zip(self.launch.block_vars, self.block):
                    benv[v] = np.asarray(i, dtype=np.int32)
                for b in self.launch.allocs:
                    self.mem[b] = _poisoned(b)
                self.exec(self.launch.body, benv, None)

    # ----------------------------------------------------------------------------------------------- statements

    def exec(self, s: Stmt, env: dict, mask: np.ndarray | None) -> None:
        saved, saved_mask = self.loc, self.mask
        if s.loc is not None:
            self.loc = s.loc
        self.mask = mask
        try:
            if isinstance(s, SeqStmt):
                for c in s.stmts:
                    self.exec(c, env, mask)
            elif isinstance(s, Store):
                self.store(s.buffer, s.indices, self.eval(s.value, env), env, mask)
            elif isinstance(s, For):
                self.exec_for(s, env, mask)
            elif isinstance(s, WarpRoles):  # at tile level the producer may simply run first
                self.exec(s.then_body, env, mask)
                for c in range(s.copies):  # then each copy of the consumers
                    self.exec(s.else_body, env if s.copy is None else env | {s.copy: np.int32(c)}, mask)
            elif isinstance(s, IfThenElse):
                self.exec_if(s, env, mask)
            elif isinstance(s, Parallel):
                self.exec_parallel(s, env)
            elif isinstance(s, AtomicRMW):
                self.atomic(s, env, mask)
            elif isinstance(s, TileOp):
                TILE_RULES[type(s)](self, s, env)
            else:
                raise TypeError(f"the tile interpreter cannot run {type(s).__name__}")
        finally:
            self.loc, self.mask = saved, saved_mask

    def exec_for(self, s: For, env: dict, mask: np.ndarray | None) -> None:
        ext = self.eval(s.extent, env)
        if np.ndim(ext) == 0:
            for i in range(int(ext)):
                env[s.var] = np.asarray(i, dtype=np.int32)
                for v, e in s.ann("lets", ()):  # values bound at the start of each trip
                    env[v] = typed(self.eval(e, env), v.dtype)
                self.exec(s.body, env, mask)
        else:  # a per-lane trip count inside a parallel loop
            for i in range(int(np.max(ext, initial=0))):
                env[s.var] = np.asarray(i, dtype=np.int32)
                self.exec(s.body, env, _and(mask, i < ext))
        env.pop(s.var, None)

    def exec_if(self, s: IfThenElse, env: dict, mask: np.ndarray | None) -> None:
        cond = self.eval(s.cond, env)
        if np.ndim(cond) == 0 and mask is None:
            if bool(cond):
                self.exec(s.then_body, env, mask)
            elif s.else_body is not None:
                self.exec(s.else_body, env, mask)
            return
        then_mask = _and(mask, cond)
        if np.any(then_mask):
            self.exec(s.then_body, env, then_mask)
        if s.else_body is not None:
            else_mask = _and(mask, np.logical_not(cond))
            if np.any(else_mask):
                self.exec(s.else_body, env, else_mask)

    def exec_parallel(self, s: Parallel, env: dict) -> None:
        ext = [int(self.eval(e, env)) for e in s.extents]
        sub = dict(env)
        n = len(ext)
        for d, v in enumerate(s.vars):
            sub[v] = np.arange(ext[d], dtype=np.int32).reshape([-1 if k == d else 1 for k in range(n)])
        if all(e > 0 for e in ext):
            self.exec(s.body, sub, np.ones(ext, dtype=bool))

    # ---------------------------------------------------------------------------------------------- memory access

    def fail(self, msg: str) -> None:
        blk = ", ".join(str(b) for b in self.block)
        raise TilecBoundsError(f"{msg} (block ({blk}))", self.loc)

    def _indices(self, buf: Buffer, idx_exprs: tuple[Expr, ...], env: dict) -> list[np.ndarray]:
        return [np.asarray(self.eval(i, env), dtype=np.int64) for i in idx_exprs]

    def _in_bounds(self, buf: Buffer, idx: list[np.ndarray]) -> np.ndarray:
        arr = self.mem[buf]
        ok = np.asarray(True)
        for i, n in zip(idx, arr.shape):
            ok = ok & (i >= 0) & (i < n)
        return ok

    def load(self, ld: Load, env: dict, mask: np.ndarray | None) -> np.ndarray:
        buf = ld.buffer
        arr = self.mem[buf]
        if buf.ndim == 0:
            return arr[()]
        idx = self._indices(buf, ld.indices, env)
        ok = self._in_bounds(buf, idx)
        if not np.all(ok):
            if buf.scope != "global" or mask is None:
                bad = _first_bad(idx, ok, mask)
                if bad is not None:
                    self.fail(f"read of {buf.name}[{bad}] outside its shape {arr.shape}")
            clipped = [np.clip(i, 0, max(n - 1, 0)) for i, n in zip(idx, arr.shape)]
            if arr.size == 0:
                return np.zeros(np.broadcast(*idx).shape, dtype=arr.dtype)
            return np.where(ok, arr[tuple(clipped)], np.zeros((), arr.dtype))
        return arr[tuple(idx)]

    def store(self, buf: Buffer, idx_exprs: tuple[Expr, ...], value: Any, env: dict, mask: np.ndarray | None) -> None:
        arr = self.mem[buf]
        value = typed(value, buf.dtype)
        idx = self._indices(buf, idx_exprs, env)
        if mask is None and all(np.ndim(i) == 0 for i in idx) and np.ndim(value) == 0:
            if not bool(self._in_bounds(buf, idx)):
                self.fail(f"write of {buf.name}[{', '.join(str(int(i)) for i in idx)}] outside its shape {arr.shape}")
            arr[tuple(int(i) for i in idx)] = value
            return
        shape = mask.shape if mask is not None else np.broadcast(*idx, value).shape
        active = np.broadcast_to(mask if mask is not None else True, shape)
        ok = np.broadcast_to(self._in_bounds(buf, idx), shape)
        if not np.all(ok[active]):
            if buf.scope != "global":
                self.fail(f"write of {buf.name}[{_first_bad(idx, ok, active)}] outside its shape {arr.shape}")
            active = active & ok
        sel = [np.broadcast_to(i, shape)[active] for i in idx]
        if buf.ndim and len(sel[0]) > 1:
            flat = np.ravel_multi_index(sel, arr.shape)
            if len(np.unique(flat)) != len(flat):
                self.fail(f"T.Parallel writes elements of {buf.name} from several iterations (a race on the GPU); "
                          "each iteration must write its own element")
        elif buf.ndim == 0 and int(np.count_nonzero(active)) > 1:
            self.fail(f"T.Parallel writes the scalar {buf.name} from several iterations (a race on the GPU)")
        arr[tuple(sel)] = np.broadcast_to(value, shape)[active]

    def atomic(self, s: AtomicRMW, env: dict, mask: np.ndarray | None) -> None:
        arr = self.mem[s.buffer]
        value = typed(self.eval(s.value, env), s.buffer.dtype)
        idx = self._indices(s.buffer, s.indices, env)
        shape = np.broadcast(*idx, value, mask if mask is not None else True).shape
        active = np.broadcast_to(mask if mask is not None else True, shape)
        ok = np.broadcast_to(self._in_bounds(s.buffer, idx), shape)
        if not np.all(ok[active]) and (s.buffer.scope != "global" or mask is None):
            self.fail(f"atomic on {s.buffer.name}[{_first_bad(idx, ok, active)}] outside its shape {arr.shape}")
        active = active & ok
        sel = tuple(np.broadcast_to(i, shape)[active] for i in idx)
        vals = np.broadcast_to(value, shape)[active]
        add_at(arr, sel, vals)

    # ---------------------------------------------------------------------------------------------- expressions

    def eval(self, e: Any, env: dict) -> Any:  # noqa: C901
        if isinstance(e, Const):
            return typed(e.value, e.dtype)
        if isinstance(e, Var):
            try:
                return env[e]
            except KeyError:
                raise TilecError(f"variable {e.name!r} has no value here", self.loc) from None
        if isinstance(e, Load):
            return self.load(e, env, self.mask)
        if isinstance(e, BinOp):
            return self.binop(e, env)
        if isinstance(e, Cast):
            return typed(self.eval(e.value, env), e.dtype)
        if isinstance(e, Table):
            return typed(e.at(self.eval(e.index, env)), e.dtype)
        if isinstance(e, Select):
            c = self.eval(e.cond, env)
            if np.ndim(c) == 0:  # C's ?: reads memory only on the side it takes (`A[i + 1] if i < n - 1 else 0`)
                return typed(self.eval(e.a if c else e.b, env), e.dtype)
            return typed(np.where(c, self.eval(e.a, env), self.eval(e.b, env)), e.dtype)
        if isinstance(e, UnOp):
            x = self.eval(e.a, env)
            if e.op == "not":
                return np.logical_not(x)
            if e.op == "~":
                return np.invert(x)
            return typed(np.negative(x.astype(_compute_dtype(e.dtype))), e.dtype)
        if isinstance(e, Call):
            cd = np.dtype(np.float32) if e.args[0].dtype.is_float and e.args[0].dtype.bits < 32 else None
            args = [self.eval(a, env) for a in e.args]
            if cd is not None:
                args = [a.astype(cd) for a in args]
            return typed(_CALL[e.name](*args), e.dtype)
        if isinstance(e, (int, float, bool)):
            return np.asarray(e)
        raise TypeError(f"the tile interpreter cannot evaluate {type(e).__name__}")

    def binop(self, e: BinOp, env: dict) -> np.ndarray:
        a = self.eval(e.a, env)
        if e.op in ("and", "or") and np.ndim(a) == 0 and bool(a) == (e.op == "or"):
            return typed(a, e.dtype)  # C's && and || do not evaluate the right side (`i < n and A[i] > 0`)
        b = self.eval(e.b, env)
        operand = e.a.dtype
        if operand.is_float and operand.bits < 32 and e.op not in ("and", "or"):
            a, b = a.astype(np.float32), b.astype(np.float32)
        if e.op in ("//", "%") and operand.is_int:
            b = np.where(b == 0, 1, b)  # C leaves x / 0 undefined; do not trap on lanes that are masked off
        return typed(_BIN[e.op](a, b), e.dtype)


def _and(mask: np.ndarray | None, cond: Any) -> np.ndarray:
    c = np.asarray(cond, dtype=bool)
    return c if mask is None else (mask & c)


def _first_bad(idx: list[np.ndarray], ok: np.ndarray, active: np.ndarray | None) -> str | None:
    shape = np.broadcast(*idx, ok, active if active is not None else True).shape
    bad = ~np.broadcast_to(ok, shape)
    if active is not None:
        bad = bad & np.broadcast_to(active, shape)
    where = np.argwhere(bad)
    if len(where) == 0:
        return None
    pos = tuple(where[0])
    return ", ".join(str(int(np.broadcast_to(i, shape)[pos])) for i in idx)


def _poisoned(b: Buffer) -> np.ndarray:
    shape = tuple(int(s) for s in b.shape)
    if b.dtype.is_float:
        return np.full(shape, np.nan, dtype=b.dtype.np)
    info = np.iinfo(b.dtype.np) if b.dtype.is_int and b.dtype.name != "int4" else None
    fill = info.min if info is not None else 0
    return np.full(shape, fill, dtype=b.dtype.np)
