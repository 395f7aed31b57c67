"""Check a call's arguments against the kernel's signature and allocate its outputs.

Every mismatch raises ``TypeError``/``ValueError`` (as :class:`~tilec.errors.TilecTypeError` /
:class:`~tilec.errors.TilecValueError`) naming the parameter, the expected and the actual value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilec import dtypes as dt
from tilec.errors import TilecRuntimeError, TilecTypeError, TilecValueError
from tilec.ir.buffer import Buffer
from tilec.ir.evaluate import eval_int
from tilec.ir.expr import Expr, Var
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import TileOp
from tilec.ir.visit import accessed_buffers, vars_in, walk
from tilec.runtime.arrays import ArrayInfo, array_info, is_contiguous, named_array_info

_INT32_MAX = 2**31 - 1


@dataclass
class Bound:
    """A checked call: one value per parameter (inputs and allocated outputs), and the symbolic sizes."""

    values: list[Any]
    infos: list[ArrayInfo | None]
    sizes: dict[Var, int]
    outputs: list[Any]


def storage_shape(buf: Buffer, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The array shape that holds a tensor of logical ``shape`` (int4: two per byte along the last dim)."""
    if buf.dtype is dt.int4:
        return shape[:-1] + ((shape[-1] + 1) // 2,) if shape else shape
    return shape


def _logical_shape(buf: Buffer, info: ArrayInfo) -> tuple[int, ...]:
    """The tensor's shape in elements of ``buf.dtype``. An int4 tensor comes packed two per int8 byte along its last
    dimension: a static last size n takes (n + 1) // 2 bytes; a symbolic one is bound to twice the bytes."""
    if buf.dtype is dt.int4:
        if info.dtype is not dt.int8:
            raise TilecTypeError(f"argument {buf.name!r}: an int4 tensor is passed packed two per byte in an int8 "
                                 f"array, got dtype {info.dtype}")
        if not info.shape or len(info.shape) != buf.ndim:
            return info.shape
        want, got = buf.shape[-1], info.shape[-1]
        if isinstance(want, int):
            if (want + 1) // 2 != got:
                raise TilecValueError(f"argument {buf.name!r}: the last dimension holds {want} int4 values, packed "
                                      f"in {(want + 1) // 2} int8 bytes; got {got} bytes (array shape {info.shape})")
            return info.shape[:-1] + (want,)
        return info.shape[:-1] + (got * 2,)
    if info.dtype is not buf.dtype:
        raise TilecTypeError(f"argument {buf.name!r}: expected dtype {buf.dtype}, got {info.dtype}")
    return info.shape


def _bind_dim(name: str, what: str, want: Any, got: int, sizes: dict[Var, int], late: list) -> None:
    if isinstance(want, int):
        if want != got:
            raise TilecValueError(f"argument {name!r}: {what} must be {want}, got {got}")
    elif isinstance(want, Var):
        if want in sizes and sizes[want] != got:
            raise TilecValueError(f"argument {name!r}: {what} is {got}, but {want.name} = {sizes[want]} from an "
                                  "earlier argument")
        info = np.iinfo(want.dtype.np) if want.dtype.is_int else None
        if info is not None and not info.min <= got <= info.max:  # the kernel gets the size in that type: never wrapped
            bound = f"at most {info.max}" if got > info.max else f"at least {info.min}"  # (a negative stride)
            raise TilecValueError(f"argument {name!r}: {what} is {got}; the symbolic size {want.name} is passed to "
                                  f"the kernel as {want.dtype} ({bound})")
        sizes[want] = got
    else:
        late.append((name, what, want, got))


def _check_array(buf: Buffer, value: Any, device: str, sizes: dict[Var, int], late: list) -> ArrayInfo:
    info = named_array_info(buf.name, value)
    if info is None:
        raise TilecTypeError(f"argument {buf.name!r}: expected an array (numpy, torch or cupy), got "
                             f"{type(value).__name__}")
    dev_ok = info.device == "cpu" if device == "cpu" else info.device.startswith("cuda")
    if not dev_ok:
        want = "host memory (a numpy array or a CPU torch tensor)" if device == "cpu" else "a CUDA device"
        raise TilecValueError(f"argument {buf.name!r}: expected an array in {want} for target {device}, got one on "
                              f"{info.device}")
    shape = _logical_shape(buf, info)
    if len(shape) != buf.ndim:
        raise TilecValueError(f"argument {buf.name!r}: expected {buf.ndim} dimension(s) of shape "
                              f"{_shape_text(buf.shape)}, got an array of shape {info.shape}")
    for d, (want, got) in enumerate(zip(buf.shape, shape)):
        _bind_dim(buf.name, f"dimension {d}", want, got, sizes, late)
    if buf.strides is None:
        if not is_contiguous(info):
            raise TilecValueError(f"argument {buf.name!r}: expected a contiguous row-major array, got strides "
                                  f"{info.strides} for shape {info.shape} (call .contiguous() / np.ascontiguousarray)")
    elif 0 in info.shape:  # no element to address: any strides do (numpy 2 gives a new empty array zero strides)
        late += [(None, None, want, got) for want, got in zip(buf.strides, info.strides) if isinstance(want, Var)]
    else:
        for d, (want, got, n) in enumerate(zip(buf.strides, info.strides, info.shape)):
            if n == 1:  # never stepped along: any stride does (x[:1] keeps x's; is_contiguous ignores them too)
                late += [(None, None, want, got)] if isinstance(want, Var) else []
            else:
                _bind_dim(buf.name, f"stride {d}", want, got, sizes, late)
    if 0 not in shape:
        top = math.prod(shape) - 1 if buf.strides is None else \
            sum((n - 1) * abs(s) for n, s in zip(info.shape, info.strides))
        _check_offsets(f"argument {buf.name!r}", top)
    return info


def _check_offsets(who: str, top: int) -> None:
    """The kernel addresses a global tensor by int32 element offsets: a larger one would wrap (on a GPU, a silent
    read or write of other memory)."""
    if top > _INT32_MAX:
        raise TilecValueError(f"{who}: its elements reach offset {top}, but kernels address a tensor by int32 "
                              f"element offsets (at most {_INT32_MAX}); split it into smaller tensors")


def _check_scalar(p: Var, value: Any, who: str = "") -> Any:
    """``value`` for the scalar parameter ``p`` as the Python number the kernel gets; ``who`` names it in errors."""
    who = who or f"argument {p.name!r}"
    if hasattr(value, "item") and np.ndim(value) == 0:
        value = value.item()
    if p.dtype.is_int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif p.dtype.is_float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, (bool, int))
    if not ok:
        raise TilecTypeError(f"{who}: expected a Python {p.dtype} scalar, got "
                             f"{type(value).__name__} {value!r}")
    if p.dtype.is_float:
        _check_float_range(p, value, who)
    if p.dtype.is_int:  # the kernel gets the value in that many bits (int4 too): never wrapped
        signed = p.dtype.kind == "int"
        lo, hi = -(1 << (p.dtype.bits - 1)) if signed else 0, (1 << (p.dtype.bits - signed)) - 1
        if not lo <= value <= hi:
            raise TilecValueError(f"{who}: {value} does not fit the parameter's type {p.dtype} "
                                  f"[{lo}, {hi}]")
    return value


def _check_float_range(p: Var, value: int | float, who: str) -> None:
    """A finite value the parameter's float type rounds to infinity (or NaN, in a format without one) is refused;
    infinities and NaN pass as they are."""
    try:
        f = float(value)
    except OverflowError:  # an int beyond a double
        f = None
    if f is not None and (math.isinf(f) or math.isnan(f)):
        return
    with np.errstate(over="ignore", invalid="ignore"):
        fits = f is not None and bool(np.isfinite(p.dtype.np.type(f)))
    if not fits:
        shown = repr(value) if len(repr(value)) <= 32 else repr(value)[:29] + "..."
        raise TilecValueError(f"{who}: {shown} is beyond the largest finite {p.dtype} "
                              f"({float(np.finfo(p.dtype.np).max):.8g})")


def bind(func: PrimFunc, args: tuple, device: str, allocate: Any) -> Bound:
    """Check ``args`` (the inputs, in order) and allocate the outputs with ``allocate(buf, shape, like)``."""
    inputs = [p for i, p in enumerate(func.params) if i not in func.out_params]
    if len(args) != len(inputs):
        names = ", ".join(p.name for p in inputs)
        raise TilecTypeError(f"kernel {func.name!r} takes {len(inputs)} argument(s) ({names}), got {len(args)}")
    sizes: dict[Var, int] = {}
    late: list = []
    values: list[Any] = [None] * len(func.params)
    infos: list[ArrayInfo | None] = [None] * len(func.params)
    k = 0
    for i, p in enumerate(func.params):
        if i in func.out_params:
            continue
        a = args[k]
        k += 1
        if isinstance(p, Buffer):
            infos[i] = _check_array(p, a, device, sizes, late)
        else:
            a = _check_scalar(p, a)
        values[i] = a
    for name, _, want, got in late:
        if name is None:  # an empty array's stride symbol: its value unless another argument bound one
            sizes.setdefault(want, got)
    for name, what, want, got in late:
        if name is not None and _eval_size(f"argument {name!r}", what, want, sizes) != got:
            raise TilecValueError(f"argument {name!r}: {what} must be {want} = {eval_int(want, sizes)}, got {got}")
    _check_aliasing(func, infos)
    read_only = [i for i, (v, inf) in enumerate(zip(values, infos))
                 if inf is not None and inf.framework == "numpy" and not v.flags.writeable]
    if read_only:
        written = written_params(func)
        for i in read_only:
            if i in written:
                raise TilecValueError(f"argument {func.params[i].name!r}: the kernel writes it, but the array is "
                                      "read-only (pass a writeable copy)")
    like = next((v for v, inf in zip(values, infos) if inf is not None), None)
    if like is None and device != "cpu" and func.out_params:  # no array to allocate like: not numpy on a GPU
        like = _gpu_like()
    outputs = []
    for i in func.out_params:
        buf = func.params[i]
        assert isinstance(buf, Buffer)
        shape = tuple(_eval_size(f"output {buf.name!r}", f"dimension {d}", n, sizes)
                      for d, n in enumerate(buf.shape))
        for d, (want, n) in enumerate(zip(buf.shape, shape)):
            if n < 0:
                raise TilecValueError(f"output {buf.name!r}: dimension {d} is {want} = {n} for these arguments' "
                                      "sizes; an output cannot have a negative size")
        if 0 not in shape:
            _check_offsets(f"output {buf.name!r}", math.prod(shape) - 1)
        out = allocate(buf, storage_shape(buf, shape), like)
        values[i] = out
        infos[i] = array_info(out)
        outputs.append(out)
    return Bound(values, infos, sizes, outputs)


def _span(info: ArrayInfo) -> tuple[int, int]:
    """The bytes from an array's first element to past its last."""
    item = max(info.dtype.bits // 8, 1)
    lo = sum((n - 1) * s for n, s in zip(info.shape, info.strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(info.shape, info.strides) if s > 0) + 1
    return info.data_ptr + lo * item, info.data_ptr + hi * item


def _addresses(info: ArrayInfo) -> np.ndarray:
    """A numpy array at the array's addresses, for ``np.shares_memory`` (which reads no element: exact for strided
    views whose elements interleave without meeting)."""
    item = max(info.dtype.bits // 8, 1)
    iface = {"data": (info.data_ptr, False), "shape": info.shape, "typestr": f"|V{item}", "version": 3,
             "strides": tuple(s * item for s in info.strides)}
    return np.asarray(type("Addresses", (), {"__array_interface__": iface})())


def _check_aliasing(func: PrimFunc, infos: list[ArrayInfo | None]) -> None:
    """Two tensor arguments over common bytes, one of them written by the kernel: its blocks and threads run in no
    fixed order, so what is read from the other would depend on that order (a silently wrong result)."""
    spans = [(i, *_span(inf)) for i, inf in enumerate(infos) if inf is not None and 0 not in inf.shape]
    pairs = [(i, j) for k, (i, lo, hi) in enumerate(spans) for j, lo2, hi2 in spans[k + 1:] if lo < hi2 and lo2 < hi
             and np.shares_memory(_addresses(infos[i]), _addresses(infos[j]))]  # spans meet: do elements?
    if not pairs:
        return
    written = written_params(func)
    for i, j in pairs:
        if i in written or j in written:
            w, other = (i, j) if i in written else (j, i)
            names = [func.params[k].name for k in (w, other)]
            raise TilecValueError(f"arguments {names[0]!r} and {names[1]!r} share memory, and the kernel writes "
                                  f"{names[0]!r}: its blocks and threads run in no fixed order, so what it reads from "
                                  f"{names[1]!r} would depend on that order; pass arrays that do not overlap (an "
                                  "in-place kernel reads and writes one parameter)")


def _eval_size(who: str, what: str, want: Any, sizes: dict[Var, int]) -> int:
    """The value of a size expression, or an error naming the argument (or output) when no argument's dimension or
    stride is one of its symbols alone (only a bare symbol binds a size: a dimension M * 2 binds no M)."""
    free = sorted({v.name for v in vars_in(want) if v not in sizes}) if isinstance(want, Expr) else []
    if free:
        raise TilecValueError(f"{who}: {what} is {want}, but no argument has a dimension or stride of "
                              f"{', '.join(free)} alone to bind it")
    return eval_int(want, sizes)


def written_params(func: PrimFunc) -> set[int]:
    """Indices of the tensor parameters the kernel writes (element stores and atomics, tile ops' outputs)."""
    written = {id(b) for b in accessed_buffers(func.launch, loads=False)}
    written |= {id(r.buffer) for n in walk(func.launch) if isinstance(n, TileOp) for r in n.writes()}
    return {i for i, p in enumerate(func.params) if id(p) in written}


def _shape_text(shape: tuple) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _gpu_like() -> Any:
    """An empty array on the current GPU for outputs to be allocated like: torch's, else CuPy's."""
    try:
        import torch
    except ImportError:
        try:
            import cupy
        except ImportError:
            raise TilecRuntimeError("a kernel without array arguments allocates its outputs with torch or CuPy; "
                                    "install one, or pass the outputs as arguments") from None
        return cupy.empty((0,), cupy.float32)
    return torch.empty((0,), dtype=torch.float32, device=torch.device("cuda", torch.cuda.current_device()))


def _gpu_empty(fw: str, storage: dt.DType, shape: tuple[int, ...], like: Any) -> Any:
    if fw == "torch":
        import torch

        name = {"float8_e4m3": "float8_e4m3fn", "bool": "bool"}.get(storage.name, storage.name)
        return torch.empty(shape, dtype=getattr(torch, name), device=like.device)
    import cupy

    with cupy.cuda.Device(like.device.id):
        return cupy.empty(shape, dtype=storage.np)


def _poison(out: Any, fw: str, storage: dt.DType) -> None:
    """NaN (floats; fp8 as the byte 0x7f, a NaN in both fp8 formats) or the type's minimum (ints)."""
    value = float("nan") if storage.is_float else int(np.iinfo(storage.np).min)
    if fw == "torch":
        import torch

        if storage.is_float and storage.bits == 8:
            out, value = out.view(torch.uint8), 0x7F
        out.fill_(value)
    else:
        if storage.is_float and storage.bits == 8:
            out, value = out.view(np.uint8), 0x7F
        out.fill(value)


def allocate_like(buf: Buffer, shape: tuple[int, ...], like: Any) -> Any:
    """A new array of ``shape`` for ``buf`` in the framework and on the device of ``like`` (numpy if None).

    Numpy outputs (the interpreters') start as NaN, or the type's minimum for integers, so elements a kernel
    leaves unwritten show; GPU outputs are left uninitialized (filling them would cost a kernel launch) unless
    ``TILEC_POISON=1`` asks for the same poison (torch and CuPy)."""
    from tilec.config import config

    storage = dt.int8 if buf.dtype is dt.int4 else buf.dtype
    fw = type(like).__module__.split(".")[0] if like is not None else "numpy"
    if fw in ("torch", "cupy"):
        out = _gpu_empty(fw, storage, shape, like)
        if config().poison and storage is not dt.boolean:
            _poison(out, fw, storage)
        return out
    if fw == "hip":
        from tilec.backends.hip.runtime import hip_empty

        return hip_empty(shape, storage.np)
    if storage.is_float:
        return np.full(shape, np.nan, dtype=storage.np)
    if storage is dt.boolean:
        return np.zeros(shape, dtype=storage.np)
    return np.full(shape, np.iinfo(storage.np).min, dtype=storage.np)
