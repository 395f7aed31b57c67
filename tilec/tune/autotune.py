"""``@tilec.autotune``: time a kernel's candidate configurations on the GPU and keep the fastest.

>>> @tilec.autotune(configs=[{"block_M": 128, "block_N": 128}, {"block_M": 128, "block_N": 256}])  # doctest: +SKIP
... @tilec.jit(out_idx=[-1])
... def matmul(M, N, K, block_M=128, block_N=128, block_K=32, num_stages=3, threads=128, dtype="float16"): ...
>>> kernel = matmul(4096, 4096, 4096)      # tunes on the first call with these arguments, then remembers

On the first call with a new key -- by default the non-config arguments (values; shapes and dtypes of arrays),
the target, the GPU's name and the compiler (tilec's version and sources) -- the candidates (a list of dicts, a
function of the call's arguments returning one or a :class:`~tilec.tune.recommend.Recommendation`, or by default
the cost model's ``top_k``) are built: parsing and the pipeline in this thread (they are not thread-safe), NVRTC
in a pool of worker threads (it releases the GIL). Each is run once on the same random inputs and its output
compared with the first candidate's (relative tolerance by dtype, :data:`tilec.tune.bench.TOLERANCE`); mismatches,
build and run errors are excluded and reported. The rest are timed (``timer(run, config) -> ms``, by default CUDA
events, median, as ``triton.testing.do_bench``); the fastest config is kept in memory and on disk
(``$TILEC_CACHE_DIR/autotune/<hash>.json``, written atomically) and the call returns its kernel (a lazy factory)
or its outputs (an eager kernel). A call that passes any config argument explicitly skips tuning.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tilec.errors import TilecRuntimeError, TilecTypeError, TilecValueError
from tilec.runtime import cache
from tilec.target import parse_target
from tilec.tune.checks import check_key, check_options


@dataclass
class Trial:
    """One candidate: ``status`` is ``ok``, ``mismatch``, ``build error`` or ``run error``."""

    config: dict[str, Any]
    status: str = "ok"
    ms: float | None = None
    note: str = ""


@dataclass
class TuneResult:
    """What one tuning run found (also what the disk cache holds)."""

    function: str
    key: str
    best: dict[str, Any]
    trials: list[Trial] = field(default_factory=list)
    build_s: float = 0.0
    check_s: float = 0.0
    bench_s: float = 0.0
    from_cache: bool = False

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("from_cache")
        d["best"] = _describe(self.best)  # as the candidates' tags describe them (see _tag)
        for t, trial in zip(d["trials"], self.trials):
            t["config"] = _describe(trial.config)
        return json.dumps(d, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> TuneResult:
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError(f"a tuning result is a JSON object, got {type(d).__name__}")
        d["trials"] = [Trial(**t) for t in d.get("trials", [])]
        return cls(**d, from_cache=True)

    def __str__(self) -> str:
        head = (f"autotune {self.function}: best {self.best}" + (" (from the cache)" if self.from_cache else
                f" ({self.build_s:.1f} s build, {self.check_s:.1f} s check, {self.bench_s:.1f} s timing)"))
        rows = sorted(self.trials, key=lambda t: (t.ms is None, t.ms or 0.0))
        return "\n".join([head] + [f"  {t.ms:10.4f} ms  {t.config}" if t.ms is not None else
                                   f"  {t.status:>13}  {t.config}: {t.note}" for t in rows])


class _Progress:
    """A tqdm bar when tqdm is installed, else one rewritten stderr line."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.total, self.desc, self.enabled, self.done, self.bar = total, desc, enabled, 0, None
        if enabled:
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total, desc=desc, leave=False, file=sys.stderr)
            except ImportError:
                pass

    def step(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.enabled:
            sys.stderr.write(f"\r[tilec.autotune] {self.desc} {self.done}/{self.total}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.total:
            sys.stderr.write("\n")


def _describe(v: Any) -> Any:
    """A JSON-able stand-in for an argument: arrays by shape and dtype, containers element-wise."""
    from tilec.runtime.arrays import array_info

    info = array_info(v)
    if info is not None:
        return {"shape": list(info.shape), "dtype": info.dtype.name, "device": info.device.split(":")[0]}
    if isinstance(v, (list, tuple)):
        return [_describe(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _describe(x) for k, x in sorted(v.items())}
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return repr(v)


def _tag(config: Any) -> str:
    """A config as JSON text: what tells candidates apart, and names the best one in the disk cache."""
    return json.dumps(_describe(config), sort_keys=True)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:300]


@dataclass
class _Candidate:
    config: dict[str, Any]
    trial: Trial
    kernel: Any = None
    inputs: list[Any] = field(default_factory=list)

    def fail(self, status: str, e: BaseException) -> None:
        self.trial.status, self.trial.note = status, _first_line(e)

    @property
    def ok(self) -> bool:
        return self.trial.status == "ok"


class AutotunedFunction:
    """What ``@tilec.autotune`` returns: call it like the ``@tilec.jit`` function it wraps.

    Attributes
    ----------
    jit_fn : JITFunction
        The wrapped function.
    results : dict
        The :class:`TuneResult` of every key tuned or read from the disk cache in this process, by key hash.
    last : TuneResult or None
        The latest of them.
    """

    def __init__(self, jit_fn: Any, configs: Any = None, key: Any = None, warmup: float = 25, rep: float = 100,
                 top_k: int = 8, timer: Callable[[Callable[[], Any], dict], float] | None = None,
                 supply: Callable[[Any], list] | None = None, rtol: float | None = None, workers: int | None = None,
                 progress: bool = True, use_cache: bool = True) -> None:
        check_options(getattr(jit_fn.fn, "__name__", "kernel"), configs, warmup, rep, top_k, timer, supply, rtol,
                       workers, progress, use_cache)
        self.jit_fn, self.configs, self.key_fn, self.top_k = jit_fn, configs, check_key(jit_fn.fn, key), top_k
        self.signature = inspect.signature(jit_fn.fn)  # what check_call holds each call to
        self.warmup, self.rep, self.timer, self.supply, self.rtol = warmup, rep, timer, supply, rtol
        self.workers, self.progress, self.use_cache = workers, progress, use_cache
        self.results: dict[str, TuneResult] = {}
        self.last: TuneResult | None = None
        self.__wrapped__ = jit_fn.fn
        self.__name__ = getattr(jit_fn.fn, "__name__", "kernel")
        self.__doc__ = getattr(jit_fn.fn, "__doc__", None)

    # ------------------------------------------------------------------------------------------------ calls

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.check_call(args, kwargs)
        if self.explicit(args, kwargs):
            return self.jit_fn(*args, **kwargs)
        return self.jit_fn(*args, **kwargs, **self.best_config(*args, **kwargs))

    def get_kernel(self, *args: Any, **kwargs: Any) -> Any:
        """The :class:`~tilec.runtime.jit.JITKernel` of the best config for these arguments (tuning if needed)."""
        self.check_call(args, kwargs)
        if self.explicit(args, kwargs):
            return self.jit_fn.get_kernel(*args, **kwargs)
        return self.jit_fn.get_kernel(*args, **kwargs, **self.best_config(*args, **kwargs))

    def check_call(self, args: tuple, kwargs: dict) -> None:
        """Refuse a call the function's signature does not take (a mistyped keyword, too many arguments) before
        tuning: else every candidate would fail to build with the same TypeError."""
        sig = self.signature
        takes = f"{self.__name__} takes ({', '.join(sig.parameters)})"
        if not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            unknown = [k for k in kwargs if k not in sig.parameters]
            if unknown:
                raise TilecTypeError(f"autotune {self.__name__}: no parameter {', '.join(map(repr, unknown))}; "
                                     f"{takes}")
        try:
            sig.bind_partial(*args, **kwargs)
        except TypeError as e:
            raise TilecTypeError(f"autotune {self.__name__}: {e}; {takes}") from None

    def best_config(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The fastest config for these arguments: remembered, from the disk cache, or found by tuning now."""
        self.check_call(args, kwargs)
        digest, _ = self.key(args, kwargs)
        hit = self.results.get(digest)
        if hit is None and self.use_cache:
            text = cache.read_json("autotune", digest)
            if text is not None:
                try:
                    hit = TuneResult.from_json(text)
                except (ValueError, TypeError, KeyError):
                    hit = None
                best = None if hit is None else self.candidate_named(hit.best, args, kwargs)
                hit = None if best is None else replace(hit, best=best)
        if hit is None:
            hit = self.tune(*args, **kwargs)
        self.results[digest] = self.last = hit
        return dict(hit.best)

    def candidate_named(self, best: Any, args: tuple, kwargs: dict) -> dict[str, Any] | None:
        """The candidate config that a tuning result read from disk names (JSON holds a tuple as a list and a
        T.GemmWarpPolicy as its repr), or None when it names none: a damaged or foreign entry, tuned again."""
        if not isinstance(best, dict) or not best:
            return None
        if self.configs is None:  # the cost model's knob values: numbers, which JSON keeps
            params = inspect.signature(self.jit_fn.fn).parameters
            plain = all(k in params and type(v) in (int, float, bool, str) for k, v in best.items())
            return dict(best) if plain else None
        tag = _tag(best)
        return next((c for c in self.candidates(args, kwargs) if _tag(c) == tag), None)

    def config_keys(self) -> set[str]:
        """The parameter names a config may set."""
        from tilec.tune.knobs import knob_names

        keys = set(knob_names(self.jit_fn.fn, (), {}))
        if isinstance(self.configs, (list, tuple)):
            keys |= {k for c in self.configs for k in c}
        return keys

    def explicit(self, args: tuple, kwargs: dict) -> set[str]:
        """The config parameters a call gives itself (by keyword or position): such a call skips tuning."""
        params = list(inspect.signature(self.jit_fn.fn).parameters)
        given = set(kwargs) | set(params[: len(args)])
        return given & self.config_keys()

    def key(self, args: tuple, kwargs: dict) -> tuple[str, dict]:
        """(hash, description) of the tuning key of a call."""
        from tilec.tune.bench import gpu_name

        fn = self.jit_fn.fn
        target = parse_target(self.jit_fn.target)
        if self.key_fn is None:
            what: Any = {"args": _describe(list(args)), "kwargs": _describe(kwargs)}
        elif callable(self.key_fn):
            what = _describe(self.key_fn(*args, **kwargs))
        else:
            bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
            what = {n: _describe(bound.get(n)) for n in self.key_fn}
        if isinstance(self.configs, (list, tuple)):
            space: Any = _describe(list(self.configs))
        else:
            space = getattr(self.configs, "__qualname__", repr(self.configs)) if self.configs is not None else \
                f"recommend top {self.top_k}"
        src = hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16] if _has_source(fn) else ""
        desc = {"function": f"{fn.__module__}.{fn.__qualname__}", "source": src, "key": what, "configs": space,
                "target": str(target), "device": (gpu_name() or "no gpu") if target.kind == "cuda" else target.kind,
                "version": cache.compiler_id()}
        return hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:32], desc

    # ----------------------------------------------------------------------------------------------- tuning

    def candidates(self, args: tuple, kwargs: dict) -> list[dict[str, Any]]:
        """The configs to try for a call, deduplicated, in order."""
        cfgs = self.configs
        if cfgs is None:
            from tilec.tune.recommend import recommend

            cfgs = recommend(self.jit_fn, *args, top_k=self.top_k, **kwargs)
        elif callable(cfgs):
            got = cfgs(*args, **kwargs)
            if isinstance(got, (str, bytes, dict)) or not isinstance(got, Iterable):
                call = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
                raise TilecValueError(f"autotune {self.__name__}: configs({call}) returned {got!r}, not a list of "
                                      "dicts")
            cfgs = got
        out, seen = [], set()
        for c in cfgs:
            if not isinstance(c, dict):
                raise TilecValueError(f"autotune configs must be dicts of parameter values, got {c!r}")
            tag = _tag(c)
            if tag not in seen:
                seen.add(tag)
                out.append(dict(c))
        if not out:
            raise TilecValueError(f"autotune {self.__name__}: no candidate configs")
        params = inspect.signature(self.jit_fn.fn).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            bad = next((c for c in out if set(c) - set(params)), None)
            if bad is not None:  # a typo: each such candidate would fail to build, and tuning go on without it
                unknown = ", ".join(repr(k) for k in bad if k not in params)
                raise TilecValueError(f"autotune {self.__name__}: config {bad} names {unknown}, not parameters of "
                                      f"{self.__name__} ({', '.join(params)})")
        return out

    def tune(self, *args: Any, **kwargs: Any) -> TuneResult:
        """Tune now for these arguments (ignoring what is remembered), remember and cache the result."""
        self.check_call(args, kwargs)
        timer = self.timer or self._gpu_timer()
        digest, _ = self.key(args, kwargs)
        session = _Session(self, args, kwargs, self.candidates(args, kwargs))
        result = session.run(timer, digest)
        self.results[digest] = self.last = result
        if self.use_cache:
            cache.write_json("autotune", digest, result.to_json())
        return result

    def _gpu_timer(self) -> Any:
        from tilec.target import gpu_available
        from tilec.tune.bench import GpuTimer

        target = parse_target(self.jit_fn.target)
        if not gpu_available():
            why = "no GPU is visible"
        elif target.kind != "cuda":
            why = f"target {target} does not run on the GPU"
        else:
            return GpuTimer(self.warmup, self.rep)
        raise TilecRuntimeError(f"tilec.autotune times candidates on a GPU with CUDA events, and {why}: tuning needs "
                                "a GPU. Pass timer=<function (run, config) -> ms> to tune elsewhere, call with "
                                "explicit config arguments, or use tilec.recommend for the cost model's ranking")

    def __repr__(self) -> str:
        return f"<autotuned {self.__name__}: {len(self.results)} key(s) tuned>"


def _has_source(fn: Any) -> bool:
    try:
        inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    return True


class _Session:
    """One tuning run: build, check and time the candidates of one call."""

    def __init__(self, tuner: AutotunedFunction, args: tuple, kwargs: dict, configs: list[dict]) -> None:
        self.t, self.args, self.kwargs = tuner, args, kwargs
        self.cands = [_Candidate(c, Trial(dict(c))) for c in configs]

    def run(self, timer: Any, digest: str) -> TuneResult:
        t0 = time.perf_counter()
        self.build()
        t1 = time.perf_counter()
        self.check()
        t2 = time.perf_counter()
        self.time(timer)
        t3 = time.perf_counter()
        timed = [c for c in self.cands if c.ok and c.trial.ms is not None]
        if not timed:
            why = "; ".join(f"{c.config}: {c.trial.status}: {c.trial.note}" for c in self.cands[:4])
            raise TilecRuntimeError(f"autotune {self.t.__name__}: no candidate built, ran and matched ({why})")
        best = min(timed, key=lambda c: c.trial.ms)  # the first of equal times
        bad = [c for c in self.cands if not c.ok]
        if bad and self.t.progress:
            for c in bad:
                sys.stderr.write(f"[tilec.autotune] {self.t.__name__} {c.config} excluded: {c.trial.status}: "
                                 f"{c.trial.note}\n")
        return TuneResult(self.t.__name__, digest, dict(best.config), [c.trial for c in self.cands], t1 - t0,
                          t2 - t1, t3 - t2)

    def kernel(self, cfg: dict) -> tuple[Any, list[Any]]:
        jf = self.t.jit_fn
        if jf.eager:
            return jf._eager_kernel(self.args, {**self.kwargs, **cfg})
        kernel = jf.get_kernel(*self.args, **self.kwargs, **cfg)
        return kernel, []

    def build(self) -> None:
        from tilec.backends import prebuild

        workers = self.t.workers or min(len(self.cands), os.cpu_count() or 1, 16)
        bar = _Progress(len(self.cands), f"{self.t.__name__}: building", self.t.progress)
        pending = []
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for c in self.cands:
                try:
                    c.kernel, c.inputs = self.kernel(c.config)
                    if not _on_disk(c.kernel):
                        pending.append((c, pool.submit(prebuild, c.kernel.state)))  # the pipeline: this thread
                except Exception as e:  # noqa: BLE001 - a candidate that fails to build is excluded, with the reason
                    c.fail("build error", e)
                bar.step()
            for c, fut in pending:
                try:
                    fut.result()
                except Exception as e:  # noqa: BLE001
                    c.fail("build error", e)
        bar.close()
        for c in self.cands:
            if c.ok:
                try:
                    c.kernel.compile()  # loads what the workers built (the GPU context lives in this thread)
                except Exception as e:  # noqa: BLE001
                    c.fail("build error", e)

    def check(self) -> None:
        from tilec.tune.bench import clone, mismatch, random_inputs

        ok = [c for c in self.cands if c.ok]
        if not ok:
            return
        first = ok[0].kernel
        if not self.t.jit_fn.eager:
            supply = self.t.supply or (lambda func: random_inputs(func, first.target))
            shared = list(supply(first.prim_func))
            for c in ok:
                c.inputs = shared
        ref = None
        for c in ok:
            try:
                outs, dtypes = _run_once(c.kernel, [clone(x) for x in c.inputs])
            except Exception as e:  # noqa: BLE001
                c.fail("run error", e)
                continue
            if ref is None:
                ref = outs
                continue
            why = next((w for r, o, d in zip(ref, outs, dtypes) if (w := mismatch(r, o, d, self.t.rtol))), None)
            if len(ref) != len(outs):
                why = f"{len(outs)} outputs, the reference has {len(ref)}"
            if why:
                c.trial.status, c.trial.note = "mismatch", f"{why} (against {ok[0].config})"

    def time(self, timer: Any) -> None:
        from tilec.tune.bench import clone

        ok = [c for c in self.cands if c.ok]
        bar = _Progress(len(ok), f"{self.t.__name__}: timing", self.t.progress)
        for c in ok:
            inputs = c.inputs if c.kernel.prim_func.out_params else [clone(x) for x in c.inputs]
            try:
                ms = float(timer(lambda k=c.kernel, a=inputs: k(*a), dict(c.config)))
                if not math.isfinite(ms) or ms < 0:  # NaN would win: min() compares nothing with it
                    raise TilecRuntimeError(f"the timer returned {ms} ms for {c.config}, not a finite time >= 0")
                c.trial.ms = ms
            except Exception as e:  # noqa: BLE001
                c.fail("run error", e)
            bar.step()
        bar.close()


def _on_disk(kernel: Any) -> bool:
    """A CUDA kernel compiled before (by any process): compile() loads it without the pipeline."""
    if kernel.target.kind != "cuda":
        return False
    from tilec.backends.cuda.runtime import front_key

    return cache.get_text(front_key(kernel.prim_func, kernel.build_target(), kernel.pass_configs)) is not None


def _run_once(kernel: Any, inputs: list[Any]) -> tuple[list[Any], list[str]]:
    """(outputs, their dtypes) of one run: the returned arrays, or all arguments for a kernel writing in place."""
    from tilec.ir.buffer import Buffer

    func = kernel.prim_func
    out = kernel(*inputs)
    if func.out_params:
        outs = list(out) if isinstance(out, tuple) else [out]
        return outs, [func.params[i].dtype.name for i in func.out_params]
    pairs = [(x, p.dtype.name) for x, p in zip(inputs, func.params) if isinstance(p, Buffer)]
    return [x for x, _ in pairs], [d for _, d in pairs]


def autotune(fn: Any = None, *, configs: Any = None, key: Any = None, warmup: float = 25, rep: float = 100,
             top_k: int = 8, timer: Callable[[Callable[[], Any], dict], float] | None = None,
             supply: Callable[[Any], list] | None = None, rtol: float | None = None, workers: int | None = None,
             progress: bool = True, cache: bool = True) -> Any:
    """Decorate a ``@tilec.jit`` function (place it above ``@tilec.jit``) to tune its configs on first use.

    Parameters
    ----------
    configs : list of dict, Recommendation, or callable, optional
        The candidates: dicts of parameter values; a :class:`~tilec.tune.recommend.Recommendation` (its top
        rows); or a function of the call's arguments returning either. Default: ``tilec.recommend``'s ``top_k``.
    key : callable or list of str, optional
        What tells tuning problems apart: a function of the call's arguments, or parameter names. Default: all
        non-config arguments (arrays by shape and dtype). The target, GPU name and compiler (tilec's version and
        sources) always count.
    warmup, rep : float
        Milliseconds of warm-up and of timed repetitions per candidate (the default timer).
    top_k : int
        Candidates taken from the cost model when ``configs`` is None.
    timer : callable, optional
        ``timer(run, config) -> milliseconds``; default: CUDA events (median), which needs a GPU.
    supply : callable, optional
        ``supply(prim_func) -> list of input arrays`` for a lazy kernel (default: random normal arrays).
    rtol : float, optional
        Tolerance of the output check, relative to the largest reference magnitude (default: by dtype).
    workers : int, optional
        Threads compiling with NVRTC (default: one per CPU core, at most 16).
    progress : bool
        Show a progress bar (tqdm when installed) and report excluded candidates on stderr.
    cache : bool
        Read and write ``$TILEC_CACHE_DIR/autotune/`` (also off when ``TILEC_DISABLE_CACHE`` is set).
    """
    if fn is None:
        return lambda f: autotune(f, configs=configs, key=key, warmup=warmup, rep=rep, top_k=top_k, timer=timer,
                                  supply=supply, rtol=rtol, workers=workers, progress=progress, cache=cache)
    from tilec.tune.recommend import unwrap

    return AutotunedFunction(unwrap(fn), configs, key, warmup, rep, top_k, timer, supply, rtol, workers, progress,
                             cache)
