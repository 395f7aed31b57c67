"""tilec: a tile-level GPU kernel language and compiler in pure Python.

>>> import tilec
>>> import tilec.language as T
"""

from tilec.errors import (  # noqa: F401
    LayoutConflictError,
    RaceError,
    SourceLoc,
    TilecBoundsError,
    TilecError,
    TilecRuntimeError,
    TilecSyntaxError,
    TilecTypeError,
    TilecValueError,
    TilecVerifyError,
)
from tilec.runtime.jit import JITFunction, JITKernel, jit  # noqa: F401
from tilec.target import Target, parse_target  # noqa: F401

__version__ = "0.1.0"

# the public names (``from tilec import *``): the lazy ones of _LAZY import tilec.tune / tilec.arch when taken;
# not compile, which would shadow Python's builtin in a star import (tilec.compile stays)
__all__ = [
    "AutotunedFunction", "DeviceModel", "JITFunction", "JITKernel", "LayoutConflictError", "RaceError",
    "Recommendation", "SourceLoc", "Target", "TilecBoundsError", "TilecError", "TilecRuntimeError", "TilecSyntaxError",
    "TilecTypeError", "TilecValueError", "TilecVerifyError", "autotune", "device_model", "dump", "jit",
    "parse_target", "recommend",
]

# Imported on first use (``import tilec`` stays light): tile recommendation and autotuning (tilec.tune).
_LAZY = {"recommend": "tilec.tune.recommend", "Recommendation": "tilec.tune.recommend",
         "autotune": "tilec.tune.autotune", "AutotunedFunction": "tilec.tune.autotune",
         "device_model": "tilec.arch", "DeviceModel": "tilec.arch"}


def __getattr__(name: str):  # noqa: ANN202 - PEP 562 lazy attributes
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tilec' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def dump(kernel, after: str = "parse") -> str:
    """The IR or FTG of a kernel after a pipeline stage, as text (see :func:`tilec.passes.pipeline.dump`)."""
    from tilec.passes.pipeline import dump as _dump

    return _dump(kernel, after)


def compile(func, target=None, out_idx=None, pass_configs=None) -> JITKernel:  # noqa: A001
    """A :class:`JITKernel` for a ``@T.prim_func`` kernel, with ``pass_configs`` as ``tilec.jit`` takes them."""
    return JITKernel(func, target, out_idx, pass_configs)
