"""Element types of tilec: one table, read by the frontend, the interpreters and the backends.

A :class:`DType` is interned: ``dtype("float16") is float16``. Every name TileLang accepts for the
common subset resolves (``"float16"``, ``"half"``, ``T.float16``, ``torch.float16``, ``np.float16``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class DType:
    """An element type.

    Parameters
    ----------
    name : str
        Canonical name, e.g. ``"float16"``.
    kind : str
        ``"float"``, ``"int"``, ``"uint"`` or ``"bool"``.
    bits : int
        Width of one element in bits (4 for ``int4``).
    np_name : str
        Name of the numpy/ml_dtypes storage type for one element in the interpreters.
    """

    name: str
    kind: str
    bits: int
    np_name: str

    @property
    def np(self) -> np.dtype:
        """The numpy dtype the interpreters store this type in (bfloat16 and fp8 through ml_dtypes)."""
        return _np_dtype(self.np_name)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def bytes(self) -> float:
        return self.bits / 8

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"T.{self.name}"

    def __call__(self, value: Any) -> Any:
        """``T.float32(x)``: a cast (or a typed constant) inside a kernel."""
        from tilec.ir.expr import cast

        return cast(self, value)


_ML_DTYPES = {"bfloat16": "bfloat16", "float8_e4m3": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}


def _np_dtype(name: str) -> np.dtype:
    found = _NP.get(name)
    if found is None:
        import ml_dtypes  # imported only when a bfloat16/fp8 array is needed: it is slow to import

        found = _NP[name] = np.dtype(getattr(ml_dtypes, _ML_DTYPES[name]))
    return found


_NP = {
    "float64": np.dtype(np.float64),
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "int64": np.dtype(np.int64),
    "int32": np.dtype(np.int32),
    "int16": np.dtype(np.int16),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "bool": np.dtype(np.bool_),
}

float64 = DType("float64", "float", 64, "float64")
float32 = DType("float32", "float", 32, "float32")
float16 = DType("float16", "float", 16, "float16")
bfloat16 = DType("bfloat16", "float", 16, "bfloat16")
float8_e4m3 = DType("float8_e4m3", "float", 8, "float8_e4m3")
float8_e5m2 = DType("float8_e5m2", "float", 8, "float8_e5m2")
int64 = DType("int64", "int", 64, "int64")
int32 = DType("int32", "int", 32, "int32")
int16 = DType("int16", "int", 16, "int16")
int8 = DType("int8", "int", 8, "int8")
int4 = DType("int4", "int", 4, "int8")  # values in [-8, 7]; global tensors packed two per int8 byte
uint8 = DType("uint8", "uint", 8, "uint8")
uint16 = DType("uint16", "uint", 16, "uint16")
uint32 = DType("uint32", "uint", 32, "uint32")
uint64 = DType("uint64", "uint", 64, "uint64")
boolean = DType("bool", "bool", 8, "bool")

ALL: tuple[DType, ...] = (
    float64, float32, float16, bfloat16, float8_e4m3, float8_e5m2,
    int64, int32, int16, int8, int4, uint8, uint16, uint32, uint64, boolean,
)  # fmt: skip

_ALIASES = {
    "half": float16,
    "float": float32,
    "double": float64,
    "bf16": bfloat16,
    "fp16": float16,
    "fp32": float32,
    "float8_e4m3fn": float8_e4m3,
    "e4m3_float8": float8_e4m3,
    "e5m2_float8": float8_e5m2,
    "int": int32,
    "bool_": boolean,
}
_BY_NAME = {d.name: d for d in ALL} | _ALIASES


def dtype(value: Any) -> DType:
    """Resolve anything that names an element type to a :class:`DType`.

    Accepts a :class:`DType`, a string, a numpy/ml_dtypes dtype or scalar type, or a torch dtype.

    Raises
    ------
    TilecTypeError
        (a ``TypeError``) if ``value`` names no supported type; the message lists the supported names.
    """
    if isinstance(value, DType):
        return value
    hint = ""
    if isinstance(value, str):
        found = _BY_NAME.get(value)
        if found is not None:
            return found
    elif value is not None:  # numpy reads None as float64
        name = _torch_name(value)
        if name is not None:
            return dtype(name)
        try:
            np_dtype = np.dtype(value)
        except TypeError:
            np_dtype = None
        found = _BY_NAME.get(np_dtype.name) if np_dtype is not None else None
        # the same name, another format: ml_dtypes.float8_e4m3 is IEEE-style e4m3, not CUDA's e4m3fn
        if found is not None and np_dtype.type is found.np.type:
            return found
        if found is not None:
            hint = f" ({found.name} here is {found.np.type.__module__}.{found.np.type.__name__})"
    from tilec.errors import TilecTypeError

    supported = ", ".join(d.name for d in ALL)
    raise TilecTypeError(f"unsupported dtype {value!r}; expected one of: {supported}{hint}")


def wrap_int(value: int, d: DType) -> int:
    """``value`` converted to the integer type ``d`` as the GPU does: modulo 2**bits, two's complement when signed."""
    if d.is_bool:
        return int(bool(value))
    v = int(value) & ((1 << d.bits) - 1)
    if d.kind == "int" and v >= 1 << (d.bits - 1):
        v -= 1 << d.bits
    return v


def _torch_name(value: Any) -> str | None:
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        name = str(value).removeprefix("torch.")
        return {"float8_e4m3fn": "float8_e4m3"}.get(name, name)
    return None


def promote(a: DType, b: DType) -> DType:
    """The type of a binary arithmetic result: the wider float, else the wider int.

    Two different 16-bit floats (float16 with bfloat16) and any float8 mixed with another float promote to
    float32, as on the GPU where neither holds the other exactly.
    """
    if a is b:
        return a
    if a.is_float or b.is_float:
        if not (a.is_float and b.is_float):
            return a if a.is_float else b
        if a.bits != b.bits:
            wide = a if a.bits > b.bits else b
            return wide if wide.bits >= 32 else float32
        return float32
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if a.kind == "int" else b


def work_type(d: DType) -> DType:
    """The type a reduction or scan into ``d`` computes in, on every target: float32 for floats narrower than 32
    bits, else ``d`` itself (an int32 or float64 sum kept in float32 loses its low bits)."""
    return float32 if d.is_float and d.bits < 32 else d


def float32_to_odd(x: np.ndarray) -> np.ndarray:
    """Ints and doubles as float32 rounded to odd (an inexact result's last bit set): converted on to bfloat16 they
    are then rounded once, as the GPU rounds them (the interpreters' path to bfloat16: some ml_dtypes versions convert
    ints through float32 rounded to nearest, which rounds 2^24 + 2^16 + 1 twice, to 2^24). Ints beyond 2^53 are first
    rounded to double, as the generated code converts them."""
    v = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = v.astype(np.float32)
        u = f.view(np.uint32).astype(np.int64)
        fix = (f.astype(np.float64) != v) & ~np.isnan(v) & (u % 2 == 0)
        u = np.where(fix, u + np.where(np.abs(v) > np.abs(f.astype(np.float64)), 1, -1), u)
    return u.astype(np.uint32).view(np.float32)


TF32_DROPPED_BITS = 13  # float32 mantissa bits a TF32 value lacks (10 of 23 kept)


def round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 as ``cvt.rna.tf32.f32`` rounds them: to nearest, ties away from zero, keeping
    10 mantissa bits (the low 13 bits zero); past the largest TF32 value to infinity; infinities and NaN unchanged."""
    f = np.asarray(x, np.float32)
    u = f.view(np.uint32)
    half, low = np.uint32(1 << (TF32_DROPPED_BITS - 1)), np.uint32((1 << TF32_DROPPED_BITS) - 1)
    rounded = (u + half) & ~low  # sign and magnitude: adding half an ulp to the magnitude rounds ties away from 0
    return np.where(np.isfinite(f), rounded, u).astype(np.uint32).view(np.float32).reshape(f.shape)


def truncate_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values as a TF32 tensor-core instruction reads them: the low 13 mantissa bits ignored."""
    u = np.asarray(x, np.float32).view(np.uint32)
    return (u & ~np.uint32((1 << TF32_DROPPED_BITS) - 1)).view(np.float32)


def typed(x: Any, d: DType) -> np.ndarray:
    """``x`` as a numpy array (0-d for scalars) of ``d``'s storage type. A conversion to fp8 saturates like CUDA's
    (``__NV_SATFINITE``: beyond the largest finite value, infinities included, it is that value; NaN stays NaN)."""
    if d.is_float and d.bits == 8:
        x = np.asarray(x)
        if x.dtype != d.np:
            top = float(_fp8_max(d))
            x = np.clip(x.astype(np.float64 if x.dtype == np.float64 else np.float32), -top, top)
    if d.is_int:
        x = np.asarray(x)
        if x.dtype.kind not in "iub":  # a float (bfloat16 too), as cvt.rzi.s32.f32 / v_cvt_i32_f32 convert it:
            x = _float_to_int(x, d)
    if d is bfloat16:
        x = np.asarray(x)
        if x.dtype.kind in "iu" or x.dtype == np.float64:
            x = float32_to_odd(x)
    out = np.asarray(x).astype(d.np, copy=False)
    if d is int4:  # stored in int8: keep the 4-bit two's complement range [-8, 7]
        out = ((out.astype(np.int16) + 8) & 0xF).astype(np.int8) - np.int8(8)
    return out


def _float_to_int(x: np.ndarray, d: DType) -> np.ndarray:
    """Floats to ints as cvt.rzi does (and the HIP header's tl::f2i): truncated, saturated to 32 bits (64 bits for
    64-bit types, where numpy's own conversion gave the minimum for every value out of range and NaN), NaN to 0, then
    the low bits for narrower types."""
    bits = 64 if d.bits == 64 else 32
    unsigned = np.dtype(d.np).kind == "u"
    lo, hi = (0, 2**bits) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1))  # hi: the first value out of range
    wide = np.dtype(f"{'u' if unsigned else ''}int{bits}")
    t = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0)
    inside = np.clip(t, lo, np.nextafter(float(hi), 0.0)).astype(wide)  # in range for the numpy cast
    return np.where(t >= hi, np.iinfo(wide).max, inside).astype(np.int64 if bits == 32 else wide)


def _fp8_max(d: DType) -> float:
    import ml_dtypes

    return float(ml_dtypes.finfo(d.np).max)
