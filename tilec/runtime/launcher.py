"""The fast path of a CUDA launch with torch tensors: a Python function generated per kernel that checks the
arguments with a few attribute reads, fills a preallocated argument block and calls ``cuLaunchKernel``.

Anything it does not recognise (another framework, dtype, shape, device, a non-contiguous tensor) goes to
the full checked path, which launches or raises the precise error. Launches share one argument block per
kernel, so a kernel object must not be called from two threads at once.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from tilec.ir.buffer import Buffer
from tilec.ir.expr import Expr, Var
from tilec.ir.kernel import PrimFunc

_INT32_MAX = 2**31 - 1  # symbolic sizes travel as int32
_FLOAT32_OVERFLOW = 2.0**128 - 2.0**103  # the least double that float32 rounds to infinity
_CTYPES = {"float64": ctypes.c_double, "float32": ctypes.c_float, "int64": ctypes.c_int64, "int32": ctypes.c_int32,
           "int16": ctypes.c_int16, "int8": ctypes.c_int8, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16,
           "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64, "bool": ctypes.c_bool}
_TORCH_NAMES = {"float8_e4m3": "float8_e4m3fn"}


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, _TORCH_NAMES.get(name, name))


def _failed(status: int, call: str = "cuLaunchKernel") -> None:
    from tilec.backends.cuda.driver import check

    check(status, call)


def _overlap_check(func: PrimFunc, inputs: list[tuple[int, Any]], ptr: dict[int, str]) -> list[str]:
    """Lines sending a call to the checked path (which names the arguments) when a tensor the kernel writes shares
    bytes with another tensor argument (all contiguous here: each a span of bytes). Makes ``ptr`` locals."""
    from tilec.runtime.args import written_params

    tensors = [i for i, p in inputs if isinstance(p, Buffer)]
    written = written_params(func)
    pairs = [(i, j) for k, i in enumerate(tensors) for j in tensors[k + 1:] if i in written or j in written]
    lines = []
    for i in sorted({i for pair in pairs for i in pair}):
        if ptr[i] != f"p{i}":
            lines.append(f"    p{i} = {ptr[i]}")
            ptr[i] = f"p{i}"

    def nbytes(i: int) -> str:
        p = func.params[i]
        item = p.dtype.bits // 8
        if all(isinstance(n, int) for n in p.shape):
            return str(math.prod(p.shape) * item)
        return " * ".join([f"sh{i}[{d}]" for d in range(p.ndim)] + [str(item)])

    for i, j in pairs:
        lines.append(f"    if p{i} < p{j} + {nbytes(j)} and p{j} < p{i} + {nbytes(i)}:")
        lines.append("        return _slow(*args)")
    return lines


def build_fast_launcher(func: PrimFunc, compiled: Any, device: int, slow: Any) -> Any | None:
    """A function ``launch(*args)`` for ``func``'s compiled kernel, or None when the kernel's signature is
    outside what the fast path handles (int4 tensors, size expressions that are not plain symbols)."""
    import torch

    from tilec.backends.cuda import driver

    inputs = [(i, p) for i, p in enumerate(func.params) if i not in func.out_params]
    dependent = getattr(compiled, "dependent", False)
    launch_fn, int_pointers = (driver.dependent_launcher(), True) if dependent else driver.launcher()
    fail = '_failed(e, "cuLaunchKernelEx")' if dependent else "_failed(e)"
    as_ptr = int if int_pointers else ctypes.c_void_p  # how the launch call takes the kernel, stream and arguments
    stream, extra = ("_stream(_dev)", "0") if int_pointers else ("_vp(_stream(_dev))", "None")
    env: dict[str, Any] = {"_Tensor": torch.Tensor, "_slow": slow, "_launch": launch_fn, "_failed": _failed,
                           "_stream": torch._C._cuda_getCurrentRawStream, "_empty": torch.empty, "_dev": device,
                           "_fn": as_ptr(compiled.function), "_vp": as_ptr,
                           "_T": compiled.threads, "_smem": compiled.smem, "_grid": compiled.grid}
    names = [f"a{i}" for i in range(len(inputs))]
    lines = ["def launch(*args):", f"    if len(args) != {len(inputs)}:", "        return _slow(*args)",
             f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args" if names else "    pass"]
    cond: list[str] = []
    sizes: dict[Var, str] = {}
    ptr: dict[int, str] = {}  # parameter index -> the local holding its data pointer
    for (i, p), a in zip(inputs, names):
        if isinstance(p, Buffer):
            if p.dtype.name == "int4" or p.strides is not None:
                return None
            env[f"_d{i}"] = _torch_dtype(p.dtype.name)
            cond.append(f"type({a}) is _Tensor and {a}.dtype is _d{i} and {a}.get_device() == _dev")
            cond.append(f"{a}.is_contiguous()")
            # one read of .shape (each read builds a torch.Size): compared whole when static
            if all(isinstance(n, int) for n in p.shape):
                if math.prod(p.shape) > _INT32_MAX + 1:  # past int32 element offsets: the checked path says so
                    return None
                env[f"_s{i}"] = tuple(p.shape)
                cond.append(f"{a}.shape == _s{i}")
            else:
                cond.append(f"len(sh{i} := {a}.shape) == {p.ndim}")
                for d, n in enumerate(p.shape):
                    if isinstance(n, int):
                        cond.append(f"sh{i}[{d}] == {n}")
                    elif isinstance(n, Var) and n not in sizes:
                        sizes[n] = f"sh{i}[{d}]"
                        cond.append(f"sh{i}[{d}] <= {_INT32_MAX}")  # an int32 cell: larger goes to the checked path
                    elif isinstance(n, Var):
                        cond.append(f"sh{i}[{d}] == {sizes[n]}")
                    else:
                        return None
                if p.ndim > 1:  # int32 element offsets: a larger tensor goes to the checked path
                    cond.append(" * ".join(f"sh{i}[{d}]" for d in range(p.ndim)) + f" <= {_INT32_MAX + 1}")
            nbytes = dict(compiled.align).get(i)
            if nbytes:  # the pointer is read once, by the alignment check
                cond.append(f"(p{i} := {a}.data_ptr()) % {nbytes} == 0")
            ptr[i] = f"p{i}" if nbytes else f"{a}.data_ptr()"
        else:
            if p.dtype.name not in _CTYPES:  # no ctypes cell of its width (a 16-bit float): the checked path packs it
                return None
            kind = "int" if p.dtype.is_int else ("float" if p.dtype.is_float else "bool")
            cond.append(f"type({a}) is {kind}")
            if p.dtype.is_int and p.dtype.bits >= 8:  # outside the type: the checked path says so (a cell wraps)
                info = np.iinfo(p.dtype.np)
                cond.append(f"{int(info.min)} <= {a} <= {int(info.max)}")
            if p.dtype.name == "float32":  # a finite double that rounds to inf in the cell: the checked path says so
                cond.append(f"(abs({a}) < {_FLOAT32_OVERFLOW!r} or not abs({a}) < _inf)")
                env["_inf"] = float("inf")
    if any(v not in sizes for v in func.dyn_vars):
        return None
    for i in func.out_params:  # an output past int32 element offsets: the checked path says so
        shape = func.params[i].shape
        if any(not isinstance(n, (int, Var)) for n in shape):
            return None
        if len(shape) > 1 and any(isinstance(n, Var) for n in shape):
            numel = " * ".join(str(n) if isinstance(n, int) else sizes[n] for n in shape)
            cond.append(f"{numel} <= {_INT32_MAX + 1}")
        elif math.prod(n for n in shape if isinstance(n, int)) > _INT32_MAX + 1:
            return None
    env["_device"] = torch.device("cuda", device)
    lines.append("    if not (" + " and\n            ".join(cond or ["True"]) + "):")
    lines.append("        return _slow(*args)")
    lines += _overlap_check(func, inputs, ptr)
    for v in func.dyn_vars:
        lines.append(f"    s_{v.name} = {sizes[v]}")
    # argument block
    values = []
    arg_of = dict(zip((i for i, _ in inputs), names))
    for i, p in enumerate(func.params):
        if i in func.out_params:
            shape = ", ".join(str(n) if isinstance(n, int) else f"s_{n.name}" for n in p.shape)
            if any(isinstance(n, Expr) and not isinstance(n, Var) for n in p.shape):
                return None
            o = f"o{i}"
            env[f"_d{i}"] = _torch_dtype(p.dtype.name)
            lines.append(f"    {o} = _empty(({shape},), dtype=_d{i}, device=_device)")
            values.append((ctypes.c_uint64, f"{o}.data_ptr()"))
        elif isinstance(p, Buffer):
            values.append((ctypes.c_uint64, ptr[i]))
        else:
            values.append((_CTYPES[p.dtype.name], arg_of[i]))
    for v in func.dyn_vars:
        values.append((ctypes.c_int32, f"s_{v.name}"))
    cells = [t() for t, _ in values]
    maps = getattr(compiled, "tensor_maps", ())
    ptrs = (ctypes.c_void_p * max(1, len(cells) + len(maps)))(*[ctypes.addressof(c) for c in cells])
    env["_cells"], env["_ptrs"] = cells, as_ptr(ctypes.addressof(ptrs))
    env["_keep"] = ptrs
    for k, (_, expr) in enumerate(values):
        lines.append(f"    _cells[{k}].value = {expr}")
    if maps:  # TMA descriptors: encoded once per tensor address, passed by the address of the 128-byte map
        from tilec.runtime.tensor_map import TensorMapCache

        for j, t in enumerate(maps):
            env[f"_tm{j}"] = TensorMapCache(t)
            lines.append(f"    _keep[{len(cells) + j}] = _tm{j}({values[t.param][1]})")
    if func.dyn_vars:
        lines.append(f"    gx, gy, gz = _grid({', '.join(f's_{v.name}' for v in func.dyn_vars)})")
        top_x, top_y, top_z = driver.GRID_LIMITS  # over CUDA's limits: the checked path says which dimension
        lines.append(f"    if not (0 <= gx <= {top_x} and 0 <= gy <= {top_y} and 0 <= gz <= {top_z}):")
        lines.append("        return _slow(*args)")
        lines.append("    if gx and gy and gz and (e := _launch(_fn, gx, gy, gz, _T, 1, 1, _smem, "
                     f"{stream}, _ptrs, {extra})):")
        lines.append(f"        {fail}")
    elif any(not 0 <= g <= top for g, top in zip(compiled.grid(), driver.GRID_LIMITS)):
        return None  # the checked path says which dimension is over CUDA's limits or negative
    elif all(compiled.grid()):  # a static grid is part of the generated code; an empty one launches nothing
        gx, gy, gz = compiled.grid()
        lines.append(f"    if e := _launch(_fn, {gx}, {gy}, {gz}, _T, 1, 1, _smem, {stream}, _ptrs, {extra}):")
        lines.append(f"        {fail}")
    out_names = [f"o{i}" for i in func.out_params]
    ret = "None" if not out_names else (out_names[0] if len(out_names) == 1 else "(" + ", ".join(out_names) + ",)")
    lines.append(f"    return {ret}")
    code = "\n".join(lines)
    exec(compile(code, f"<tilec launcher {func.name}>", "exec"), env)  # noqa: S102 - generated from the IR
    launch = env["launch"]
    launch._source = code
    return launch
