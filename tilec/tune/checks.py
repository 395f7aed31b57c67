"""Checks of ``tilec.autotune``'s arguments at the decorator: a bad one is refused naming it, instead of failing
inside tilec at the first call (or, for ``key``, silently sharing one tuning result between problems)."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable
from typing import Any

from tilec.errors import TilecValueError


def check_options(name: str, configs: Any, warmup: Any, rep: Any, top_k: Any, timer: Any, supply: Any, rtol: Any,
                  workers: Any, progress: Any = True, cache: Any = True) -> None:
    """Refuse, naming it, an argument of ``tilec.autotune`` that would fail later inside tilec."""
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1

    def flag(v: Any) -> bool:  # True/False or 0/1: "no" or None would be taken by its truth
        return isinstance(v, int) and v in (0, 1)

    bad = [(not (configs is None or callable(configs) or isinstance(configs, Iterable))
            or isinstance(configs, (str, bytes, dict)),
            "configs is a list of dicts, a Recommendation or a function of the call's arguments", configs),
           (not number(warmup), "warmup is milliseconds, a number >= 0", warmup),
           (not number(rep), "rep is milliseconds, a number >= 0", rep),
           (not count(top_k), "top_k is the number of the cost model's configs to time, an int >= 1", top_k),
           (not (timer is None or callable(timer)), "timer is a function (run, config) -> milliseconds", timer),
           (not (supply is None or callable(supply)), "supply is a function (prim_func) -> list of input arrays",
            supply),
           (not (rtol is None or number(rtol)), "rtol is the relative tolerance of the output check, a number >= 0 "
            "(or None)", rtol),
           (not (workers is None or count(workers)), "workers is the number of compiling threads, an int >= 1 "
            "(or None)", workers),
           (not flag(progress), "progress is True or False (show a progress bar)", progress),
           (not flag(cache), "cache is True or False (read and write the disk cache)", cache)]
    for failed, what, value in bad:
        if failed:
            raise TilecValueError(f"autotune {name}: {what}, got {value!r}")
    if isinstance(configs, (list, tuple)):
        for c in configs:
            if not isinstance(c, dict):
                raise TilecValueError(f"autotune {name}: configs must be dicts of parameter values, got {c!r}")


def check_key(fn: Any, key: Any) -> Any:
    """``key`` if it is None, a function or a list of ``fn``'s parameter names (a name that is none of them would
    read as None for every call, so that different problems shared one tuning result)."""
    if key is None or callable(key):
        return key
    name = getattr(fn, "__name__", "kernel")
    if isinstance(key, str) or not isinstance(key, (list, tuple)) or not all(isinstance(k, str) for k in key):
        raise TilecValueError(f"autotune {name}: key must be a function of the call's arguments or a list of parameter "
                              f"names, got {key!r}")
    params = list(inspect.signature(fn).parameters)
    unknown = [k for k in key if k not in params]
    if unknown:
        raise TilecValueError(f"autotune {name}: key names {', '.join(map(repr, unknown))}, not parameters of "
                              f"{name} ({', '.join(params)})")
    return list(key)
