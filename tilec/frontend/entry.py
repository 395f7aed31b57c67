"""Entry points of the frontend: ``@T.prim_func`` (lazy form) and the eager ``@tilec.jit`` form."""

from __future__ import annotations

import ast
import inspect
from typing import Any

from tilec import dtypes as dt
from tilec.errors import TilecError, TilecSyntaxError, TilecTypeError, TilecValueError
from tilec.frontend.builder import Builder, building
from tilec.frontend.parser import Parser, attach_loc
from tilec.frontend.source import function_env, function_source
from tilec.ir.buffer import Buffer
from tilec.ir.expr import Expr, Var
from tilec.ir.kernel import PrimFunc
from tilec.ir.stmt import KernelLaunch
from tilec.ir.visit import vars_in
from tilec.language.types import ConstSymbol, TensorSpec
from tilec.runtime.arrays import ArrayInfo, array_info


def _unquoted(node: ast.expr) -> ast.expr:
    """A quoted annotation (``A: "T.Tensor((M,), 'float32')"`` without ``from __future__ import annotations``) as
    the expression it quotes, placed where the string is."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return node
    try:
        inner = ast.parse(node.value.strip(), mode="eval").body
    except SyntaxError as e:
        raise TilecSyntaxError(f"the annotation {node.value!r} is not a Python expression: {e.msg}") from None
    for n in ast.walk(inner):
        if hasattr(n, "lineno"):
            n.lineno, n.col_offset = node.lineno, node.col_offset
            n.end_lineno, n.end_col_offset = node.end_lineno, node.end_col_offset
    return inner


def _param(name: str, ann: Any) -> Buffer | Var:
    if isinstance(ann, TensorSpec):
        unbound = [d.name for d in ann.shape if isinstance(d, ConstSymbol)]
        if unbound:
            raise TilecTypeError(f"parameter {name!r}: the T.const size(s) {', '.join(unbound)} are bound only by an "
                                 "eager kernel's `A: T.Tensor[[M, K], dtype]` statement; use ints or T.dynamic here")
        return Buffer(name, ann.shape, ann.dtype, "global", ann.strides)
    try:
        return Var(name, dt.dtype(ann))
    except TypeError:
        raise TilecTypeError(f"parameter {name!r}: annotate it with T.Tensor(shape, dtype) or a scalar type such "
                             f"as T.int32, got {ann!r}") from None


def _refuse_scalar_sizes(p: Buffer | Var, params: list[Buffer | Var], loc: Any) -> None:
    """A tensor sized by a scalar parameter would take the size from the array and the value from the argument,
    unchecked against each other (and the CUDA kernel would declare the parameter twice)."""
    if not isinstance(p, Buffer):
        return
    scalars = {id(q): q for q in params if isinstance(q, Var)}
    used = [v for d in tuple(p.shape) + tuple(p.strides or ()) if isinstance(d, Expr) for v in vars_in(d)]
    hit = next((scalars[id(v)] for v in used if id(v) in scalars), None)
    if hit is not None:
        raise TilecTypeError(f"parameter {p.name!r}: its shape uses the scalar parameter {hit.name!r}; declare the "
                             f"size with {hit.name} = T.dynamic({hit.name!r}) instead (bound from the array's shape, "
                             "usable as a value in the kernel)", loc)


def _dyn_vars(params: list[Buffer | Var]) -> tuple[Var, ...]:
    seen: dict[int, Var] = {}
    for p in params:
        if isinstance(p, Buffer):
            for d in tuple(p.shape) + tuple(p.strides or ()):
                if isinstance(d, Expr):
                    for v in vars_in(d):
                        seen.setdefault(id(v), v)
    return tuple(seen.values())


def _defaults(fn: Any, args: list[ast.arg], params: list[Buffer | Var], src: Any) -> tuple[tuple[int, Any], ...]:
    """The defaults of ``fn``'s parameters (``n: T.int32 = 3``), checked against their types; a call that leaves the
    parameter out passes it. A tensor parameter has none (its shape and dtype are all the kernel knows)."""
    values = fn.__defaults__ or ()
    out = []
    for i, value in enumerate(values, len(params) - len(values)):
        p, loc = params[i], src.loc(args[i])
        if isinstance(p, Buffer):
            raise TilecTypeError(f"parameter {p.name!r}: a tensor parameter takes no default (got {value!r}); pass "
                                 "the array at each call, or name the parameter in out_idx to have the call "
                                 "allocate it", loc)
        from tilec.runtime.args import _check_scalar

        try:
            out.append((i, _check_scalar(p, value, f"the default of parameter {p.name!r}")))
        except TilecError as e:
            raise attach_loc(e, loc) from None
    return tuple(out)


def _finish(name: str, params: list[Buffer | Var], b: Builder, loc: Any, out_params: tuple[int, ...] = (),
            defaults: tuple[tuple[int, Any], ...] = ()) -> PrimFunc:
    top = b.frames[0]
    launches = [s for s in top if isinstance(s, KernelLaunch)]
    if len(launches) != 1:
        raise TilecSyntaxError(f"kernel {name!r} must contain exactly one `with T.Kernel(...)`, found "
                               f"{len(launches)}", loc)
    others = [s for s in top if not isinstance(s, KernelLaunch)]
    if others:
        raise TilecSyntaxError("statements outside `with T.Kernel(...)` cannot run on the device; move them into "
                               "the kernel body", others[0].loc or loc)
    return PrimFunc(name, tuple(params), launches[0], _dyn_vars(params), out_params, defaults, loc=loc)


def _with_outer(env: Any, outer: dict[str, Any]) -> Any:
    """Closure cells first, then the enclosing function's locals, then globals and builtins."""
    from collections import ChainMap

    return ChainMap(env.maps[0], dict(outer), *env.maps[1:])


def parse_prim_func(fn: Any, outer: dict[str, Any] | None = None) -> PrimFunc:
    """``@T.prim_func``: parse ``fn`` (parameters annotated with ``T.Tensor`` or scalar types) to a PrimFunc.

    ``outer`` holds the names of the enclosing function (the factory), which string annotations may use.
    """
    src = function_source(fn)
    env = function_env(fn)
    if outer:
        env = _with_outer(env, outer)
    b = Builder()
    parser = Parser(src, env, b, {})
    args = src.tree.args
    if args.vararg or args.kwarg or args.kwonlyargs:
        raise TilecSyntaxError("a @T.prim_func takes plain positional parameters", src.loc(src.tree))
    params: list[Buffer | Var] = []
    for a in args.args:
        if a.annotation is None:
            raise TilecSyntaxError(f"parameter {a.arg!r} needs an annotation (T.Tensor(shape, dtype) or T.int32)",
                                   src.loc(a))
        ann = fn.__annotations__.get(a.arg)
        try:
            p = _param(a.arg, parser.expr(_unquoted(a.annotation)) if ann is None or isinstance(ann, str) else ann)
        except Exception as e:
            if isinstance(e, (TilecTypeError, TilecSyntaxError)):
                raise attach_loc(e, src.loc(a)) from None
            raise
        _refuse_scalar_sizes(p, params, src.loc(a))
        params.append(p)
        parser.local[a.arg] = p
    defaults = _defaults(fn, args.args, params, src)
    with building(b):
        ret = parser.run_body()
    if ret is not None:
        raise TilecSyntaxError("a @T.prim_func returns nothing; outputs are parameters (see out_idx)",
                               src.loc(src.tree))
    return _finish(src.name, params, b, src.loc(src.tree), defaults=defaults)


class _EagerParser(Parser):
    """Accepts ``A: T.Tensor[[M, K], dtype]`` statements that bind T.const symbols from the actual arguments."""

    def __init__(self, *a: Any, infos: dict[str, ArrayInfo], params: list[Buffer | Var]) -> None:
        super().__init__(*a)
        self.infos = infos
        self.params = params
        self.consts: list[ConstSymbol] = []  # the T.const symbols this parse bound (unbound again after it)

    def annotate(self, name: str, ann: Any) -> None:
        if name not in self.infos:
            raise TilecSyntaxError(f"{name!r} is annotated but is not a tensor argument of the kernel")
        if not isinstance(ann, TensorSpec):
            raise TilecTypeError(f"{name!r}: expected a T.Tensor[[...], dtype] annotation, got {ann!r}")
        self.consts += [d for d in ann.shape if isinstance(d, ConstSymbol)]
        info = self.infos[name]
        buf = _bind_spec(name, ann, info)
        old = self.local[name]
        self.params[self.params.index(old)] = buf
        self.local[name] = buf


def _bind_spec(name: str, spec: TensorSpec, info: ArrayInfo) -> Buffer:
    if len(spec.shape) != len(info.shape):
        raise TilecValueError(f"argument {name!r}: annotated with {len(spec.shape)} dimension(s), got an array of "
                              f"shape {info.shape}")
    if spec.dtype is not info.dtype:
        raise TilecTypeError(f"argument {name!r}: annotated dtype {spec.dtype}, got an array of dtype {info.dtype}")
    return Buffer(name, tuple(_bind_dim(name, d, n, i) for i, (d, n) in enumerate(zip(spec.shape, info.shape))),
                  spec.dtype, "global", spec.strides)


def _bind_dim(name: str, d: Any, n: int, i: int) -> Any:
    if isinstance(d, ConstSymbol):
        if d.value is None:
            d.value = n
        elif d.value != n:
            raise TilecValueError(f"argument {name!r}: dimension {i} is {n} but {d.name} is already {d.value}")
        return n
    if isinstance(d, int) and d != n:
        raise TilecValueError(f"argument {name!r}: dimension {i} must be {d}, got {n}")
    return d


def parse_eager(fn: Any, args: tuple, kwargs: dict) -> tuple[PrimFunc, list[str], bool]:
    """Parse an eager kernel for these arguments.

    Returns the PrimFunc, the names of the tensor arguments (its leading parameters, in order), and whether
    the function returns a tuple of outputs.
    """
    src = function_source(fn)
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        raise TilecTypeError(f"kernel {src.name!r}: {e}") from None
    bound.apply_defaults()
    local: dict[str, Any] = {}
    infos: dict[str, ArrayInfo] = {}
    params: list[Buffer | Var] = []
    for name, value in bound.arguments.items():
        info = array_info(value)
        if info is None:
            local[name] = value
            continue
        infos[name] = info
        buf = Buffer(name, info.shape, info.dtype, "global")
        params.append(buf)
        local[name] = buf
    b = Builder()
    parser = _EagerParser(src, function_env(fn), b, local, infos=infos, params=params)
    try:
        with building(b):
            ret = parser.run_body()
    finally:  # a T.const made outside the kernel (a module's) is bound by each call's arguments, not the first's
        for sym in parser.consts:
            sym.value = None
    outs = ret if isinstance(ret, tuple) else (() if ret is None else (ret,))
    for o in outs:
        if not (isinstance(o, Buffer) and o in b.empties):
            raise TilecSyntaxError(f"an eager kernel returns tensors made by T.empty, got {o!r}", src.loc(src.tree))
    twice = next((o for k, o in enumerate(outs) if o in outs[:k]), None)
    if twice is not None:  # one parameter, two outputs allocated for it: the kernel would write only the second
        raise TilecSyntaxError(f"an eager kernel returns each T.empty tensor once, got {twice.name!r} twice; return "
                               "it once (or make a second tensor with T.empty)", parser.return_loc)
    for e in b.empties:
        if e not in outs:
            raise TilecSyntaxError(f"the tensor {e.name!r} made by T.empty is never returned", e.loc)
    n_in = len(params)
    out_params = tuple(n_in + b.empties.index(o) for o in outs)
    all_params = params + list(b.empties)
    func = _finish(src.name, all_params, b, src.loc(src.tree), out_params)
    from tilec.ir.unset_reads import first_unset_read
    from tilec.runtime.args import written_params

    written = written_params(func)
    for o, i in zip(outs, out_params):  # returned as allocated: NaN on the interpreters, uninitialized on a GPU
        if i not in written:
            raise TilecSyntaxError(f"the tensor {o.name!r} made by T.empty is returned but never written", o.loc)
        read = first_unset_read(func.launch.body, o)
        if read is not None:
            raise TilecValueError(f"the tensor {o.name!r} made by T.empty is read before the kernel writes it: it "
                                  "starts unset (NaN on the interpreters and under TILEC_POISON, garbage on a GPU); "
                                  "write it first (T.clear, T.fill, a copy), or pass it in as an argument", read.loc)
    return func, list(infos), isinstance(ret, tuple)
