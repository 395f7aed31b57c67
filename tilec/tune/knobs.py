"""Tuning knobs: which keyword parameters of a kernel factory are tuned, and the values they may take.

A knob is a keyword parameter of the ``@tilec.jit`` function whose default is :data:`auto` (``T.auto``), or one
of :data:`KNOB_NAMES` with a default, that the call does not pin. Its candidate values come from the
``space={...}`` the caller gives, else from :data:`DEFAULT_SPACE` (powers of two; ``block_*`` names not listed
there get the block sizes). This module is imported by ``import tilec.language`` and stays light.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Iterable, Sequence
from typing import Any


class Auto:
    """``T.auto``: a parameter default meaning "let tilec choose" (the cost model's pick, or the autotuner's)."""

    _instance: Auto | None = None

    def __new__(cls) -> Auto:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "T.auto"

    def __reduce__(self) -> str:
        return "auto"


auto = Auto()

KNOB_NAMES = ("block_M", "block_N", "block_K", "num_stages", "threads")
BLOCK_SIZES = (16, 32, 64, 128, 256)
DEFAULT_SPACE: dict[str, tuple[Any, ...]] = {
    "block_M": BLOCK_SIZES,
    "block_N": BLOCK_SIZES,
    "block_K": (16, 32, 64, 128),
    "num_stages": (1, 2, 3, 4),
    "threads": (128, 256),
}


def is_auto(value: Any) -> bool:
    return value is auto


def auto_params(fn: Any) -> tuple[str, ...]:
    """Names of the parameters of ``fn`` whose default is ``T.auto``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in params if p.default is auto)


def knob_names(fn: Any, args: Sequence[Any], fixed: dict[str, Any], space: dict[str, Iterable[Any]] | None = None,
               names: Sequence[str] | None = None) -> list[str]:
    """The knobs of ``fn`` called with ``args`` and ``fixed``, in signature order.

    ``names`` (when given) are the knobs; else the parameters defaulting to ``T.auto``, those in
    :data:`KNOB_NAMES` that have a default, and every name in ``space`` -- less what ``args`` and ``fixed`` pin.
    """
    from tilec.errors import TilecValueError

    params = list(inspect.signature(fn).parameters.values())
    bound = {p.name for p in params[: len(args)]} | set(fixed)
    order = [p.name for p in params]
    if names is not None:
        unknown = [n for n in names if n not in order]
        if unknown:
            raise TilecValueError(f"{fn.__name__} has no parameter {', '.join(map(repr, unknown))} to tune")
        return [n for n in order if n in names and n not in bound]
    picked = {p.name for p in params if p.default is auto or (p.name in KNOB_NAMES and p.default is not p.empty)}
    picked |= set(space or {})
    unknown = [n for n in (space or {}) if n not in order]
    if unknown:
        raise TilecValueError(f"space names {', '.join(map(repr, unknown))}, not parameters of {fn.__name__}")
    return [n for n in order if n in picked and n not in bound]


def values_of(name: str, space: dict[str, Iterable[Any]] | None) -> tuple[Any, ...]:
    """The candidate values of knob ``name``."""
    if space and name in space:
        given = space[name]
        if isinstance(given, (str, bytes, dict)) or not isinstance(given, Iterable):
            from tilec.errors import TilecValueError

            raise TilecValueError(f"space[{name!r}] is the list of values to try, got {given!r}; write "
                                  f"{{{name!r}: [{given!r}]}} for one value, or pin it by keyword")
        vals = tuple(given)
    elif name in DEFAULT_SPACE:
        vals = DEFAULT_SPACE[name]
    elif name.startswith("block_"):
        vals = BLOCK_SIZES
    else:
        from tilec.errors import TilecValueError

        raise TilecValueError(f"knob {name!r} has no default candidate values; pass space={{{name!r}: [...]}}")
    if not vals:
        from tilec.errors import TilecValueError

        raise TilecValueError(f"knob {name!r}: the space gives it no value")
    return vals


def candidate_configs(names: Sequence[str], space: dict[str, Iterable[Any]] | None = None) -> list[dict[str, Any]]:
    """Every combination of the knobs' values, in a fixed order (the first knob varies slowest)."""
    grids = [values_of(n, space) for n in names]
    return [dict(zip(names, combo)) for combo in itertools.product(*grids)]
