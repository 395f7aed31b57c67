"""Expressions of a kernel body: the part of the parser that evaluates Python expressions (pipeline stage 1).

Values over Python objects (block sizes, dtypes, flags) are computed at compile time; values over kernel objects
(block and loop indices, buffer elements, ``T.alloc_var`` scalars) build IR expressions. Calls of ``T.*``
primitives run and emit into the current :class:`~tilec.frontend.builder.Builder`; ``@T.macro`` functions are
parsed inline by a nested parser.
"""

from __future__ import annotations

import ast
import builtins
import operator
from collections import ChainMap
from types import GeneratorType
from typing import Any

import numpy as np

from tilec.errors import SourceLoc, TilecError, TilecSyntaxError, TilecTypeError
from tilec.frontend.builder import Builder
from tilec.frontend.scopes import ScopeTracker, Undefined
from tilec.frontend.source import FunctionSource
from tilec.ir.buffer import Buffer, Region, index_buffer
from tilec.ir.expr import Const, Expr, Load, as_expr, binop, call, cast, fit_ints, select, unop
from tilec.language.loops import serial
from tilec.language.types import ConstSymbol

_BINOPS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
}  # fmt: skip
_PY_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
    ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.Pow: operator.pow,
    ast.MatMult: operator.matmul,
}  # fmt: skip
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_PY_CMPOPS = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq,
    ast.NotEq: operator.ne, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}  # fmt: skip


def attach_loc(e: TilecError, loc: SourceLoc) -> TilecError:
    """Give an error raised without a location the location of the kernel code that caused it."""
    if e.loc is None:
        e.loc = loc
        e.args = (e._format(),)
    return e


class Macro:
    """``@T.macro``: a helper whose body is parsed inline where it is called from a kernel."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "macro")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tilec.frontend.builder import active

        parser = _ACTIVE[-1] if _ACTIVE else None
        if active() is None or parser is None:
            raise TilecSyntaxError(f"macro {self.__name__!r} can only be called inside a kernel")
        return parser.inline(self, args, kwargs)


_ACTIVE: list[Any] = []  # the parsers of the bodies being parsed, innermost last


class ExprParser(ScopeTracker):
    """Evaluates the expressions of one function body; :class:`~tilec.frontend.parser.Parser` adds statements."""

    src: FunctionSource
    env: ChainMap
    b: Builder
    local: dict[str, Any]
    unbound_consts_ok: bool = False  # set while the annotation of an eager kernel's tensor is evaluated

    def inline(self, macro: Macro, args: tuple | list, kwargs: dict) -> Any:
        raise NotImplementedError  # statements: see Parser.inline

    def lookup(self, name: str, node: ast.AST) -> Any:
        if name in self.local:
            v = self.local[name]
            if isinstance(v, Undefined):
                raise v.error()
            self.note_read(name)
        elif name in self.env:
            v = self.env[name]
        else:
            raise TilecSyntaxError(f"name {name!r} is not defined", self.src.loc(node))
        if isinstance(v, ConstSymbol):
            if v.value is None and self.unbound_consts_ok:
                return v  # inside the annotation that binds it (eager kernels)
            if v.value is None:
                raise TilecSyntaxError(f"{v.name!r} (T.const) is used before a tensor annotation binds it")
            return v.value
        return v

    def rvalue(self, v: Any) -> Any:
        """A value as an operand: ``T.alloc_var`` buffers and 0-d tensors (a 0-d array argument) read as their
        element."""
        if isinstance(v, Buffer) and v.ndim == 0:
            return Load(v, ())
        return v

    def truth(self, v: Any, node: ast.expr) -> Any:
        """``v``, the value of ``node``, where Python takes its truth (``if``, ``not``, ``and``/``or``, ternaries):
        a tile has none in a kernel (Python's would be always true)."""
        name = _tile_name(v)
        if name:
            raise TilecTypeError(f"`{ast.unparse(node)}` is the tile {name}, used as a condition: a tile has no truth "
                                 "value in a kernel (Python would take it as always true); test its elements "
                                 "(`A[i] > 0` in a T.Parallel or T.serial loop) or reduce it first (T.reduce_max, "
                                 "T.reduce_sum)")
        return v

    def expr(self, node: ast.expr) -> Any:
        handler = getattr(self, f"expr_{type(node).__name__}", None)
        if handler is None:
            return self.python_eval(node)
        return handler(node)

    def expr_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def expr_Name(self, node: ast.Name) -> Any:
        return self.lookup(node.id, node)

    def expr_Attribute(self, node: ast.Attribute) -> Any:
        base = self.expr(node.value)
        try:
            return getattr(base, node.attr)
        except AttributeError:
            raise TilecTypeError(f"{type(base).__name__} {ast.unparse(node.value)!r} has no attribute "
                                 f"{node.attr!r}") from None

    def subscript_key(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Slice):
            parts = [None if p is None else self.rvalue(self.expr(p)) for p in (node.lower, node.upper, node.step)]
            return slice(*parts)
        if isinstance(node, ast.Tuple):
            return tuple(self.subscript_key(e) for e in node.elts)
        return self.rvalue(self.expr(node))

    def expr_Subscript(self, node: ast.Subscript) -> Any:
        base = self.expr(node.value)
        key = self.subscript_key(node.slice)
        if isinstance(base, Buffer):
            if base.scope == "var" and key in (0, ()):
                return Load(base, ())
            try:
                return index_buffer(base, key)
            except TilecError as e:
                raise attach_loc(e, self.src.loc(node)) from None
        if isinstance(base, Expr):
            raise TilecTypeError(f"`{ast.unparse(node.value)}` is a scalar kernel value and cannot be indexed")
        run_time = next((k for k in _key_parts(key) if isinstance(k, Expr) and not isinstance(k, Const)), None)
        if run_time is not None and isinstance(base, (list, tuple, dict, str, range, np.ndarray)):
            raise TilecTypeError(
                f"`{ast.unparse(node)}`: {ast.unparse(node.value)} is a Python {type(base).__name__}, indexed when the "
                f"kernel is parsed, but the index {run_time} is a kernel value, known only when the kernel runs (a "
                "T.serial/range loop or block index); loop over a Python list to index at parse time (`for k in "
                "list(range(n))` unrolls), or keep the values in a buffer (a T.Tensor argument, or a fragment "
                "filled in the kernel)")
        try:
            return base[key]
        except Exception as e:
            raise TilecTypeError(f"`{ast.unparse(node)}`: {type(e).__name__}: {e}") from None

    def binary(self, op: type, a: Any, b: Any) -> Any:
        a, b = self.rvalue(a), self.rvalue(b)
        unbound = next((v for v in (a, b) if isinstance(v, ConstSymbol) and v.value is None), None)
        if unbound is not None:  # in the annotation that binds it: Python's 'unsupported operand type(s)' came out
            raise TilecTypeError(f"the T.const {unbound.name!r} is bound by this annotation from the argument's shape, "
                                 f"so a dimension must be the symbol itself, not an expression of it; annotate "
                                 f"{unbound.name} alone (`T.Tensor[[{unbound.name}], ...]`) and compute sizes from it "
                                 "after the annotation")
        tile = _tile_name(a) or _tile_name(b)
        if tile:
            if op is ast.MatMult:
                raise TilecTypeError(f"`@` on the tile {tile}: a tile product is T.gemm(A, B, C) (C += A @ B, C a "
                                     "T.alloc_fragment accumulator)")
            sym = _BINOPS.get(op, "**")
            raise TilecTypeError(f"`{sym}` on the tile {tile}: arithmetic in a kernel is on elements ({tile}[i] {sym} "
                                 "... in a T.Parallel loop), not on whole tiles")
        if not isinstance(a, Expr) and not isinstance(b, Expr):
            try:
                return _PY_BINOPS[op](a, b)
            except Exception as e:
                raise TilecTypeError(f"{type(e).__name__}: {e}") from None
        if op is ast.Pow:
            return self.power(a, b)
        if op not in _BINOPS:
            raise TilecSyntaxError(f"operator {op.__name__} is not supported on kernel values")
        return binop(_BINOPS[op], *fit_ints(a, b))

    def power(self, a: Any, b: Any) -> Expr:
        if isinstance(b, int) and not isinstance(b, bool) and 0 < b <= 4:
            out = a
            for _ in range(b - 1):
                out = binop("*", out, a)
            return out
        if isinstance(a, Expr) and a.dtype.is_int and isinstance(b, int) and not isinstance(b, bool) and b >= 0:
            return _int_power(a, b)  # an int, as in Python (float32 pow rounds above 2**24)
        x = as_expr(a)
        if not x.dtype.is_float and not (isinstance(b, Expr) and b.dtype.is_float):
            x = cast("float32", x)
        return call("pow", x, b)

    def expr_BinOp(self, node: ast.BinOp) -> Any:
        return self.binary(type(node.op), self.expr(node.left), self.expr(node.right))

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Any:
        v = self.rvalue(self.expr(node.operand))
        op = type(node.op)
        if op is ast.Not:
            self.truth(v, node.operand)
        if not isinstance(v, Expr):
            return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                    ast.Invert: operator.invert}[op](v)
        if v.dtype.is_bool and op in (ast.USub, ast.UAdd):  # Python's -True is -1: an int
            v = cast("int32", v)
        return {ast.USub: lambda: unop("-", v), ast.UAdd: lambda: v, ast.Not: lambda: unop("not", v),
                ast.Invert: lambda: unop("~", v)}[op]()

    def expr_BoolOp(self, node: ast.BoolOp) -> Any:
        """``a and b`` / ``a or b`` as Python evaluates them: the value of the operand that decides (``A[i] or 7``
        is ``A[i]`` where it is non-zero, else 7), not a bool; over bool operands that is the logical and / or."""
        is_and = isinstance(node.op, ast.And)
        result: Any = None
        for i, sub in enumerate(node.values):
            if i > 0 and not isinstance(result, Expr) and (not result if is_and else result):
                return result  # Python short-circuit: the remaining operands are not evaluated
            v = self.rvalue(self.expr(sub))
            if i < len(node.values) - 1:  # the last operand's truth is never taken
                self.truth(v, sub)
            if i == 0 or not isinstance(result, Expr):
                result = v
            elif result.dtype.is_bool and (isinstance(v, bool) or isinstance(v, Expr) and v.dtype.is_bool):
                result = binop("and" if is_and else "or", result, v)
            else:
                cond = _as_bool(result)
                result = select(cond, v, result) if is_and else select(cond, result, v)
        return result

    def expr_Compare(self, node: ast.Compare) -> Any:
        left = self.rvalue(self.expr(node.left))
        result: Any = True
        for op, right_node in zip(node.ops, node.comparators):
            right = self.rvalue(self.expr(right_node))
            if isinstance(left, Expr) or isinstance(right, Expr):
                if type(op) not in _CMPOPS:
                    raise TilecSyntaxError(f"`{ast.unparse(node)}`: `is`/`in` do not apply to kernel values")
                part: Any = binop(_CMPOPS[type(op)], *fit_ints(left, right))
            else:
                part = self.python_compare(node, op, left, right)
            result = part if result is True else (binop("and", result, part) if isinstance(result, Expr) or
                                                  isinstance(part, Expr) else (result and part))
            if result is False:
                return False
            left = right
        return result

    def python_compare(self, node: ast.Compare, op: ast.cmpop, left: Any, right: Any) -> Any:
        """A comparison of compile-time values; a tile against a value is refused (Python's would compare the buffer
        object: False for ``F == 0``, a TypeError for ``F > 0``)."""
        tile = _tile_name(left) or _tile_name(right)
        if tile and type(op) in _CMPOPS and not (_tile_name(left) and _tile_name(right)):
            raise TilecTypeError(f"`{ast.unparse(node)}` compares the tile {tile}: comparisons in a kernel are on "
                                 f"elements ({tile}[i] > 0 in a T.Parallel or T.serial loop), not on whole tiles")
        try:
            return _PY_CMPOPS[type(op)](left, right)
        except TilecError:
            raise
        except Exception as e:
            raise TilecTypeError(f"`{ast.unparse(node)}`: {type(e).__name__}: {e}") from None

    def expr_IfExp(self, node: ast.IfExp) -> Any:
        cond = self.truth(self.rvalue(self.expr(node.test)), node.test)
        if not isinstance(cond, Expr):
            return self.expr(node.body if cond else node.orelse)
        return select(cond, *fit_ints(self.rvalue(self.expr(node.body)), self.rvalue(self.expr(node.orelse))))

    def expr_JoinedStr(self, node: ast.JoinedStr) -> str:
        """An f-string, formatted when the kernel is parsed (a kernel value in it is refused: see :func:`_as_text`)."""
        parts = []
        for v in node.values:
            if not isinstance(v, ast.FormattedValue):
                parts.append(str(self.expr(v)))
                continue
            value = _as_text(self.rvalue(self.expr(v.value)), f"`{ast.unparse(v.value)}` in an f-string")
            if v.conversion != -1:
                value = {ord("s"): str, ord("r"): repr, ord("a"): ascii}[v.conversion](value)
            spec = self.expr(v.format_spec) if v.format_spec is not None else ""
            try:
                parts.append(format(value, spec))
            except Exception as e:
                raise TilecTypeError(f"`{ast.unparse(node)}`: {type(e).__name__}: {e}") from None
        return "".join(parts)

    def expr_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.elements(node.elts))

    def expr_List(self, node: ast.List) -> list:
        return self.elements(node.elts)

    def elements(self, elts: list[ast.expr]) -> list:
        out: list = []
        for e in elts:
            if isinstance(e, ast.Starred):
                out.extend(self.expr(e.value))
            else:
                out.append(self.expr(e))
        return out

    def expr_Dict(self, node: ast.Dict) -> dict:
        out: dict = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                out.update(self.expr(v))
            else:
                out[self.expr(k)] = self.expr(v)
        return out

    def expr_Call(self, node: ast.Call) -> Any:
        fn = self.expr(node.func)
        args = self.elements(node.args)
        if fn is builtins.bool and len(args) == 1 and not node.keywords:
            self.truth(self.rvalue(args[0]), node.args[0])
        kwargs: dict[str, Any] = {}
        for kw in node.keywords:
            if kw.arg is None:
                kwargs.update(self.expr(kw.value))
            else:
                kwargs[kw.arg] = self.expr(kw.value)
        loc = self.src.loc(node)
        saved = self.b.loc
        self.b.loc = loc
        try:
            return self.call(fn, args, kwargs)
        except TilecError as e:
            raise attach_loc(e, loc) from None
        finally:
            self.b.loc = saved

    def call(self, fn: Any, args: list, kwargs: dict) -> Any:
        if fn in (builtins.min, builtins.max) and len(args) == 1 and isinstance(args[0], (list, tuple, GeneratorType)):
            args = [list(args[0])]  # max(xs) or max(x + j for j in ...): the values are the items (read once)
            if not kwargs and args[0] and any(isinstance(self.rvalue(a), Expr) for a in args[0]):
                return _BUILTIN_OVERRIDES[fn]([self.rvalue(a) for a in args[0]])
        if fn in _BUILTIN_OVERRIDES and any(isinstance(self.rvalue(a), Expr) for a in args):
            return _BUILTIN_OVERRIDES[fn]([self.rvalue(a) for a in args])
        if fn is builtins.range:
            return range(*args) if all(isinstance(a, int) for a in args) else serial(*args)
        if fn is builtins.round and any(isinstance(self.rvalue(a), Expr) for a in args):
            raise TilecTypeError("round() of a kernel value: use T.round (C's roundf: halves away from zero, where "
                                 "Python's round takes them to even), T.floor or T.ceil")
        if fn is builtins.print and any(isinstance(self.rvalue(a), (Expr, Buffer)) for a in [*args, *kwargs.values()]):
            raise TilecTypeError("print() of a kernel value runs once, when the kernel is parsed, and prints the "
                                 "expression, not its values: use T.print(value, msg) to print from the device")
        if fn in (builtins.str, builtins.repr, builtins.format, builtins.ascii) or \
                isinstance(getattr(fn, "__self__", None), str):  # "...".format(x), "-".join(xs)
            for a in [*args, *kwargs.values()]:
                _as_text(self.rvalue(a), f"{getattr(fn, '__name__', 'str')}() of {a}")
        if isinstance(fn, Macro):
            return self.inline(fn, args, kwargs)
        owner, bodies = getattr(fn, "__self__", None), getattr(self, "bodies", ())
        if bodies and isinstance(owner, (list, dict, set)) and getattr(fn, "__name__", "") in _MUTATORS:
            raise TilecSyntaxError(
                f"`.{fn.__name__}(...)` changes a Python {type(owner).__name__} once, when the kernel is parsed, not "
                f"each time {bodies[-1].what} runs; keep values that change in a buffer or a T.alloc_var")
        module = str(getattr(fn, "__module__", "") or "")
        if module == "tilec.language.math":  # T.max, T.exp, T.cast ...: of values
            args, kwargs = [self.rvalue(a) for a in args], {k: self.rvalue(v) for k, v in kwargs.items()}
            tile = next((t for t in map(_tile_name, [*args, *kwargs.values()]) if t), None)
            if tile:  # as_expr's 'expected a scalar expression' named neither the function nor what to do
                raise TilecTypeError(f"T.{fn.__name__} works on scalar values, got the tile {tile}: apply it to its "
                                     f"elements in a T.Parallel loop (T.{fn.__name__}({tile}[i]))")
        try:
            return fn(*args, **kwargs)
        except TilecError:
            raise
        except Exception as e:
            name = getattr(fn, "__qualname__", repr(fn))
            if module.startswith("tilec.language"):  # a T.* primitive, as the user wrote it
                name = f"T.{fn.__name__}"
            elif module and module != "builtins":
                name = f"{module}.{name}"
            value = next((a for a in [*args, *kwargs.values()] if isinstance(self.rvalue(a), Expr)), None)
            hint = ""
            if value is not None and not module.startswith("tilec"):
                hint = (f"; {value} is a kernel value, which a Python function gets as an expression when the kernel "
                        "is parsed, not as a number: use T.* functions on kernel values (T.exp, T.sqrt, T.max, ...)")
            raise TilecTypeError(f"calling {name}: {type(e).__name__}: {e}{hint}") from e

    def python_eval(self, node: ast.expr) -> Any:
        """Comprehensions, lambdas, f-strings: evaluated as plain Python over the current names."""
        if isinstance(node, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.Starred)):
            raise TilecSyntaxError(f"`{ast.unparse(node)}` is not supported in a kernel")
        code = compile(ast.Expression(_relocated(node)), self.src.file, "eval")
        scope = dict(self.env)
        scope.update(self.local)
        try:
            return eval(code, scope)  # noqa: S307 - the user's own kernel source
        except TilecError:
            raise
        except Exception as e:
            raise TilecTypeError(f"`{ast.unparse(node)}`: {type(e).__name__}: {e}") from e


# methods that change a Python list, dict or set in place (a kernel's run-time loop would run them once, at parse time)
_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update",
                       "setdefault", "popitem", "add", "discard", "__setitem__", "__delitem__", "__iadd__"})


def _relocated(node: ast.expr) -> ast.expr:
    return ast.fix_missing_locations(node)


def _as_text(v: Any, what: str) -> Any:
    """``v`` to be made into text when the kernel is parsed: a kernel value would give its expression (``bx``), not
    the value it has when the kernel runs."""
    if isinstance(v, Expr) and not isinstance(v, Const):
        raise TilecTypeError(f"{what} makes text of a kernel value when the kernel is parsed: the text is the "
                             f"expression {str(v)!r}, not its value at run time; print run-time values with "
                             "T.print(value, msg)")
    return v


def _key_parts(key: Any) -> list:
    """The indices and slice bounds of a subscript key."""
    out = []
    for k in key if isinstance(key, tuple) else (key,):
        out.extend((k.start, k.stop, k.step) if isinstance(k, slice) else (k,))
    return out


def _tile_name(v: Any) -> str | None:
    """The name of the tile ``v`` is (a buffer of one or more dimensions, or a region of one), else None."""
    if isinstance(v, Region):
        return v.buffer.name
    return v.name if isinstance(v, Buffer) and v.ndim > 0 else None


def _int_power(a: Expr, n: int) -> Expr:
    """``a ** n`` of a kernel int by squaring (``n >= 0``; 1 when ``n`` is 0)."""
    out: Expr | None = None
    while n:
        if n & 1:
            out = a if out is None else binop("*", out, a)
        n >>= 1
        if n:
            a = binop("*", a, a)
    return out if out is not None else as_expr(1, a.dtype)


def _as_bool(v: Any) -> Any:
    if isinstance(v, Expr):
        return v if v.dtype.is_bool else binop("!=", v, 0)
    return bool(v)


def _minmax(op: str):
    def fn(args: list) -> Any:
        if len(args) == 1:
            args = list(args[0])
        out = args[0]
        for a in args[1:]:
            out = binop(op, *fit_ints(out, a))
        return out

    return fn


_BUILTIN_OVERRIDES = {
    builtins.min: _minmax("min"),
    builtins.max: _minmax("max"),
    builtins.abs: lambda args: call("abs", args[0]),
    builtins.float: lambda args: cast("float32", args[0]),
    builtins.int: lambda args: cast("int32", args[0]),
    builtins.bool: lambda args: _as_bool(args[0]),
}
