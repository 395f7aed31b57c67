"""What tilec needs to know of an array argument, for numpy arrays, torch tensors and cupy arrays.

No framework is imported here: an object is recognized by its type's module, so ``import tilec`` stays
light and works without torch or cupy installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tilec import dtypes as dt


@dataclass(frozen=True)
class ArrayInfo:
    """Shape, dtype, element strides and place of an array.

    ``device`` is ``"cpu"`` or ``"cuda:N"`` (AMD GPUs too, as torch on ROCm names them); ``framework`` is
    ``"numpy"``, ``"torch"``, ``"cupy"`` or ``"hip"`` (hip-python's ``DeviceArray``).
    """

    shape: tuple[int, ...]
    dtype: dt.DType
    strides: tuple[int, ...]
    device: str
    framework: str
    data_ptr: int


def framework_of(value: Any) -> str | None:
    mod = type(value).__module__.split(".")[0]
    if isinstance(value, np.ndarray):
        return "numpy"
    if mod == "torch" and type(value).__name__ in ("Tensor", "Parameter"):
        return "torch"
    if mod == "cupy" and type(value).__name__ == "ndarray":
        return "cupy"
    if mod in ("hip", "rocm") and type(value).__name__ == "DeviceArray":
        return "hip"
    return None


def array_info(value: Any) -> ArrayInfo | None:
    """The :class:`ArrayInfo` of an array, or None when ``value`` is not an array of a known framework."""
    fw = framework_of(value)
    if fw is None:
        return None
    if fw == "numpy":
        return ArrayInfo(value.shape, _dtype(value.dtype), _elements(value.strides, value.itemsize, value.shape),
                         "cpu", fw, value.ctypes.data if value.size else 0)
    if fw == "torch":
        dev = value.device
        device = "cpu" if dev.type == "cpu" else f"{dev.type}:{dev.index or 0}"
        return ArrayInfo(tuple(value.shape), dt.dtype(value.dtype), tuple(value.stride()), device, fw,
                         value.data_ptr())
    if fw == "hip":
        return _hip_array_info(value)
    return ArrayInfo(value.shape, _dtype(value.dtype), _elements(value.strides, value.itemsize, value.shape),
                     f"cuda:{value.device.id}", fw, value.data.ptr)


def named_array_info(name: str, value: Any) -> ArrayInfo | None:
    """:func:`array_info`, its errors (an unsupported dtype, strides between elements) naming the argument."""
    from tilec.errors import TilecTypeError, TilecValueError

    try:
        return array_info(value)
    except (TilecTypeError, TilecValueError) as e:
        raise type(e)(f"argument {name!r}: {e.message}") from None


def _elements(strides: tuple[int, ...], item: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Byte strides in elements; an array whose elements are not spaced by whole elements (a field of a packed
    structured array) has no such strides and is refused."""
    if any(s % item and n > 1 for s, n in zip(strides, shape)):
        from tilec.errors import TilecValueError

        raise TilecValueError(f"byte strides {tuple(strides)} are not multiples of the {item}-byte elements (a field "
                              "of a packed structured array?); pass a copy (np.ascontiguousarray)")
    return tuple(s // item for s in strides)


def _hip_array_info(value: Any) -> ArrayInfo:
    """A hip-python ``DeviceArray`` (``hipMalloc(n).configure(typestr=..., shape=...)``), by its CUDA array
    interface; its device is the current HIP device (the interface does not say)."""
    from tilec.backends.hip.runtime import current_device

    cai = value.__cuda_array_interface__
    np_dtype = np.dtype(cai["typestr"])
    shape = tuple(int(d) for d in cai["shape"])
    strides = cai.get("strides")
    strides = contiguous_strides(shape) if strides is None else \
        _elements(tuple(int(s) for s in strides), np_dtype.itemsize, shape)
    return ArrayInfo(shape, _dtype(np_dtype), strides, f"cuda:{current_device()}", "hip", int(cai["data"][0]))


def _dtype(np_dtype: Any) -> dt.DType:
    return dt.dtype(np.dtype(np_dtype))


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def is_contiguous(info: ArrayInfo) -> bool:
    """Row-major contiguous (strides of size-1 dimensions are ignored; an empty array is contiguous)."""
    if 0 in info.shape:
        return True
    want = contiguous_strides(info.shape)
    return all(n == 1 or s == w for n, s, w in zip(info.shape, info.strides, want))


def to_numpy(value: Any) -> np.ndarray:
    """A numpy view of a CPU array (torch CPU tensors included, bfloat16/fp8 through ml_dtypes)."""
    fw = framework_of(value)
    if fw == "numpy":  # a subclass (np.matrix stays 2-D when flattened) as a plain view of the same memory
        return value if type(value) is np.ndarray else value.view(np.ndarray)
    if fw == "torch":
        d = dt.dtype(value.dtype)
        if d.np_name in ("bfloat16", "float8_e4m3", "float8_e5m2"):
            import torch

            raw = value.view(torch.int16 if d.bits == 16 else torch.uint8).numpy()
            return raw.view(d.np)
        return value.numpy()
    raise TypeError(f"cannot view a {fw} array in host memory")
