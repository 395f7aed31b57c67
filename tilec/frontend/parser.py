"""Parse: the Python AST of a kernel function → Tile IR (pipeline stage 1).

The parser walks the function's AST itself (no tracing). Expressions over Python values are evaluated at
compile time, so block sizes, dtypes and flags are constants and an ``if`` on them folds away; expressions
over kernel values (block and loop indices, buffer elements) build IR. Statements map to IR as follows:

* ``with T.Kernel(...) as (bx, by)`` → :class:`~tilec.ir.stmt.KernelLaunch`
* ``for ... in T.serial / T.unroll / T.Pipelined / T.vectorized / range`` → :class:`~tilec.ir.stmt.For`;
  ``T.Parallel`` → :class:`~tilec.ir.stmt.Parallel`; ``for x in <Python list or tuple>`` unrolls at compile time
* ``buf[i, j] = v`` → :class:`~tilec.ir.stmt.Store`; ``x = v`` on a ``T.alloc_var`` likewise; any other
  ``name = value`` binds the name (kernel expressions are inlined where used)
* ``if`` → :class:`~tilec.ir.stmt.IfThenElse`, or the taken branch when the condition is a Python value
* calls of ``T.*`` primitives emit tile ops; ``@T.macro`` functions are parsed inline; other Python
  functions run at compile time.

Errors name the user's file, line and column.
"""

from __future__ import annotations

import ast
import builtins
import operator
from collections import ChainMap
from typing import Any

from tilec.errors import SourceLoc, TilecError, TilecSyntaxError, TilecTypeError, TilecValueError
from tilec.frontend.builder import Builder, KernelFrame, seq
from tilec.frontend.source import FunctionSource
from tilec.ir.buffer import Buffer, Region, index_buffer
from tilec.ir.expr import Expr, Load, Var, as_expr, binop, call, cast, select, unop
from tilec.ir.stmt import For, IfThenElse, KernelLaunch, Parallel, Store
from tilec.language.loops import KernelSpec, LoopSpec, serial
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
_SUPPORTED = ("assignments, `for` over T.serial/T.Pipelined/T.Parallel/T.unroll/range or a Python list, "
              "`if`/`else`, `with T.Kernel(...)`, calls of T.* primitives and @T.macro functions")


class Return(Exception):  # noqa: N818 - control flow, not an error
    def __init__(self, value: Any) -> None:
        self.value = value


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


_ACTIVE: list[Parser] = []


class Parser:
    """Parses one function body into the statements of a :class:`Builder`."""

    def __init__(self, src: FunctionSource, env: ChainMap, builder: Builder, local: dict[str, Any]) -> None:
        self.src = src
        self.env = env
        self.b = builder
        self.local = local

    # ------------------------------------------------------------------------------------------------ statements

    def run_body(self) -> Any:
        """Parse the function body; returns the value of its ``return`` (or None)."""
        _ACTIVE.append(self)
        try:
            self.block(self.src.tree.body)
        except Return as r:
            return r.value
        finally:
            _ACTIVE.pop()
        return None

    def block(self, stmts: list[ast.stmt]) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, node: ast.stmt) -> None:
        loc = self.src.loc(node)
        saved = self.b.loc
        self.b.loc = loc
        try:
            handler = getattr(self, f"visit_{type(node).__name__}", None)
            if handler is None:
                raise TilecSyntaxError(f"`{type(node).__name__}` statements are not supported in a kernel; "
                                       f"supported: {_SUPPORTED}")
            handler(node)
        except TilecError as e:
            raise attach_loc(e, loc) from None
        finally:
            self.b.loc = saved

    def visit_Pass(self, node: ast.Pass) -> None:
        pass

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring
        value = self.expr(node.value)
        if isinstance(value, (LoopSpec, KernelSpec)):
            raise TilecSyntaxError("a loop or kernel construct must be used in a `for` or `with` statement")

    def visit_Return(self, node: ast.Return) -> None:
        raise Return(None if node.value is None else self.expr(node.value))

    def visit_Assert(self, node: ast.Assert) -> None:
        cond = self.expr(node.test)
        if isinstance(cond, Expr):
            raise TilecSyntaxError("`assert` on a kernel value is not supported; asserts are checked at compile "
                                   "time on Python values")
        if not cond:
            msg = self.expr(node.msg) if node.msg is not None else f"assertion failed: {ast.unparse(node.test)}"
            raise TilecValueError(str(msg))

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = self.expr(node.exc) if node.exc is not None else None
        raise TilecValueError(f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else str(exc))

    def visit_Assign(self, node: ast.Assign) -> None:
        value = self.rhs(node.value, node.targets[0] if len(node.targets) == 1 else None)
        for t in node.targets:
            self.assign(t, value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        ann = self.expr(node.annotation)
        if node.value is None:
            if not isinstance(node.target, ast.Name):
                raise TilecSyntaxError("an annotation without a value must name a variable")
            self.annotate(node.target.id, ann)
            return
        value = self.rhs(node.value, node.target)
        if isinstance(value, Expr) and hasattr(ann, "is_float"):
            value = cast(ann, value)
        self.assign(node.target, value)

    def annotate(self, name: str, ann: Any) -> None:
        """``A: T.Tensor[[M, K], dtype]`` with no value; only eager kernels accept it (see eager.py)."""
        raise TilecSyntaxError(f"annotation of {name!r} without a value is only allowed in an eager @tilec.jit "
                               "kernel (to declare a tensor parameter's shape and dtype)")

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        op = type(node.op)
        value = self.expr(node.value)
        t = node.target
        if isinstance(t, ast.Name):
            old = self.lookup(t.id, t)
            self.assign(t, self.binary(op, self.rvalue(old), value))
        elif isinstance(t, ast.Subscript):
            ref = self.expr(t)
            if not isinstance(ref, Load):
                raise TilecSyntaxError(f"`{ast.unparse(t)} {ast.unparse(node.op)}= ...` needs one element; "
                                       "use a T.Parallel loop for a tile")
            self.store(ref, self.binary(op, ref, value))
        else:
            raise TilecSyntaxError(f"cannot assign to `{ast.unparse(t)}`")

    def rhs(self, value: ast.expr, target: ast.expr | None) -> Any:
        if isinstance(target, ast.Name) and isinstance(value, ast.Call):
            self.b.name_hint = target.id
        try:
            return self.expr(value)
        finally:
            self.b.name_hint = None

    def assign(self, t: ast.expr, value: Any) -> None:
        if isinstance(t, ast.Name):
            old = self.local.get(t.id)
            if isinstance(old, Buffer) and old.scope == "var" and not isinstance(value, Buffer):
                self.store(Load(old, ()), value)
            else:
                self.local[t.id] = value
        elif isinstance(t, (ast.Tuple, ast.List)):
            try:
                items = list(value)
            except TypeError:
                raise TilecTypeError(f"cannot unpack {value!r} into `{ast.unparse(t)}`") from None
            if len(items) != len(t.elts):
                raise TilecValueError(f"cannot unpack {len(items)} values into {len(t.elts)} names "
                                      f"(`{ast.unparse(t)}`)")
            for sub, v in zip(t.elts, items):
                self.assign(sub, v)
        elif isinstance(t, ast.Subscript):
            base = self.expr(t.value)
            key = self.subscript_key(t.slice)
            if isinstance(base, Load) and base.buffer.scope == "var" and key in (0, ()):
                self.store(base, value)
            elif isinstance(base, Buffer):
                ref = index_buffer(base, key)
                if isinstance(ref, Region):
                    raise TilecSyntaxError(f"assigning to the slice `{ast.unparse(t)}` is not supported; use "
                                           "T.fill(region, value), T.copy(src, region) or a T.Parallel loop")
                self.store(ref, value)
            elif isinstance(base, (list, dict)):
                base[key] = value
            else:
                raise TilecSyntaxError(f"cannot assign to an element of {type(base).__name__} `{ast.unparse(t)}`")
        else:
            raise TilecSyntaxError(f"cannot assign to `{ast.unparse(t)}`")

    def store(self, ref: Load, value: Any) -> None:
        if isinstance(value, (Buffer, Region)):
            raise TilecTypeError(f"cannot store the tile {value} into the element {ref}; use T.copy")
        if ref.buffer.scope == "global" and self.b.kernel is None:
            raise TilecSyntaxError(f"stores to {ref.buffer.name!r} must be inside `with T.Kernel(...)`")
        v = cast(ref.dtype, as_expr(self.rvalue(value), ref.dtype))
        self.b.emit(Store(ref.buffer, ref.indices, v, loc=self.b.loc))

    def visit_If(self, node: ast.If) -> None:
        cond = self.rvalue(self.expr(node.test))
        if not isinstance(cond, Expr):
            self.block(node.body if cond else node.orelse)
            return
        with self.b.frame() as then:
            self.block(node.body)
        other = None
        if node.orelse:
            with self.b.frame() as els:
                self.block(node.orelse)
            other = seq(els) if els else None
        if not cond.dtype.is_bool:
            cond = binop("!=", cond, 0)
        if then or other is not None:
            self.b.emit(IfThenElse(cond, seq(then), other, loc=self.b.loc))

    def visit_With(self, node: ast.With) -> None:
        if len(node.items) != 1:
            raise TilecSyntaxError("`with` takes exactly one T.Kernel(...) in a kernel")
        item = node.items[0]
        spec = self.expr(item.context_expr)
        if not isinstance(spec, KernelSpec):
            raise TilecSyntaxError(f"`with` in a kernel takes T.Kernel(...), got {type(spec).__name__}")
        if self.b.kernel is not None:
            raise TilecSyntaxError("T.Kernel cannot be nested")
        names = self.target_names(item.optional_vars, len(spec.grid), "T.Kernel") if item.optional_vars else []
        defaults = ["bx", "by", "bz"]
        bvars = tuple(Var(names[i] if i < len(names) else defaults[i]) for i in range(len(spec.grid)))
        if len(names) == 1 and len(spec.grid) > 1 or len(names) > len(spec.grid):
            raise TilecSyntaxError(f"T.Kernel has {len(spec.grid)} grid dimension(s) but binds {len(names)} name(s)")
        for n, v in zip(names, bvars):
            self.local[n] = v
        kernel = self.b.kernel = KernelFrame(spec.threads)
        try:
            with self.b.frame() as body:
                self.block(node.body)
        finally:
            self.b.kernel = None
        launch = KernelLaunch(spec.grid, bvars, spec.threads, seq(body), tuple(kernel.allocs),
                              tuple(kernel.layout_map.items()), kernel.swizzle, loc=self.src.loc(node))
        self.b.emit(launch)

    def target_names(self, t: ast.expr, n: int, what: str) -> list[str]:
        elts = t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]
        if not all(isinstance(e, ast.Name) for e in elts):
            raise TilecSyntaxError(f"{what} binds plain names, got `{ast.unparse(t)}`")
        return [e.id for e in elts]  # type: ignore[attr-defined]

    def visit_For(self, node: ast.For) -> None:
        if node.orelse:
            raise TilecSyntaxError("`for ... else` is not supported in a kernel")
        it = self.expr(node.iter)
        if isinstance(it, range):
            it = serial(it.start, it.stop, it.step)
        if isinstance(it, LoopSpec):
            self.loop(node, it)
        elif isinstance(it, (list, tuple)):
            for v in it:  # unrolled at compile time
                self.assign(node.target, v)
                self.block(node.body)
        else:
            raise TilecSyntaxError(f"`for` in a kernel iterates T.serial/T.Pipelined/T.Parallel/T.unroll/range or a "
                                   f"Python list, got {type(it).__name__}")

    def loop(self, node: ast.For, spec: LoopSpec) -> None:
        names = self.target_names(node.target, len(spec.extents), f"T.{spec.kind}")
        if len(names) != len(spec.extents):
            raise TilecSyntaxError(f"T.{spec.kind} has {len(spec.extents)} extent(s) but the loop binds "
                                   f"{len(names)} name(s)")
        vs = [Var(n) for n in names]
        for n, v, start, step in zip(names, vs, spec.starts, spec.steps):
            self.local[n] = v if (isinstance(start, int) and start == 0 and step == 1) else start + v * step
        if spec.kind == "parallel":
            self.b.parallel_depth += 1
        try:
            with self.b.frame() as body:
                self.block(node.body)
        finally:
            if spec.kind == "parallel":
                self.b.parallel_depth -= 1
        self.b.emit(self.make_loop(spec, vs, seq(body) if body else None))

    def make_loop(self, spec: LoopSpec, vs: list[Var], body: Any) -> Any:
        from tilec.ir.stmt import SeqStmt

        body = body if body is not None else SeqStmt(())
        loc = self.b.loc
        if spec.kind == "parallel":
            if self.b.kernel is None:
                raise TilecSyntaxError("T.Parallel must be inside `with T.Kernel(...)`")
            extents = tuple(e if isinstance(e, int) else as_expr(e) for e in spec.extents)
            if isinstance(body, Parallel) and self.b.parallel_depth == 0:  # perfectly nested: one loop nest
                return Parallel(tuple(vs) + body.vars, extents + body.extents, body.body, loc=loc)
            return Parallel(tuple(vs), extents, body, loc=loc)
        kind = "serial" if spec.kind == "grid" else spec.kind
        for v, e in reversed(list(zip(vs, spec.extents))):
            ext = as_expr(e)
            if not ext.dtype.is_int:
                raise TilecTypeError(f"loop extent {ext} must be an integer, got {ext.dtype}")
            body = For(v, ext, kind, body, spec.annotations, loc=loc)
        return body

    # ----------------------------------------------------------------------------------------------- expressions

    def lookup(self, name: str, node: ast.AST) -> Any:
        if name in self.local:
            v = self.local[name]
        elif name in self.env:
            v = self.env[name]
        else:
            raise TilecSyntaxError(f"name {name!r} is not defined", self.src.loc(node))
        if isinstance(v, ConstSymbol):
            if v.value is None:
                raise TilecSyntaxError(f"{v.name!r} (T.const) is used before a tensor annotation binds it")
            return v.value
        return v

    def rvalue(self, v: Any) -> Any:
        """A value as an operand: ``T.alloc_var`` buffers read as their element."""
        if isinstance(v, Buffer) and v.scope == "var":
            return Load(v, ())
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
            return index_buffer(base, key)
        if isinstance(base, Expr):
            raise TilecTypeError(f"`{ast.unparse(node.value)}` is a scalar kernel value and cannot be indexed")
        try:
            return base[key]
        except Exception as e:
            raise TilecTypeError(f"`{ast.unparse(node)}`: {type(e).__name__}: {e}") from None

    def binary(self, op: type, a: Any, b: Any) -> Any:
        a, b = self.rvalue(a), self.rvalue(b)
        if not isinstance(a, Expr) and not isinstance(b, Expr):
            try:
                return _PY_BINOPS[op](a, b)
            except Exception as e:
                raise TilecTypeError(f"{type(e).__name__}: {e}") from None
        if op is ast.Pow:
            return self.power(a, b)
        if op not in _BINOPS:
            raise TilecSyntaxError(f"operator {op.__name__} is not supported on kernel values")
        return binop(_BINOPS[op], a, b)

    def power(self, a: Any, b: Any) -> Expr:
        if isinstance(b, int) and not isinstance(b, bool) and 0 < b <= 4:
            out = a
            for _ in range(b - 1):
                out = binop("*", out, a)
            return out
        x = as_expr(a)
        if not x.dtype.is_float and not (isinstance(b, Expr) and b.dtype.is_float):
            x = cast("float32", x)
        return call("pow", x, b)

    def expr_BinOp(self, node: ast.BinOp) -> Any:
        return self.binary(type(node.op), self.expr(node.left), self.expr(node.right))

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Any:
        v = self.rvalue(self.expr(node.operand))
        op = type(node.op)
        if not isinstance(v, Expr):
            return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                    ast.Invert: operator.invert}[op](v)
        return {ast.USub: lambda: unop("-", v), ast.UAdd: lambda: v, ast.Not: lambda: unop("not", v),
                ast.Invert: lambda: unop("~", v)}[op]()

    def expr_BoolOp(self, node: ast.BoolOp) -> Any:
        is_and = isinstance(node.op, ast.And)
        result: Any = None
        for i, sub in enumerate(node.values):
            v = self.rvalue(self.expr(sub))
            if i == 0:
                result = v
            elif isinstance(result, Expr) or isinstance(v, Expr):
                result = binop("and" if is_and else "or", _as_bool(result), _as_bool(v))
            else:
                result = v
            if not isinstance(result, Expr) and (not result if is_and else result):
                return result  # Python short-circuit
        return result

    def expr_Compare(self, node: ast.Compare) -> Any:
        left = self.rvalue(self.expr(node.left))
        result: Any = True
        for op, right_node in zip(node.ops, node.comparators):
            right = self.rvalue(self.expr(right_node))
            if isinstance(left, Expr) or isinstance(right, Expr):
                if type(op) not in _CMPOPS:
                    raise TilecSyntaxError(f"`{ast.unparse(node)}`: `is`/`in` do not apply to kernel values")
                part: Any = binop(_CMPOPS[type(op)], left, right)
            else:
                part = _PY_CMPOPS[type(op)](left, right)
            result = part if result is True else (binop("and", result, part) if isinstance(result, Expr) or
                                                  isinstance(part, Expr) else (result and part))
            if result is False:
                return False
            left = right
        return result

    def expr_IfExp(self, node: ast.IfExp) -> Any:
        cond = self.rvalue(self.expr(node.test))
        if not isinstance(cond, Expr):
            return self.expr(node.body if cond else node.orelse)
        return select(cond, self.rvalue(self.expr(node.body)), self.rvalue(self.expr(node.orelse)))

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
        if fn in _BUILTIN_OVERRIDES and any(isinstance(self.rvalue(a), Expr) for a in args):
            return _BUILTIN_OVERRIDES[fn]([self.rvalue(a) for a in args])
        if fn is builtins.range:
            return range(*args) if all(isinstance(a, int) for a in args) else serial(*args)
        if isinstance(fn, Macro):
            return self.inline(fn, args, kwargs)
        try:
            return fn(*args, **kwargs)
        except TilecError:
            raise
        except Exception as e:
            name = getattr(fn, "__qualname__", repr(fn))
            raise TilecTypeError(f"calling {name}: {type(e).__name__}: {e}") from e

    def inline(self, macro: Macro, args: tuple | list, kwargs: dict) -> Any:
        import inspect

        from tilec.frontend.source import function_env, function_source

        try:
            bound = inspect.signature(macro.fn).bind(*args, **kwargs)
        except TypeError as e:
            raise TilecTypeError(f"macro {macro.__name__!r}: {e}") from None
        bound.apply_defaults()
        sub = Parser(function_source(macro.fn), function_env(macro.fn), self.b, dict(bound.arguments))
        return sub.run_body()

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


def _relocated(node: ast.expr) -> ast.expr:
    return ast.fix_missing_locations(node)


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
            out = binop(op, out, a)
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
