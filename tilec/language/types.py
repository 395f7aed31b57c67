"""Parameter annotations: ``T.Tensor(shape, dtype)``, ``T.Tensor[[M, K], dtype]``, scalar types, symbols."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from tilec import dtypes as dt
from tilec.errors import TilecTypeError, TilecValueError
from tilec.ir.expr import Expr, SizeVar


@dataclass(frozen=True)
class TensorSpec:
    """The annotation of a global tensor parameter."""

    shape: tuple[int | Expr, ...]
    dtype: dt.DType
    strides: tuple[int | Expr, ...] | None = None


def _shape(shape: Any, what: str, consts: bool = False) -> tuple[Any, ...]:
    """Normalize a shape; with ``consts``, unbound :class:`ConstSymbol` entries stay (a ``T.Tensor`` annotation of an
    eager kernel binds them from the argument's shape)."""
    if isinstance(shape, (int, Expr)):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise TilecTypeError(f"{what}: shape must be a tuple or list of ints or T.dynamic symbols, got {shape!r}")
    out = []
    for d in shape:
        if consts and isinstance(d, ConstSymbol) and d.value is None:
            out.append(d)
            continue
        if not isinstance(d, (int, Expr)) and not hasattr(d, "__index__"):
            d = getattr(d, "value", d)  # a bound T.const symbol
        if isinstance(d, (bool, np.bool_)):
            raise TilecTypeError(f"{what}: dimension {d!r} is a bool, not a size")
        if hasattr(d, "__index__") and not isinstance(d, Expr):
            d = int(d)
            if d < 0:
                raise TilecTypeError(f"{what}: dimension sizes must be >= 0, got {d}")
        elif not isinstance(d, Expr):
            raise TilecTypeError(f"{what}: dimension {d!r} is neither an int nor a T.dynamic symbol")
        out.append(d)
    return tuple(out)


class _TensorMeta(type):
    def __getitem__(cls, item: Any) -> TensorSpec:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TilecTypeError("T.Tensor[...] takes [shape, dtype], e.g. T.Tensor[[M, K], 'float16']")
        return cls(item[0], item[1])


class Tensor(metaclass=_TensorMeta):
    """``T.Tensor(shape, dtype)``: a global tensor parameter (contiguous, row-major)."""

    def __new__(cls, shape: Any, dtype: Any = "float32") -> TensorSpec:  # type: ignore[misc]
        return TensorSpec(_shape(shape, "T.Tensor", consts=True), dt.dtype(dtype))


Buffer = Tensor


class _StridedMeta(type):
    def __getitem__(cls, item: Any) -> TensorSpec:
        if not isinstance(item, tuple) or len(item) != 3:
            raise TilecTypeError("T.StridedTensor[...] takes [shape, strides, dtype]")
        return cls(*item)


class StridedTensor(metaclass=_StridedMeta):
    """``T.StridedTensor(shape, strides, dtype)``: a global tensor with explicit element strides."""

    def __new__(cls, shape: Any, strides: Any, dtype: Any = "float32") -> TensorSpec:  # type: ignore[misc]
        shp = _shape(shape, "T.StridedTensor")
        st = _shape(strides, "T.StridedTensor strides")
        if len(st) != len(shp):
            raise TilecTypeError(f"T.StridedTensor: {len(shp)} dimensions but {len(st)} strides")
        return TensorSpec(shp, dt.dtype(dtype), st)


def dynamic(name: str, dtype: Any = "int32") -> SizeVar | tuple[SizeVar, ...]:
    """``T.dynamic("M")``: a symbolic size, bound from the arguments' shapes at every launch; ``M, N =
    T.dynamic("M, N")`` makes several (names separated by commas or spaces). Sizes reach the kernel as int32 (a
    launch with a larger one is refused), so ``dtype`` may only be int32."""
    names = _names(name)
    if names is None:
        raise TilecTypeError(f"T.dynamic takes the names of its sizes in one string, separated by spaces or commas "
                             f"(M, N = T.dynamic(\"M, N\")), got {name!r}")
    if dt.dtype(dtype) is not dt.int32:
        raise TilecTypeError(f"T.dynamic({name!r}): dtype must be int32 (symbolic sizes are passed to the kernel as "
                             f"int32), got {dt.dtype(dtype)}")
    syms = tuple(SizeVar(n, dt.int32) for n in names)
    return syms[0] if len(syms) == 1 else syms


def _names(names: Any) -> list[str] | None:
    """The identifiers of ``"M N"`` / ``"M, N"``, or None where ``names`` is no such string."""
    parts = [p for p in names.replace(",", " ").split() if p] if isinstance(names, str) else []
    return parts if parts and all(p.isidentifier() for p in parts) else None


symbolic = dynamic


class ConstSymbol:
    """``T.const("M")`` in an eager kernel: a compile-time size bound by a tensor annotation."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.value: int | None = None

    def __repr__(self) -> str:
        return f"T.const({self.name!r})" if self.value is None else str(self.value)


def const(names: str) -> ConstSymbol | tuple[ConstSymbol, ...]:
    """``M, N = T.const("M N")`` (names separated by spaces or commas)."""
    parts = _names(names)
    if parts is None:
        raise TilecTypeError(f"T.const takes the names of its symbols in one string, separated by spaces or commas "
                             f"(M, N = T.const(\"M N\")), got {names!r}")
    syms = tuple(ConstSymbol(p) for p in parts)
    return syms[0] if len(syms) == 1 else syms


class GemmWarpPolicy(Enum):
    """How ``T.gemm`` splits the block's warps over the output tile."""

    Square = "Square"
    FullRow = "FullRow"
    FullCol = "FullCol"

    @classmethod
    def _missing_(cls, value: object) -> None:
        raise TilecValueError(f"T.GemmWarpPolicy: {value!r} is not a policy; expected one of "
                              f"{', '.join(repr(p.value) for p in cls)}")
