"""Tile recommendation and autotuning: :func:`recommend` ranks a kernel's configurations with the static cost
model; :func:`autotune` times candidates on the GPU and keeps the fastest. Imported lazily by ``tilec``."""

from __future__ import annotations

from typing import Any

_LAZY = {"recommend": "tilec.tune.recommend", "Recommendation": "tilec.tune.recommend",
         "autotune": "tilec.tune.autotune", "AutotunedFunction": "tilec.tune.autotune",
         "do_bench": "tilec.tune.bench"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tilec.tune' has no attribute {name!r}")
