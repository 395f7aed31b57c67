"""The kernel: a function over global tensors and scalars whose body is one kernel launch."""

from __future__ import annotations

from dataclasses import dataclass, field

from tilec.errors import SourceLoc, TilecTypeError
from tilec.ir.buffer import Buffer
from tilec.ir.expr import Var
from tilec.ir.stmt import KernelLaunch, Stmt


@dataclass(frozen=True, eq=False)
class PrimFunc:
    """A tile kernel.

    Parameters
    ----------
    name : str
    params : tuple of Buffer or Var
        Global tensors (``T.Tensor``) and scalar parameters (``T.int32`` ...), in call order.
    body : Stmt
        A :class:`~tilec.ir.stmt.KernelLaunch`.
    dyn_vars : tuple of Var
        Symbolic dimensions (``T.dynamic``) of the parameters' shapes, bound from the arguments at launch.
    out_params : tuple of int
        Indices into ``params`` of tensors the kernel allocates and returns (``out_idx``, ``T.empty``).
    defaults : tuple of (int, value)
        Defaults of scalar parameters (``n: T.int32 = 3``): the index into ``params`` and the Python value a call
        that leaves the parameter out passes.
    """

    name: str
    params: tuple[Buffer | Var, ...]
    body: Stmt
    dyn_vars: tuple[Var, ...] = ()
    out_params: tuple[int, ...] = ()
    defaults: tuple[tuple[int, int | float | bool], ...] = ()
    loc: SourceLoc | None = field(default=None, kw_only=True, repr=False)

    __hash__ = object.__hash__

    @property
    def launch(self) -> KernelLaunch:
        assert isinstance(self.body, KernelLaunch)
        return self.body

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        return tuple(p for p in self.params if isinstance(p, Buffer))

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise TilecTypeError(f"{self.name!r} is a @T.prim_func, the kernel's IR, which does not run by itself: "
                             f"compile it, kernel = tilec.compile({self.name}, target=...), then call kernel(...) (or "
                             "return it from a @tilec.jit factory and call what the factory gives)")

    def __str__(self) -> str:
        from tilec.ir.printer import print_func

        return print_func(self)
