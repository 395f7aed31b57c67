"""``@tilec.jit``: compile a kernel once per argument tuple and run it.

Two forms, as in TileLang:

* lazy — the decorated function is a factory of compile-time values returning a ``@T.prim_func``; calling
  it returns a :class:`JITKernel`, memoized per argument tuple;
* eager — the decorated function is the kernel itself, its tensor parameters read from the actual arrays
  (``T.const`` symbols bound by ``A: T.Tensor[[M, K], dtype]`` annotations, outputs made by ``T.empty``);
  calling it compiles (once per shapes, dtypes and other arguments) and runs, returning the outputs.

Either way a kernel is reused only while the globals and closure variables the function's source names are bound
to what they were when it was made (a module constant rebound, an equal number or string aside, makes a new one);
what a bound object holds (a list changed in place, a helper's own globals) is not checked.
"""

from __future__ import annotations

import ast
import functools
import inspect
import numbers
import os
from typing import Any

from tilec.errors import TilecError, TilecRuntimeError, TilecTypeError, TilecValueError
from tilec.ir.kernel import PrimFunc
from tilec.runtime.arrays import array_info, named_array_info
from tilec.runtime.reuse import environment, free_names, freeze, unchanged
from tilec.target import Target, parse_target
from tilec.tune.knobs import auto_params, is_auto


def default_pass_configs() -> dict:
    """Pass configs from the environment: on sm_90a (other targets ignore them) the Hopper path — wgmma for T.gemm,
    its pipelines fed by TMA — unless ``TILEC_WGMMA=0``. A kernel's own pass configs override these."""
    from tilec.config import config

    return {"wgmma": True, "tma": True} if config().wgmma else {}


class JITKernel:
    """A compiled kernel: call it with arrays; inspect it with ``ftg``, ``report()``, ``get_kernel_source()``."""

    def __init__(self, func: PrimFunc, target: str | Target | None = None, out_idx: Any = None,
                 pass_configs: dict | None = None) -> None:
        if not isinstance(func, PrimFunc):
            raise TilecTypeError(f"expected a @T.prim_func kernel, got {type(func).__name__}")
        self.prim_func = _with_outputs(func, out_idx)
        self.target = parse_target(target)
        from tilec.passes.configs import check_pass_configs

        self.asked = check_pass_configs(pass_configs)  # the kernel's own pass configs
        self.pass_configs = {**default_pass_configs(), **self.asked}
        self._state: Any = None
        self._exe: Any = None
        self._fast: Any = None  # the generated launcher (False: this kernel has none)
        self._calls = 0
        self.environment: tuple = ()  # what the names of the jit function's source were bound to (see JITFunction)
        self.notes: tuple[str, ...] = ()  # report notes of tilec.jit's TileLang-only options (see _tilelang_notes)

    # ------------------------------------------------------------------------------------------------ compile

    @property
    def state(self) -> Any:
        """The compile state after the whole pipeline (built on first use; needs no device)."""
        if self._state is None:
            from tilec.passes.pipeline import run_pipeline

            target = self.build_target()
            state = run_pipeline(self.prim_func, target, options=self.pass_configs)
            from tilec.passes.configs import target_inert

            inert = target_inert(target, self.asked, self.pass_configs)
            self._state = state.with_(report=self.notes + tuple(inert) + state.report)
        return self._state

    def build_target(self) -> Target:
        """The target the kernel is built for: ``cuda`` naming no architecture takes the device's (read once)."""
        if self.target.kind == "cuda" and not self.target.arch:
            from tilec.backends.cuda.runtime import device_arch
            from tilec.target import archs

            try:
                arch = device_arch()
            except TilecRuntimeError as e:  # no driver, no device: the message said only that
                raise TilecRuntimeError(f"target 'cuda' compiles for the GPU's architecture, and no NVIDIA GPU is "
                                        f"usable ({e}): name one, target='cuda:sm_90a', to build the source and "
                                        "report without a GPU; run the kernel on the CPU with 'simt:sm_90a' or "
                                        "'cpu'") from e
            if arch not in archs("cuda"):  # older than Ampere, or newer than tilec's device models and tests
                raise TilecRuntimeError(f"the GPU is {arch}, which tilec's CUDA backend does not target (it builds "
                                        f"for {', '.join(archs('cuda'))}); target='cpu' runs the kernel on the CPU "
                                        "interpreter")
            self.target = Target("cuda", arch)
        return self.target

    @property
    def ftg(self) -> Any:
        """The kernel's fused tile dataflow graph (:class:`tilec.ftg.FTG`)."""
        return self.state.ftg

    def compile(self) -> JITKernel:
        """Build the executable now (otherwise it is built at the first call). A CUDA kernel compiled before,
        by this or another process, comes from the disk cache without running the pipeline."""
        if self._exe is None:
            if self.target.kind == "cuda":
                from tilec.backends.cuda.runtime import CudaExecutable, load_cached

                ck = load_cached(self.prim_func, self.build_target(), self.pass_configs)
                if ck is not None:
                    self._exe = CudaExecutable(ck, self.prim_func)
                    return self
            from tilec.backends import executable_for

            self._exe = executable_for(self.state, self.pass_configs)
        return self

    @property
    def n_regs(self) -> int:
        """Registers per thread of the compiled CUDA / HIP kernel."""
        return self._compiled("n_regs").n_regs

    @property
    def n_spills(self) -> int:
        """Bytes of register spill stores reported by ptxas (the HIP compiler on AMD)."""
        return self._compiled("n_spills").n_spills

    def _compiled(self, attr: str) -> Any:
        """The compiled GPU module whose ``attr`` a property reads: only the cuda and hip targets have one."""
        if self.target.kind not in ("cuda", "hip"):
            raise TilecValueError(f"kernel.{attr}: the {self.target} target compiles no GPU code; registers and "
                                  "spills are what ptxas / the HIP compiler report for the cuda and hip targets")
        return self.compile()._exe.ck

    @property
    def layouts(self) -> Any:
        """The layout plan: each fragment's and shared buffer's layout, each gemm's warp grid."""
        return self.state.artifacts.get("layout_inference")

    def get_kernel_source(self) -> str:
        """The source of what runs: CUDA/HIP for GPU targets, the Tile IR for the ``cpu`` interpreter."""
        src = self.state.artifacts.get("source")
        return src if src is not None else str(self.prim_func)

    def report(self) -> str:
        """Per tile op: what the compiler chose (instructions, layouts, stages), and every fallback taken."""
        ftg = self.ftg  # built first: "cuda" becomes the device's architecture
        lines = [f"kernel {self.prim_func.name} for target {self.target}", *ftg.rows()]
        lines += [f"  note: {r}" for r in self.state.report]
        ck = getattr(self._exe, "ck", None)  # compiled already: what ptxas said about performance
        if getattr(ck, "n_spills", 0) > 0:
            lines.append(f"  registers: {ck.n_regs} a thread, {ck.n_spills} bytes of spill stores (local memory)")
        lines += [f"  ptxas: {w}" for w in getattr(ck, "warnings", ())]
        lines += [f"  stage {name}: {sec * 1e3:.2f} ms" for name, sec in self.state.timings]
        return "\n".join(lines)

    # ---------------------------------------------------------------------------------------------------- run

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs or self.prim_func.defaults:
            args = self._positional(args, kwargs)
        fast = self._fast
        if fast is not None:
            return fast(*args)
        out = self._call_checked(*args)
        self._calls += 1
        # the fast path from the second call on: a kernel called once starts without importing CuPy, whose
        # launchKernel the fast path uses
        if fast is None and self._calls >= 2 and self.target.kind == "cuda" \
                and any(type(a).__module__.startswith("torch") for a in args) \
                and not _poisoning():  # the fast path allocates outputs without the poison fill
            from tilec.runtime.launcher import build_fast_launcher

            self._fast = build_fast_launcher(self.prim_func, self._exe.ck, self._exe.ck.device,
                                             self._call_checked) or False
        return out

    def _positional(self, args: tuple, kwargs: dict) -> tuple:
        """``args`` and ``kwargs`` as the inputs in order (keywords name the kernel's input parameters); a scalar
        parameter with a default that neither gives takes its default."""
        func = self.prim_func
        names = [p.name for i, p in enumerate(func.params) if i not in func.out_params]
        defaults = {func.params[i].name: v for i, v in func.defaults}
        kwargs = {**{n: defaults[n] for n in names[len(args):] if n in defaults}, **kwargs}
        outs = [func.params[i].name for i in func.out_params]
        for k in kwargs:
            if k not in names:
                note = f"; {k} is an output, allocated by the call" if k in outs else ""
                raise TilecTypeError(f"kernel {func.name!r} has no input {k!r} (its inputs: {', '.join(names)}{note})")
            if names.index(k) < len(args):
                raise TilecTypeError(f"kernel {func.name!r} got multiple values for argument {k!r}")
        rest = names[len(args):]
        missing = [n for n in rest if n not in kwargs]
        if missing:
            raise TilecTypeError(f"kernel {func.name!r} takes {len(names)} argument(s) ({', '.join(names)}): "
                                 + ", ".join(repr(n) for n in missing) + (" is" if len(missing) == 1 else " are")
                                 + " missing")
        return args + tuple(kwargs[n] for n in rest)

    def _call_checked(self, *args: Any) -> Any:
        """The launch with every argument checked (the fast path falls back to it)."""
        from tilec.runtime.args import allocate_like, bind

        self.compile()
        device = "cpu" if self.target.kind in ("cpu", "simt") else "cuda"
        bound = bind(self.prim_func, args, device, allocate_like)
        self._exe(bound)
        outs = bound.outputs
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __repr__(self) -> str:
        return f"<JITKernel {self.prim_func.name} target={self.target}>"


def _poisoning() -> bool:
    from tilec.config import config

    return config().poison


def _with_outputs(func: PrimFunc, out_idx: Any) -> PrimFunc:
    if out_idx is None:
        return func
    try:  # one index or several (an index that is neither, 1.0, is refused below by name)
        idx = [out_idx] if isinstance(out_idx, numbers.Integral) else list(out_idx)
    except TypeError:
        idx = [out_idx]
    n = len(func.params)
    from tilec.ir.unset_reads import first_unset_read
    from tilec.runtime.args import written_params

    written = written_params(func)
    norm = []
    for i in idx:
        if not isinstance(i, numbers.Integral) or isinstance(i, bool) or not -n <= i < n:
            raise TilecTypeError(f"out_idx: {i!r} is not a parameter index of {func.name!r} ({n} parameters)")
        j = int(i) % n
        from tilec.ir.buffer import Buffer

        if not isinstance(func.params[j], Buffer):
            raise TilecTypeError(f"out_idx: parameter {j} ({func.params[j].name}) is a scalar, not a tensor")
        if func.params[j].strides is not None:
            raise TilecTypeError(f"out_idx: parameter {j} ({func.params[j].name}) is a T.StridedTensor; the call "
                                 "allocates contiguous outputs, which the kernel would address by the declared "
                                 "strides: pass it as an argument, or declare it T.Tensor")
        if j not in written:  # the call would return the allocation as it was: NaN here, uninitialized on a GPU
            raise TilecValueError(f"out_idx: parameter {j} ({func.params[j].name}) is never written by the kernel, "
                                  "so the call would return it unset: name the tensors the kernel writes")
        read = first_unset_read(func.launch.body, func.params[j])
        if read is not None:  # the call's allocation read as it was: NaN here, garbage on a GPU
            name = func.params[j].name
            raise TilecValueError(f"out_idx: parameter {j} ({name}) is read before the kernel writes it: the call "
                                  f"allocates it and leaves it unset (NaN on the interpreters and under TILEC_POISON, "
                                  f"garbage on a GPU); pass {name} as an input, or write it first (T.clear, T.fill, "
                                  "a copy)", read.loc)
        if j in norm:  # two outputs allocated for one parameter: the kernel would write only the second
            raise TilecValueError(f"out_idx: {[int(k) for k in idx]} names parameter {j} ({func.params[j].name}) "
                                  "twice")
        norm.append(j)
    import dataclasses

    return dataclasses.replace(func, out_params=tuple(norm))


def _refuse_nested_arrays(kernel: str, name: str, value: Any, kind: Any) -> None:
    """An eager kernel binds each tensor to a named parameter (its ``x: T.Tensor[...]`` annotation names it): an
    array in ``*args``, ``**kwargs`` or a list argument has no name to bind."""
    if isinstance(value, dict):
        items = [(f"{name}[{k!r}]", v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        items = [(f"{name}[{i}]", v) for i, v in enumerate(value)]
    else:
        return
    where = next((w for w, v in items if _is_array(v)), None)
    if where is None:
        return
    how = {inspect.Parameter.VAR_POSITIONAL: f"passed through *{name}",
           inspect.Parameter.VAR_KEYWORD: f"passed through **{name}"}.get(
        kind, f"inside the {type(value).__name__} argument {name!r}")
    raise TilecTypeError(f"kernel {kernel!r}: {where} is an array {how}; an eager kernel takes each tensor through a "
                         f"named parameter (def {kernel}(x, y, ...)), which its T.Tensor annotation binds")


def _is_array(value: Any) -> bool:
    try:
        return array_info(value) is not None
    except TilecError:  # an array of an unsupported dtype: an array all the same
        return True


def _is_eager(fn: Any) -> bool:
    """Eager when the function's own body (not a nested function) has a ``with`` statement (T.Kernel)."""
    from tilec.frontend.source import function_source

    tree = function_source(fn).tree

    def visit(nodes: list[ast.stmt]) -> bool:
        for n in nodes:
            if isinstance(n, ast.With):
                return True
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for field in ("body", "orelse", "finalbody"):
                if visit(getattr(n, field, []) or []):
                    return True
        return False

    return visit(tree.body)


class JITFunction:
    """What ``@tilec.jit`` returns; call it like the decorated function."""

    def __init__(self, fn: Any, out_idx: Any = None, target: Any = None, pass_configs: dict | None = None,
                 notes: tuple[str, ...] = ()) -> None:
        from tilec.passes.configs import check_pass_configs

        self.fn = fn
        self.notes = notes  # put in the report of each kernel made
        self.out_idx = out_idx
        self.target = target
        self.pass_configs = pass_configs
        check_pass_configs(pass_configs)  # at the decorator, not at the first call
        self.eager = _is_eager(fn)
        if self.eager and out_idx is not None:  # it would be ignored: an eager kernel's outputs are what it returns
            raise TilecTypeError(f"tilec.jit: out_idx={out_idx!r} is for a kernel factory (returning a @T.prim_func); "
                                 f"{fn.__name__!r} is an eager kernel: its outputs are the T.empty tensors it returns")
        self.auto_params = auto_params(fn)  # parameters defaulting to T.auto, filled by the cost model's pick
        # globals and closure variables the source reads: a kernel made before one of them was rebound is not reused
        self._free = free_names(fn)
        self._kernels: dict[Any, JITKernel] = {}
        self._dynamic: dict[Any, list[JITKernel]] = {}  # eager kernels with T.dynamic sizes, by their loose key
        functools.update_wrapper(self, fn)

    def get_kernel(self, *args: Any, **kwargs: Any) -> JITKernel:
        """The compiled kernel for these arguments (for the eager form: example arrays of the right shape)."""
        if self.eager:
            return self._eager_kernel(args, kwargs)[0]
        key = (self._env_key(), freeze((args, kwargs), f"arguments of {self.fn.__name__}"))
        kernel = self._kernels.get(key)
        if kernel is None or not unchanged(self.fn, kernel.environment):
            env = environment(self.fn, self._free)
            call_args, call_kwargs = self.resolve_auto(args, kwargs)
            func = self.fn(*call_args, **call_kwargs)
            if not isinstance(func, PrimFunc):
                raise TilecTypeError(f"@tilec.jit function {self.fn.__name__!r} must return a @T.prim_func kernel, "
                                     f"got {type(func).__name__}")
            kernel = self._kernels[key] = JITKernel(func, self.target, self.out_idx, self.pass_configs)
            kernel.notes = self.notes
            kernel.environment = env
        return kernel

    def _env_key(self) -> tuple:
        """What the environment adds to a kernel's memo key: ``TILEC_TARGET`` (for a function without a target of
        its own) and ``TILEC_WGMMA`` (the default pass configs), which are read when a kernel is made, so that a
        kernel made under other settings is not reused."""
        env = os.environ  # read raw (config() builds paths: ~15 us, on every eager call)
        return (env.get("TILEC_TARGET", "auto") if self.target is None else None, env.get("TILEC_WGMMA", "1"))

    def resolve_auto(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """``(args, kwargs)`` with every ``T.auto`` parameter the call leaves open set to the cost model's top pick
        (:func:`tilec.recommend` for this function's target, the other knobs as given or defaulted); a ``T.auto``
        passed by position and the arguments after it come back as keywords."""
        import inspect

        if not self.auto_params:
            return args, kwargs
        params = list(inspect.signature(self.fn).parameters.values())
        bound = inspect.signature(self.fn).bind_partial(*args, **kwargs).arguments
        open_ = [n for n in self.auto_params if n not in bound or is_auto(bound[n])]
        if not open_:
            return args, kwargs
        cut = next((i for i, p in enumerate(params[:len(args)]) if p.name in open_), len(args))  # T.auto by position
        if cut < len(args) and all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[cut:len(args)]):
            args, kwargs = args[:cut], {**{p.name: a for p, a in zip(params[cut:], args[cut:])}, **kwargs}
        from tilec.tune.recommend import recommend

        given = {k: v for k, v in kwargs.items() if k not in open_}
        rec = recommend(self, *args, knobs=open_, **given)
        return args, {**given, **rec.best.config}

    def _eager_kernel(self, args: tuple, kwargs: dict) -> tuple[JITKernel, list[Any]]:
        """The kernel for these arguments: one already compiled for the same shapes, or one whose T.dynamic sizes
        accept them (same non-tensor arguments, dtypes and ranks), or a new one."""
        import inspect

        try:
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
        except TypeError as e:
            raise TilecTypeError(f"kernel {self.fn.__name__!r}: {e}") from None
        parts, loose, tensors = [], [], []
        kinds = {p.name: p.kind for p in inspect.signature(self.fn).parameters.values()}
        for name, v in bound.arguments.items():
            info = named_array_info(name, v)
            if info is None:
                _refuse_nested_arrays(self.fn.__name__, name, v, kinds[name])
                part = (name, freeze(v, f"argument {name!r}"))
                parts.append(part)
                loose.append(part)
            else:
                device = info.device.split(":")[0]
                parts.append((name, "tensor", info.shape, info.dtype.name, info.strides, device))
                loose.append((name, "tensor", len(info.shape), info.dtype.name, device))
                tensors.append(v)
        env = self._env_key()
        key = (env, tuple(parts))
        loose.append(env)
        kernel = self._kernels.get(key)
        if kernel is None or not unchanged(self.fn, kernel.environment):
            from tilec.frontend.entry import parse_eager

            env = environment(self.fn, self._free)
            func, _, _ = parse_eager(self.fn, *self.resolve_auto(args, kwargs))
            # A kernel compiled for other sizes is reused when its T.dynamic sizes accept these arrays and the
            # kernel parsed for them is the same program (a size read into Python would make them differ).
            text = str(func)
            kernel = next((k for k in self._dynamic.get(tuple(loose), [])
                           if str(k.prim_func) == text and _accepts(k, tensors)), None)
            if kernel is None:
                kernel = JITKernel(func, self.target, None, self.pass_configs)
                kernel.notes = self.notes
                if func.dyn_vars:
                    self._dynamic.setdefault(tuple(loose), []).append(kernel)
            kernel.environment = env  # (a kernel reused for its text is the program these values make)
        self._kernels[key] = kernel
        return kernel, tensors

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.eager:
            return self.get_kernel(*args, **kwargs)
        kernel, tensors = self._eager_kernel(args, kwargs)
        return kernel(*tensors)


def _accepts(kernel: JITKernel, tensors: list[Any]) -> bool:
    """Whether ``kernel``'s signature (its T.dynamic sizes free) takes these arrays."""
    from tilec.runtime.args import bind

    device = "cpu" if kernel.target.kind in ("cpu", "simt") else "cuda"
    try:
        bind(kernel.prim_func, tuple(tensors), device, lambda *_: None)
    except (TilecTypeError, TilecValueError):
        return False
    return True


# accepted, no effect here: TileLang's default of each (not noted) and what tilec does instead (noted otherwise)
_TILELANG_ONLY = {"execution_backend": ((None, "auto"), "tilec launches through its own NVRTC / hiprtc launcher"),
                  "verbose": ((None, False), "read kernel.report() and tilec.dump(kernel, after=...)"),
                  "compile_flags": ((None, (), []), "tilec compiles with its own NVRTC / hiprtc options"),
                  "debug_root_path": ((None,), "set TILEC_DUMP_DIR to keep each stage's IR")}


def _tilelang_notes(options: dict) -> tuple[str, ...]:
    """A report note for each TileLang-only option of tilec.jit given other than its TileLang default."""
    def default(k: str, v: Any) -> bool:  # compared within a type: an array compared to None is no bool
        return any(v is d or (type(v) is type(d) and v == d) for d in _TILELANG_ONLY[k][0])

    return tuple(f"tilec.jit: {k}={v!r} is accepted for TileLang compatibility and has no effect "
                 f"({_TILELANG_ONLY[k][1]})" for k, v in options.items() if not default(k, v))


def jit(func: Any = None, *, out_idx: Any = None, target: str | Target | None = None,
        pass_configs: dict | None = None, **tilelang: Any) -> Any:
    """Decorate a kernel factory (lazy form) or a kernel (eager form); see the module docstring.

    Parameters
    ----------
    out_idx : int or list of int, optional
        Lazy form: indices of the parameters the call allocates and returns.
    target : str or Target, optional
        Default ``TILEC_TARGET``, else ``"auto"``: ``"cuda"`` when an NVIDIA GPU is present, else ``"hip"`` with an
        AMD GPU and hip-python, else ``"cpu"``. Others: ``"cuda:sm_90a"``, ``"hip:gfx90a"``, ``"simt:sm_80"``...
        (see :mod:`tilec.target`).
    pass_configs : dict, optional
        Compiler options by name, e.g. ``{"wgmma": False}`` (the list: :mod:`tilec.passes.configs`); they
        override the ``TILEC_WGMMA`` defaults. An unknown name or a value of the wrong kind is an error.
    **tilelang
        TileLang's ``execution_backend``, ``verbose``, ``compile_flags`` and ``debug_root_path``, accepted so that
        its kernels port unchanged (they change nothing here: each given other than TileLang's default is noted in
        the kernel's report); any other keyword is an error.
    """
    unknown = [k for k in tilelang if k not in _TILELANG_ONLY]
    if unknown:
        import difflib

        near = difflib.get_close_matches(unknown[0], ["out_idx", "target", "pass_configs", *_TILELANG_ONLY], n=1)
        raise TilecTypeError(f"tilec.jit got an unexpected keyword argument {unknown[0]!r}"
                             + (f" (did you mean {near[0]!r}?)" if near else ""))
    if not (target is None or isinstance(target, Target) or (isinstance(target, str) and target.strip().lower() ==
                                                                "auto")):
        parse_target(target)  # a wrong target is refused where the decorator is, not at the first call
    if func is None:
        return functools.partial(jit, out_idx=out_idx, target=target, pass_configs=pass_configs, **tilelang)
    if isinstance(func, PrimFunc):  # @tilec.jit over @T.prim_func (as TileLang's): the kernel itself
        kernel = JITKernel(func, target, out_idx, pass_configs)
        kernel.notes = _tilelang_notes(tilelang)
        return kernel
    if isinstance(func, (str, Target)):
        raise TilecTypeError(f"tilec.jit takes its options by keyword: @tilec.jit(target={func!r}), got the "
                             f"positional argument {func!r}")
    if not (inspect.isfunction(func) or inspect.ismethod(func)):
        raise TilecTypeError(f"tilec.jit decorates a Python function (a kernel factory returning a @T.prim_func, or "
                             f"an eager kernel) or a @T.prim_func, got {type(func).__name__} {func!r}")
    return JITFunction(func, out_idx, target, pass_configs, _tilelang_notes(tilelang))
