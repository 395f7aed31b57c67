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

Expressions are evaluated by :class:`~tilec.frontend.expressions.ExprParser`, the base class of :class:`Parser`.
Errors name the user's file, line and column.
"""

from __future__ import annotations

import ast
from collections import ChainMap
from typing import Any

from tilec.errors import TilecError, TilecSyntaxError, TilecTypeError, TilecValueError, where
from tilec.frontend.builder import Builder, KernelFrame, seq
from tilec.frontend.expressions import _ACTIVE, ExprParser, Macro, attach_loc
from tilec.frontend.scopes import reads_written, writes_of
from tilec.frontend.source import FunctionSource
from tilec.ir.buffer import Buffer, Region, index_buffer
from tilec.ir.expr import Expr, Load, Var, as_expr, binop, cast
from tilec.ir.stmt import For, IfThenElse, KernelLaunch, Parallel, Store
from tilec.ir.visit import walk
from tilec.language.loops import Kernel, KernelSpec, LoopSpec, serial

_SUPPORTED = ("assignments, `for` over T.serial/T.Pipelined/T.Parallel/T.unroll/range or a Python list, "
              "`if`/`else`, `with T.Kernel(...)`, calls of T.* primitives and @T.macro functions")


_KEYWORDS = {
    "While": "while", "Try": "try", "TryStar": "try", "Break": "break", "Continue": "continue", "Delete": "del",
    "Global": "global", "Nonlocal": "nonlocal", "Import": "import", "ImportFrom": "from ... import",
    "FunctionDef": "def", "AsyncFunctionDef": "async def", "ClassDef": "class", "Match": "match",
    "AsyncFor": "async for", "AsyncWith": "async with", "TypeAlias": "type",
}  # fmt: skip


class Return(Exception):  # noqa: N818 - control flow, not an error
    def __init__(self, value: Any, loc: Any = None) -> None:
        self.value = value
        self.loc = loc



__all__ = ["Macro", "Parser", "attach_loc"]


class Parser(ExprParser):
    """Parses one function body into the statements of a :class:`Builder`."""

    def __init__(self, src: FunctionSource, env: ChainMap, builder: Builder, local: dict[str, Any]) -> None:
        self.src = src
        self.env = env
        self.b = builder
        self.local = local
        self.bodies = []  # the run-time loop bodies and `if` branches being parsed (see scopes.py)
        self.kernel_depth = 0  # how many `with T.Kernel` of this function body enclose the statement being parsed
        self.return_loc = None  # where the body returned (eager kernels name it in errors about their outputs)

    # ------------------------------------------------------------------------------------------------ statements

    def run_body(self) -> Any:
        """Parse the function body; returns the value of its ``return`` (or None)."""
        _ACTIVE.append(self)
        try:
            self.block(self.src.tree.body)
        except Return as r:
            self.return_loc = r.loc
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
        frame = self.b.frames[-1]
        emitted = len(frame)
        try:
            handler = getattr(self, f"visit_{type(node).__name__}", None)
            if handler is None:
                what = _KEYWORDS.get(type(node).__name__, type(node).__name__)
                raise TilecSyntaxError(f"`{what}` statements are not supported in a kernel; supported: {_SUPPORTED}")
            handler(node)
            for s in frame[emitted:]:
                self.note_writes(s, where(loc))
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
        if self.kernel_depth:
            raise TilecSyntaxError("`return` inside `with T.Kernel(...)` is not supported: every block runs the whole "
                                   "body; guard the work with `if` instead")
        if self.bodies:  # a macro's: parsed once, so the return would be taken whatever the condition or trip
            raise TilecSyntaxError(f"`return` inside {self.bodies[-1].what} is not supported: a macro's body is "
                                   "parsed once, so it would return there every time; return after the `if` or "
                                   "loop, with the value in a T.alloc_var or T.if_then_else(cond, a, b)")
        raise Return(None if node.value is None else self.expr(node.value), self.b.loc)

    def visit_Assert(self, node: ast.Assert) -> None:
        cond = self.truth(self.rvalue(self.expr(node.test)), node.test)
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
        value = self.by_value(node.value, self.rhs(node.value, node.targets[0] if len(node.targets) == 1 else None))
        frame = self.b.frames[-1]
        for k, t in enumerate(node.targets):
            emitted = len(frame)
            self.assign(t, value)
            later = node.targets[k + 1:]
            w = next((w for s in frame[emitted:] for w in writes_of(s) if later and reads_written(value, w)), None)
            if w is not None:
                raise TilecSyntaxError(
                    f"`{ast.unparse(node)}`: the value reads {w[0].name}, which the target `{ast.unparse(t)}` stores "
                    f"to before `{ast.unparse(later[0])}` is assigned; Python evaluates the value once, a kernel at "
                    "each store, so the later targets would get the new value; assign them in separate statements "
                    "(the last target first, then the others from it)")

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is None:
            if not isinstance(node.target, ast.Name):
                raise TilecSyntaxError("an annotation without a value must name a variable")
            self.unbound_consts_ok = True  # `A: T.Tensor[[M, K], dtype]` binds the T.const symbols M and K
            try:
                ann = self.expr(node.annotation)
            finally:
                self.unbound_consts_ok = False
            self.annotate(node.target.id, ann)
            return
        ann = self.expr(node.annotation)
        value = self.by_value(node.value, self.rhs(node.value, node.target))
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
        elif isinstance(t, ast.Subscript) and isinstance(base := self.expr(t.value), (list, dict)):
            key = self.subscript_key(t.slice)
            self.set_item(base, key, self.binary(op, self.expr(t), value), t)
        elif isinstance(t, ast.Subscript):
            ref = self.expr(t)
            if not isinstance(ref, Load):
                raise TilecSyntaxError(f"`{ast.unparse(node)}` needs one element of {ast.unparse(t.value)!r}; "
                                       "use a T.Parallel loop for a tile")
            self.store(ref, self.binary(op, ref, value))
        else:
            raise TilecSyntaxError(f"cannot assign to `{ast.unparse(t)}`")

    def rhs(self, value: ast.expr, target: ast.expr | None) -> Any:
        if isinstance(target, ast.Name) and (isinstance(value, ast.Call) or isinstance(value, ast.IfExp) and
                                             isinstance(value.body, ast.Call) and isinstance(value.orelse, ast.Call)):
            self.b.name_hint = target.id
        try:
            return self.expr(value)
        finally:
            self.b.name_hint = None

    def by_value(self, node: ast.expr, value: Any) -> Any:
        """A T.alloc_var named on an assignment's right side (``a = b``, ``a, b = b, a``) is read for its value: the
        target gets that value (stored when it is a T.alloc_var too), not the name of b's buffer."""
        if isinstance(node, ast.Name):
            return self.rvalue(value)
        if isinstance(node, (ast.Tuple, ast.List)) and isinstance(value, (tuple, list)) \
                and len(node.elts) == len(value):
            return type(value)(self.by_value(n, v) for n, v in zip(node.elts, value))
        return value

    def assign(self, t: ast.expr, value: Any) -> None:
        if isinstance(t, ast.Name):
            old = self.local.get(t.id)
            if isinstance(old, Buffer) and old.scope == "var" and not isinstance(value, Buffer):
                self.store(Load(old, ()), value)
            else:
                self.bind(t.id, value)
        elif isinstance(t, (ast.Tuple, ast.List)):
            try:
                items = list(value)
            except TilecError:
                raise
            except TypeError:
                raise TilecTypeError(f"cannot unpack {value!r} into `{ast.unparse(t)}`") from None
            targets, items = self.starred(t, items)
            if len(items) != len(targets):
                raise TilecValueError(f"cannot unpack {len(items)} values into {len(t.elts)} names "
                                      f"(`{ast.unparse(t)}`)")
            self.unpack(t, targets, items)
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
                self.set_item(base, key, value, t)
            else:
                raise TilecSyntaxError(f"cannot assign to an element of {type(base).__name__} `{ast.unparse(t)}`")
        else:
            raise TilecSyntaxError(f"cannot assign to `{ast.unparse(t)}`")

    def set_item(self, base: list | dict, key: Any, value: Any, t: ast.Subscript) -> None:
        """``xs[k] = v`` on a Python list or dict: done once, at compile time, so not in a run-time loop or `if`."""
        if self.bodies:
            raise TilecSyntaxError(
                f"`{ast.unparse(t)} = ...` changes the Python {type(base).__name__} {ast.unparse(t.value)} once, when "
                f"the kernel is parsed, not each time {self.bodies[-1].what} runs; keep a value that changes in a "
                "T.alloc_var or a buffer")
        try:
            base[key] = value
        except Exception as e:
            raise TilecTypeError(f"`{ast.unparse(t)} = ...`: {type(e).__name__}: {e}") from None

    def starred(self, t: ast.Tuple | ast.List, items: list) -> tuple[list[ast.expr], list]:
        """The targets and values of ``a, *rest = values``: the starred target takes a list of the values the others
        leave, as in Python."""
        stars = [k for k, e in enumerate(t.elts) if isinstance(e, ast.Starred)]
        if not stars:
            return list(t.elts), items
        k, after = stars[0], len(t.elts) - stars[0] - 1
        if len(stars) > 1 or len(items) < len(t.elts) - 1:
            raise TilecValueError(f"cannot unpack {len(items)} value(s) into `{ast.unparse(t)}`")
        targets = [e.value if isinstance(e, ast.Starred) else e for e in t.elts]
        return targets, items[:k] + [items[k:len(items) - after]] + items[len(items) - after:]

    def unpack(self, t: ast.Tuple | ast.List, targets: list[ast.expr], items: list) -> None:
        """``x, y = a, b``: Python evaluates the whole right side first; a kernel stores the targets one after
        another, so a value reading what an earlier target stored would read the new element: an error."""
        frame = self.b.frames[-1]
        for k, (sub, v) in enumerate(zip(targets, items)):
            emitted = len(frame)
            self.assign(sub, v)
            for w in (w for s in frame[emitted:] for w in writes_of(s)):
                later = next((e for e, x in zip(targets[k + 1:], items[k + 1:]) if reads_written(x, w)), None)
                if later is not None:
                    raise TilecSyntaxError(
                        f"`{ast.unparse(t)} = ...`: the value for `{ast.unparse(later)}` reads {w[0].name}, which the "
                        f"target `{ast.unparse(sub)}` before it stores to; Python evaluates the whole right side "
                        "first, a kernel stores the targets one after another, so it would read the new value; assign "
                        "through a temporary (a T.alloc_var, or a fragment inside T.Parallel)")

    def store(self, ref: Load, value: Any) -> None:
        value = self.rvalue(value)  # a T.alloc_var read by name is its element
        if isinstance(value, (Buffer, Region)):
            raise TilecTypeError(f"cannot store the tile {value} into the element {ref}; use T.copy")
        if ref.buffer.scope == "global" and self.b.kernel is None:
            raise TilecSyntaxError(f"stores to {ref.buffer.name!r} must be inside `with T.Kernel(...)`")
        v = cast(ref.dtype, as_expr(self.rvalue(value), ref.dtype))
        self.b.emit(Store(ref.buffer, ref.indices, v, loc=self.b.loc))

    def visit_If(self, node: ast.If) -> None:
        cond = self.truth(self.rvalue(self.expr(node.test)), node.test)
        if not isinstance(cond, Expr):
            self.block(node.body if cond else node.orelse)
            return
        what = f"the `if` at {where(self.src.loc(node))}"
        with self.b.frame() as then, self.runtime_body(what, is_loop=False) as then_body:
            self.block(node.body)
        other = None
        bodies = [then_body]
        if node.orelse:
            with self.b.frame() as els, self.runtime_body(what, is_loop=False) as else_body:
                self.block(node.orelse)
            other = seq(els) if els else None
            bodies.append(else_body)
        self.close_bodies(bodies)
        if not cond.dtype.is_bool:
            cond = binop("!=", cond, 0)
        if then or other is not None:
            self.b.emit(IfThenElse(cond, seq(then), other, loc=self.b.loc))

    def visit_With(self, node: ast.With) -> None:
        if len(node.items) != 1:
            raise TilecSyntaxError("`with` takes exactly one T.Kernel(...) in a kernel")
        item = node.items[0]
        ctx = item.context_expr
        if isinstance(ctx, ast.Call) and (fn := self.expr(ctx.func)) is not Kernel and not isinstance(fn, Macro):
            # not called: the error comes before anything else runs (`with open(path)` would open the file)
            raise TilecSyntaxError(f"`with` in a kernel takes T.Kernel(...), got `{ast.unparse(ctx)}`")
        spec = self.expr(ctx)
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
        self.kernel_depth += 1
        try:
            with self.b.frame() as body:
                self.block(node.body)
        finally:
            self.b.kernel = None
            self.kernel_depth -= 1
        launch = KernelLaunch(spec.grid, bvars, spec.threads, seq(body), tuple(kernel.allocs),
                              tuple(kernel.layout_map.items()), kernel.swizzle,
                              tuple(kernel.layout_locs.get(b) for b in kernel.layout_map), loc=self.src.loc(node))
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
        names = self.target_names(node.target, len(spec.extents), spec.ctor)
        if len(names) != len(spec.extents):
            raise TilecSyntaxError(f"{spec.ctor} has {len(spec.extents)} extent(s) but the loop binds "
                                   f"{len(names)} name(s)")
        vs = [Var(n) for n in names]
        ctor = spec.ctor
        what = f"the {ctor} loop at {where(self.src.loc(node))}"
        if spec.kind == "parallel":
            self.b.parallel_depth += 1
        try:
            with self.b.frame() as body, self.runtime_body(what, True) as rb:
                for n, v, start, step in zip(names, vs, spec.starts, spec.steps):
                    self.bind(n, v if (isinstance(start, int) and start == 0 and step == 1) else start + v * step)
                self.block(node.body)
        finally:
            if spec.kind == "parallel":
                self.b.parallel_depth -= 1
        self.close_bodies([rb])
        self.b.emit(self.make_loop(spec, vs, seq(body) if body else None))

    def make_loop(self, spec: LoopSpec, vs: list[Var], body: Any) -> Any:
        from tilec.ir.stmt import SeqStmt

        body = body if body is not None else SeqStmt(())
        loc = self.b.loc
        if spec.kind == "parallel":
            if self.b.kernel is None:
                raise TilecSyntaxError("T.Parallel must be inside `with T.Kernel(...)`")
            extents = tuple(e if isinstance(e, int) else as_expr(e) for e in spec.extents)
            if any(isinstance(e, int) and e <= 0 for e in extents):  # as range(0): no iteration (and no layout of
                return SeqStmt(())  # a zero-size loop nest, which the GPU targets could not build)
            width = dict(spec.annotations).get("coalesced_width", 0)
            if isinstance(body, Parallel):  # perfectly nested: one loop nest (the inner loop's width is innermost)
                return Parallel(tuple(vs) + body.vars, extents + body.extents, body.body,
                                body.coalesced_width or width, loc=loc)
            inner = next((n for n in walk(body) if isinstance(n, Parallel)), None)
            if inner is not None:
                raise TilecSyntaxError("a T.Parallel loop inside another one must be its whole body (perfect nesting, "
                                       "which merges into one `for i, j in T.Parallel(M, N)`); here the outer loop's "
                                       "body has other statements too", inner.loc)
            return Parallel(tuple(vs), extents, body, width, loc=loc)
        kind = "serial" if spec.kind == "grid" else spec.kind
        for v, e in reversed(list(zip(vs, spec.extents))):
            ext = as_expr(e)
            if not ext.dtype.is_int:
                raise TilecTypeError(f"loop extent {ext} must be an integer, got {ext.dtype}")
            body = For(v, ext, kind, body, spec.annotations, loc=loc)
        return body

    # ----------------------------------------------------------------------------------------------- expressions

    def inline(self, macro: Macro, args: tuple | list, kwargs: dict) -> Any:
        import dataclasses
        import inspect

        from tilec.frontend.source import function_env, function_source

        try:
            bound = inspect.signature(macro.fn).bind(*args, **kwargs)
        except TypeError as e:
            raise TilecTypeError(f"macro {macro.__name__!r}: {e}") from None
        bound.apply_defaults()
        src = dataclasses.replace(function_source(macro.fn), kernel_file=self.src.kernel_file or self.src.file,
                                  site=self.b.loc)  # the call's (ExprParser sets it)
        sub = Parser(src, function_env(macro.fn), self.b, dict(bound.arguments))
        self.b.macro_depth += 1
        try:
            return sub.run_body()
        except RecursionError:
            if self.b.macro_depth > 1:
                raise  # up to the outermost macro call, where the stack is short again
            raise TilecSyntaxError(f"macro {macro.__name__!r} expands without end: its macro calls nest deeper than "
                                   "Python's recursion limit; a macro that calls itself must stop on a compile-time "
                                   "condition (an `if` on Python values, such as a size that shrinks)") from None
        finally:
            self.b.macro_depth -= 1

