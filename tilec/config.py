"""Every option tilec reads from the environment, read in this one place.

=======================  ========================================================  ====================
variable                 meaning                                                   default
=======================  ========================================================  ====================
``TILEC_TARGET``         default target of ``tilec.jit`` (see :mod:`tilec.target`)  ``auto``
``TILEC_CACHE_DIR``      on-disk cache of compiled GPU kernels (*)                 ``~/.cache/tilec``
``TILEC_DISABLE_CACHE``  ``1`` disables the disk cache (*)                         ``0``
``TILEC_DUMP_DIR``       when set, the IR after every stage is written there as    unset
                         ``<kernel>.<target>.<key>.<NN>.<stage>.txt``
``TILEC_WGMMA``          ``0``: sm_90a kernels take the sm_80 path (mma.sync,       ``1``
                         cp.async) unless their pass configs ask for the Hopper
                         one; ``1``: ``T.gemm`` on sm_90a uses wgmma, its
                         pipelines fed by TMA
``TILEC_POISON``         ``1``: GPU outputs tilec allocates start as NaN (floats)    ``0``
                         or the type's minimum (ints), so unwritten elements show
                         (one fill kernel per output and call; for testing)
=======================  ========================================================  ====================

(*) read by the GPU backends and by ``tilec.autotune`` (its results, under ``autotune/``); the ``cpu`` target
compiles nothing and caches nothing on disk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Config:
    target: str
    cache_dir: Path
    disable_cache: bool
    dump_dir: Path | None
    wgmma: bool = True
    poison: bool = False


def config() -> Config:
    """The options in force now (the environment is read on every call, so tests may change it)."""
    env = os.environ
    dump = env.get("TILEC_DUMP_DIR")
    return Config(
        target=env.get("TILEC_TARGET", "auto"),
        # "~" expanded (a quoted value reaches us unexpanded); an empty value is the default, not the current directory
        cache_dir=Path(env.get("TILEC_CACHE_DIR") or Path.home() / ".cache" / "tilec").expanduser(),
        disable_cache=env.get("TILEC_DISABLE_CACHE", "0") not in ("", "0", "false", "False"),
        dump_dir=Path(dump).expanduser() if dump else None,
        wgmma=env.get("TILEC_WGMMA", "1") not in ("", "0", "false", "False"),
        poison=env.get("TILEC_POISON", "0") not in ("", "0", "false", "False"),
    )
